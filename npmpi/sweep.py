"""The sweep: rank 0 transmits and decides, the reflector echoes, other ranks wait quietly.

Control messages travel outside the timed loops. Per message size, rank 0 sends the size and
the round trips per trial to the reflector; both fill their buffers with a size-specific
pattern, run untimed warm-up round trips, then each trial starts with a one-integer sync
message (1 = run the trial, 0 = abandon the size) so a stop request never leaves the reflector
blocked. After the trials both check the received data and the reflector reports its check.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from npmpi.errors import DataMismatch, Interrupted
from npmpi.kernels import KernelFn
from npmpi.layout import Layout
from npmpi.options import Options
from npmpi.runfile import SizeResult
from npmpi.schedule import SizePoint, next_iterations, powers_of_two_schedule

CTRL_TAG = 10
SYNC_TAG = 11
RESULT_TAG = 12

CMD_STOP = 0
CMD_SIZE = 1
CMD_PROBE = 2

PROBE_ROUND_TRIPS = 200
PROBE_CHUNKS = 5
MIN_ITERATIONS = 3
IDLE_POLL_S = 0.05


class StopFlag:
    """Set by the signal handlers; rank 0 looks at it between trials."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self.name = ""
        self.transmitter = None

    def set(self, signum: int, name: str) -> None:
        self.signum, self.name = signum, name

    def __bool__(self) -> bool:
        return self.signum is not None


def warmup_iterations(iterations: int) -> int:
    """Untimed round trips before a size's trials: a tenth of a trial, at least 2."""
    return max(2, min(iterations // 10, iterations))


class Patterns:
    """Size-specific byte patterns: a stale buffer from another size never passes the check."""

    PERIOD = 251  # prime, so patterns never line up with power-of-two sizes

    def __init__(self, largest_bytes: int) -> None:
        self.base = (np.arange(largest_bytes + self.PERIOD, dtype=np.int64) % self.PERIOD).astype(np.uint8)

    def _offset(self, origin_rank: int, size: int) -> int:
        return (size * 31 + origin_rank * 101) % self.PERIOD

    def fill(self, buf: np.ndarray, origin_rank: int, size: int) -> None:
        off = self._offset(origin_rank, size)
        buf[:size] = self.base[off : off + size]

    def matches(self, buf: np.ndarray, origin_rank: int, size: int) -> bool:
        off = self._offset(origin_rank, size)
        return bool(np.array_equal(buf[:size], self.base[off : off + size]))


def allocate_buffers(largest_bytes: int) -> tuple[np.ndarray, np.ndarray]:
    """Send and receive buffers, touched now so page faults stay out of the timed loops."""
    sbuf = np.zeros(max(largest_bytes, 1), dtype=np.uint8)
    rbuf = np.zeros(max(largest_bytes, 1), dtype=np.uint8)
    return sbuf, rbuf


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
        kernel: KernelFn,
        stop: StopFlag,
        on_row: Callable[[int, SizeResult], None],
    ) -> None:
        self.comm = comm
        self.peer = layout.pair[1]
        self.others = [r for r in range(layout.world_size) if r not in layout.pair]
        self.opts = opts
        self.kernel = kernel
        self.stop = stop
        stop.transmitter = self  # lets a stop signal see whether a trial is in progress
        self.on_row = on_row
        largest = opts.largest_message_bytes
        self.patterns = Patterns(largest)
        self.sbuf, self.rbuf = allocate_buffers(largest)
        self.ctrl = np.zeros(4, dtype=np.int64)
        self.sync = np.zeros(1, dtype=np.int64)
        self.result = np.zeros(2, dtype=np.int64)
        # where the reflector is: "between" sizes (waiting for a command), in "trials" (waiting for
        # a sync), or in a "kernel" loop (only an abort can end it)
        self.state = "between"

    # -- protocol steps
    def _command(self, cmd: int, a: int = 0, b: int = 0, c: int = 0) -> None:
        self.ctrl[:] = (cmd, a, b, c)
        self.comm.Send(self.ctrl, self.peer, CTRL_TAG)

    def _run_kernel(self, size: int, iterations: int) -> float:
        self.state = "kernel"
        elapsed = self.kernel(self.comm, self.peer, self.sbuf, self.rbuf, size, iterations, True)
        self.state = "trials"
        return elapsed

    def _prepare(self, size: int) -> None:
        self.patterns.fill(self.sbuf, 0, size)
        self.rbuf[:size] = 0

    def probe_round_trip_s(self) -> float:
        """Mean round trip of the smallest size, to seed the iteration rule (NetPIPE's latency run)."""
        size = self.opts.lower_bytes
        self._command(CMD_PROBE, size, PROBE_ROUND_TRIPS)
        self._prepare(size)
        self.state = "kernel"
        chunk = PROBE_ROUND_TRIPS // PROBE_CHUNKS
        self.kernel(self.comm, self.peer, self.sbuf, self.rbuf, size, chunk, True)  # warm-up
        # the fastest chunk: one scheduling hiccup must not shrink the first size's iterations
        best = min(
            self.kernel(self.comm, self.peer, self.sbuf, self.rbuf, size, chunk, True)
            for _ in range(PROBE_CHUNKS)
        )
        self.state = "between"
        return best / chunk

    def measure_size(self, size: int, iterations: int) -> SizeResult | None:
        """All trials of one size; None when a stop request abandoned it."""
        opts = self.opts
        warm = warmup_iterations(iterations)
        self._command(CMD_SIZE, size, iterations, opts.trials | (int(opts.integrity) << 32))
        self._prepare(size)
        self.state = "kernel"
        self.kernel(self.comm, self.peer, self.sbuf, self.rbuf, size, warm, True)
        self.state = "trials"
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
            if opts.integrity:
                start = time.time()
                total = 0.0
                for _ in range(iterations):
                    self.rbuf[:size] = 0
                    total += self._run_kernel(size, 1)
                    verified &= self.patterns.matches(self.rbuf, self.peer, size)
                end = time.time()
            else:
                start = time.time()
                total = self._run_kernel(size, iterations)
                end = time.time()
            trial_s.append(total)
            starts.append(start)
            ends.append(end)
        self.state = "between"
        verified &= self.patterns.matches(self.rbuf, self.peer, size)
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
        return SizeResult(size, iterations, warm, trial_s, starts, ends, True)

    def sweep(self, points: list[SizePoint]) -> SweepOutcome:
        opts = self.opts
        outcome = SweepOutcome(status="complete")
        prev_size = opts.lower_bytes
        prev_rt = self.probe_round_trip_s()
        for index, point in enumerate(points):
            if self.stop:
                break
            size = point.size_bytes
            if opts.repeats is not None:
                iterations = opts.repeats
            else:
                iterations = next_iterations(
                    opts.target_time_s, prev_size, prev_rt, size, MIN_ITERATIONS, 1_000_000_000
                )
            row = self.measure_size(size, iterations)
            if row is None:
                break
            outcome.rows.append(row)
            self.on_row(index, row)
            # the median trial: robust to one disturbed trial, close to the paper's average
            prev_size, prev_rt = size, float(np.median(row.trial_s)) / iterations
            best_rt = min(row.trial_s) / iterations
            if best_rt > opts.max_round_trip_s:
                outcome.stopped_early = (
                    f"one round trip of {size} B took {best_rt:.3g} s, above --max-round-trip "
                    f"{opts.max_round_trip_s:g} s"
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


def reflect(comm, layout: Layout, opts: Options, kernel: KernelFn, stop: StopFlag) -> int:
    """The reflector's side: echo every message; returns the exit code rank 0 sends at the end."""
    corrupt_at, raise_at = _fault_size("CORRUPT_SIZE"), _fault_size("RAISE_SIZE")
    me = comm.Get_rank()
    peer = layout.pair[0]
    largest = opts.largest_message_bytes
    patterns = Patterns(largest)
    sbuf, rbuf = allocate_buffers(largest)
    ctrl = np.zeros(4, dtype=np.int64)
    sync = np.zeros(1, dtype=np.int64)
    result = np.zeros(2, dtype=np.int64)
    while True:
        comm.Recv(ctrl, peer, CTRL_TAG)
        cmd, size, iterations, packed = (int(x) for x in ctrl)
        if cmd == CMD_STOP:
            return size  # the exit code travels in the size field
        patterns.fill(sbuf, me, size)
        rbuf[:size] = 0
        if cmd == CMD_PROBE:
            chunk = iterations // PROBE_CHUNKS
            for _ in range(PROBE_CHUNKS + 1):
                kernel(comm, peer, sbuf, rbuf, size, chunk, False)
            continue
        trials, integrity = packed & 0xFFFFFFFF, bool(packed >> 32)
        if size == raise_at:
            raise RuntimeError(f"fault injected at {size} B (NPMPI_FAULT_RAISE_SIZE)")
        kernel(comm, peer, sbuf, rbuf, size, warmup_iterations(iterations), False)
        if size == corrupt_at:
            sbuf[size // 2] ^= 0xFF  # what a faulty transport would deliver
        ok = True
        abandoned = False
        for _ in range(trials):
            comm.Recv(sync, peer, SYNC_TAG)
            if sync[0] == 0:
                abandoned = True
                break
            comm.Send(sync, peer, SYNC_TAG)
            if integrity:
                for _ in range(iterations):
                    rbuf[:size] = 0
                    kernel(comm, peer, sbuf, rbuf, size, 1, False)
                    ok &= patterns.matches(rbuf, peer, size)
            else:
                kernel(comm, peer, sbuf, rbuf, size, iterations, False)
        if abandoned:
            continue
        result[0] = int(ok and patterns.matches(rbuf, peer, size))
        result[1] = int(stop.signum or 0)
        comm.Send(result, peer, RESULT_TAG)


def wait_quietly(comm, stop: StopFlag) -> int:
    """Ranks with no role: wait for rank 0's stop without spinning a core in a blocking MPI call."""
    ctrl = np.zeros(4, dtype=np.int64)
    req = comm.Irecv(ctrl, 0, CTRL_TAG)
    while not req.Test():
        time.sleep(IDLE_POLL_S)
    return int(ctrl[1])


def interrupted_error(stop: StopFlag) -> Interrupted:
    return Interrupted(int(stop.signum or 0), stop.name)


__all__ = [
    "Patterns",
    "StopFlag",
    "SweepOutcome",
    "Transmitter",
    "powers_of_two_schedule",
    "reflect",
    "schedule_for",
    "wait_quietly",
    "warmup_iterations",
]
