"""The sweep: rank 0 transmits and decides, the reflector echoes, other ranks wait quietly.

Control messages travel outside the timed loops. Per message size, rank 0 sends the size and
the round trips per trial to the reflector; both fill their buffers with a size-specific
pattern, run untimed warm-up round trips, then each trial starts with a one-integer sync
message (1 = run the trial, 0 = abandon the size) so a stop request never leaves the reflector
blocked. After the trials both check the received data and the reflector reports its check.

With several pairs (--pairs), rank 0 sends every command to every rank of every pair; before each
trial every one of them tells rank 0 it is ready and waits for its go (1 run, 0 abandon), so all
pairs start together; after the size each reports its data check, and each transmitter its own
trial times. A trial's aggregate time is the slowest pair's.

During an idle baseline (npmpi.baseline) every rank waits asleep, never in a blocking receive.

The mode (pingpong, stream, bidir), --async and --cache-cold only change what one iteration of
the timed loop does (MessageLoop); the protocol around the loops is the same for all of them.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from npmpi import buffers
from npmpi.baseline import take_part
from npmpi.buffers import ARRANGEMENT_NETPIPE
from npmpi.config import Options
from npmpi.errors import DataMismatch, Interrupted
from npmpi.kernels import KernelFn, TransferFn
from npmpi.layout import Layout
from npmpi.modes import MODE_PINGPONG, MODE_STREAM, mode_factors, regions_for
from npmpi.protocol import (
    CMD_BASELINE,
    CMD_PROBE,
    CMD_SIZE,
    CMD_STOP,
    CTRL_TAG,
    RESULT_TAG,
    SYNC_TAG,
    TIMES_TAG,
    StopFlag,
)
from npmpi.runfile import SizeResult
from npmpi.schedule import SizePoint, netpipe_repeats, powers_of_two_schedule

PROBE_ROUND_TRIPS = 200
PROBE_CHUNKS = 5
PROBE_BUDGET_S = 0.5
MAX_ITERATIONS = 1_000_000_000
IDLE_POLL_S = 0.05


def warmup_iterations(iterations: int) -> int:
    """Untimed round trips before a size's trials: a tenth of a trial, at least 2."""
    return max(2, min(iterations // 10, iterations))


class Patterns:
    """Size-specific byte patterns: a stale buffer from another size never passes the check."""

    PERIOD = 251  # prime, so patterns never line up with power-of-two sizes

    def __init__(self, largest_bytes: int) -> None:
        # built in uint8 directly: no 8-byte temporary per byte for multi-GiB messages
        self.base = np.resize(np.arange(self.PERIOD, dtype=np.uint8), largest_bytes + self.PERIOD)

    def _offset(self, origin_rank: int, size: int) -> int:
        return (size * 31 + origin_rank * 101) % self.PERIOD

    def fill(self, buf: np.ndarray, origin_rank: int, size: int) -> None:
        off = self._offset(origin_rank, size)
        buf[:size] = self.base[off : off + size]

    CHECK_CHUNK_BYTES = 64 << 20  # compared piece by piece: no size-long temporary for a 2 GiB message

    def matches(self, buf: np.ndarray, origin_rank: int, size: int) -> bool:
        off = self._offset(origin_rank, size)
        for at in range(0, size, self.CHECK_CHUNK_BYTES):
            end = min(at + self.CHECK_CHUNK_BYTES, size)
            if not np.array_equal(buf[at:end], self.base[off + at : off + end]):
                return False
        return True

    def expected(self, origin_rank: int, size: int) -> np.ndarray:
        off = self._offset(origin_rank, size)
        return self.base[off : off + size]


class MessageLoop:
    """One rank's side of the timed loop in the run's mode, with its send and receive pools.

    Plain ping-pong (no --async, no --cache-cold) calls the ping-pong kernel, unchanged; every
    other variant calls the transfer kernel with the size's regions of the pools.
    """

    def __init__(self, opts: Options, kernels: tuple[KernelFn, TransferFn], transmitter: bool) -> None:
        self.pingpong, self.transfer = kernels
        self.mode, self.window, self.async_ = opts.mode, opts.window, opts.async_
        self.cache_cold = opts.cache_cold
        self.transmitter = transmitter
        self.plain = opts.mode == MODE_PINGPONG and not opts.async_ and not opts.cache_cold
        self.pool = opts.pool_bytes
        self.huge_pages = opts.huge_pages
        self.one_buffer = opts.buffers == ARRANGEMENT_NETPIPE
        if self.one_buffer:  # NetPIPE's: allocated per size (set_size), sent from and received into
            self.sbuf = self.rbuf = np.zeros(1, dtype=np.uint8)
        else:
            self.sbuf = buffers.allocate(self.pool, self.huge_pages)
            self.rbuf = buffers.allocate(self.pool, self.huge_pages)
        self.size, self.regions, self.stride = 0, 1, 0
        self.own_origin = 0

    @property
    def receives_data(self) -> bool:
        """Whether this side receives messages (a stream's transmitter only gets acknowledgements)."""
        return not (self.mode == MODE_STREAM and self.transmitter)

    def per_iteration(self) -> int:
        return self.window if self.mode == MODE_STREAM else 1

    def set_size(self, size: int, patterns: Patterns, origin_rank: int) -> None:
        """Fill every region this size uses with this rank's pattern and clear the receive regions."""
        self.size = size
        self.own_origin = origin_rank
        if self.one_buffer:
            # a fresh buffer per size, as NetPIPE allocates one; the transmitter's holds its
            # pattern, the reflector's is cleared (it sends back what it receives)
            self.sbuf = self.rbuf = None  # the last size's map is released before the next one
            self.sbuf = self.rbuf = buffers.allocate(size, self.huge_pages, buffers.NETPIPE_ALIGN_BYTES)
            self.regions, self.stride = 1, 0
            if self.transmitter:
                self.sbuf[:size] = patterns.expected(origin_rank, size)
            return
        self.regions, self.stride = regions_for(self.mode, self.window, self.cache_cold, self.pool, size)
        self._send_view()[:] = patterns.expected(origin_rank, size)
        self._recv_view()[:] = 0

    def huge_page_bytes(self) -> int:
        """Bytes of this rank's message buffers' maps on transparent huge pages (-1: unknown)."""
        return buffers.huge_page_bytes((self.sbuf,) if self.one_buffer else (self.sbuf, self.rbuf))

    def _send_view(self) -> np.ndarray:
        return _regions_view(self.sbuf, self.regions, self.stride, self.size)

    def _recv_view(self) -> np.ndarray:
        return _regions_view(self.rbuf, self.regions, self.stride, self.size)

    def run(self, comm, peer: int, iterations: int, first: int = 0) -> float:
        if self.plain:
            return self.pingpong(comm, peer, self.sbuf, self.rbuf, self.size, iterations, self.transmitter)
        return self.transfer(
            comm,
            peer,
            self.sbuf,
            self.rbuf,
            self.size,
            iterations,
            self.transmitter,
            self.mode,
            self.window,
            self.async_,
            self.regions,
            self.stride,
            first,
        )

    def _touched(self, first: int, iterations: int) -> np.ndarray | slice:
        per = self.per_iteration()
        count = iterations * per
        if count >= self.regions:
            return slice(None)
        return np.arange(first * per, first * per + count) % self.regions

    def clear_received(self, first: int, iterations: int) -> None:
        if self.one_buffer and self.transmitter:
            return  # its one buffer is what it sends next
        self._recv_view()[self._touched(first, iterations)] = 0

    def received_ok(self, patterns: Patterns, origin_rank: int, first: int, iterations: int) -> bool:
        """Every region that iterations [first, first + iterations) received into holds the sender's
        pattern, every byte of it (a region is cleared before it receives). With one buffer the
        transmitter's own pattern travels both ways, so both sides expect it."""
        if not self.receives_data:
            return True
        if self.one_buffer and self.transmitter:
            origin_rank = self.own_origin
        got = self._recv_view()[self._touched(first, iterations)]
        return bool(
            np.array_equal(got, np.broadcast_to(patterns.expected(origin_rank, self.size), got.shape))
        )

    def corrupt(self, after_trials: bool) -> None:
        """Fault injection: what a faulty transport would deliver (the peer's data before the
        trials; in stream mode, where the reflector only receives, and with one buffer, which every
        receive overwrites, what it received after them)."""
        if self.size == 0:
            return
        if not after_trials:
            if not self.one_buffer:
                self._send_view()[:, self.size // 2] ^= 0xFF
        elif (self.mode == MODE_STREAM or self.one_buffer) and self.receives_data:
            self._recv_view()[:, self.size // 2] ^= 0xFF


def _regions_view(buf: np.ndarray, regions: int, stride: int, size: int) -> np.ndarray:
    """[regions, size] view of the message bytes of every region of a pool."""
    if regions == 1:
        return buf[:size].reshape(1, size)
    return buf[: regions * stride].reshape(regions, stride)[:, :size]


def schedule_for(opts: Options) -> list[SizePoint]:
    from npmpi.schedule import netpipe_schedule

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
        kernels: tuple[KernelFn, TransferFn],
        stop: StopFlag,
        on_row: Callable[[int, SizeResult], None],
    ) -> None:
        self.comm = comm
        self.peer = layout.pair[1]
        in_pairs = {r for pair in layout.pairs for r in pair}
        self.others = [r for r in range(layout.world_size) if r not in in_pairs]
        self.multi = len(layout.pairs) > 1
        self.members = sorted(in_pairs - {0})  # every pair rank but rank 0 (several pairs only)
        self.pair_transmitters = [a for a, _ in layout.pairs[1:]]
        self.peer_of = {a: b for pair in layout.pairs for a, b in (pair, pair[::-1])}
        self.opts = opts
        self.stop = stop
        stop.transmitter = self  # lets a stop signal see whether a trial is in progress
        self.on_row = on_row
        self.patterns = Patterns(opts.largest_message_bytes)
        self.loop = MessageLoop(opts, kernels, transmitter=True)
        self.ctrl = np.zeros(4, dtype=np.int64)
        self.sync = np.zeros(1, dtype=np.int64)
        self.result = np.zeros(2, dtype=np.int64)
        # where the reflector is: "between" sizes (waiting for a command), in "trials" (waiting for
        # a sync), or in a "kernel" loop (only an abort can end it)
        self.state = "between"

    # -- protocol steps
    def _command(self, cmd: int, a: int = 0, b: int = 0, c: int = 0) -> None:
        self.ctrl[:] = (cmd, a, b, c)
        for rank in self.members if self.multi else (self.peer,):
            self.comm.Send(self.ctrl, rank, CTRL_TAG)

    def _go(self, value: int) -> None:
        self.sync[0] = value
        for rank in self.members:
            self.comm.Send(self.sync, rank, SYNC_TAG)

    def _run_kernel(self, iterations: int, first: int = 0) -> float:
        self.state = "kernel"
        elapsed = self.loop.run(self.comm, self.peer, iterations, first)
        self.state = "trials"
        return elapsed

    def _prepare(self, size: int) -> None:
        self.loop.set_size(size, self.patterns, 0)

    def probe_round_trip_s(self) -> float:
        """Round trip of the smallest size, to seed the iteration rule (NetPIPE's latency run).

        A first look of a few single round trips; the full probe only when it takes at most
        PROBE_BUDGET_S (a 2 GiB smallest size would otherwise spend minutes here)."""
        size = self.opts.lower_bytes
        rt = self._probe(size, PROBE_CHUNKS)
        if rt * PROBE_ROUND_TRIPS <= PROBE_BUDGET_S:
            rt = self._probe(size, PROBE_ROUND_TRIPS)
        return rt

    def _probe(self, size: int, round_trips: int) -> float:
        """A warm-up chunk, then the fastest of PROBE_CHUNKS chunks (one scheduling hiccup must not
        shrink the first size's iterations): seconds per round trip."""
        self._command(CMD_PROBE, size, round_trips)
        self._prepare(size)
        self.state = "kernel"
        chunk = round_trips // PROBE_CHUNKS
        self.loop.run(self.comm, self.peer, chunk)
        best = min(self.loop.run(self.comm, self.peer, chunk) for _ in range(PROBE_CHUNKS))
        self.state = "between"
        return best / chunk

    def _start_size(self, size: int, iterations: int) -> int:
        """Command the size, fill the buffers and run the untimed warm-up; its iteration count."""
        opts = self.opts
        warm = warmup_iterations(iterations)
        self._command(CMD_SIZE, size, iterations, opts.trials | (int(opts.integrity) << 32))
        self._prepare(size)
        self.state = "kernel"
        self.loop.run(self.comm, self.peer, warm)
        self.state = "trials"
        return warm

    def measure_size(self, size: int, iterations: int) -> SizeResult | None:
        """All trials of one size; None when a stop request abandoned it."""
        if self.multi:
            return self._measure_size_pairs(size, iterations)
        opts = self.opts
        warm = self._start_size(size, iterations)
        trial_s, starts, ends = [], [], []
        verified = True
        for _ in range(opts.trials):
            if self.stop:
                self.sync[0] = 0
                self.comm.Send(self.sync, self.peer, SYNC_TAG)
                self.state = "between"
                return None
            self.sync[0] = 1
            self.comm.Send(self.sync, self.peer, SYNC_TAG)
            self.comm.Recv(self.sync, self.peer, SYNC_TAG)
            total, start, end, ok = self._trial(size, iterations)
            verified &= ok
            trial_s.append(total)
            starts.append(start)
            ends.append(end)
        self.state = "between"
        verified &= self.loop.received_ok(self.patterns, self.peer, 0, iterations)
        self.comm.Recv(self.result, self.peer, RESULT_TAG)
        peer_ok, peer_signal = bool(self.result[0]), int(self.result[1])
        if peer_signal and not self.stop:
            self.stop.set(peer_signal, f"signal {peer_signal} on rank {self.peer}")
        if not (verified and peer_ok):
            where = [] if verified else [f"rank 0 received wrong data from rank {self.peer}"]
            where += [] if peer_ok else [f"rank {self.peer} received wrong data from rank 0"]
            raise DataMismatch(
                f"data check failed at message size {size} B: {'; '.join(where)}. "
                "The MPI transport corrupted or truncated a message; the run file keeps every size "
                "before this one"
            )
        return SizeResult(
            size,
            iterations,
            warm,
            trial_s,
            starts,
            ends,
            True,
            buffer_huge_page_bytes=self.loop.huge_page_bytes(),
        )

    def _trial(self, size: int, iterations: int) -> tuple[float, float, float, bool]:
        """One trial of this rank's pair: (seconds, wall start, wall end, received data all right)."""
        verified = True
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

    def _measure_size_pairs(self, size: int, iterations: int) -> SizeResult | None:
        """All trials of one size with several pairs; rank 0 runs pair 0 and starts every trial."""
        opts = self.opts
        warm = self._start_size(size, iterations)
        own, starts, ends = [], [], []
        verified = True
        for _ in range(opts.trials):
            for rank in self.members:  # everyone is ready: the previous trial ended everywhere
                self.comm.Recv(self.sync, rank, SYNC_TAG)
            if self.stop:
                self._go(0)
                self.state = "between"
                return None
            self._go(1)
            total, start, end, ok = self._trial(size, iterations)
            verified &= ok
            own.append(total)
            starts.append(start)
            ends.append(end)
        verified &= self.loop.received_ok(self.patterns, self.peer, 0, iterations)
        bad = [] if verified else [f"rank 0 received wrong data from rank {self.peer}"]
        signal = 0
        for rank in self.members:
            self.comm.Recv(self.result, rank, RESULT_TAG)
            if not self.result[0]:
                bad.append(f"rank {rank} received wrong data from rank {self.peer_of[rank]}")
            signal = signal or int(self.result[1])
        times = [own]
        buf = np.zeros(opts.trials, dtype=np.float64)
        for rank in self.pair_transmitters:
            self.comm.Recv(buf, rank, TIMES_TAG)
            times.append(buf.tolist())
        self.state = "between"
        if signal and not self.stop:
            self.stop.set(signal, f"signal {signal} on a pair rank")
        if bad:
            raise DataMismatch(
                f"data check failed at message size {size} B: {'; '.join(bad)}. "
                "The MPI transport corrupted or truncated a message; the run file keeps every size "
                "before this one"
            )
        slowest = np.max(np.array(times), axis=0).tolist()  # the aggregate: all pairs' data moved
        return SizeResult(
            size,
            iterations,
            warm,
            slowest,
            starts,
            ends,
            True,
            pair_trial_s=times,
            buffer_huge_page_bytes=self.loop.huge_page_bytes(),
        )

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
        per_iteration = opts.window if opts.mode == MODE_STREAM else 1
        return -(-repeats // per_iteration)

    def sweep(self, points: list[SizePoint]) -> SweepOutcome:
        opts = self.opts
        outcome = SweepOutcome(status="complete")
        unit = mode_factors(opts.mode, opts.window).one_way_factor  # iteration time / NetPIPE's time
        prev_size = opts.lower_bytes
        # fixed --repeats need no estimate of the time per message
        prev_t = self.probe_round_trip_s() / unit if opts.repeats is None else 0.0
        for index, point in enumerate(points):
            if self.stop:
                break
            size = point.size_bytes
            iterations = self._iterations(point, prev_size, prev_t)
            row = self.measure_size(size, iterations)
            if row is None:
                break
            outcome.rows.append(row)
            self.on_row(index, row)
            # NetPIPE's tlast: the best trial's time per message (one way for a ping-pong)
            prev_size, prev_t = size, min(row.trial_s) / (iterations * unit)
            # NetPIPE 3.7 tests its stop rule (tlast < STOPTM) before each base point, so a base
            # point's perturbed sizes are all measured
            if point.group_end and prev_t >= opts.max_one_way_s:
                outcome.stopped_early = (
                    f"the one-way time of {size} B (best trial, NetPIPE's time per message) was "
                    f"{prev_t:.3g} s, at least --max-one-way {opts.max_one_way_s:g} s"
                )
                break
        if self.stop:
            outcome.status = "interrupted"
            outcome.message = f"{self.stop.name} received; stopped after {len(outcome.rows)} sizes"
            outcome.exit_code = 128 + int(self.stop.signum or 0)
        return outcome

    def release(self, exit_code: int) -> bool:
        """Tell the reflector and the waiting ranks to exit; False if the reflector is mid-loop."""
        if self.state == "kernel":
            return False
        if self.state == "trials":
            if self.multi:
                self._go(0)
            else:
                self.sync[0] = 0
                self.comm.Send(self.sync, self.peer, SYNC_TAG)
        self._command(CMD_STOP, exit_code)
        for rank in self.others:
            self.comm.Send(self.ctrl, rank, CTRL_TAG)
        self.state = "between"
        return True


def _fault_size(name: str) -> int | None:
    """Fault injection for the test suite: NPMPI_FAULT_<NAME>=SIZE acts at that message size."""
    value = os.environ.get(f"NPMPI_FAULT_{name}")
    return int(value) if value and value.isdigit() else None


def serve_commands(comm, source: int, peer: int, loop: MessageLoop, patterns: Patterns, measure) -> int:
    """The command loop of a pair's ranks other than rank 0: stop, idle baselines and probes are
    answered here, each size's trials by `measure(size, iterations, trials, integrity)`; returns
    the exit code rank 0 sends at the end (`source`: the rank that commands, `peer`: the partner)."""
    me = comm.Get_rank()
    ctrl = np.zeros(4, dtype=np.int64)
    while True:
        comm.Recv(ctrl, source, CTRL_TAG)
        cmd, size, iterations, packed = (int(x) for x in ctrl)
        if cmd == CMD_STOP:
            return size  # the exit code travels in the size field
        if cmd == CMD_BASELINE:  # an idle baseline: wait without spinning until it ends
            code = take_part(comm, ctrl, node_stat=False)
            if code is not None:
                return code
            continue
        loop.set_size(size, patterns, me)
        if cmd == CMD_PROBE:
            chunk = iterations // PROBE_CHUNKS
            for _ in range(PROBE_CHUNKS + 1):
                loop.run(comm, peer, chunk)
            continue
        measure(size, iterations, packed & 0xFFFFFFFF, bool(packed >> 32))


def reflect(comm, layout: Layout, opts: Options, kernels: tuple[KernelFn, TransferFn], stop: StopFlag) -> int:
    """The reflector's side: echo every message; returns the exit code rank 0 sends at the end."""
    if len(layout.pairs) > 1:
        return pair_member(comm, layout, opts, kernels, stop)
    corrupt_at, raise_at = _fault_size("CORRUPT_SIZE"), _fault_size("RAISE_SIZE")
    peer = layout.pair[0]
    patterns = Patterns(opts.largest_message_bytes)
    loop = MessageLoop(opts, kernels, transmitter=False)
    sync = np.zeros(1, dtype=np.int64)
    result = np.zeros(2, dtype=np.int64)

    def measure(size: int, iterations: int, trials: int, integrity: bool) -> None:
        if size == raise_at:
            raise RuntimeError(f"fault injected at {size} B (NPMPI_FAULT_RAISE_SIZE)")
        loop.run(comm, peer, warmup_iterations(iterations))
        if size == corrupt_at:
            loop.corrupt(after_trials=False)
        ok = True
        abandoned = False
        for _ in range(trials):
            comm.Recv(sync, peer, SYNC_TAG)
            if sync[0] == 0:
                abandoned = True
                break
            comm.Send(sync, peer, SYNC_TAG)
            if integrity:
                for k in range(iterations):
                    loop.clear_received(k, 1)
                    loop.run(comm, peer, 1, k)
                    ok &= loop.received_ok(patterns, peer, k, 1)
            else:
                loop.run(comm, peer, iterations)
        if abandoned:
            return
        if size == corrupt_at:
            loop.corrupt(after_trials=True)
        result[0] = int(ok and loop.received_ok(patterns, peer, 0, iterations))
        result[1] = int(stop.signum or 0)
        comm.Send(result, peer, RESULT_TAG)

    return serve_commands(comm, peer, peer, loop, patterns, measure)


def pair_member(
    comm, layout: Layout, opts: Options, kernels: tuple[KernelFn, TransferFn], stop: StopFlag
) -> int:
    """A rank of one of several pairs (other than rank 0): rank 0 commands and starts every trial;
    a transmitter times its trials and sends the times to rank 0 after each size."""
    corrupt_at, raise_at = _fault_size("CORRUPT_SIZE"), _fault_size("RAISE_SIZE")
    me = comm.Get_rank()
    pair = next(p for p in layout.pairs if me in p)
    transmitter = me == pair[0]
    peer = pair[1] if transmitter else pair[0]
    patterns = Patterns(opts.largest_message_bytes)
    loop = MessageLoop(opts, kernels, transmitter=transmitter)
    sync = np.zeros(1, dtype=np.int64)
    result = np.zeros(2, dtype=np.int64)

    def measure(size: int, iterations: int, trials: int, integrity: bool) -> None:
        if size == raise_at and not transmitter:
            raise RuntimeError(f"fault injected at {size} B (NPMPI_FAULT_RAISE_SIZE)")
        loop.run(comm, peer, warmup_iterations(iterations))
        faulty = size == corrupt_at and not transmitter
        if faulty:
            loop.corrupt(after_trials=False)
        ok = True
        abandoned = False
        times = np.full(trials, np.nan)
        for t in range(trials):
            sync[0] = 1
            comm.Send(sync, 0, SYNC_TAG)
            comm.Recv(sync, 0, SYNC_TAG)
            if sync[0] == 0:
                abandoned = True
                break
            if integrity:
                total = 0.0
                for k in range(iterations):
                    loop.clear_received(k, 1)
                    total += loop.run(comm, peer, 1, k)
                    ok &= loop.received_ok(patterns, peer, k, 1)
            else:
                total = loop.run(comm, peer, iterations)
            times[t] = total
        if abandoned:
            return
        if faulty:
            loop.corrupt(after_trials=True)
        result[0] = int(ok and loop.received_ok(patterns, peer, 0, iterations))
        result[1] = int(stop.signum or 0)
        comm.Send(result, 0, RESULT_TAG)
        if transmitter:
            comm.Send(times, 0, TIMES_TAG)

    return serve_commands(comm, 0, peer, loop, patterns, measure)


def wait_quietly(comm, stop: StopFlag) -> int:
    """Ranks with no role: wait for rank 0's stop without spinning a core in a blocking MPI call
    (taking part in the idle baselines on the way)."""
    ctrl = np.zeros(4, dtype=np.int64)
    while True:
        req = comm.Irecv(ctrl, 0, CTRL_TAG)
        while not req.Test():
            time.sleep(IDLE_POLL_S)
        if int(ctrl[0]) != CMD_BASELINE:
            return int(ctrl[1])
        code = take_part(comm, ctrl, node_stat=False)
        if code is not None:
            return code


def interrupted_error(stop: StopFlag) -> Interrupted:
    return Interrupted(int(stop.signum or 0), stop.name)


__all__ = [
    "Patterns",
    "StopFlag",
    "SweepOutcome",
    "Transmitter",
    "pair_member",
    "powers_of_two_schedule",
    "reflect",
    "schedule_for",
    "wait_quietly",
    "warmup_iterations",
]
