"""The sweep: rank 0 transmits and decides, the reflector echoes, other ranks wait quietly
(rank 0's side here; the others in npmpi/persize/reflector.py, the timed loop in
npmpi/persize/messageloop.py).

Control messages travel outside the timed loops. Per message size, rank 0 sends the size and
the round trips per trial to the reflector; both fill their buffers with a size-specific
pattern, run untimed warm-up round trips, then each trial starts with a one-integer sync
message (1 = run the trial, 0 = abandon the size) so a stop request never leaves the reflector
blocked. After the trials both check the received data and the reflector reports its check.

With several pairs (--pairs), rank 0 sends every command to every rank of every pair; before each
trial every one of them tells rank 0 it is ready and waits for its go (1 run, 0 abandon), so all
pairs start together; after the size each reports its data check, and each transmitter its own
trial times. A trial's aggregate time is the slowest pair's.

During an idle baseline (npmpi.power.baseline) every rank waits asleep, never in a blocking receive.

The mode (pingpong, stream, bidir), --async and --cache-cold only change what one iteration of
the timed loop does (MessageLoop); the protocol around the loops is the same for all of them.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from npmpi.core import sampling
from npmpi.core.config import Options
from npmpi.core.errors import DataMismatch, LinkLost
from npmpi.core.layout import Layout
from npmpi.core.messages import (
    CMD_PROBE,
    StopFlag,
)
from npmpi.core.protocol import Link
from npmpi.core.schedule import SizePoint, netpipe_repeats
from npmpi.persize import cputime
from npmpi.persize import span as trialspan
from npmpi.persize.driver import SizeDriver
from npmpi.persize.kernels import Kernel
from npmpi.persize.messageloop import PROBE_CHUNKS, MessageLoop, Patterns, probe_chunks, warmup_iterations
from npmpi.persize.watchdog import PROBE, WARMUP, Progress
from npmpi.protocols.mpi.link import MpiLink
from npmpi.runfile.format import SizeResult

PROBE_ROUND_TRIPS = 200
PROBE_BUDGET_S = 0.5
MAX_ITERATIONS = 1_000_000_000


def schedule_for(opts: Options) -> list[SizePoint]:
    from npmpi.core.schedule import SizePoint, netpipe_schedule

    if opts.lower_bytes == 0:  # OSU's first row (-l 0): 0 bytes, then NetPIPE's sizes from 1 B
        return [SizePoint(0, 1), *netpipe_schedule(1, opts.upper_bytes, opts.perturbation_bytes)]
    return netpipe_schedule(opts.lower_bytes, opts.upper_bytes, opts.perturbation_bytes)


@dataclass
class SweepOutcome:
    """How the sweep ended, for the file's status and the exit code."""

    status: str  # complete | interrupted | failed
    message: str = ""
    exit_code: int = 0
    stopped_early: str = ""
    rows: list[SizeResult] = field(default_factory=list)


class Transmitter:
    """Rank 0's side: decides iterations, times trials, records rows, keeps the protocol in step."""

    def __init__(
        self,
        comm,
        layout: Layout,
        opts: Options,
        kernel: Kernel,
        stop: StopFlag,
        on_row: Callable[[int, SizeResult], None],
        link: Link | None = None,
    ) -> None:
        self.comm = comm
        self.peer = layout.pair[1]
        # the protocol's link to the peer, opened before the sweep (MPI: the communicator itself)
        self.link = link if link is not None else MpiLink(comm, self.peer)
        in_pairs = {r for pair in layout.pairs for r in pair}
        self.others = [r for r in range(layout.world_size) if r not in in_pairs]
        self.multi = len(layout.pairs) > 1
        self.members = sorted(in_pairs - {0})  # every pair rank but rank 0
        self.pair_transmitters = [a for a, _ in layout.pairs[1:]]
        self.peer_of = {a: b for pair in layout.pairs for a, b in (pair, pair[::-1])}
        self.opts = opts
        self.stop = stop
        stop.transmitter = self  # lets a stop signal see whether a trial is in progress
        self.on_row = on_row
        self.patterns = Patterns(opts.largest_message_bytes)
        self.loop = MessageLoop(opts, kernel, transmitter=True)
        # where the reflector is: "between" sizes (waiting for a command) or in "trials" (waiting for
        # a sync); inside a timed loop (self.stop.timing) only an abort can end it
        self.state = "between"
        # where rank 0 is, for the stall watchdog (watchdog.py)
        self.progress = Progress(sampling.trials_bound(opts), 2 * opts.messages_per_iteration)
        # the per-size sequence with every other pair rank (one pair: the reflector alone)
        self.driver = SizeDriver(comm, self.members, self.pair_transmitters, self.progress, stop)

    # -- protocol steps

    def _run_kernel(self, iterations: int, first: int = 0) -> float:
        with self.stop.timed():
            elapsed = self.loop.run(self.link, iterations, first)
        self.state = "trials"
        return elapsed

    def _prepare(self, size: int) -> None:
        self.loop.set_size(size, self.patterns, 0)

    def probe_round_trip_s(self, size: int | None = None) -> float:
        """Round trip of the smallest size (or of `size`: --order random), to seed the iteration rule
        (NetPIPE's latency run).

        A first look of a few single round trips (of one iteration in a windowed mode: a window of
        65536 messages, or of 64 of 1 GiB, is already seconds); the full probe only when it takes at
        most PROBE_BUDGET_S (a 2 GiB smallest size would otherwise spend minutes here)."""
        size = self.opts.lower_bytes if size is None else size
        rt = self._probe(size, self.first_look)
        if rt * PROBE_ROUND_TRIPS <= PROBE_BUDGET_S:
            rt = self._probe(size, PROBE_ROUND_TRIPS)
        return rt

    @property
    def first_look(self) -> int:
        """The probe's first look, in iterations: PROBE_CHUNKS, or one when an iteration is a window."""
        return PROBE_CHUNKS if self.opts.messages_per_iteration == 1 else 1

    def _probe(self, size: int, round_trips: int) -> float:
        """A warm-up chunk, then the fastest of PROBE_CHUNKS chunks (one scheduling hiccup must not
        shrink the first size's iterations): seconds per round trip (probe_chunks: a first look of
        fewer iterations times each)."""
        chunk, chunks = probe_chunks(round_trips)
        self.progress.at(size, PROBE, self.peer, chunk * chunks)
        self.driver.command(CMD_PROBE, size, round_trips)
        self._prepare(size)
        with self.stop.timed():
            if chunks > PROBE_CHUNKS:
                self.loop.run(self.link, chunk)
            best = min(self.loop.run(self.link, chunk) for _ in range(min(chunks, PROBE_CHUNKS)))
        self.state = "between"
        return best / chunk

    def _start_size(self, size: int, iterations: int) -> int:
        """Command the size, fill the buffers and run the untimed warm-up; its iteration count."""
        opts = self.opts
        warm = warmup_iterations(iterations)
        self.progress.at(size, WARMUP, self.peer, warm)
        self.driver.start_size(size, iterations, sampling.trials_bound(opts), opts.integrity)
        self._prepare(size)
        with self.stop.timed():
            self.loop.run(self.link, warm)
        self.state = "trials"
        return warm

    def measure_size(self, size: int, iterations: int) -> SizeResult | None:
        """All trials of one size (rank 0 runs pair 0 and starts every pair's trials together); None
        when a stop request abandoned it."""
        opts = self.opts
        warm = self._start_size(size, iterations)
        span = trialspan.TrialSpan()  # rank 0's CPU and conditions over the trials (the warm-up is done)
        trials = self.driver.trials(
            size,
            iterations,
            sampling.trials_bound(opts),
            self.peer,
            lambda: span.lap(self._trial(size, iterations)),
            sampling.stop_rule(opts),
        )
        if trials is None:
            self.state = "between"
            return None
        own_span = span.stop()
        own, starts, ends, oks = (list(column) for column in zip(*trials, strict=True))
        verified = all(oks) and self.loop.received_ok(self.patterns, self.peer, 0, iterations)
        reports = self.driver.reports(size, iterations, len(own))
        self.state = "between"
        cpu = cputime.row_fields([0, *self.members], [own_span.cpu, *reports.cpu])
        cpu.update(trialspan.row_fields([0, *self.members], own_span, reports.cond))
        if reports.signal and not self.stop:
            where = f"rank {self.peer}" if not self.multi else "a pair rank"
            self.stop.set(reports.signal, f"signal {reports.signal} on {where}")
        bad = [] if verified else [f"rank 0 received wrong data from rank {self.peer}"]
        bad += [f"rank {rank} received wrong data from rank {self.peer_of[rank]}" for rank in reports.wrong]
        if bad:
            raise DataMismatch(
                f"data check failed at message size {size} B: {'; '.join(bad)}. "
                f"The transport (--protocol {self.opts.protocol}) corrupted or truncated a message; "
                "the run file keeps every size "
                "before this one"
            )
        ints, floats = sampling.precision_fields(opts, own)  # pair 0's times: what the rule followed
        pair_times = None
        if self.multi:  # the aggregate: all pairs' data moved by the slowest pair's end
            pair_times = [own, *(reports.times[rank] for rank in self.pair_transmitters)]
            own = np.max(np.array(pair_times), axis=0).tolist()
        return SizeResult(
            size,
            iterations,
            warm,
            own,
            starts,
            ends,
            True,
            pair_trial_s=pair_times,
            buffer_huge_page_bytes=self.loop.huge_page_bytes(),
            row_columns=ints or None,
            row_floats=floats or None,
            **cpu,
        )

    def _trial(self, size: int, iterations: int) -> tuple[float, float, float, bool]:
        """One trial of this rank's pair: (seconds, wall start, wall end, received data all right)."""
        verified = True
        self.link.before_trial()
        if self.opts.integrity:
            start = time.time()
            total = 0.0
            for k in range(iterations):
                self.loop.clear_received(k, 1)
                total += self._run_kernel(1, k)
                verified &= self.loop.received_ok(self.patterns, self.peer, k, 1)
            end = time.time()
        else:
            start = time.time()
            total = self._run_kernel(iterations)
            end = time.time()
        return total, start, end, verified

    def _iterations(self, point: SizePoint, prev_size: int, prev_t: float) -> int:
        """Iterations per trial of the next size: --repeats, or NetPIPE 3.7's nrepeat rule.

        prev_t is the last size's best time in NetPIPE's unit (one way for a ping-pong, one
        message of a stream, one exchange of bidir), and nrepeat counts NetPIPE's repeats: round
        trips, exchanges, or in a stream messages, where an iteration here is a window of them,
        so a stream runs ceil(nrepeat / window) iterations (at least nrepeat messages). The floor
        is the number of trials, NetPIPE's TRIALS."""
        opts = self.opts
        if opts.repeats is not None:
            return opts.repeats
        repeats = netpipe_repeats(
            opts.target_time_s, prev_size, point.increment_bytes, prev_t, opts.trials, MAX_ITERATIONS
        )
        return -(-repeats // opts.messages_per_iteration)

    def sweep(self, points: list[SizePoint]) -> SweepOutcome:
        """The whole sweep; a link that broke (LinkLost) is raised after both ranks left their
        loops, so the control channel is in step and release() can end the job cleanly."""
        try:
            return self._sweep(points)
        except LinkLost:
            self.stop.timing = False  # the peer's loop broke too: it waits for a command or a sync
            raise

    def _sweep(self, points: list[SizePoint]) -> SweepOutcome:
        opts = self.opts
        outcome = SweepOutcome(status="complete")
        unit = opts.mode_value.factors(opts.window).one_way_factor  # iteration time / NetPIPE's time
        order = sampling.measure_order(len(points), opts)
        shuffled = opts.size_order == sampling.ORDER_RANDOM
        prev_size = opts.lower_bytes
        prev_t = 0.0
        if opts.repeats is None and not shuffled:
            prev_t = self.probe_round_trip_s() / unit
        elif (
            opts.repeats is not None
            and opts.stall_timeout_s > 0
            and opts.repeats * opts.trials >= 10 * math.prod(probe_chunks(self.first_look))
        ):
            # fixed --repeats need no estimate for the iteration rule, but the stall watchdog needs a
            # time per iteration to bound the first size's warm-up and trials by (else its bound is
            # the bare --stall-timeout, which a long warm-up passes): a first look, when its round
            # trips are at most a tenth of the first size's trials
            self._probe(points[order[0]].size_bytes if order else opts.lower_bytes, self.first_look)
        groups = _group_indices(points)
        measured: dict[int, float] = {}  # --order random: each measured size's NetPIPE time
        last_group = len(points)  # --order random: groups after the first that reached --max-one-way go
        for index, i in enumerate(order):
            if self.stop:
                break
            point = points[i]
            if groups[i] > last_group:
                continue
            size = point.size_bytes
            if shuffled:
                iterations = self._iterations_near(size, measured, unit)
            else:
                iterations = self._iterations(point, prev_size, prev_t)
            try:
                row = self.measure_size(size, iterations)
            except LinkLost as exc:
                raise LinkLost(f"{exc} at message size {size} B; every size before it is kept") from None
            if row is None:
                break
            outcome.rows.append(row)
            self.on_row(index, row)
            # NetPIPE's tlast: the best trial's time per message (one way for a ping-pong)
            prev_size, prev_t = size, min(row.trial_s) / (iterations * unit)
            measured[size] = prev_t
            if shuffled and prev_t >= opts.max_one_way_s and groups[i] < last_group:
                # the sizes of later groups are skipped, as NetPIPE's stop skips them in ascending order
                last_group = groups[i]
                outcome.stopped_early = (
                    f"the one-way time of {size} B (best trial, NetPIPE's time per message) was "
                    f"{prev_t:.3g} s, at least --max-one-way {opts.max_one_way_s:g} s: larger sizes "
                    "not yet measured were skipped"
                )
            # NetPIPE 3.7 tests its stop rule (tlast < STOPTM) before each base point, so a base
            # point's perturbed sizes are all measured
            if not shuffled and point.group_end and prev_t >= opts.max_one_way_s:
                outcome.stopped_early = (
                    f"the one-way time of {size} B (best trial, NetPIPE's time per message) was "
                    f"{prev_t:.3g} s, at least --max-one-way {opts.max_one_way_s:g} s"
                )
                break
        if self.stop:
            self.stop.mark_interrupted(outcome, f"; stopped after {len(outcome.rows)} sizes")
        return outcome

    def _iterations_near(self, size: int, measured: dict[int, float], unit: float) -> int:
        """--order random: iterations per trial of `size` from its own estimate of NetPIPE's time
        (npmpi.core.sampling.nearest_time: the nearest measured size, or a probe of this size)."""
        opts = self.opts
        if opts.repeats is not None:
            return opts.repeats
        t = sampling.nearest_time(size, measured)
        if t is None:
            t = self.probe_round_trip_s(size) / unit
        repeats = int(min(max(opts.target_time_s / max(t, 1e-9), opts.trials), MAX_ITERATIONS))
        return -(-repeats // opts.messages_per_iteration)

    def release(self, exit_code: int) -> bool:
        """Tell the reflector and the waiting ranks to exit; False if the reflector is mid-loop."""
        if self.stop.timing:
            return False
        self.driver.release(exit_code, self.state == "trials", self.others)
        self.state = "between"
        return True


def _group_indices(points: list[SizePoint]) -> list[int]:
    """Each point's base-point group (n-p, n, n+p share one), counted from 0 in schedule order."""
    out, group = [], 0
    for point in points:
        out.append(group)
        group += int(point.group_end)
    return out
