"""Rank 0's stall watchdog: a measuring rank that stops answering ends the run with one line and
every completed size kept in the file, instead of a job that hangs until a time limit.

Why a thread. When the reflector, or a rank of another pair, is stopped (SIGSTOP, a debugger
attached) or stuck (a swap storm, a hung file system), rank 0 waits in a blocking MPI call or in
the C kernel. Both release the GIL (mpi4py around its blocking calls; csrc/cmpi.c, ctcp.c and
crma.c with Py_BEGIN_ALLOW_THREADS; a socket's recv) and never return to Python, so a Python
signal handler (the SIGALRM of a stop signal) never runs; a daemon thread does. It sleeps towards
the deadline of the step in progress (TICK_S at a time) and, when the main thread has not moved on
by then, ends the run for it. Rank 0 itself paused (SIGSTOP and SIGCONT, a debugger, a paused VM)
pauses this thread too, which then wakes later than it asked: that time is rank 0's, not a silent
peer's, and is not counted (StallWatchdog._run).

--integrity checks every message of a trial in Python, which the warm-up does not: a trial's
expected time adds INTEGRITY_CHECK_S per iteration (`Progress.check_s`), so the first trial of a
size is not bounded by the warm-up's much faster rate.

What counts as progress. The transmitter calls `Progress.at(size, step, rank, iterations)` when a
step of the protocol starts: the probe, a size's warm-up, each trial (with its sync), the wait for
a rank's readiness or its results. That is a tuple stored and a clock read between trials, nothing
inside the timed loop. The rank named is the one rank 0 waits for during the step.

The bound of a step is `stall_bound_s`: max(--stall-timeout, STALL_FACTOR x what the step is
expected to take), so a slow but live measurement never trips it: the expectation is the step's
iterations times the time per iteration of the last step that ran iterations (the probe, the
warm-up, the previous trial: they are measured as they end, here), scaled by the size ratio when
the size grew (past the latency a message takes about proportionally longer; a switch of the
transport's protocol between sizes is what the factor is for). NetPIPE's rule picks iterations so
that a trial lasts about --target-time, and its stop rule (--max-one-way) ends the sweep once
messages get slower than that, so the expectation follows what the run is asked to do; no fixed
number could (a 2 GiB message on a slow link takes seconds per iteration). A step
with no estimate yet (the first look of the probe) is expected to take at least what its messages
cost at a floor price (`floor_step_s`: MESSAGE_FLOOR_S a message plus BYTE_FLOOR_S a byte, for the
messages each way of an iteration, a whole window of them in a windowed mode), so a first look at
a window of 1 GiB messages is not bounded by the bare floor. A group kind's size much larger than
the last measured (coll --sizes 8,64K) starts with an untimed look of LOOK_ITERATIONS (its bound:
the last rate plus its bytes at LOOK_BYTE_S, not the size ratio's blow-up, so a member stopped
before it is found within seconds), and its warm-up and trials follow the look's own rate. Before
any of it, rank 0 waits for each member's word that its buffers for the size are prepared (PREPARE:
the message's bytes per member at PREPARE_BYTE_S, no rate).
--stall-timeout 0 turns the watchdog off.

Why writing the file from this thread is safe. HDF5 must not be entered by this thread while the
main thread is inside h5py (h5py serialises single calls, not a row's several writes). The watchdog
acts only while the protocol is `armed`: from a step's start (`at`) until the main thread calls
`quiet()` before it touches the file (rank 0's row, the power collection, the end of the sweep).
`quiet()` and the watchdog's check-and-act hold the same lock, and the watchdog never releases it
once it acts: a main thread that returns from MPI at that very moment blocks in `quiet()` until
MPI_Abort ends the process. A stop signal's `mark_file` takes the lock too (reentrant: the handler
runs in the main thread, perhaps while it holds the lock). The thread calls MPI once, MPI_Abort,
while the main thread is blocked in MPI: Open MPI 5 and MPICH 4 end the job from another thread
even at MPI_THREAD_SINGLE, the level rank 0 asks for (tests/test_reliability_stall.py,
tests/test_large_messages.py's MPICH environment), and a stopped
process never reaches MPI_Finalize, so only an abort (mpirun kills it) ends the job.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import NamedTuple

STALL_FACTOR = 20.0  # times what a step is expected to take
IDLE_CHECK_S = 1.0  # how often the thread looks while nothing is armed
TICK_S = 0.25  # the longest the thread sleeps while a step is armed: how it sees rank 0 paused
PAUSE_SLACK_S = 0.1  # a wake this much later than asked is rank 0 paused (or not run), not a slow peer
# --integrity: each iteration of a trial is followed by Python's check of the received message,
# which the warm-up (the rate the first trial's bound is learned from) does not do; a generous
# cost of that check, added to each trial iteration's expected time
INTEGRITY_CHECK_S = 2e-4
# the least a message is taken to cost with no measured rate yet (the probe's first look): a fast
# shared-memory message, and a byte at 10 GB/s; STALL_FACTOR times it is what a step of a window of
# large messages may take before it is called a stall (floor_step_s)
MESSAGE_FLOOR_S = 1e-6
BYTE_FLOOR_S = 1e-10

# steps other than a trial (whose step is its index from 0); LOOK: a group kind's untimed first
# look at a size much larger than the last measured (its rate is then the size's own); PREPARE: the
# wait for a group kind's member to prepare a size's buffers (its word before the warm-up)
PROBE, WARMUP, READY, RESULTS, LOOK, PREPARE = -1, -2, -3, -4, -5, -6
# a member's buffers prepared at this cost a byte, a message's bytes for each member (1 GB/s;
# STALL_FACTOR times it: 50 MB/s): allocated, every page touched, the send pattern written
PREPARE_BYTE_S = 1e-9
# a look's expected time per iteration: the last rate scaled by the size ratio, but at most the last
# rate plus each of the step's messages at this cost a byte (100 MB/s; STALL_FACTOR times it: 5 MB/s)
LOOK_BYTE_S = 1e-8


def stall_bound_s(floor_s: float, expected_s: float) -> float:
    """Seconds without progress after which a step is stalled: never below the floor, never below
    STALL_FACTOR times what the step is expected to take; 0 (no bound) when the floor is 0."""
    if floor_s <= 0:
        return 0.0
    return max(floor_s, STALL_FACTOR * max(expected_s, 0.0))


def expected_step_s(iterations: int, per_iteration_s: float, measured_size: int, size: int) -> float:
    """What a step of `iterations` at `size` should take, from a time per iteration measured at
    `measured_size` (scaled up by the size ratio, never down); a wait with no iterations of its own
    (a result, a rank's readiness) counts as one iteration."""
    if per_iteration_s <= 0:
        return 0.0
    ratio = max(1.0, size / measured_size) if measured_size > 0 else max(1.0, float(size))
    return max(iterations, 1) * per_iteration_s * ratio


def floor_step_s(iterations: int, messages: int, size: int) -> float:
    """The least a step of `iterations` at `size` can take: `messages` per iteration (both ways, a
    window's worth in a windowed mode) at MESSAGE_FLOOR_S each plus BYTE_FLOOR_S a byte."""
    return max(iterations, 1) * max(messages, 0) * (MESSAGE_FLOOR_S + size * BYTE_FLOOR_S)


class Step(NamedTuple):
    size: int
    step: int  # a trial's index, or PROBE, WARMUP, READY, RESULTS
    rank: int  # the rank rank 0 waits for
    iterations: int
    started: float  # time.monotonic()


class Progress:
    """The main thread's position in the protocol, for the watchdog (see the module's docstring)."""

    lost = "the size in progress is not recorded"  # what the stall costs, for the one line

    def __init__(self, trials: int, messages: int = 1) -> None:
        self.trials = trials
        self.messages = messages  # messages an iteration moves, both ways (floor_step_s)
        self.lock = threading.RLock()
        self.armed = False
        self.current: Step | None = None
        self.rate: tuple[int, float] = (0, 0.0)  # (size, seconds per iteration) of the last measured step
        self.check_s = 0.0  # per trial iteration, beyond the loop's rate: INTEGRITY_CHECK_S with --integrity

    def at(self, size: int, step: int, rank: int, iterations: int = 0) -> None:
        """A step starts; the previous one has ended: if it ran rank 0's loop (a trial, the warm-up,
        the probe; not a wait for another rank), its time per iteration is kept. A wait for a rank's
        readiness or results is given a trial's iterations with several pairs: that rank may still
        be in its trial."""
        now = time.monotonic()
        last = self.current
        ran_loop = last is not None and last.step not in (READY, RESULTS, PREPARE) and last.iterations > 0
        if self.armed and ran_loop and now > last.started:
            self.rate = (last.size, (now - last.started) / last.iterations)
        self.current = Step(size, step, rank, iterations, now)
        self.armed = True

    def quiet(self) -> None:
        """The main thread leaves the protocol (to write the file): the watchdog may not act now."""
        with self.lock:
            self.armed = False

    def bound_s(self, floor_s: float) -> float:
        """The bound of the step in progress."""
        step = self.current
        if step is None:
            return stall_bound_s(floor_s, 0.0)
        measured_size, per_iteration = self.rate
        expected = expected_step_s(step.iterations, per_iteration, measured_size, step.size)
        if step.step == LOOK and per_iteration > 0:  # not the raw size ratio's blow-up
            capped = per_iteration + self.messages * step.size * LOOK_BYTE_S
            expected = min(expected, max(step.iterations, 1) * capped)
        if step.step == PREPARE:  # buffers to fill, no iteration: not the last rate's
            expected = self.messages * step.size * PREPARE_BYTE_S
        expected = max(expected, floor_step_s(step.iterations, self.messages, step.size))
        if step.step >= 0:  # a trial: with --integrity, every iteration's check too
            expected += step.iterations * self.check_s
        return stall_bound_s(floor_s, expected)

    def describe(self, step: Step) -> str:
        """What rank 0 was doing: 'trial 3 of 7 at 64 KiB'."""
        what = {
            PROBE: "the probe",
            LOOK: "the first look",
            WARMUP: "the warm-up",
            READY: "the wait for it to be ready for a trial",
            RESULTS: "the wait for its results",
            PREPARE: "the wait for it to prepare its buffers",
        }.get(step.step, "")
        what = what or f"trial {step.step + 1} of {self.trials}"
        return f"{what} at {step.size} B"


class StallWatchdog:
    """The thread, as a context manager around the sweep; `end(message, bound_s)` marks the file and
    ends the job (it is called with the lock held, and should not return)."""

    def __init__(
        self,
        progress: Progress,
        floor_s: float,
        hosts: list[str],
        partner_of: dict[int, int],
        end: Callable[[str, float], None],
        group: tuple[int, ...] = (),
    ) -> None:
        self.progress = progress
        self.floor_s = floor_s
        self.hosts = hosts
        self.partner_of = partner_of  # rank -> its pair's other rank (pairs other than rank 0's)
        self.group = group  # a group kind's members: inside its step each waits for all the others
        self.end = end
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="npmpi-stall-watchdog", daemon=True)
        self._paused: tuple[Step | None, float] = (None, 0.0)  # (the step, seconds rank 0 was paused in it)

    def __enter__(self) -> StallWatchdog:
        if self.floor_s > 0:
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        with self.progress.lock:  # blocks for good if the watchdog is ending the job
            self.progress.armed = False
            self._stopped.set()
        if self._thread.is_alive():
            self._thread.join(timeout=IDLE_CHECK_S)

    def _sleep_s(self) -> float:
        p = self.progress
        step = p.current
        if not p.armed or step is None:
            return IDLE_CHECK_S
        left = step.started + self.paused_s(step) + p.bound_s(self.floor_s) - time.monotonic()
        return min(max(0.05, left), TICK_S)

    def paused_s(self, step: Step) -> float:
        """How long rank 0 itself was paused during `step` (see `_run`)."""
        paused_step, seconds = self._paused
        return seconds if paused_step is step else 0.0

    def _run(self) -> None:
        """Rank 0 paused as a whole (SIGSTOP and SIGCONT, a debugger, a paused VM) stops this thread
        too: it wakes later than it asked (by more than PAUSE_SLACK_S). The main thread was not
        running either, so that lateness is no peer's silence: it is taken off the step's wait
        (`paused_s`), and the peer is blamed only for a bound's worth of time that rank 0 itself was
        running. Only the lateness: a pause that began during the sleep costs at most TICK_S of the
        bound (the thread sleeps no longer while a step is armed), and a machine so loaded that the
        thread is always late still sees a silent peer's wait grow by every sleep it asked for."""
        while True:
            asked = self._sleep_s()
            slept_from = time.monotonic()
            if self._stopped.wait(asked):
                return
            late = time.monotonic() - slept_from - asked
            p = self.progress
            with p.lock:
                step = p.current
                if late > PAUSE_SLACK_S and step is not None:
                    self._paused = (step, self.paused_s(step) + late)
                if self._stopped.is_set() or not p.armed or step is None:
                    continue
                bound = p.bound_s(self.floor_s)
                waited = time.monotonic() - step.started - self.paused_s(step)
                if waited >= bound:
                    self.end(self.message(step, waited, bound), bound)
                    return

    def message(self, step: Step, waited_s: float, bound_s: float) -> str:
        """The one line: which rank, for how long, doing what, what to check."""
        rank = step.rank
        host = self.hosts[rank] if 0 <= rank < len(self.hosts) else "?"
        partner = self.partner_of.get(rank)
        also = f" (or its partner rank {partner}, whose messages it waits for)" if partner is not None else ""
        who = f"rank {rank} ({host}){also}"
        if self.group and (step.step >= 0 or step.step in (WARMUP, LOOK)):  # rank 0 inside the group's step
            others = ", ".join(str(r) for r in self.group if r != 0)
            who = f"one of the measuring ranks {others} (inside a step of the whole group each waits for all)"
        return (
            f"{who} stopped answering: nothing from it for {waited_s:.1f} s "
            f"(the stall bound: {bound_s:.1f} s, --stall-timeout) during {self.progress.describe(step)}; "
            "check that process: stopped (SIGSTOP, a debugger attached) or stuck (swapping, a hung "
            f"file system, its node down); {self.progress.lost}"
        )
