"""A group kind: every measuring rank in one group, a step they all take together, per size.

A group kind supplies only its step (`GroupStep`: what one iteration does on each member, through the
group's own communicator) and its bytes per iteration; the per-size sequence around it (rank 0
commands the size; every member prepares its buffers and says whether it could, with why not, before
any collective: one member that cannot (out of memory) fails the run with its cause, every rank
released; every member runs the warm-up; before each trial every member is ready and waits
for the go, so a stop never leaves one blocked; after the size each reports its check, stop signal,
times and CPU time) is the run's own (npmpi/persize/driver.py). A trial's time is the slowest member's
(the operation is done when every rank is); every member's own times are kept
(/pingpong/member_trial_s). Rank 0's stall watchdog follows each wait (npmpi/persize/watchdog.py);
idle baselines and the stop are answered between sizes.
"""

from __future__ import annotations

import errno
import os
import time
from dataclasses import dataclass, field

import numpy as np

from npmpi.core import sampling
from npmpi.core.errors import DataMismatch, Interrupted, PrepareFailed
from npmpi.core.messages import CMD_BASELINE, CMD_STOP, CTRL_TAG, StopFlag
from npmpi.core.safetext import printable
from npmpi.core.units import format_size_iec
from npmpi.persize import cputime
from npmpi.persize import span as trialspan
from npmpi.persize.driver import SizeDriver, member_prepared, member_report, member_trials
from npmpi.persize.messageloop import warmup_iterations
from npmpi.persize.watchdog import LOOK, PREPARE, WARMUP, Progress
from npmpi.runfile.format import SizeResult

MAX_ITERATIONS = 1_000_000_000
PROBE_ITERATIONS = 20  # the first size's time per step, from a measurement of this many not kept
COMMAND_POLL_S = 0.001  # serve_group(quiet=True)'s sleep between looks for rank 0's next command
SERIES_SHIFT = 40  # a kind's series index rides in CMD_SIZE's trials field, above the integrity bit
LOOK_BIT = 1 << 33  # in CMD_SIZE's trials field: run LOOK_ITERATIONS untimed before the warm-up
LOOK_ITERATIONS = 1
LOOK_RATIO = 2  # a size more than this many times the last measured one starts with a look
# fault injection for the test suite: SIZE:RANK, that rank's buffers for that size fail (MemoryError)
PREPARE_FAULT_ENV = "NPMPI_FAULT_PREPARE"
CAUSE_CHARS = 160  # of an exception's message in the cause a rank sends


class GroupStep:
    """What a group kind's members do: one instance per member, built by the kind."""

    verifies = True  # whether check() compares the results (the rows' data_verified)

    def set_size(self, size: int) -> None:
        """Prepare the buffers of `size` bytes (untimed)."""
        raise NotImplementedError

    def run(self, iterations: int) -> float:
        """`iterations` steps through the group's communicator; the seconds they took on this rank."""
        raise NotImplementedError

    def check(self) -> bool:
        """Whether the last step's results are right (after the trials, untimed)."""
        return True

    def select(self, series: int) -> None:
        """Measure series `series` of a kind that has several (npmpi/coll/series.py); by default one."""

    def warmup(self, size: int, iterations: int) -> int:
        """Untimed steps before a size's trials."""
        return warmup_iterations(iterations)


def failure_cause(exc: BaseException) -> str:
    """Why a rank could not prepare a size, in a few words: the exception's type and message (cut),
    out of memory said so (MemoryError, or ENOMEM from the buffer's mmap under a memory limit)."""
    text = printable(str(exc))[:CAUSE_CHARS]
    name = type(exc).__name__
    if isinstance(exc, MemoryError) or (isinstance(exc, OSError) and exc.errno == errno.ENOMEM):
        return f"{name} (out of memory){': ' + text if text else ''}"
    return f"{name}: {text}" if text else name


def prepare(step: GroupStep, size: int, rank: int, series: int | None = None) -> str | None:
    """This rank's buffers for `size` (on a member, for series `series` first): None, or why it could
    not (failure_cause). A stop's Interrupted is no failure of the size: it passes."""
    try:
        if series is not None:
            step.select(series)
        if os.environ.get(PREPARE_FAULT_ENV) == f"{size}:{rank}":
            raise MemoryError(f"{PREPARE_FAULT_ENV}={size}:{rank}, an allocation failure for a test")
        step.set_size(size)
    except Interrupted:
        raise
    except Exception as exc:
        return failure_cause(exc)
    return None


def unprepared_message(size: int, causes: dict[int, str], hosts: list[str]) -> str:
    """The run's end when ranks could not prepare `size`: the lowest of them, its host and cause."""
    rank = min(causes)
    host = hosts[rank] if 0 <= rank < len(hosts) else "?"
    others = sorted(r for r in causes if r != rank)
    also = f" (ranks {', '.join(map(str, others))} too)" if others else ""
    hint = ""
    if "(out of memory)" in causes[rank]:
        hint = "; give smaller --sizes, or run where each rank has more memory"
    return (
        f"rank {rank} ({host}) could not prepare {format_size_iec(size)} messages: {causes[rank]}{also}{hint}"
    )


@dataclass
class GroupOutcome:
    """How the sizes ended, for the file's status and the exit code."""

    status: str = "complete"
    message: str = ""
    exit_code: int = 0
    stopped_early: str = ""
    rows: list[SizeResult] = field(default_factory=list)


class GroupCoordinator:
    """Rank 0's side: commands every size, starts every trial, gathers the members' times
    (the per-size driver: npmpi/persize/driver.py)."""

    def __init__(self, comm, members: list[int], step: GroupStep, opts, stop: StopFlag, on_row) -> None:
        self.comm, self.step, self.opts, self.stop, self.on_row = comm, step, opts, stop, on_row
        self.members = list(members)
        self.others = [r for r in self.members if r != 0]
        self.idle = [r for r in range(comm.Get_size()) if r not in self.members]
        self.progress = Progress(sampling.trials_bound(opts), len(self.members))
        self.driver = SizeDriver(comm, self.others, self.others, self.progress, stop)
        self.watched = self.others[0] if self.others else 0  # the rank named while rank 0 is in a trial
        self.state = "between"  # "trials" while the members wait for a go: release() abandons the size
        self.series = 0  # the series measured (a kind with several: npmpi/coll/series.py)
        self.watchdog = None  # the recording's StallWatchdog, once it has one
        self.hosts: list[str] = []  # each rank's host, for a failure's message (the recording's layout)
        stop.transmitter = self

    def _iterations(self, prev_s: float) -> int:
        """Iterations for a trial of about --target-time from the last size's best time per step (as
        NetPIPE's rule: sizes that grow by steps take at most a few times longer), at least the
        number of trials (NetPIPE's floor)."""
        if self.opts.repeats is not None:
            return self.opts.repeats
        return int(min(max(self.opts.target_time_s / max(prev_s, 1e-6), self.opts.trials), MAX_ITERATIONS))

    def first_rate_s(self, size: int) -> float | None:
        """The first size's seconds per step, from its trials of PROBE_ITERATIONS steps, measured and
        not kept (NetPIPE's latency probe): a kept first size of 20 steps per trial would be mostly
        the members' start (each starts its clock at its own go, up to tens of µs apart on 8 ranks)
        and one-time costs. None when a stop abandoned it."""
        probe = self.measure_size(size, PROBE_ITERATIONS)
        return None if probe is None else max(min(probe.trial_s) / PROBE_ITERATIONS, 1e-9)

    def rate_before(self, size: int, prev_s: float) -> float | None:
        """The time per step the next size's iterations follow: the last size's, or at a series'
        first size (`prev_s` 0) the probe's (none with --repeats); None when a stop abandoned it."""
        if prev_s > 0.0 or self.opts.repeats is not None:
            return prev_s
        return self.first_rate_s(size)

    def rate_near(self, size: int, measured: dict[int, float]) -> float | None:
        """--order random: the time per step of `size` from the measured size nearest to it (within a
        factor of 2, npmpi.core.sampling.nearest_time), else from a probe of `size` itself."""
        near = sampling.nearest_time(size, measured)
        return near if near is not None else self.rate_before(size, 0.0)

    def ordered(self, sizes, series: int = 0, counts=None) -> list[int]:
        """`sizes` in the order measured (--order; a coll file's series `series` of `counts` sizes)."""
        sizes = list(sizes)
        return [sizes[i] for i in sampling.measure_order(len(sizes), self.opts, series, counts)]

    def run(self) -> GroupOutcome:
        """Every size until done or stopped."""
        outcome = GroupOutcome()
        prev_s = 0.0
        measured: dict[int, float] = {}
        shuffled = self.opts.size_order == sampling.ORDER_RANDOM
        for index, size in enumerate(self.ordered(self.opts.sizes_bytes)):
            if self.stop:
                break
            rate = self.rate_near(size, measured) if shuffled else self.rate_before(size, prev_s)
            if rate is None:
                break
            iterations = self._iterations(rate)
            row = self.measure_size(size, iterations)
            if row is None:
                break
            outcome.rows.append(row)
            self.on_row(index, row)
            prev_s = measured[size] = min(row.trial_s) / iterations
        if self.stop:
            self.stop.mark_interrupted(outcome, f"; stopped after {len(outcome.rows)} sizes")
        return outcome

    def _trial(self, iterations: int) -> tuple[float, float, float]:
        start = time.time()
        with self.stop.timed():
            elapsed = self.step.run(iterations)
        return elapsed, start, time.time()

    def _start(self, size: int, iterations: int, look: int) -> bool:
        """The size's command, rank 0's own buffers, then every member's word that it prepared its
        own, and the go (npmpi/persize/driver.py): True when they go on; False when a stop came (every
        member leaves the size); PrepareFailed naming the lowest rank that could not (every member
        has left the size: none waits inside a collective, so all can be released)."""
        trials = sampling.trials_bound(self.opts) | look | self.series << SERIES_SHIFT
        self.progress.at(size, PREPARE, self.watched)
        self.driver.start_size(size, iterations, trials)
        self.state = "trials"  # the members wait for a go: a release first tells them to leave the size
        own = prepare(self.step, size, 0)
        going, causes = self.driver.prepared(lambda rank: self.progress.at(size, PREPARE, rank), own is None)
        self.state = "between"
        if own is not None:
            causes[0] = own
        if causes:
            raise PrepareFailed(unprepared_message(size, causes, self.hosts))
        return going

    def measure_size(self, size: int, iterations: int) -> SizeResult | None:
        """All trials of one size; None when a stop request abandoned it."""
        opts = self.opts
        warm = self.step.warmup(size, iterations)
        # the stall watchdog's rate is of the last size: scaled by a large size ratio it bounds the
        # warm-up and trials by hours, so a much larger size's own rate comes from a look first
        measured = self.progress.rate[0]
        look = LOOK_BIT if measured > 0 and size > LOOK_RATIO * measured else 0
        if not self._start(size, iterations, look):
            return None
        self.progress.at(size, LOOK if look else WARMUP, self.watched, LOOK_ITERATIONS if look else warm)
        with self.stop.timed():
            if look:
                self.step.run(LOOK_ITERATIONS)
                self.progress.at(size, WARMUP, self.watched, warm)
            self.step.run(warm)
        self.state = "trials"
        span = trialspan.TrialSpan()
        trials = self.driver.trials(
            size,
            iterations,
            sampling.trials_bound(opts),
            self.watched,
            lambda: span.lap(self._trial(iterations)),
            sampling.stop_rule(opts),  # on rank 0's own times: the slowest member's come after the size
        )
        if trials is None:
            self.state = "between"
            return None
        own_span = span.stop()
        own, starts, ends = (list(column) for column in zip(*trials, strict=True))
        ok = self.step.check()
        reports = self.driver.reports(size, iterations, len(own))
        self.state = "between"
        if reports.signal and not self.stop:
            self.stop.set(reports.signal, f"signal {reports.signal} on a member rank")
        bad = ([] if ok else ["rank 0"]) + [f"rank {rank}" for rank in reports.wrong]
        if bad:
            raise DataMismatch(
                f"result check failed at message size {size} B on {', '.join(bad)}; the run file keeps "
                "every size before this one"
            )
        member_times = [own, *(reports.times[r] for r in self.others)]
        slowest = np.max(np.array(member_times), axis=0).tolist()
        cpu = cputime.row_fields([0, *self.others], [own_span.cpu, *reports.cpu])
        cpu.update(trialspan.row_fields([0, *self.others], own_span, reports.cond))
        ints, floats = sampling.precision_fields(opts, own)
        return SizeResult(
            size,
            iterations,
            warm,
            slowest,
            starts,
            ends,
            self.step.verifies,
            member_trial_s=member_times,
            row_columns=ints or None,
            row_floats=floats or None,
            **cpu,
        )

    def release(self, exit_code: int) -> bool:
        """Tell every other rank to exit; False while the members are in a step (only an abort ends it)."""
        if self.stop.timing:
            return False
        self.driver.release(exit_code, self.state == "trials", self.idle)
        self.state = "between"
        return True


def serve_group(comm, step: GroupStep, stop: StopFlag, quiet: bool = False) -> int:
    """A member other than rank 0: each size's trials as rank 0 commands them, the idle baselines,
    until the stop; returns the exit code rank 0 sends. `quiet`: wait for each command without
    spinning a core in a blocking receive (a member that sits out a series of a coll run)."""
    from npmpi.core.ending import frozen_for_a_test
    from npmpi.power.baseline import take_part

    ctrl = np.zeros(4, dtype=np.int64)
    while True:
        if quiet:
            req = comm.Irecv(ctrl, 0, CTRL_TAG)
            while not req.Test():
                time.sleep(COMMAND_POLL_S)
        else:
            comm.Recv(ctrl, 0, CTRL_TAG)
        cmd, size, iterations, trials = (int(x) for x in ctrl)
        if cmd == CMD_STOP:
            return size  # the exit code travels in the size field
        if cmd == CMD_BASELINE:
            code = take_part(comm, ctrl, node_stat=False)
            if code is not None:
                return code
            continue
        failure = prepare(step, size, comm.Get_rank(), trials >> SERIES_SHIFT)
        if not member_prepared(comm, failure):
            continue  # a stop, or a rank could not prepare the size: rank 0 ends the run or goes on
        frozen_for_a_test(f"size-{size}", comm.Get_rank())
        if trials & LOOK_BIT:
            step.run(LOOK_ITERATIONS)
        step.run(step.warmup(size, iterations))
        span = trialspan.TrialSpan()
        times = member_trials(comm, trials & 0xFFFFFFFF, lambda: span.lap(step.run(iterations)))  # noqa: B023
        figures = span.stop()
        if times is not None:
            member_report(comm, step.check(), stop, times, figures)
