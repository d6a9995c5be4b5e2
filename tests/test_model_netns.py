"""Differences that are real, for real: a ping-pong between two network-namespace hosts
(tests/support/netns_hosts.py, links at 1 Gbit/s), then the same with one host's link limited to
100 Mbit/s; npmpi-analyze compares them and reads 'slower' at every size the limit bites (64 KiB and
up: 5 ms or more at 100 Mbit/s against 0.5-1 ms) and the model's beta of the largest regime
'slower'. (Small sizes are not asserted: a rate hardly changes a 1-byte message's time, and two
runs on this shared machine differ by more than each run's trials say.)"""

from __future__ import annotations

import csv
import os
import subprocess

import pytest
from conftest import VENV
from support import netns_hosts
from support.netns_hosts import hosts_or_skip, tc

pytestmark = [pytest.mark.mpi, pytest.mark.slow]

RATE, BURST, SLOW = "1gbit", "128kb", "100mbit"
SWEEP = ("-l", "1", "-u", "512K", "-p", "0", "--trials", "5", "--target-time", "0.02")


@pytest.fixture(scope="module")
def hosts(tmp_path_factory):
    with hosts_or_skip(tmp_path_factory.mktemp("netns-model"), count=2, rate=RATE) as h:
        yield h


def sweep(hosts, path) -> None:
    mpirun = hosts.mpirun_wrapper(str(VENV / "bin" / "mpirun"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_") and k != "PYTHONPATH"}
    cmd = [str(mpirun), "-np", "2", "--map-by", "node", str(VENV / "bin" / "python"), "-m", "npmpi"]
    cmd += [*SWEEP, "-q", "-o", str(path)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=150, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.timeout(400)
def test_a_rate_limited_link_reads_slower_where_the_limit_bites(hosts, tmp_path):
    fast, slow = tmp_path / "fast.h5", tmp_path / "slow.h5"
    sweep(hosts, fast)
    first = hosts.names[0]
    tc(first, "qdisc", "replace", "dev", "eth0", "root", "tbf", "rate", SLOW, "burst", BURST,
       "latency", "50ms")  # fmt: skip
    try:
        sweep(hosts, slow)
    finally:
        netns_hosts.unshape(first, RATE, BURST)
    out = tmp_path / "c.csv"
    proc = subprocess.run(
        [str(VENV / "bin" / "npmpi-analyze"), str(fast), str(slow), "--compare-csv", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = list(csv.DictReader(out.read_text().splitlines()))
    bites = [r for r in rows if int(r["size_bytes"]) >= 65536]
    assert len(bites) >= 4 and {r["slow_time_verdict"] for r in bites} == {"slower"}, bites
    assert all(float(r["slow_time_ratio_lo"]) > 2 for r in bites)  # 10x the rate: several times the time
    model = [line for line in proc.stdout.splitlines() if "slow vs fast, model" in line]
    assert model and "beta slower by" in model[-1], proc.stdout[-3000:]
