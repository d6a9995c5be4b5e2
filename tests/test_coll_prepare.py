"""A rank that cannot prepare a size's buffers ends a collective run with its cause (issue 45, class 6).

Before, a member whose buffers for a size could not be allocated (its MemoryError, or ENOMEM from the
buffer's mmap under a memory limit) ended the job from its side with MPI_Abort; mpirun's SIGTERM then
reached rank 0, whose file said `interrupted: SIGTERM received`. Now every member says whether it
prepared the size before any collective (npmpi/persize/driver.py, `member_prepared`; rank 0's
`SizeDriver.prepared`), and rank 0 fails the run with the rank, its host and the cause, every earlier
size kept, every rank released (exit 1, one line). The fault is injected with NPMPI_FAULT_PREPARE=
SIZE:RANK (npmpi/kinds/group.py), or is real: rank 1 alone under `ulimit -v`.
"""

from __future__ import annotations

import errno
import subprocess
import sys

import h5py
import pytest
from conftest import run_mpi
from support.launcher import local_mpi_env, mpirun_path
from support.reliability import analyze_in_process, assert_analysed_with_a_notice

from npmpi.kinds.group import failure_cause, unprepared_message
from npmpi.persize.watchdog import PREPARE, STALL_FACTOR, Progress

QUICK = ["--trials", "2", "--target-time", "0.01"]


def test_the_cause_says_out_of_memory_and_names_the_rank_and_its_host():
    assert failure_cause(MemoryError()) == "MemoryError (out of memory)"
    assert failure_cause(OSError(errno.ENOMEM, "Cannot allocate memory")) == (
        "OSError (out of memory): [Errno 12] Cannot allocate memory"
    )
    assert failure_cause(ValueError("bad\nvalue")) == "ValueError: bad\\x0avalue"
    line = unprepared_message(
        1 << 30, {2: "MemoryError (out of memory)", 1: "KeyError: 'x'"}, ["a", "b", "c"]
    )
    assert line.startswith("rank 1 (b) could not prepare 1 GiB messages: KeyError: 'x' (ranks 2 too)")
    assert "smaller --sizes" not in line
    line = unprepared_message(4096, {3: "MemoryError (out of memory)"}, ["a"])
    assert line.startswith("rank 3 (?) could not prepare 4 KiB messages: MemoryError (out of memory);")
    assert "give smaller --sizes" in line


def test_the_wait_for_a_member_to_prepare_is_bounded_by_its_bytes_not_the_last_rate():
    progress = Progress(3, 2)
    progress.at(8, 0, 1, 1000)
    progress.at(1 << 30, PREPARE, 1)  # the 8 B trial's rate times the size ratio would be hours
    assert progress.bound_s(2.0) == pytest.approx(STALL_FACTOR * 2 * (1 << 30) * 1e-9)
    assert progress.rate[0] == 8  # the wait for a member runs no loop: no rate from it
    progress.at(64, PREPARE, 1)
    assert progress.bound_s(2.0) == 2.0


def _check_failed_run(proc, path, rank: int, size_text: str, cause: str, rows: list[int], capsys) -> str:
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("npmpi: error:")]
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert len(errors) == 1 and "Traceback" not in proc.stderr + proc.stdout, proc.stderr[-3000:]
    want = f"rank {rank} ("
    assert want in errors[0] and f"could not prepare {size_text} messages: {cause}" in errors[0], errors[0]
    assert "SIGTERM" not in errors[0] and "aborting" not in errors[0], errors[0]
    with h5py.File(path) as f:
        status, message = f.attrs["status"], str(f.attrs["status_message"])
        assert status == "failed", (status, message)
        assert message.startswith(f"rank {rank} (") and cause in message, message
        assert f["pingpong/size_bytes"][:].tolist() == rows
    assert_analysed_with_a_notice(*analyze_in_process(capsys, path))
    return errors[0]


@pytest.mark.mpi
@pytest.mark.timeout(120)
@pytest.mark.parametrize(("kernel", "rank"), [("python", 2), ("c", 1), ("python", 0)])
def test_a_rank_that_cannot_prepare_a_size_fails_the_run_with_its_cause(tmp_path, capsys, kernel, rank):
    """Rank `rank` of 3 (0: rank 0's own buffers) cannot prepare 64 KiB: the 8 B to 4 KiB rows kept."""
    name = f"prepare-{kernel}-{rank}.h5"
    args = ["coll", "--sizes", "8,1K,4K,64K,256K", *QUICK, "--kernel", kernel, "-o", name]
    proc = run_mpi(args, np=3, cwd=tmp_path, timeout=90, env={"NPMPI_FAULT_PREPARE": f"65536:{rank}"})
    line = _check_failed_run(
        proc, tmp_path / name, rank, "64 KiB", "MemoryError (out of memory)", [8, 1024, 4096], capsys
    )
    assert "3 completed sizes are in" in line, line
    print(f"\n{line}", file=sys.stderr)


@pytest.mark.mpi
@pytest.mark.timeout(120)
def test_a_member_under_a_memory_limit_fails_the_run_with_its_cause(tmp_path, capsys):
    """Rank 1 alone under `ulimit -v 1200000` (1.2 GB of address space; a rank takes about 0.6 GB
    before any buffer here), 512 MiB messages: its send and receive buffers do not fit (ENOMEM from
    the buffer's mmap), rank 0's do. Before: `interrupted: SIGTERM received`."""
    launcher = mpirun_path()
    if launcher is None:
        pytest.fail("no mpirun found: run scripts/setup.sh (or set NPMPI_MPIRUN)")
    args = ["coll", "--sizes", "8,1K,512M", *QUICK, "-o", "limited.h5"]
    npmpi = [sys.executable, "-m", "npmpi", *args]
    limited = ["/bin/sh", "-c", 'ulimit -v 1200000 && exec "$@"', "limited", *npmpi]
    cmd = [launcher, "--oversubscribe", "--bind-to", "none", "-np", "1", *npmpi, ":", "-np", "1", *limited]
    try:
        proc = subprocess.run(
            cmd, cwd=tmp_path, env=local_mpi_env(), capture_output=True, text=True, timeout=90, check=False
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"mpirun hung: {exc.stdout}\n{exc.stderr}")
    cause = "OSError (out of memory): [Errno 12] Cannot allocate memory"
    line = _check_failed_run(proc, tmp_path / "limited.h5", 1, "512 MiB", cause, [8, 1024], capsys)
    print(f"\n{line}", file=sys.stderr)
