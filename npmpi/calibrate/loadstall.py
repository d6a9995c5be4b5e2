"""calibrate's start and end of the load watched: a load rank that stops answering ends the
calibration with one line naming it, instead of a job that hangs in a barrier until Ctrl-C or its
time limit.

Every load rank runs the same schedule from a common start and then waits its meters' last
reports, so all end within moments of each other; a barrier cannot say who is missing, so before
the barrier of the start and before the barrier of the end each load rank other than rank 0 tells
rank 0 it is there (LOAD_DONE_TAG: 0 at the start, 1 at the end), and
rank 0 waits for each in turn, asleep, under the run's stall watchdog (npmpi/persize/watchdog.py):
the bound is `max(--stall-timeout, 20 x the longest burst)` (a rank may lag rank 0 by a burst it
is finishing). There is no file to keep: the reserved output is released, nothing is written, and
every rank ends with MPI_Abort (a stopped process never reaches MPI_Finalize).
"""

from __future__ import annotations

import time

import numpy as np

from npmpi.core.messages import LOAD_DONE_TAG
from npmpi.persize.watchdog import Progress, StallWatchdog, Step, stall_bound_s

POLL_S = 0.01


class LoadProgress(Progress):
    """Rank 0's wait for one load rank's end of the load."""

    lost = "no calibration is written"

    def __init__(self, burst_max_s: float, stage: str = "end") -> None:
        super().__init__(trials=0)
        self.burst_max_s = burst_max_s
        self.stage = stage

    def wait(self, rank: int) -> None:
        self.current = Step(0, 0, rank, 0, time.monotonic())
        self.armed = True

    def bound_s(self, floor_s: float) -> float:
        return stall_bound_s(floor_s, self.burst_max_s)

    def describe(self, step: Step) -> str:
        return f"the wait for the {self.stage} of its load"


def say_done(comm, stage: str = "end") -> None:
    """A load rank other than rank 0: it is at the load's start or its end is over (before the
    barrier there)."""
    comm.Send(np.full(1, int(stage == "end"), dtype=np.int64), 0, LOAD_DONE_TAG)


def wait_for_load_ranks(
    comm, ranks: list[int], floor_s: float, burst_max_s: float, hosts, output, stage: str = "end"
) -> None:
    """Rank 0: wait for each load rank at the load's `stage` (start, end), under the stall watchdog;
    a stall releases `output` (the reserved calibration file) and ends the job with one line."""
    from npmpi.core.abort import abort
    from npmpi.core.outpath import release

    progress = LoadProgress(burst_max_s, stage)

    def end(message: str, bound_s: float) -> None:
        extra = ""
        try:
            if output is not None:
                release(output)
        except Exception as exc:
            extra = f" (and the reserved output could not be released: {exc})"
        abort(comm, message + extra, 1, settle_s=0.3)

    done = np.zeros(1, dtype=np.int64)
    with StallWatchdog(progress, floor_s, list(hosts), {}, end):
        for rank in ranks:
            progress.wait(rank)
            req = comm.Irecv(done, rank, LOAD_DONE_TAG)
            while not req.Test():
                time.sleep(POLL_S)
        progress.quiet()
