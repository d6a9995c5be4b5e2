"""`npmpi coll` across four network-namespace hosts (tests/support/netns_hosts.py), a measuring rank and a
power rank on each: the collective crosses the bridge between the hosts and every host's power is
recorded as its own node. The four hosts are one machine (one kernel boot_id): the job's power
counts it once, not four times (numbers/machines.py), and the energy of one operation is that power
times the time of one operation; each node's own part is its reading times the same time. The sum
over distinct nodes is tested on a synthetic file of two machines (tests/test_coll.py)."""

from __future__ import annotations

import os
import subprocess

import h5py
import numpy as np
import pytest
from conftest import VENV
from npmpi_analysis.numbers.analyse import analyse_run, size_rows
from support.netns_hosts import hosts_or_skip

from npmpi.runfile.reader import load_run

pytestmark = [pytest.mark.mpi, pytest.mark.slow]


@pytest.fixture(scope="module")
def hosts(tmp_path_factory):
    with hosts_or_skip(tmp_path_factory.mktemp("netns-coll"), count=4) as h:
        yield h


@pytest.mark.parametrize(
    "op, kernel, sizes",
    [
        ("allreduce", "python", "8,64K"),
        ("allgather", "c", "8,64K"),
        ("alltoall", "c", "8,64K"),
        ("bcast", "python", "8,64K"),
        ("reduce", "c", "8,64K"),
        ("reduce_scatter", "python", "16,64K"),
        ("barrier", "c", None),
    ],
)
def test_every_op_across_four_hosts_with_a_power_rank_each(hosts, tmp_path, op, kernel, sizes):
    mpirun = hosts.mpirun_wrapper(str(VENV / "bin" / "mpirun"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_") and k != "PYTHONPATH"}
    cmd = [str(mpirun), "-np", "8", "--map-by", "node", str(VENV / "bin" / "python"), "-m", "npmpi", "coll"]
    cmd += ["--op", op, "--kernel", kernel, "--check", "--quick"] + (["--sizes", sizes] if sizes else [])
    cmd += ["--meter", "estimate", "--baseline", "0", "-q", "-o", str(tmp_path / "c.h5")]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=150, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    with h5py.File(tmp_path / "c.h5", "r") as f:
        a = f.attrs
        assert a["node_count"] == 4 and a["coll_ranks"] == 4 and a["status"] == "complete"
        hosts_of = [h.decode() if isinstance(h, bytes) else h for h in f["layout/host"][:]]
        members = list(a["member_ranks"])
        assert len({hosts_of[r] for r in members}) == 4  # one measuring rank on each host
        assert f["pingpong/data_verified"][:].all()
    run = load_run(tmp_path / "c.h5")
    a = analyse_run(run, "c")
    assert len(a.power.nodes) == 4
    assert any("are one machine" in n and "counts it once" in n for n in a.notices), a.notices
    for k, row in enumerate(size_rows(a)):
        t = np.mean(run.pingpong.trial_s[k]) / run.pingpong.iterations[k]
        assert row["power_w"] == pytest.approx(row["node0_power_w"], rel=1e-9)  # the machine once
        assert row["energy_per_op_j"] == pytest.approx(row["power_w"] * t, rel=1e-9)
        for i in range(4):
            assert row[f"node{i}_energy_per_op_j"] == pytest.approx(row[f"node{i}_power_w"] * t, rel=1e-9)
