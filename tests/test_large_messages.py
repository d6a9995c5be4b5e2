"""Messages past 2 GiB - 1 bytes, for real, on an MPI 4 library (PyPI's MPICH wheel).

The default environment's Open MPI 5 is an MPI 3.1 library: there npmpi refuses such sizes with
the limit named (test_modes.py). Here a separate environment, .venv-mpich, is built by
`NPMPI_VENV=.venv-mpich NPMPI_MPI=mpich NPMPI_EXTRAS= scripts/setup.sh` (pip's `mpich` and `mpi4py`
wheels, the C kernel built with the wheel's mpicc; no test tools), and both kernels carry a
2 GiB + 8 B message through MPI_Send_c/MPI_Recv_c, every byte checked. Each rank holds a send and
a receive buffer of that size and the reference pattern the check compares against: about 13 GiB in
all; the test is skipped, saying so, when the machine has less free memory.

The same environment checks the stall watchdog's MPI_Abort from its own thread on MPICH.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
from pathlib import Path

import pytest
from conftest import built_env

from npmpi.runfile.reader import load_run

REPO = Path(__file__).resolve().parents[1]
VENV = built_env(".venv-mpich")
PYTHON = os.environ.get("PYTHON", "python3")  # the interpreter scripts/setup.sh builds venvs from
SIZE = 2**31 + 8  # past the 2 GiB - 1 of an int count
NEEDED_BYTES = 2 * 3 * SIZE + (1 << 30)  # two ranks x (send, receive, reference pattern), and room


def _available_bytes() -> int:
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


@pytest.fixture(scope="module")
def mpich_venv() -> Path:
    """.venv-mpich with npmpi on PyPI's MPICH (an MPI 4.1 library); built once per machine."""
    env = dict(
        os.environ, NPMPI_VENV=os.path.relpath(VENV, REPO), NPMPI_MPI="mpich", PYTHON=PYTHON, NPMPI_EXTRAS=""
    )  # the benchmark alone
    for name in ("MPICC", "PYTHONPATH"):
        env.pop(name, None)
    proc = subprocess.run(
        ["bash", str(REPO / "scripts" / "setup.sh")],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
    )
    assert proc.returncode == 0, f"setup of {VENV.name} failed:\n{proc.stdout}\n{proc.stderr}"
    return VENV


def _mpiexec(venv: Path, args: list[str], cwd: Path, timeout: float) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_", "PMIX_", "PRTE_"))}
    env.pop("PYTHONPATH", None)
    cmd = [str(venv / "bin" / "mpiexec"), "-n", "2", str(venv / "bin" / "python"), "-m", "npmpi", *args]
    try:
        return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"mpiexec hung for more than {timeout} s: {' '.join(cmd)}\n{exc.stdout}\n{exc.stderr}")


@pytest.mark.mpi
@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_the_mpich_environment_is_an_mpi4_library_with_the_c_kernel_on_it(mpich_venv, tmp_path):
    proc = _mpiexec(mpich_venv, ["--quick", "-u", "4K", "--kernel", "c", "-o", "r.h5"], tmp_path, 120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run = load_run(tmp_path / "r.h5")
    assert run.status == "complete"
    assert "MPICH" in run.attrs["mpi_library_version"]
    assert int(run.attrs["mpi_standard_version"].split(".")[0]) >= 4


@pytest.mark.mpi
@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize("kernel", ["python", "c"])
def test_a_message_past_2_gib_is_carried_and_checked(mpich_venv, tmp_path, kernel):
    if _available_bytes() < NEEDED_BYTES:
        pytest.skip(
            f"a {SIZE} B ping-pong needs about {NEEDED_BYTES / 2**30:.0f} GiB of free memory; "
            f"{_available_bytes() / 2**30:.1f} GiB is free"
        )
    args = ["-l", str(SIZE), "-u", str(SIZE), "-p", "0", "--repeats", "1", "--trials", "2"]
    args += ["--integrity", "--kernel", kernel, "-o", "big.h5"]
    proc = _mpiexec(mpich_venv, args, tmp_path, 600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run = load_run(tmp_path / "big.h5")
    assert run.status == "complete"
    pp = run.pingpong
    assert list(pp.size_bytes) == [SIZE]
    assert list(pp.iterations) == [1]
    assert run.attrs["kernel"] == kernel
    # one round trip of 2 GiB each way: at least the time to copy it twice at 100 GB/s
    assert pp.best_trial_s[0] > 2 * SIZE / 100e9
    assert pp.one_way_s[0] == pytest.approx(pp.best_trial_s[0] / 2)


def _rank_pid(marker: str, rank: int) -> int | None:
    """The pid of the MPICH rank `rank` (PMI_RANK in its environment) whose command line holds `marker`."""
    for proc in Path("/proc").iterdir():
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ")
            env = (proc / "environ").read_bytes().split(b"\0") if marker.encode() in cmdline else []
        except OSError:
            continue
        if f"PMI_RANK={rank}".encode() in env and b" -m npmpi " in cmdline:
            return int(proc.name)
    return None


@pytest.mark.mpi
@pytest.mark.timeout(300)
def test_a_frozen_reflector_on_mpich_ends_the_job_by_the_watchdog(mpich_venv, tmp_path):
    """The stall watchdog calls MPI_Abort from its own thread at MPI_THREAD_SINGLE (outside the
    standard): on MPICH too the job ends by itself, one line naming the rank, the completed sizes kept
    (measured by hand: 3.2 s after the SIGSTOP with --stall-timeout 3)."""
    import signal
    import time

    out = tmp_path / "stall.h5"
    marker = f"-o {out}"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_", "PMIX_", "PRTE_"))}
    env.pop("PYTHONPATH", None)
    args = ["--trials", "5", "--target-time", "0.1", "--stall-timeout", "3", "-o", str(out)]
    cmd = [str(mpich_venv / "bin" / "mpiexec"), "-n", "2", str(mpich_venv / "bin" / "python"), "-m", "npmpi"]
    log, err = tmp_path / "stdout.txt", tmp_path / "stderr.txt"
    with log.open("w") as out_f, err.open("w") as err_f:
        proc = subprocess.Popen([*cmd, *args], cwd=tmp_path, env=env, stdout=out_f, stderr=err_f, text=True)
    pid = None
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.2)
            rows = re.findall(r"^\s*\d+:\s+\d+ bytes", log.read_text(), flags=re.M)
            if len(rows) >= 5:  # a few sizes measured and in the file
                pid = _rank_pid(marker, 1)
                break
        assert pid is not None, (
            "the sweep never started: " + log.read_text()[-2000:] + err.read_text()[-2000:]
        )
        os.kill(pid, signal.SIGSTOP)
        stopped = time.monotonic()
        proc.wait(timeout=60)
        took = time.monotonic() - stopped
    finally:
        for sig in (signal.SIGCONT, signal.SIGKILL):
            if pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    stdout, stderr = log.read_text(), err.read_text()
    assert proc.returncode != 0 and took < 30, (took, stdout[-2000:], stderr[-2000:])
    errors = [ln.lstrip("\0") for ln in stderr.splitlines() if ln.lstrip("\0").startswith("npmpi: error:")]
    assert len(errors) == 1 and "rank 1" in errors[0] and "stopped answering" in errors[0], stderr
    assert "Traceback" not in stdout + stderr
    run = load_run(out)
    assert run.status == "failed" and len(run.pingpong.size_bytes) >= 1
    assert _rank_pid(marker, 0) is None  # rank 0 did not outlive the job (the stopped one is killed above)
