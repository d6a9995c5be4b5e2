"""A member stopped just before a large size jump of a collective run is found within the bound.

`coll --sizes 8,64K` (or 8,1M): the stall watchdog's rate was the 8 B size's, scaled by the size
ratio (8192, 131072) for the 64K warm-up and trials, a bound of hours. Now a size more than LOOK_RATIO
times the last measured starts with an untimed look of one iteration (npmpi/kinds/group.py), bounded
by the last rate plus its bytes at LOOK_BYTE_S (npmpi/persize/watchdog.py), and the warm-up and trials
follow the look's own rate. Rank 1 is stopped deterministically once it has the large size's
command, its buffers prepared and rank 0's go (NPMPI_FAULT_FREEZE=size-N:1,
npmpi.core.ending.frozen_for_a_test), just before the look. A live run across such a
jump, whose trials are longer than --stall-timeout, still completes.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import sys
import time

import h5py
import pytest
from support.reliability import Job

from npmpi.persize.watchdog import LOOK, STALL_FACTOR, WARMUP, Progress

STALL_S = 2.0
MARGIN_S = 15.0


def test_a_look_after_a_large_jump_is_bounded_without_the_size_ratio():
    progress = Progress(3, 3)
    progress.at(8, 0, 1, 1000)
    time.sleep(0.01)
    progress.at(1 << 20, LOOK, 1, 1)  # the last trial: 1000 iterations in about 10 ms, 10 us each
    per_iteration = progress.rate[1]
    assert progress.bound_s(STALL_S) == pytest.approx(
        max(STALL_S, STALL_FACTOR * (per_iteration + 3 * (1 << 20) * 1e-8)), rel=1e-6
    )
    assert progress.bound_s(STALL_S) < 60  # the ratio alone: 20 x 10 us x 131072 = 26 s and more
    time.sleep(0.01)
    progress.at(1 << 20, WARMUP, 1, 100)  # the warm-up follows the look's own rate
    assert progress.rate[0] == 1 << 20


def _frozen_at(tmp_path, sizes: str, big: int, kernel: str) -> tuple[float, str]:
    name = f"jump-{kernel}-{big}.h5"
    args = ["coll", "--sizes", sizes, "--trials", "3", "--target-time", "2", "--kernel", kernel]
    args += ["--stall-timeout", f"{STALL_S:g}", "-o", name]
    env = {**os.environ, "NPMPI_FAULT_FREEZE": f"size-{big}:1"}
    job = Job(args, 3, tmp_path, name, env)
    pid = None
    try:
        assert job.wait_for_rows(1, 90), job.stderr[-2000:]
        pid = job.rank_pids()[1]
        started = time.monotonic()
        job.wait(STALL_S + MARGIN_S + 30)
        took = time.monotonic() - started
    finally:
        for sig in (signal.SIGCONT, signal.SIGKILL):
            if pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)
        job.close()
    errors = [ln.lstrip("\0") for ln in job.err if ln.lstrip("\0").startswith("npmpi: error:")]
    assert len(errors) == 1 and "stopped answering" in errors[0], job.stderr[-3000:]
    with h5py.File(tmp_path / name) as f:
        assert f.attrs["status"] == "failed", dict(f.attrs)
        assert f["pingpong/size_bytes"][:].tolist() == [8]
    print(f"\n{sizes} ({kernel}): ended {took:.1f} s after the 8 B line: {errors[0]}", file=sys.stderr)
    return took, errors[0]


@pytest.mark.mpi
@pytest.mark.timeout(150)
@pytest.mark.parametrize(("sizes", "big", "kernel"), [("8,64K", 65536, "c"), ("8,1M", 1 << 20, "python")])
def test_a_member_stopped_before_a_large_size_jump_ends_the_job(tmp_path, sizes, big, kernel):
    took, line = _frozen_at(tmp_path, sizes, big, kernel)
    assert took < STALL_S + MARGIN_S, line
    assert re.search(r"during the first look at \d+ B", line), line


@pytest.mark.mpi
@pytest.mark.timeout(150)
def test_a_live_run_across_a_large_jump_does_not_trip(tmp_path):
    """8 B then 64 KiB: the 64 KiB trials run the iterations the 8 B rate planned (500000 here, about
    0.7 us each at 8 B, 11 us at 64 KiB), each several seconds, longer than --stall-timeout 1; the
    look's rate bounds them, not the 8 B one. (coll has no fixed --repeats: the check of the trials'
    length holds when the 8 B size got its usual iterations, which a very loaded machine may not.)"""
    from support.reliability import run_without_tripping

    args = ["coll", "--sizes", "8,64K", "--trials", "2", "--target-time", "0.5"]
    with run_without_tripping([*args, "--stall-timeout", "1"], tmp_path, "jump-live.h5", 120, 1.0) as f:
        assert f["pingpong/size_bytes"][:].tolist() == [8, 65536]
        print(f"\ntrials {f['pingpong/trial_s'][:]} s", file=sys.stderr)
        if f["pingpong/iterations"][0] >= 200_000:
            assert f["pingpong/trial_s"][1].min() > 1.0
