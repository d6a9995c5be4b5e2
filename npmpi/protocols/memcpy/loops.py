"""--protocol memcpy: each measuring rank copies between its own two buffers, NetPIPE's memcpy module.

NetPIPE's memcpy round trip is `SendData` (copy the send buffer into the receive buffer) then
`RecvData` (copy it back): two copies of the message, and its one-way time is one copy, so its
bandwidth is the bytes one copy moves per second (every byte read once and written once). The
protocol is not paired: both ranks of what would be a pair copy on their own, at the same time
(trials start together as a pair's do), so the node runs as many busy processes as in a pair's run
and its power is comparable; the transmitter's times are recorded, as for a pair.

The copies go between the two pools (`--buffers separate`, `--cache-cold` regions as in the other
protocols). With NetPIPE's one buffer per size (the default) the second buffer is a twin of it,
same size and alignment, allocated with it before the clock starts: NetPIPE's module copies its one
buffer onto itself in that mode, which a copy routine may skip (glibc's memmove returns at once when
source and destination are the same).
"""

from __future__ import annotations

import math
from itertools import cycle, islice
from time import perf_counter
from typing import Any

import numpy as np

from npmpi.core import buffers
from npmpi.core.config import Options
from npmpi.core.transfer import PLAIN


class MemcpyLink:
    """No peer: the rank's own second buffer when the message loop has only one."""

    protocol = "memcpy"

    def __init__(self, opts: Options) -> None:
        self.opts = opts
        self.endpoint = (self, -1)
        self._for = None
        self._twin = None

    def twin(self, buf: np.ndarray) -> np.ndarray:
        """A second buffer like `buf` (NetPIPE's alignment), made when `buf` is new (untimed)."""
        if buf is not self._for:
            self._for = self._twin = None
            self._twin = buffers.allocate(buf.nbytes, self.opts.huge_pages, buffers.NETPIPE_ALIGN_BYTES)
            self._for = buf
        return self._twin

    def before_trial(self) -> None:
        """Nothing per trial (npmpi.core.protocol.Link's contract, kept without subclassing it)."""

    def settings(self) -> dict[str, Any]:
        """Which buffers it copies between, their alignment, what it calls."""
        one = self.opts.buffers == buffers.ARRANGEMENT_NETPIPE
        return {
            "copy": "memcpy" if self.opts.kernel == "c" else "numpy.copyto",
            "buffers": "one buffer per size and its twin" if one else "send and receive pools",
            "alignment_bytes": buffers.NETPIPE_ALIGN_BYTES if one else buffers.DEFAULT_ALIGN_BYTES,
            "huge_pages": self.opts.huge_pages,
            "copies_per_round_trip": 2,
        }

    def reset(self) -> None:
        """Fault injection (NPMPI_FAULT_LINK_RESET_SIZE): nothing here can be broken as a network
        would be, so it does nothing (npmpi.core.protocol.Link.reset)."""

    def close(self) -> None:
        """Nothing to close."""


def open_memcpy_link(comm, opts: Options, peer: int, transmitter: bool) -> MemcpyLink:
    """Nothing to open: the rank copies on its own."""
    return MemcpyLink(opts)


def _pair(link, sendbuf, recvbuf):
    return (sendbuf, link.twin(sendbuf)) if recvbuf is sendbuf else (sendbuf, recvbuf)


def memcpy_pingpong(link, _peer, sendbuf, recvbuf, nbytes: int, iterations: int, transmitter: bool) -> float:
    """Copy there and back, `iterations` times (np.copyto on preallocated views)."""
    src, dst = _pair(link, sendbuf, recvbuf)
    s, r = src[:nbytes], dst[:nbytes]
    copy = np.copyto
    t0 = perf_counter()
    for _ in range(iterations):
        copy(r, s)
        copy(s, r)
    t1 = perf_counter()
    return t1 - t0


def _regions(src, dst, nbytes: int, regions: int, stride: int) -> list:
    return [
        (dst[k * stride : k * stride + nbytes], src[k * stride : k * stride + nbytes]) for k in range(regions)
    ]


def memcpy_transfer(
    link,
    _peer,
    sendbuf,
    recvbuf,
    nbytes: int,
    iterations: int,
    transmitter: bool,
    settings,
    first: int = 0,
) -> float:
    """Ping-pong (there and back) or a stream (a window of one-way copies) through the pools'
    regions: message m uses region m % regions, as in the MPI loops."""
    src, dst = _pair(link, sendbuf, recvbuf)
    pairs = _regions(src, dst, nbytes, settings.regions, settings.stride)
    per = settings.window  # messages one way per iteration
    if per > 1:  # a stream: windows of one-way copies
        n = len(pairs)
        period = n // math.gcd(n, per)
        pairs = [[pairs[(k * per + j) % n] for j in range(per)] for k in range(period)]
    k0 = first % len(pairs)
    it = islice(cycle(pairs[k0:] + pairs[:k0]), iterations)
    return _COPY_LOOPS[settings.mode.name](it)


def _there_and_back(it) -> float:
    """NetPIPE's memcpy round trip: the message there (SendData), then back (RecvData)."""
    copy = np.copyto
    t0 = perf_counter()
    for r, s in it:
        copy(r, s)
        copy(s, r)
    t1 = perf_counter()
    return t1 - t0


def _one_way(it) -> float:
    """A stream: each iteration a window of copies one way."""
    copy = np.copyto
    t0 = perf_counter()
    for w in it:
        for r, s in w:
            copy(r, s)
    t1 = perf_counter()
    return t1 - t0


_COPY_LOOPS = {"pingpong": _there_and_back, "stream": _one_way}


def c_memcpy_pingpong(
    link, _peer, sendbuf, recvbuf, nbytes: int, iterations: int, transmitter: bool
) -> float:
    """The C kernel's copies (csrc/cmemcpy.c), one region."""
    return c_memcpy_transfer(link, _peer, sendbuf, recvbuf, nbytes, iterations, transmitter, PLAIN, 0)


def c_memcpy_transfer(
    link,
    _peer,
    sendbuf,
    recvbuf,
    nbytes: int,
    iterations: int,
    transmitter: bool,
    settings,
    first: int = 0,
) -> float:
    """memcpy_transfer's contract in C (the twin buffer found here, untimed)."""
    from npmpi import _ckernel

    src, dst = _pair(link, sendbuf, recvbuf)
    s = settings
    return _ckernel.memcpy_transfer(
        src, dst, nbytes, iterations, s.mode.name, s.window, s.regions, s.stride, first
    )
