"""--protocol tcp across two hosts (network namespaces, the link shaped to 200 Mbit/s).

Each kernel's pair connects over the hosts' own addresses (no name resolution: the listener takes
its interface's address), and the large messages cross the shaped link at its rate.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from support.launcher import local_mpi_env
from support.netns_hosts import SUBNET, hosts_or_skip

from npmpi.runfile.reader import load_run

pytestmark = [pytest.mark.mpi, pytest.mark.slow]

RATE_BIT_S = 200e6


@pytest.fixture(scope="module")
def hosts(tmp_path_factory):
    with hosts_or_skip(tmp_path_factory.mktemp("netns"), count=2, rate="200mbit") as h:
        yield h


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "kernel, extra", [("python", ["--tcp-reconnect"]), ("c", ["--mode", "stream", "--window", "4"])]
)
def test_tcp_across_two_hosts(hosts, tmp_path, kernel, extra):
    mpirun = hosts.mpirun_wrapper(str(sys.prefix + "/bin/mpirun"))
    out = tmp_path / "r.h5"
    cmd = [str(mpirun), "-np", "2", "--map-by", "node", sys.executable, "-m", "npmpi", "-u", "1M"]
    cmd += ["--quick", "--protocol", "tcp", "--kernel", kernel, *extra, "-o", str(out)]
    proc = subprocess.run(cmd, env=local_mpi_env(), capture_output=True, text=True, timeout=100, check=False)
    assert proc.returncode == 0, proc.stderr
    run = load_run(out)
    assert run.status == "complete" and np.all(run.pingpong.data_verified)
    assert list(run.layout["host"]) == hosts.names and run.attrs["pair_crosses_nodes"]
    (pair,) = json.loads(run.attrs["protocol_settings"])["pairs"]
    t, r = pair["transmitter"], pair["reflector"]
    assert t["local_address"].startswith(f"{SUBNET}.1:") and r["local_address"].startswith(f"{SUBNET}.2:")
    assert t["peer_address"] == r["local_address"] and t["tcp_nodelay"]
    assert t["reconnect_per_trial"] == ("--tcp-reconnect" in extra)
    pp = run.pingpong
    factor = int(run.attrs["bytes_per_iteration_factor"])
    best_bit_s = factor * pp.iterations * 8 * pp.size_bytes / np.nanmin(pp.trial_s, axis=1)
    # ping-pong counts both directions of a round trip, each at the rate in turn
    plateau = float(np.median(best_bit_s[pp.size_bytes >= 512 * 1024]))
    assert 0.8 <= plateau / RATE_BIT_S <= 1.3, f"plateau {plateau / 1e6:.0f} Mbit/s; load {os.getloadavg()}"
