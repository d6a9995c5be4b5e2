"""Rank 0's stall watchdog in a map: a member that stops answering ends the map with one line and
every completed round kept, instead of a map that hangs until Ctrl-C or the job's time limit.

The thread, its lock and the file's safety rule are the run's (npmpi/persize/watchdog.py): the
coordinator calls `at` before each of rank 0's waits in a round (a member's readiness, rank 0's own
pair, a transmitter's results) and `quiet()` once the round is over, before the round reaches the
file, so the thread never enters HDF5 while the main thread is in it.

The bound of a wait is the run's rule, `stall_bound_s(--stall-timeout, expected)`, with the
expectation a whole round's: the probe, the warm-up and the trials of a pair, each about
--target-time (NetPIPE's rule picks the iterations so) or one message when a message takes longer,
twice with both directions. A message's time at a new size comes from the slowest pair of the
last round (its trial time per iteration), scaled up by the size ratio as in a run; a round at a
size already measured is expected to take at least as long as the last one did. A map's pairs are
not rank 0's loop, so there is no per-step rate to learn: the round is the step.
"""

from __future__ import annotations

import time

import numpy as np

from npmpi.persize.watchdog import STALL_FACTOR, Progress, StallWatchdog, Step, expected_step_s, stall_bound_s

WAIT_READY, WAIT_OWN, WAIT_RESULTS = 0, 1, 2  # what rank 0 waits for (a Step's iterations field)
STEPS_OUTSIDE_TRIALS = 3  # first contact and the probe, the warm-up, the end and its check


class RoundProgress(Progress):
    """Where rank 0 is in the map's rounds, and what a round is expected to take."""

    lost = "the round in progress is not recorded"

    def __init__(self, trials: int, target_time_s: float, both: bool) -> None:
        super().__init__(trials)
        self.target_time_s = target_time_s
        self.directions = 2 if both else 1
        self.label = "round 1"  # 'round 3 of 9', or a suspect's re-measurement
        self.message_rate: tuple[int, float] = (0, 0.0)  # (size, s per iteration) of the slowest pair
        self.last_round: tuple[int, float] = (0, 0.0)  # (size, s) of the last round

    def wait(self, size: int, rank: int, what: int) -> None:
        """Rank 0 starts waiting for `rank` (WAIT_READY, WAIT_OWN or WAIT_RESULTS)."""
        self.current = Step(size, 0, rank, what, time.monotonic())
        self.armed = True

    def expected_round_s(self, size: int) -> float:
        """What a round at `size` should take (see the module's docstring)."""
        measured_size, per_iteration_s = self.message_rate
        message_s = expected_step_s(1, per_iteration_s, measured_size, size)
        trial_s = max(self.target_time_s, message_s)
        expected = (self.trials + STEPS_OUTSIDE_TRIALS) * trial_s * self.directions
        last_size, last_s = self.last_round
        return max(expected, last_s) if last_size == size else expected

    def learn(self, size: int, window_s: float, trial_s: list[np.ndarray], iterations: list[int]) -> None:
        """A round ended: its time, and the slowest pair's time per iteration."""
        self.last_round = (size, window_s)
        pairs = zip(trial_s, iterations, strict=True)
        rates = [float(np.nanmax(t)) / n for t, n in pairs if n > 0 and np.isfinite(t).any()]
        if rates:
            self.message_rate = (size, max(rates))

    def bound_s(self, floor_s: float) -> float:
        step = self.current
        return stall_bound_s(floor_s, self.expected_round_s(step.size) if step is not None else 0.0)

    def describe(self, step: Step) -> str:
        what = {
            WAIT_READY: "the wait for it to be ready",
            WAIT_OWN: "rank 0's own pair with it",
            WAIT_RESULTS: "the wait for its pair's results",
        }[step.iterations]
        return f"{self.label} at {step.size} B ({what})"


def map_watchdog(recording) -> StallWatchdog:
    """Rank 0's watchdog around the map's rounds and re-measurements, its bound's rule stored in the
    file; `recording` is the MapRecording (its writer, coordinator, layout, comm)."""
    floor_s = recording.opts.stall_timeout_s
    recording.writer.set_attrs(stall_timeout_s=floor_s, stall_bound_factor=STALL_FACTOR)
    coordinator = recording.coordinator
    hosts = list(recording.layout.hosts)
    return StallWatchdog(coordinator.progress, floor_s, hosts, coordinator.partner_of, recording.stalled)
