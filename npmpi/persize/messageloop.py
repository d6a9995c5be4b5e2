"""One side's message loop: the buffers and patterns of a message size and the timed kernel call.

Every measuring rank (rank 0's Transmitter in npmpi/persize/transmitter.py, the reflector and pair members in
npmpi/persize/reflector.py) sets a size, runs the kernel over it and checks what it received. The mode
(pingpong, stream, bidir), --async and --cache-cold only change what one iteration does.
"""

from __future__ import annotations

import numpy as np

from npmpi.core import buffers
from npmpi.core.buffers import ARRANGEMENT_NETPIPE
from npmpi.core.config import Options
from npmpi.persize.kernels import Kernel, TransferSettings
from npmpi.protocols import protocol_named

PROBE_CHUNKS = 5  # the probe's chunks of round trips (rank 0 and its peers run the same number)


def probe_chunks(round_trips: int) -> tuple[int, int]:
    """The probe's chunk of iterations and how many chunks it runs (rank 0 and its peers alike):
    PROBE_CHUNKS + 1 chunks of round_trips // PROBE_CHUNKS (the first untimed); fewer round trips
    than PROBE_CHUNKS (a windowed mode's first look, an iteration being a whole window) run that many
    single iterations, each timed."""
    if round_trips >= PROBE_CHUNKS:
        return round_trips // PROBE_CHUNKS, PROBE_CHUNKS + 1
    return 1, max(round_trips, 1)


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

    def __init__(self, opts: Options, kernel: Kernel, transmitter: bool) -> None:
        protocol = protocol_named(opts.protocol)
        self.pingpong, self.transfer = protocol.loops_in(kernel)
        # the mode as its value, and the messages one way per iteration (the options' window)
        self.mode, self.window, self.async_ = opts.mode_value, opts.window, opts.async_
        self.windowed = self.mode.windowed
        self.cache_cold = opts.cache_cold
        self.transmitter = transmitter
        # an unpaired protocol (memcpy): every rank moves its own pattern, and checks it
        self.solo = not protocol.paired
        self.plain = self.mode.plain_kernel and not opts.async_ and not opts.cache_cold
        self.pool = opts.pool_bytes
        self.huge_pages = opts.huge_pages
        self.one_buffer = opts.buffers == ARRANGEMENT_NETPIPE
        self.one_region = opts.one_region  # --buffers osu: a window's messages share one region
        if self.one_buffer:  # NetPIPE's: allocated per size (set_size), sent from and received into
            self.sbuf = self.rbuf = np.zeros(1, dtype=np.uint8)
        else:
            self.sbuf = buffers.allocate(self.pool, self.huge_pages)
            self.rbuf = buffers.allocate(self.pool, self.huge_pages)
        self.size, self.regions, self.stride = 0, 1, 0
        self.settings = TransferSettings(self.mode, self.window, self.async_)
        self.own_origin = 0

    @property
    def receives_data(self) -> bool:
        """Whether this side receives messages (a stream's transmitter only gets acknowledgements)."""
        return self.solo or not (self.windowed and self.transmitter)

    def per_iteration(self) -> int:
        return self.window

    def set_size(self, size: int, patterns: Patterns, origin_rank: int) -> None:
        """Fill every region this size uses with this rank's pattern and clear the receive regions."""
        self.size = size
        self.own_origin = origin_rank
        if self.one_buffer:
            # a fresh buffer per size, as NetPIPE allocates one; the transmitter's holds its
            # pattern, the reflector's is cleared (it sends back what it receives)
            self.sbuf = self.rbuf = None  # the last size's map is released before the next one
            self.sbuf = self.rbuf = buffers.allocate(size, self.huge_pages, buffers.NETPIPE_ALIGN_BYTES)
            self._set_regions(1, 0)
            if self.transmitter or self.solo:
                self.sbuf[:size] = patterns.expected(origin_rank, size)
            return
        self._set_regions(*self.mode.regions(self.window, self.cache_cold, self.pool, size, self.one_region))
        self._send_view()[:] = patterns.expected(origin_rank, size)
        self._recv_view()[:] = 0

    def _set_regions(self, regions: int, stride: int) -> None:
        self.regions, self.stride = regions, stride
        self.settings = TransferSettings(self.mode, self.window, self.async_, regions, stride)

    def huge_page_bytes(self) -> int:
        """Bytes of this rank's message buffers' maps on transparent huge pages (-1: unknown)."""
        return buffers.huge_page_bytes((self.sbuf,) if self.one_buffer else (self.sbuf, self.rbuf))

    def _send_view(self) -> np.ndarray:
        return _regions_view(self.sbuf, self.regions, self.stride, self.size)

    def _recv_view(self) -> np.ndarray:
        return _regions_view(self.rbuf, self.regions, self.stride, self.size)

    def run(self, link, iterations: int, first: int = 0) -> float:
        """The protocol's timed loop over `link` (a `Link`, npmpi/core/protocol.py): its elapsed seconds."""
        a, b = link.endpoint
        if self.plain:
            return self.pingpong(a, b, self.sbuf, self.rbuf, self.size, iterations, self.transmitter)
        return self.transfer(
            a, b, self.sbuf, self.rbuf, self.size, iterations, self.transmitter, self.settings, first
        )

    def _touched(self, first: int, iterations: int) -> np.ndarray | slice:
        per = self.per_iteration()
        count = iterations * per
        if count >= self.regions:
            return slice(None)
        return np.arange(first * per, first * per + count) % self.regions

    def clear_received(self, first: int, iterations: int) -> None:
        if self.one_buffer and (self.transmitter or self.solo):
            return  # its one buffer is what it sends next
        self._recv_view()[self._touched(first, iterations)] = 0

    def received_ok(self, patterns: Patterns, origin_rank: int, first: int, iterations: int) -> bool:
        """Every region that iterations [first, first + iterations) received into holds the sender's
        pattern, every byte of it (a region is cleared before it receives). With one buffer the
        transmitter's own pattern travels both ways, so both sides expect it."""
        if not self.receives_data:
            return True
        if self.solo or (self.one_buffer and self.transmitter):
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
        elif (self.windowed or self.one_buffer) and self.receives_data:
            self._recv_view()[:, self.size // 2] ^= 0xFF


def _regions_view(buf: np.ndarray, regions: int, stride: int, size: int) -> np.ndarray:
    """[regions, size] view of the message bytes of every region of a pool."""
    if regions == 1:
        return buf[:size].reshape(1, size)
    return buf[: regions * stride].reshape(regions, stride)[:, :size]
