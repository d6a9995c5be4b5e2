"""A frozen measuring rank has an end: rank 0's stall watchdog (npmpi/persize/watchdog.py).

The reflector stopped with SIGSTOP mid-sweep (`--stall-timeout 3`): the job ends by itself within
the bound and a margin, with one line naming rank 1, no traceback, no process left, and a file
`failed` with the reason and every completed size, which npmpi-analyze reads. With both kernels:
the C kernel busy-polls with the GIL released, the Python one in mpi4py's receives. A slow but live
measurement (trials longer than --stall-timeout) does not trip it; the bound's rule and the thread
are tested in process too. The stopped process is SIGCONTed and killed by the test whatever happens.
"""

from __future__ import annotations

import re
import sys
import threading
import time

import h5py
import pytest
from support.reliability import Job, analyze_in_process, freeze_until_the_end, run_without_tripping

from npmpi.persize.watchdog import (
    READY,
    RESULTS,
    STALL_FACTOR,
    WARMUP,
    Progress,
    StallWatchdog,
    expected_step_s,
    stall_bound_s,
)

STALL_S = 3.0
MARGIN_S = 12.0  # rank 0's wait starts up to a step before the stop; mpirun's abort; a loaded machine


# -- the bound's rule and the thread, in process


def test_the_bound_is_the_floor_or_twenty_times_the_expected_step():
    assert stall_bound_s(60.0, 0.0) == 60.0
    assert stall_bound_s(60.0, 1.0) == 60.0
    assert stall_bound_s(60.0, 10.0) == STALL_FACTOR * 10.0 == 200.0
    assert stall_bound_s(3.0, 2.0) == 40.0  # a 2 s trial never trips a 3 s --stall-timeout
    assert stall_bound_s(0.0, 1e9) == 0.0  # --stall-timeout 0: never


def test_the_expected_step_scales_with_iterations_and_a_larger_size_only():
    assert expected_step_s(1000, 1e-6, 1024, 1024) == pytest.approx(1e-3)
    assert expected_step_s(1000, 1e-6, 1024, 4096) == pytest.approx(4e-3)  # 4 times the bytes
    assert expected_step_s(1000, 1e-6, 4096, 1024) == pytest.approx(1e-3)  # never scaled down
    assert expected_step_s(0, 1e-6, 1024, 1024) == pytest.approx(1e-6)  # a wait: one iteration
    assert expected_step_s(1000, 0.0, 1024, 1024) == 0.0  # nothing measured yet: the floor alone


def test_progress_learns_the_time_per_iteration_from_its_own_loops_only():
    p = Progress(trials=3)
    p.at(1024, WARMUP, 1, 100)
    p.current = p.current._replace(started=p.current.started - 0.5)  # the warm-up took 0.5 s
    p.at(1024, 0, 1, 1000)
    size, per_iteration = p.rate
    assert size == 1024 and per_iteration == pytest.approx(0.005, rel=0.05)
    assert p.bound_s(1.0) == pytest.approx(STALL_FACTOR * 1000 * 0.005, rel=0.05)  # 100 s, not 1 s
    p.current = p.current._replace(started=p.current.started - 2.0)  # trial 1 took 2 s
    p.at(1024, READY, 2, 1000)  # a wait for another rank: not a rate of rank 0's loop
    per_iteration = p.rate[1]
    assert per_iteration == pytest.approx(0.002, rel=0.05)
    p.current = p.current._replace(started=p.current.started - 30)
    p.at(1024, RESULTS, 2)
    assert p.rate[1] == pytest.approx(per_iteration)
    p.quiet()  # the file is written between sizes: that time is no step's
    p.current = p.current._replace(step=1, iterations=10, started=p.current.started - 100)
    p.at(2048, WARMUP, 1, 10)
    assert p.rate[1] == pytest.approx(per_iteration)


def _watch(progress: Progress, floor_s: float):
    fired: list[tuple[str, float]] = []

    def end(message: str, bound_s: float) -> None:
        fired.append((message, bound_s))

    return StallWatchdog(progress, floor_s, ["n0", "n1", "n2", "n3"], {2: 3, 3: 2}, end), fired


def test_the_watchdog_fires_on_a_stalled_step_and_names_the_rank_and_what_it_was_doing():
    p = Progress(trials=7)
    watchdog, fired = _watch(p, 0.3)
    with watchdog:
        p.at(65536, 2, 3, 10)
        deadline = time.monotonic() + 10
        while not fired and time.monotonic() < deadline:
            time.sleep(0.02)
    ((message, bound),) = fired
    assert bound == pytest.approx(0.3)
    assert message.startswith("rank 3 (n3) (or its partner rank 2, whose messages it waits for) stopped")
    assert "during trial 3 of 7 at 65536 B" in message and "SIGSTOP" in message and "swapping" in message


def test_the_watchdog_stays_quiet_while_steps_progress_or_the_file_is_written():
    p = Progress(trials=7)
    watchdog, fired = _watch(p, 0.3)
    with watchdog:
        end = time.monotonic() + 1.2
        trial = 0
        while time.monotonic() < end:  # live: a step every 0.1 s, four within each bound
            p.at(1024, trial % 7, 1, 100)
            trial += 1
            time.sleep(0.1)
        p.quiet()  # writing the file: however long it takes, no stall
        time.sleep(0.8)
    assert fired == []
    assert not any(t.name == "npmpi-stall-watchdog" and t.is_alive() for t in threading.enumerate())


# -- under mpirun


def _frozen_rank_run(tmp_path, name: str, args: list[str], np: int, frozen: int):
    """SIGSTOP rank `frozen` after 6 sizes; checks the end; (the error line, the file's path)."""
    args = [*args, "--quick", "--stall-timeout", f"{STALL_S:g}", "-o", name]
    job = Job(args, np, tmp_path, name)
    took, errors = freeze_until_the_end(job, lambda: job.rows_printed() >= 6, frozen, STALL_S + MARGIN_S + 30)
    assert len(errors) == 1, job.stderr[-3000:]
    assert "stopped answering" in errors[0] and re.search(rf"rank {frozen}\b", errors[0]), errors
    assert "completed sizes are in" in errors[0] and "aborting all ranks" in errors[0], errors
    assert job.proc.returncode != 0
    printed = job.rows_printed()
    with h5py.File(tmp_path / name) as f:
        assert f.attrs["status"] == "failed", dict(f.attrs)
        reason = str(f.attrs["status_message"])
        assert errors[0].startswith(f"npmpi: error: {reason}; "), (reason, errors[0])
        assert f.attrs["stall_timeout_s"] == STALL_S and f.attrs["stall_bound_s"] >= STALL_S
        assert f["pingpong/size_bytes"].shape[0] == printed  # every size printed is in the file
    print(f"\nfrozen rank {frozen} ({name}): job ended {took:.1f} s after the SIGSTOP", file=sys.stderr)
    print(errors[0], file=sys.stderr)
    assert took < STALL_S + MARGIN_S
    return errors[0], tmp_path / name


@pytest.mark.mpi
@pytest.mark.timeout(150)
@pytest.mark.parametrize("kernel", ["c", "python"])
def test_a_frozen_reflector_ends_the_job_with_one_line_and_a_failed_file(tmp_path, kernel, capsys):
    line, path = _frozen_rank_run(tmp_path, f"stalled-{kernel}.h5", ["-u", "8M", "--kernel", kernel], 2, 1)
    assert line.startswith("npmpi: error: rank 1 (") and "(or its partner" not in line, line
    code, out, err = analyze_in_process(capsys, path)
    assert code == 0 and "Traceback" not in out + err, err
    assert "status: failed (rank 1" in out and "stopped answering" in out, out[-2000:]


@pytest.mark.mpi
@pytest.mark.timeout(150)
def test_a_frozen_rank_of_another_pair_ends_the_job(tmp_path):
    """--pairs 2 on 4 ranks (pairs 0-3 and 1-2), rank 2 stopped: rank 0 waits for the readiness of
    rank 1 (its partner, blocked in its trial) or of rank 2 itself, and names both."""
    line, _path = _frozen_rank_run(tmp_path, "stalled-pairs.h5", ["-u", "1M", "--pairs", "2"], 4, 2)
    assert re.match(r"npmpi: error: rank [12] \(", line) and re.search(r"partner rank [12],", line), line


@pytest.mark.mpi
@pytest.mark.timeout(120)
def test_trials_longer_than_the_stall_timeout_do_not_trip_it(tmp_path):
    """Two trials of 2 s or more each with --stall-timeout 1: the bound follows the trial (20 x the
    trial the probe's time per round trip predicts). The iterations are fixed (--repeats: 3 x 10^6
    round trips of 1 B, 0.6 µs each in the Python kernel on a quiet machine, 2 µs on a loaded one: 10^6
    made trials of 0.61 s on a quiet one), not derived from --target-time: on a loaded machine
    the probe can see round trips a thousand times slower than the trials then run (the peer
    descheduled throughout it), and the trials would be shorter than the stall timeout."""
    name = "slow-live.h5"
    args = ["-l", "1", "-u", "1", "-p", "0", "--trials", "2", "--repeats", "3000000", "--stall-timeout", "1"]
    with run_without_tripping(args, tmp_path, name, 90, 1.0) as f:
        assert f["pingpong/trial_s"][0].min() > 1.0  # each trial was longer than --stall-timeout
