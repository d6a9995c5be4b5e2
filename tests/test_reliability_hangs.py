"""Hangs and false statuses at the edges of a run (issue 37): every wait of rank 0 has an end.

A measuring rank stopped (SIGSTOP) during an idle baseline or at the end of the run: rank 0 waits
for its reply or its end report at most --stall-timeout (npmpi.power.baseline, npmpi.core.ending.
await_ends), then names it in one line, closes the file `failed` with the reason, every size and
the samples taken up to then, and aborts the job. A rank stopped before the start-up checks end, or
after rank 0's last message, is bounded by a guard shell (MPI_Init and MPI_Finalize hold the GIL).
A stop signal while rank 0 is inside the C kernel's timed loop marks the file `interrupted`, as the
Python kernel does (npmpi.core.signals.watch_signals_in_a_thread). Rank 0 itself paused longer than the
bound does not blame a healthy rank, in process and under mpirun. Every stopped process is
SIGCONTed and killed by the test whatever happens; every wait of the test is bounded.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time

import h5py
import numpy as np
import pytest
from support.reliability import Job, freeze_until_the_end, processes_named, rank_of

from npmpi.core.guards import STARTUP_FLOOR_S
from npmpi.persize.watchdog import (
    INTEGRITY_CHECK_S,
    STALL_FACTOR,
    WARMUP,
    Progress,
    StallWatchdog,
    floor_step_s,
    stall_bound_s,
)

STALL_S = 5.0  # a floor this loaded machine's sweeps stay under (a busy-polling trial can lag seconds)
MARGIN_S = 15.0  # mpirun's abort and a loaded 2-core machine


def _one_line(errors: list[str], *words: str) -> str:
    assert len(errors) == 1, errors
    for word in words:
        assert word in errors[0], (word, errors[0])
    assert "aborting all ranks" in errors[0], errors[0]
    return errors[0]


def _failed_file(path, reason_words: tuple[str, ...], rows: int):
    with h5py.File(path) as f:
        assert f.attrs["status"] == "failed", dict(f.attrs)
        reason = str(f.attrs["status_message"])
        for word in reason_words:
            assert word in reason, (word, reason)
        assert f["pingpong/size_bytes"].shape[0] == rows
        assert f.attrs["stall_bound_s"] == STALL_S  # the bound that ran out
        return reason


# -- a measuring rank stopped in an idle baseline or at the end


@pytest.mark.mpi
@pytest.mark.timeout(200)
@pytest.mark.parametrize("when", ["before", "after"])
def test_a_reflector_stopped_in_an_idle_baseline_ends_the_job(tmp_path, when):
    """-np 3 with a meter and --baseline 4: the reflector stopped once the baseline before (or
    after) the sweep starts. Before: the job hung for ever, the file `running` (`complete` after)."""
    name = f"baseline-{when}.h5"
    args = [
        "--quick",
        "-u",
        "64",
        "--meter",
        "estimate",
        "--baseline",
        "4",
        "--stall-timeout",
        f"{STALL_S:g}",
    ]
    job = Job([*args, "-o", name], 3, tmp_path, name)
    cue = "recording 4 s of idle baseline power" if when == "before" else "recording 4 s of idle power after"
    took, errors = freeze_until_the_end(job, lambda: cue in job.stdout, 1, 4 + STALL_S + MARGIN_S + 30)
    print(f"\nreflector stopped in the baseline {when} the sweep: ended {took:.1f} s later", file=sys.stderr)
    line = _one_line(errors, "rank 1 (", "stopped answering", f"idle baseline {when} the measurements")
    rows = 22 if when == "after" else 0
    reason = _failed_file(tmp_path / name, ("rank 1 (", "stopped answering"), rows)
    assert line.startswith(f"npmpi: error: {reason}; {rows} completed sizes are in"), (reason, line)
    assert took < 4 + 2 + STALL_S + MARGIN_S  # the baseline, its settling, the bound
    if when == "after":  # the samples of the baseline up to the stall are in the file
        with h5py.File(tmp_path / name) as f:
            last_trial = float(np.max(f["pingpong/trial_end_unix_s"][:]))
            samples = f["power/node0/channel0/time_unix_s"][:]
        assert samples.size and samples.max() > last_trial + 3.0, (samples[-3:], last_trial)


def _frozen_at_the_end(tmp_path, where: str, within_s: float):
    """NPMPI_FAULT_FREEZE=WHERE:1: the reflector stops itself at that point of its end (a test's own
    SIGSTOP cannot be timed there). The job must end by itself; (seconds, error lines, the file)."""
    name = f"end-{where}.h5"
    args = ["--quick", "-u", "64", "--stall-timeout", f"{STALL_S:g}", "-o", name]
    job = Job(args, 2, tmp_path, name, env={"NPMPI_FAULT_FREEZE": f"{where}:1"})
    try:
        ended = job.wait(within_s)
        left = job.leftovers()
    finally:
        job.close()
    assert left == [], "a rank outlived the job"
    assert "Traceback" not in job.stdout + job.stderr
    assert job.proc.returncode != 0
    errors = [ln.lstrip("\0") for ln in job.err if ln.lstrip("\0").startswith("npmpi: error:")]
    return ended - job.started, errors, tmp_path / name


@pytest.mark.mpi
@pytest.mark.timeout(200)
def test_a_reflector_stopped_after_the_last_size_is_named_and_the_file_failed(tmp_path):
    """Before: the job hung in MPI_Finalize for ever, its file `complete`."""
    took, errors, path = _frozen_at_the_end(tmp_path, "end", 120)
    line = _one_line(errors, "rank 1 (", "stopped answering", "during the end of the run")
    reason = _failed_file(path, ("rank 1 (", "the end of the run"), 22)
    assert line.startswith(f"npmpi: error: {reason}; 22 completed sizes are in"), line
    print(f"\nreflector stopped at its end: the job took {took:.1f} s", file=sys.stderr)


@pytest.mark.mpi
@pytest.mark.timeout(200)
def test_a_reflector_stopped_before_its_mpi_finalize_is_bounded(tmp_path):
    """Its end reported, the file closed `complete` (everything was measured, every rank ended its
    role), then stopped before MPI_Finalize: rank 0's guard ends the job with one line."""
    from npmpi.commands.sequence import FINALIZE_FLOOR_S

    took, errors, path = _frozen_at_the_end(tmp_path, "leave", 120)
    _one_line(errors, "did not end within", "MPI_Finalize")
    with h5py.File(path) as f:
        assert f.attrs["status"] == "complete" and f["pingpong/size_bytes"].shape[0] == 22
    print(f"\nreflector stopped before MPI_Finalize: the job took {took:.1f} s", file=sys.stderr)
    assert took < 120 and FINALIZE_FLOOR_S <= 10


@pytest.mark.mpi
@pytest.mark.timeout(200)
def test_a_rank_stopped_during_the_start_up_ends_the_job(tmp_path):
    """Rank 1 stops itself right after MPI_Init, inside the start-up (NPMPI_FAULT_FREEZE=startup:1:
    a SIGSTOP timed from outside, 0.3 s after the process appeared, found the rank already past its
    start-up on a quiet machine): rank 0's start-up guard ends the job after STARTUP_FLOOR_S.
    Before: hung for ever."""
    name = "startup.h5"
    args = ["--quick", "-u", "64", "--stall-timeout", f"{STALL_S:g}", "-o", name]
    job = Job(args, 2, tmp_path, name, env={"NPMPI_FAULT_FREEZE": "startup:1"})
    pid = None
    try:
        deadline = time.monotonic() + 60
        while pid is None and time.monotonic() < deadline:
            pid = next((p for p in processes_named(name) if rank_of(p) == 1), None)
            time.sleep(0.005)
        assert pid is not None, job.stderr[-2000:]
        ended = job.wait(STARTUP_FLOOR_S + MARGIN_S + 30)
        left = job.leftovers()
    finally:
        for sig in (signal.SIGCONT, signal.SIGKILL):
            with contextlib.suppress(ProcessLookupError, TypeError):
                os.kill(pid, sig)
        job.close()
    assert left == [], "mpirun left the stopped rank behind"
    errors = [ln.lstrip("\0") for ln in job.err if ln.lstrip("\0").startswith("npmpi: error:")]
    _one_line(errors, "start-up did not end within")
    assert "Traceback" not in job.stdout + job.stderr and job.proc.returncode != 0
    took = ended - job.started
    print(f"\nrank 1 stopped at start-up: the job ended {took:.1f} s after it started", file=sys.stderr)
    assert took < STARTUP_FLOOR_S + MARGIN_S
    assert not (tmp_path / name).exists()


# -- a stop signal while rank 0 is inside the C kernel


@pytest.mark.mpi
@pytest.mark.timeout(150)
@pytest.mark.parametrize("protocol", ["mpi", "tcp"])
def test_sigterm_inside_the_c_kernels_trial_marks_the_file_interrupted(tmp_path, protocol):
    """Trials of 100,000 round trips of 1 MiB (seconds each) in one call of the C kernel; SIGTERM to
    mpirun during one. Before: the file was left `running` with no message (the handler never ran
    before mpirun's SIGKILL). The trials' length is fixed (--repeats), not the probe's choice: with
    --target-time 2 a probe slowed by another job chose so few iterations that the run had ended
    before the signal (once in CI)."""
    name = f"c-sigterm-{protocol}.h5"
    args = ["-l", "1M", "-u", "1M", "-p", "0", "--trials", "3", "--repeats", "100000", "--kernel", "c"]
    job = Job([*args, "--protocol", protocol, "-o", name], 2, tmp_path, name)
    try:
        assert job.wait_until(lambda: "Mbps = bandwidth" in job.stdout, 90), job.stderr[-2000:]
        time.sleep(3.0)  # the probe and the warm-up are short: inside a trial of 2 s
        job.proc.send_signal(signal.SIGTERM)
        job.wait(30)
        left = job.leftovers()
    finally:
        job.close()
    assert left == [] and "Traceback" not in job.stdout + job.stderr
    assert job.proc.returncode != 0
    with h5py.File(tmp_path / name) as f:
        assert f.attrs["status"] == "interrupted", dict(f.attrs)
        assert "SIGTERM" in str(f.attrs["status_message"]), dict(f.attrs)


# -- rank 0 itself paused


def _pause_this_process(after_s: float, for_s: float) -> subprocess.Popen:
    """A shell that stops this very process after `after_s` and continues it `for_s` later."""
    script = f"sleep {after_s}; kill -STOP {os.getpid()}; sleep {for_s}; kill -CONT {os.getpid()}"
    return subprocess.Popen(["/bin/sh", "-c", script])


@pytest.mark.timeout(60)
def test_rank_0_paused_as_a_whole_is_not_a_stalled_peer():
    """The process stopped for 3 s (bound 1.5 s) in the middle of a step whose answer comes 0.1 s
    after it resumes: the watchdog, paused too, must not blame the peer. Before: it fired at once."""
    p = Progress(trials=3)
    fired: list[str] = []
    watchdog = StallWatchdog(p, 1.5, ["n0", "n1"], {}, lambda message, bound: fired.append(message))
    pauser = None
    try:
        with watchdog:
            p.at(1024, 0, 1, 10)
            pauser = _pause_this_process(0.2, 3.0)
            last = time.monotonic()
            deadline = last + 20
            while time.monotonic() < deadline:  # the main thread "in MPI": paused with the rest
                time.sleep(0.02)
                now = time.monotonic()
                if now - last > 1.0:  # the pause is over: the peer's answer comes 0.1 s later
                    time.sleep(0.1)
                    p.at(1024, 1, 1, 10)
                    break
                last = now
            p.quiet()
    finally:
        if pauser is not None:
            pauser.wait(timeout=20)
    assert pauser.returncode == 0
    assert fired == []


@pytest.mark.timeout(30)
def test_a_live_peer_is_still_caught_after_a_pause():
    """After the pause is forgiven, a peer that really is silent is caught a bound later."""
    p = Progress(trials=3)
    fired: list[float] = []
    watchdog = StallWatchdog(p, 0.6, ["n0", "n1"], {}, lambda message, bound: fired.append(time.monotonic()))
    pauser = None
    with watchdog:
        p.at(1024, 0, 1, 10)
        pauser = _pause_this_process(0.1, 1.5)
        deadline = time.monotonic() + 15
        while not fired and time.monotonic() < deadline:
            time.sleep(0.02)
    pauser.wait(timeout=20)
    assert fired, "a silent peer was never caught"


@pytest.mark.mpi
@pytest.mark.timeout(200)
def test_rank_0_paused_longer_than_the_bound_does_not_end_the_run(tmp_path):
    """SIGSTOP rank 0 for 2 x --stall-timeout mid-sweep (the C kernel: a trial is one call, which
    has its rest to run after the SIGCONT), then SIGCONT. Before: 'rank 1 stopped answering' 0.6 s
    after it resumed, the file failed."""
    name, stall_s = "paused-0.h5", 6.0  # a floor the quick trials (ms) stay under even 100x slower
    args = ["--quick", "-u", "64", "--kernel", "c", "--stall-timeout", f"{stall_s:g}", "-o", name]
    job = Job(args, 2, tmp_path, name)
    pid = None
    try:
        assert job.wait_for_rows(3), job.stderr[-2000:]
        pid = job.rank_pids()[0]
        os.kill(pid, signal.SIGSTOP)
        time.sleep(2 * stall_s)
        os.kill(pid, signal.SIGCONT)
        job.wait(150)
    finally:
        with contextlib.suppress(ProcessLookupError, TypeError):
            os.kill(pid, signal.SIGCONT)
        job.close()
    assert "stopped answering" not in job.stderr, job.stderr[-2000:]
    assert job.proc.returncode == 0, job.stderr[-2000:]
    with h5py.File(tmp_path / name) as f:
        assert f.attrs["status"] == "complete", dict(f.attrs)


# -- --integrity


def test_integrity_trials_are_bounded_with_their_checks():
    """The first trial's bound comes from the warm-up, which skips the per-message checks: a trial
    of a million iterations of 0.1 us is expected to take the checks' time too."""
    p = Progress(trials=3)
    p.at(1, WARMUP, 1, 100_000)
    p.current = p.current._replace(started=p.current.started - 0.01)  # 0.1 us per iteration
    p.check_s = INTEGRITY_CHECK_S
    p.at(1, 0, 1, 1_000_000)
    assert p.bound_s(5.0) >= STALL_FACTOR * 1_000_000 * INTEGRITY_CHECK_S
    p.check_s = 0.0
    # without --integrity: the warm-up's rate (0.1 s for the trial), below the floor price of its
    # messages (1 us each: 1 s), which bounds it: 20 x 1 s
    assert (
        p.bound_s(5.0) == stall_bound_s(5.0, floor_step_s(1_000_000, 1, 1)) == pytest.approx(20.0, rel=1e-3)
    )
