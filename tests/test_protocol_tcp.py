"""--protocol tcp in real mpirun jobs on one host: both kernels, its options, its failures."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time

import numpy as np
import pytest
from support.launcher import local_mpi_env

from npmpi.runfile.reader import load_run

pytestmark = pytest.mark.mpi

TINY = ["--trials", "3", "--target-time", "0.002"]


def one_error_line(proc, code: int = 2) -> str:
    assert proc.returncode == code, proc.stdout + proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("npmpi: error:")]
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    return lines[0]


def settings_of(run) -> dict:
    return json.loads(run.attrs["protocol_settings"])


# (kernel, extra options, ranks): each job checks several things; together every mode, both kernels,
# the socket buffer, reconnects, a power rank and two pairs
JOBS = {
    "python-pingpong": (
        "python",
        ["--socket-buffer", "64K", "--tcp-reconnect", "--meter", "estimate", "--baseline", "0"],
        3,
    ),
    "c-bidir": ("c", ["--mode", "bidir", "--socket-buffer", "16K", "-u", "1M"], 2),
    "c-stream-pairs": ("c", ["--mode", "stream", "--window", "8", "--pairs", "2"], 4),
}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("job", list(JOBS))
def test_tcp_runs_with_both_kernels(npmpi_run, tmp_path, job):
    kernel, extra, ranks = JOBS[job]
    args = ["-u", "64K", *TINY, "--protocol", "tcp", "--kernel", kernel, "--integrity", *extra]
    proc = npmpi_run([*args, "-o", "r.h5"], np=ranks, timeout=100)
    assert proc.returncode == 0, proc.stderr
    run = load_run(tmp_path / "r.h5")
    assert run.status == "complete" and np.all(run.pingpong.data_verified)
    assert run.attrs["protocol"] == "tcp" and run.attrs["kernel"] == kernel
    s = settings_of(run)
    pairs = [[0, 1]] if ranks < 4 else [[0, 3], [1, 2]]
    assert s["protocol"] == "tcp" and [p["ranks"] for p in s["pairs"]] == pairs
    for pair in s["pairs"]:
        t, r = pair["transmitter"], pair["reflector"]
        assert (t["role"], r["role"]) == ("connect", "listen") and t["tcp_nodelay"] and r["tcp_nodelay"]
        assert t["peer_address"] == r["local_address"] and t["local_address"] == r["peer_address"]
        assert r["local_address"].startswith("127.0.0.1:")  # one host: loopback
    first = s["pairs"][0]["transmitter"]
    if "--socket-buffer" in extra:
        asked = 65536 if "64K" in extra else 16384
        assert s["requested"]["socket_buffer_bytes"] == asked == first["socket_buffer_bytes"]
        assert asked <= first["granted_sndbuf_bytes"] <= 2 * asked  # Linux doubles what is asked
        assert asked <= first["granted_rcvbuf_bytes"] <= 2 * asked
    if "--tcp-reconnect" in extra:
        assert s["requested"]["tcp_reconnect"] and first["reconnect_per_trial"]
        assert list(run.layout["role"]) == ["transmitter", "reflector", "power"] and len(run.power) == 1
    summary = subprocess.run(
        [sys.executable, "-m", "npmpi_analysis", str(tmp_path / "r.h5")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    ).stdout
    assert "protocol: tcp" in summary and "mode: tcp " in summary
    if "64K" in extra:
        assert "socket buffer asked 65536 B" in summary and "a new connection per trial" in summary


@pytest.mark.timeout(60)
def test_a_port_in_use_is_one_line_before_the_sweep(npmpi_run, tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        proc = npmpi_run(["--protocol", "tcp", "--tcp-port", str(port), "-o", "r.h5"], timeout=50)
    line = one_error_line(proc)
    assert f"rank 1 cannot listen for TCP on 127.0.0.1:{port}" in line and "in use" in line
    assert not (tmp_path / "r.h5").exists()


@pytest.mark.timeout(60)
def test_a_peer_that_never_connects_is_bounded(npmpi_run, tmp_path):
    t0 = time.monotonic()
    proc = npmpi_run(
        ["--protocol", "tcp", "--tcp-connect-timeout", "1", "-o", "r.h5"],
        env={"NPMPI_FAULT_TCP_NO_CONNECT": "1"},
        timeout=50,
    )
    line = one_error_line(proc)
    assert "no TCP connection between rank 0 and rank 1" in line and "within 1 s" in line
    assert time.monotonic() - t0 < 30 and not (tmp_path / "r.h5").exists()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kernel", ["python", "c"])
def test_a_connection_reset_mid_sweep_keeps_every_completed_size(npmpi_run, tmp_path, kernel):
    proc = npmpi_run(
        ["-u", "1K", *TINY, "--protocol", "tcp", "--kernel", kernel, "-o", "r.h5"],
        env={"NPMPI_FAULT_LINK_RESET_SIZE": "128"},
        timeout=50,
    )
    line = one_error_line(proc, code=1)
    assert "TCP connection of the pair broke" in line and "at message size 128 B" in line
    run = load_run(tmp_path / "r.h5")
    assert run.status == "failed" and "at message size 128 B" in run.attrs["status_message"]
    sizes = run.pingpong.size_bytes.tolist()
    assert sizes and sizes[-1] < 128 and 64 in sizes and np.all(run.pingpong.trial_s > 0)


def test_a_protocol_the_options_cannot_do_is_refused_before_mpi(tmp_path):
    """No mpirun: the option check ends the process before MPI starts."""
    for argv, fragment in (
        (
            ["--protocol", "tcp", "--async"],
            "--async (pre-posted MPI receives) has no meaning with --protocol tcp",
        ),
        (["--protocol", "tcp", "-l", "0"], "a 0-byte message does not exist with --protocol tcp"),
        (["--protocol", "tcp", "--socket-buffer", "100"], "out of range"),
    ):
        proc = subprocess.run(
            [sys.executable, "-m", "npmpi", *argv, "-o", "x.h5"],
            cwd=tmp_path,
            env=local_mpi_env(),
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        assert fragment in one_error_line(proc)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.timeout(60)
def test_the_pattern_check_catches_corrupted_tcp_data(npmpi_run, tmp_path):
    proc = npmpi_run(
        ["-u", "1K", *TINY, "--protocol", "tcp", "-o", "r.h5"],
        env={"NPMPI_FAULT_CORRUPT_SIZE": "128"},
        timeout=50,
    )
    line = one_error_line(proc, code=1)
    assert "data check failed at message size 128 B" in line and "(--protocol tcp)" in line
    run = load_run(tmp_path / "r.h5")
    assert run.status == "failed" and run.pingpong.size_bytes[-1] < 128
