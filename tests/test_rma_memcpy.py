"""--protocol rma (MPI one-sided, NetPIPE's NPmpi2) and --protocol memcpy (NetPIPE's memcpy module).

Bad input without MPI; then, per kernel, one mpirun sweeping every variant in-process with every
message checked (tests/support/protocol_variants.py), a corrupted message failing each protocol's check;
a full run of each protocol with a power rank and its file; rma across two network-namespace hosts.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import h5py
import pytest
from conftest import REPO, VENV
from support.launcher import local_mpi_env, mpirun_path

from npmpi.core.errors import UsageError
from npmpi.protocols.rma.link import RDMA_DEVICES, quiet_declining_osc_ucx
from npmpi.run.options import parse_options
from npmpi.runfile.reader import load_run

SIZES = [1, 2, 3, 4, 6, 8]  # tests/support/protocol_variants.py: -u 8 -p 0
MPI_ENV = {"OMPI_MCA_osc": "^ucx"}  # the wheel's ucx component prints an error when it declines


@pytest.mark.parametrize(
    "argv, fragment",
    [
        (["--protocol", "memcpy", "--mode", "bidir"], "--protocol memcpy cannot run --mode bidir"),
        (["--protocol", "memcpy", "--async"], "--async (pre-posted MPI receives) has no meaning"),
        (["--protocol", "rma", "--async"], "has no meaning with --protocol rma"),
        (["--protocol", "rma", "--rma-op", "fetch"], "--rma-op 'fetch': choose one of: put, get"),
        (["--protocol", "rma", "--rma-sync", "pscw"], "--rma-sync 'pscw': choose one of: fence, lock"),
        (
            ["--protocol", "rma", "--rma-op", "get", "--mode", "stream"],
            "--rma-op get cannot run --mode stream",
        ),
        (["--rma-op", "get"], "--rma-op only applies to --protocol rma (this run: --protocol mpi)"),
        (["--protocol", "memcpy", "--rma-sync", "lock"], "--rma-sync only applies to --protocol rma"),
        (["--protocol", "rma", "--socket-buffer", "64K"], "--socket-buffer only applies to --protocol tcp"),
    ],
)
def test_bad_rma_and_memcpy_options_are_one_line(argv, fragment):
    with pytest.raises(UsageError) as info:
        parse_options(argv)
    assert fragment in str(info.value) and "\n" not in str(info.value)


def test_the_declining_osc_ucx_is_kept_quiet_only_without_an_rdma_device_or_a_users_choice(tmp_path):
    devices = tmp_path / "infiniband"
    env: dict[str, str] = {}
    assert quiet_declining_osc_ucx(env, devices) and env == {"OMPI_MCA_osc": "^ucx"}  # no such class
    devices.mkdir()
    env = {}
    assert quiet_declining_osc_ucx(env, devices) and env == {"OMPI_MCA_osc": "^ucx"}  # an empty class
    (devices / "mlx5_0").mkdir()
    env = {}
    assert not quiet_declining_osc_ucx(env, devices) and env == {}  # an RDMA device: ucx is wanted
    env = {"OMPI_MCA_osc": "ucx"}
    assert not quiet_declining_osc_ucx(env, tmp_path / "none") and env == {"OMPI_MCA_osc": "ucx"}


def test_options_reach_the_run_and_bad_usage_exits_2_before_mpi():
    opts = parse_options(["--protocol", "rma", "--rma-op", "GET", "--rma-sync", "lock"])
    assert (opts.protocol, opts.rma_op, opts.rma_sync) == ("rma", "get", "lock")
    proc = subprocess.run(
        [sys.executable, "-m", "npmpi", "--protocol", "memcpy", "--mode", "bidir"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "cannot run --mode bidir" in proc.stderr


@pytest.mark.mpi
@pytest.mark.timeout(150)
@pytest.mark.parametrize("kernel", ["python", "c"])
def test_every_variant_checks_every_message(kernel):
    """Every message of every variant lands as sent (a put in the peer's buffer, a get in its own,
    a copy in the twin); a corrupted message fails the check of each protocol."""
    cmd = [mpirun_path(), "-np", "2", "--oversubscribe", "--bind-to", "none", sys.executable]
    cmd += [str(REPO / "tests" / "support" / "protocol_variants.py"), kernel]
    proc = subprocess.run(
        cmd, cwd=REPO, env=local_mpi_env(MPI_ENV), capture_output=True, text=True, timeout=140
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = {r["name"]: r for r in map(json.loads, proc.stdout.strip().splitlines())}
    assert len(rows) == 11, proc.stdout
    for name, row in rows.items():
        if "corrupted" in name:
            assert row["status"] == "failed" and "data check failed at message size 4 B" in row["message"]
            assert row["sizes"] == SIZES[: SIZES.index(4)], row  # every size before it kept
        else:
            assert (row["status"], row["sizes"], row["iterations"]) == ("complete", SIZES, [4]), row


@pytest.mark.mpi
@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "protocol, kernel, extra",
    [
        ("rma", "c", ["--rma-sync", "lock", "--mode", "stream"]),
        ("memcpy", "python", ["--buffers", "separate"]),
    ],
)
def test_run_with_a_power_rank_stores_the_protocol(npmpi_run, tmp_path, protocol, kernel, extra):
    args = ["-u", "256", "-p", "0", "--trials", "2", "--repeats", "20", "--meter", "estimate", "-o", "r.h5"]
    # without OMPI_MCA_osc: on a node without an RDMA device npmpi keeps the declining osc/ucx quiet
    proc = npmpi_run([*args, "--protocol", protocol, "--kernel", kernel, *extra], np=3)
    assert proc.returncode == 0, proc.stderr
    assert "OSC UCX" not in proc.stdout + proc.stderr
    run = load_run(tmp_path / "r.h5")
    assert run.status == "complete" and len(run.pingpong.size_bytes) == 16
    assert list(run.layout["role"]) == ["transmitter", "reflector", "power"]
    with h5py.File(tmp_path / "r.h5") as f:
        settings = json.loads(f.attrs["protocol_settings"])
        assert f.attrs["protocol"] == protocol
    granted = settings["pairs"][0]["transmitter"]
    if protocol == "rma":
        assert settings["requested"] == {"rma_op": "put", "rma_sync": "lock"}
        assert granted["op"] == "MPI_Put" and granted["window_over"] == "receive buffer"
        assert granted["window_bytes"] > 0 and granted["memory_model"] in ("unified", "separate")
        rdma = RDMA_DEVICES.is_dir() and any(RDMA_DEVICES.iterdir())
        assert granted["ompi_mca_osc"] == (None if rdma else "^ucx")
        assert granted["ompi_mca_osc_set_by_npmpi"] is not rdma
    else:
        assert granted["copy"] == "numpy.copyto" and granted["buffers"] == "send and receive pools"
        assert settings["pairs"][0]["reflector"] == granted  # the reflector copies too
    report = subprocess.run(
        [str(VENV / "bin" / "npmpi-analyze"), str(tmp_path / "r.h5")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert report.returncode == 0, report.stderr
    label = next(ln for ln in report.stdout.splitlines() if ln.strip().startswith("protocol:"))
    assert ("MPI_Put; MPI_Win_lock" in label) if protocol == "rma" else ("numpy.copyto between" in label)


@pytest.mark.mpi
@pytest.mark.slow
@pytest.mark.timeout(180)
def test_rma_across_two_namespace_hosts(tmp_path_factory):
    from support.netns_hosts import hosts_or_skip

    with hosts_or_skip(tmp_path_factory.mktemp("netns"), count=2, rate="1gbit") as hosts:
        out = tmp_path_factory.mktemp("rma") / "r.h5"
        mpirun = hosts.mpirun_wrapper(str(VENV / "bin" / "mpirun"))
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_") and k != "PYTHONPATH"}
        env.update(MPI_ENV)
        for kernel, sync in (("c", "fence"), ("python", "lock")):
            cmd = [str(mpirun), "-np", "2", "--map-by", "node", str(VENV / "bin" / "python"), "-m", "npmpi"]
            cmd += ["-u", "16K", "-p", "0", "--trials", "2", "--repeats", "5", "--integrity", "--force"]
            cmd += ["--protocol", "rma", "--rma-sync", sync, "--kernel", kernel, "-o", str(out)]
            proc = subprocess.run(
                cmd, env=env, capture_output=True, text=True, timeout=80, stdin=subprocess.DEVNULL
            )
            assert proc.returncode == 0, proc.stdout + proc.stderr
            run = load_run(out)
            assert run.status == "complete" and int(run.pingpong.size_bytes[-1]) == 16384
            assert run.attrs["node_count"] == 2 and run.attrs["protocol"] == "rma"
