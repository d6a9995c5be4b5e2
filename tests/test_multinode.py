"""npmpi on two hosts: network namespaces joined by a bridge, the link shaped to 1 Gbit/s.

jobs/two-nodes.sbatch runs outside Slurm with its launcher pointed at the hosts: one ping-pong rank
and one power rank per host, each power rank replaying its own trace (NODE_METERS, by host name).
Checked: the layout and the host of every power group, the traces, the clock offsets, that the pair
crossed the link at the shaped rate, and that the job's power is the sum of the nodes' power.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
from conftest import VENV
from support.netns_hosts import REPO, hosts_or_skip

from npmpi.runfile.reader import load_run

pytestmark = [pytest.mark.mpi, pytest.mark.slow]

RATE_BIT_S = 1e9
NODE_W = (100.0, 250.0)  # the power each host's replay trace reports


@pytest.fixture(scope="module")
def hosts(tmp_path_factory):
    with hosts_or_skip(tmp_path_factory.mktemp("netns"), count=2, rate="1gbit") as h:
        yield h


def window_power(ch, offset_s: float, start: float, end: float) -> float:
    """Mean power of a channel's samples inside [start, end] of rank 0's clock."""
    t = ch.time_unix_s - offset_s
    inside = (t >= start) & (t <= end)
    return float(np.mean(ch.power_w[inside])) if inside.any() else float("nan")


@pytest.mark.timeout(180)
def test_two_hosts_shaped_link_per_node_power(hosts, tmp_path):
    from npmpi import _build_info

    names = hosts.names
    for host in names:
        assert "rate 1Gbit" in hosts.qdisc(host)
    traces = {}
    for host, watts in zip(names, NODE_W, strict=True):
        traces[host] = tmp_path / f"{host}.csv"
        traces[host].write_text(f"time_s,power_w\n0,{watts}\n1,{watts}\n")
    mpirun = hosts.mpirun_wrapper(str(VENV / "bin" / "mpirun"))
    kernel = "c" if _build_info.CKERNEL_BUILT else "python"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_") and k != "PYTHONPATH"}
    env.update(
        NPMPI_VENV=str(VENV),
        LAUNCHER="mpirun",
        MPIRUN=str(mpirun),
        MPIRUN_OPTS="",
        METERS="estimate",  # every host is listed below, so no power rank uses it
        NODE_METERS=" ".join(f"{h}=replay:{traces[h]},interval=0.1" for h in names),
        NPMPI_ARGS=f"--quick -p 0 --kernel {kernel} --baseline 1",
        OUTDIR=str(tmp_path / "runs"),
    )
    proc = subprocess.run(
        ["bash", str(REPO / "jobs" / "two-nodes.sbatch")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=150,
        stdin=subprocess.DEVNULL,
    )
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log
    (path,) = (tmp_path / "runs").glob("npmpi-two-nodes-local-*.h5")
    run = load_run(path)
    assert run.status == "complete", log

    # layout: one ping-pong rank and one power rank per host, the pair across the link
    assert list(run.layout["host"]) == [names[0], names[0], names[1], names[1]]
    assert list(run.layout["role"]) == ["transmitter", "power", "reflector", "power"]
    assert run.attrs["node_count"] == 2 and run.attrs["pair_crosses_nodes"]
    pair = run.attrs["pair_ranks"]
    assert (json.loads(pair) if isinstance(pair, str) else list(pair)) == [0, 2]

    # each host's power rank read its own trace, and its clock offset was measured
    assert [n.host for n in run.power] == names
    for node, host, watts in zip(run.power, names, NODE_W, strict=True):
        assert list(node.attrs["meter_specs"]) == [f"replay:{traces[host]},interval=0.1"]
        (ch,) = node.channels
        assert ch.label == "simulated" and len(ch.power_w) > 20
        assert np.allclose(ch.power_w, watts)
        for which in ("start", "end"):
            # one machine, one clock: the offset is within the measurement's uncertainty
            uncertainty = node.attrs[f"clock_offset_{which}_uncertainty_s"]
            assert 0 < uncertainty < 0.01
            assert abs(node.attrs[f"clock_offset_{which}_s"]) < 0.01

    # the pair crossed the shaped link: the large messages' bandwidth plateaus at the rate
    pp = run.pingpong
    best_bit_s = 2 * pp.iterations * 8 * pp.size_bytes / np.nanmin(pp.trial_s, axis=1)
    large = pp.size_bytes >= 2 * 2**20
    plateau = float(np.median(best_bit_s[large]))
    assert abs(plateau / RATE_BIT_S - 1) <= 0.10, (
        f"plateau {plateau / 1e9:.3f} Gbit/s on a 1 Gbit/s link; load {os.getloadavg()}"
    )
    # small messages pay the TCP round trip between the namespaces
    assert pp.one_way_s[0] > 5e-6

    # the job's power: the sum of the nodes', size by size (from the file, on rank 0's clock)
    offsets = [n.attrs["clock_offset_start_s"] for n in run.power]
    for i in np.flatnonzero(large):
        start, end = float(np.nanmin(pp.trial_start_unix_s[i])), float(np.nanmax(pp.trial_end_unix_s[i]))
        per_node = [
            window_power(n.channels[0], off, start, end) for n, off in zip(run.power, offsets, strict=True)
        ]
        assert per_node == pytest.approx(list(NODE_W)) and sum(per_node) == pytest.approx(sum(NODE_W))

    stem = path.with_suffix("")
    data = json.loads(Path(f"{stem}.json").read_text())
    (result,) = data["runs"]
    nodes = result["summary"]["nodes"]
    assert [n["host"] for n in nodes] == names
    assert [n["active_power_w"] for n in nodes] == pytest.approx(list(NODE_W))
    assert result["summary"]["active_power_w"] == pytest.approx(sum(NODE_W))
    rows = [r for r in result["sizes"] if r["size_bytes"] >= 2 * 2**20]
    assert rows
    for row in rows:
        assert row["power_w"] == pytest.approx(sum(NODE_W))
        assert [row["node0_power_w"], row["node1_power_w"]] == pytest.approx(list(NODE_W))
    assert (Path(f"{stem}-plots") / "bandwidth.png").stat().st_size > 0
