"""A frozen power rank has an end (issue 28, item 5), and no rank's exception while starting hangs
the job (item 4).

A power rank stopped with SIGSTOP for good: after a bounded wait (npmpi.power.rank.PowerCollector.
lost_after_s, 10 s for these meters) rank 0 goes on without that node's power, recorded as a gap to
the end; the sweep, the map or the calibration completes, its file is written (`failed` since issue
45, class 7, with every size or round: the job cannot end well), and the job ends (rank 0 ends it with
MPI_Abort: a stopped process never reaches MPI_Finalize). The stopped process
is SIGCONTed and killed by the test whatever happens.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time

import h5py
import pytest
from support.reliability import Job

from npmpi.power.rank import LOST_AFTER_MIN_S

pytestmark = [pytest.mark.mpi, pytest.mark.slow]

END_WITHIN_S = LOST_AFTER_MIN_S + 40  # the bound, then the rest of the job on a loaded machine


def _freeze_power_rank(job: Job, when) -> tuple[int, float]:
    """SIGSTOP rank 2 (the power rank of -np 3) once `when()` holds; (its pid, the moment)."""
    assert job.wait_until(when, 90), job.stdout[-2000:] + job.stderr[-2000:]
    pid = job.rank_pids()[2]
    os.kill(pid, signal.SIGSTOP)
    return pid, time.monotonic()


def _end(job: Job, pid: int, frozen_at: float) -> float:
    """Wait for mpirun to end by itself; then make sure the stopped process is gone. Seconds taken."""
    try:
        ended = job.wait(END_WITHIN_S + 30)
    finally:
        for sig in (signal.SIGCONT, signal.SIGKILL):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        job.close()
    took = ended - frozen_at
    assert job.leftovers() == [], "a rank outlived the job"
    assert "Traceback" not in job.stdout + job.stderr
    assert "did not answer for" in job.stderr and "went on without its power" in job.stderr, job.stderr[
        -2000:
    ]
    return took


def _lost_gap(group) -> tuple[float, float]:
    """(start, end) of the one gap fault that runs to the end, in /power/node0/channel0."""
    fg = group["power/node0/channel0/faults"]
    rows = [k for k in range(fg["time_unix_s"].shape[0]) if b"went on without" in fg["message"][k]]
    assert len(rows) == 1, [fg["message"][k] for k in range(fg["time_unix_s"].shape[0])]
    k = rows[0]
    kind = fg["kind"][k]
    assert (kind.decode() if isinstance(kind, bytes) else kind) == "gap"
    return float(fg["time_unix_s"][k]), float(fg["last_time_unix_s"][k])


@pytest.mark.timeout(180)
def test_a_sweep_goes_on_without_a_power_rank_stopped_for_good(tmp_path):
    name = "frozen-sweep.h5"
    args = ["--quick", "-u", "64K", "--meter", "estimate", "--baseline", "0.3", "-o", name]
    job = Job(args, 3, tmp_path, name)
    pid, frozen_at = _freeze_power_rank(job, lambda: job.rows_printed() >= 4)
    took = _end(job, pid, frozen_at)
    assert job.proc.returncode == 1, job.stderr[-2000:]
    with h5py.File(tmp_path / name) as f:
        # every size, but the job ends with MPI_Abort: `failed`, saying what is missing (issue 45, class 7)
        assert f.attrs["status"] == "failed", dict(f.attrs)
        assert "went on without its power" in str(f.attrs["status_message"])
        sizes = f["pingpong/size_bytes"][:]
        assert sizes[-1] == 64 * 1024 + 3, sizes  # the whole sweep
        start, end = _lost_gap(f)
        assert start < end
        assert end >= f["pingpong/trial_end_unix_s"][-1].max()  # the gap runs to the end
    print(f"\nfrozen power rank, sweep: job ended {took:.1f} s after the SIGSTOP", file=sys.stderr)
    assert took < END_WITHIN_S


@pytest.mark.timeout(180)
def test_a_map_goes_on_without_a_power_rank_stopped_for_good(tmp_path):
    name = "frozen-map.h5"
    args = ["map", "--per-rank", "--quick", "--sizes", "1,4K,64K", "--meter", "estimate", "--baseline", "0.3"]
    job = Job([*args, "-o", name], 3, tmp_path, name)
    pid, frozen_at = _freeze_power_rank(job, lambda: "map:" in job.stdout)
    took = _end(job, pid, frozen_at)
    assert job.proc.returncode == 1, job.stderr[-2000:]
    with h5py.File(tmp_path / name) as f:
        assert f.attrs["status"] == "failed" and f["map"].attrs["status"] == "failed", dict(f.attrs)
        assert "went on without its power" in str(f.attrs["status_message"])
        assert f["map"].attrs["rounds_completed"] == f["map"].attrs["n_rounds"] * 3
        _lost_gap(f)
    print(f"\nfrozen power rank, map: job ended {took:.1f} s after the SIGSTOP", file=sys.stderr)
    assert took < END_WITHIN_S


@pytest.mark.timeout(180)
def test_calibrate_goes_on_without_a_power_rank_stopped_for_good(tmp_path):
    name = "frozen-cal.json"
    args = ["calibrate", "--meter", "estimate", "--duration", "5", "--burst-min", "0.5", "--burst-max", "1"]
    job = Job([*args, "--max-delay", "1", "-o", name], 3, tmp_path, name)
    pid, frozen_at = _freeze_power_rank(job, lambda: "calibrating" in job.stdout)
    took = _end(job, pid, frozen_at)
    assert job.proc.returncode == 1, job.stderr[-2000:]
    doc = json.loads((tmp_path / name).read_text())
    (result,) = doc["results"]
    assert result["delay_s"] is None and "stopped answering" in result["reason"]
    print(f"\nfrozen power rank, calibrate: job ended {took:.1f} s after the SIGSTOP", file=sys.stderr)
    assert took < END_WITHIN_S


@pytest.mark.timeout(60)
def test_an_exception_while_a_power_rank_opens_its_meters_ends_the_job(tmp_path):
    """Injected (NPMPI_FAULT_RAISE_OPEN): the rank's surprise ends every rank with one line, exit 1."""
    for args in (["--meter", "estimate"],):  # a map and calibrate share this path (cli, maprun, calibration)
        job = Job([*args, "-o", "never.h5"], 3, tmp_path, "never.h5", env={"NPMPI_FAULT_RAISE_OPEN": "1"})
        try:
            job.wait(45)
        finally:
            job.close()
        # Open MPI's abort banner can end in a NUL byte that lands before the next line forwarded
        errors = [ln.lstrip("\0") for ln in job.err if ln.lstrip("\0").startswith("npmpi: error:")]
        assert job.proc.returncode == 1, job.stderr[-2000:]
        assert len(errors) == 1 and "fault injected while opening the meters" in errors[0], job.stderr
        assert "aborting all ranks" in errors[0] and "Traceback" not in job.stderr
        assert job.leftovers() == [] and not (tmp_path / "never.h5").exists()
        print(f"\nexception on a power rank while starting: {errors[0]}", file=sys.stderr)
