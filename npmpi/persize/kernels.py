"""The timed ping-pong loop, twice with one contract: pure Python (mpi4py) and C.

A kernel takes the communicator, the peer's rank, the send and receive buffers (numpy uint8),
the message size in bytes, the number of round trips and whether this rank transmits first;
it runs exactly that loop with blocking Send/Recv and returns the loop's elapsed seconds on the
monotonic clock (the transmitter's figure is the one recorded). Nothing else is timed.

The transfer kernels add the other modes (stream, bidir), pre-posted receives (--async) and
buffer pools whose regions each message cycles through (--cache-cold), one separate loop per
variant so no loop tests a mode inside it; `transmitter` is the side that times (and, in stream
mode, sends).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from itertools import cycle, islice
from time import perf_counter
from typing import Any

from npmpi.core.errors import KernelUnavailable
from npmpi.core.messages import ACK_TAG, DATA_TAG
from npmpi.core.transfer import TransferSettings

KernelFn = Callable[[Any, int, Any, Any, int, int, bool], float]
# each kernel's name and what it is, for --kernel's help
KERNEL_NOTES = {"python": "mpi4py Send/Recv on numpy buffers", "c": "the same loop in C"}
KERNEL_NAMES = tuple(KERNEL_NOTES)


def python_pingpong(
    comm, peer: int, sendbuf, recvbuf, nbytes: int, iterations: int, transmitter: bool
) -> float:
    """Blocking mpi4py Send/Recv on preallocated buffers; lookups hoisted out of the loop."""
    send, recv = comm.Send, comm.Recv
    smsg, rmsg = message_spec(sendbuf[:nbytes]), message_spec(recvbuf[:nbytes])
    tag = DATA_TAG
    loop = range(iterations)
    if transmitter:
        t0 = perf_counter()
        for _ in loop:
            send(smsg, peer, tag)
            recv(rmsg, peer, tag)
        t1 = perf_counter()
    else:
        t0 = perf_counter()
        for _ in loop:
            recv(rmsg, peer, tag)
            send(smsg, peer, tag)
        t1 = perf_counter()
    return t1 - t0


def message_spec(view) -> list:
    """[buffer, MPI.BYTE] for a numpy view. The view's memory is wrapped once in mpi4py's own buffer
    object: mpi4py then skips numpy's buffer export on every call, about 0.1 us per round trip
    (measured, docs/performance.md)."""
    from mpi4py import MPI

    return [MPI.buffer(view), MPI.BYTE]


# (comm, peer, sendbuf, recvbuf, nbytes, iterations, transmitter, settings, first): see python_transfer
TransferFn = Callable[[Any, int, Any, Any, int, int, bool, TransferSettings, int], float]

_messages_cache: dict[tuple, tuple] = {}


def _sequences(sendbuf, recvbuf, nbytes: int, regions: int, stride: int, window: int, transmitter: bool):
    """Per iteration, what it sends and receives ([buf, MPI.BYTE] specs of the pools' regions):
    (send, receive) pairs, for a stream the window's messages of this side, for a windowed bidir
    the window's (send, receive) pairs. Built once per size and kept, so no trial's start is
    delayed by building them."""
    key = (id(sendbuf), id(recvbuf), nbytes, regions, stride, window, transmitter)
    found = _messages_cache.get(key)
    if found is None or found[0] is not sendbuf or found[1] is not recvbuf:
        smsgs = [message_spec(sendbuf[k * stride : k * stride + nbytes]) for k in range(regions)]
        rmsgs = [message_spec(recvbuf[k * stride : k * stride + nbytes]) for k in range(regions)]
        pairs = list(zip(smsgs, rmsgs, strict=True))
        period = regions // math.gcd(regions, window)
        msgs = smsgs if transmitter else rmsgs
        at = [[(k * window + j) % regions for j in range(window)] for k in range(period)]
        windows = [[msgs[m] for m in ms] for ms in at]
        pair_windows = [[pairs[m] for m in ms] for ms in at]
        _messages_cache.clear()
        found = (sendbuf, recvbuf, pairs, windows, pair_windows)
        _messages_cache[key] = found
    return found[2:]


def _rotated(items: list, first: int) -> list:
    k = first % len(items)
    return items[k:] + items[:k] if k else items


def python_transfer(
    comm,
    peer: int,
    sendbuf,
    recvbuf,
    nbytes: int,
    iterations: int,
    transmitter: bool,
    settings: TransferSettings,
    first: int = 0,
) -> float:
    """Every mode's timed loop. Iterations are numbered from `first`; message m uses region
    m % regions (offset (m % regions) * stride) of both pools, where m = k (pingpong, bidir) or
    k * window + j (stream, j-th message of iteration k). Plain ping-pong has its own loop
    (python_pingpong); each variant here has its own loop too, chosen before the clock starts."""
    mode = settings.mode
    if mode.name not in _LOOPS:
        raise ValueError(f"unknown mode {mode.name!r}")
    pairs, windows, pair_windows = _sequences(
        sendbuf, recvbuf, nbytes, settings.regions, settings.stride, settings.window, transmitter
    )
    if iterations <= 0:
        return 0.0
    loop, seq = _LOOPS[mode.name], windows if mode.windowed else pairs
    if settings.window > 1 and not mode.windowed:  # bidir with a window each way (osu_bibw)
        loop, seq = _bidir_window_loop, pair_windows
    it = islice(cycle(_rotated(seq, first)), iterations)
    return loop(comm, peer, it, transmitter, settings.async_)


def _stream_loop(comm, peer: int, it, transmitter: bool, async_: bool) -> float:
    """A window of Isends, then a 1-byte acknowledgement (`it`: each iteration's window)."""
    import numpy as np
    from mpi4py import MPI

    tag = DATA_TAG
    send, recv, isend, irecv = comm.Send, comm.Recv, comm.Isend, comm.Irecv
    ack = message_spec(np.zeros(1, dtype=np.uint8))
    waitall = MPI.Request.Waitall
    if transmitter:
        if async_:
            t0 = perf_counter()
            for win in it:
                q = irecv(ack, peer, ACK_TAG)
                waitall([isend(m, peer, tag) for m in win])
                q.Wait()
            t1 = perf_counter()
        else:
            t0 = perf_counter()
            for win in it:
                waitall([isend(m, peer, tag) for m in win])
                recv(ack, peer, ACK_TAG)
            t1 = perf_counter()
    elif async_:
        reqs = [irecv(m, peer, tag) for m in next(it)]  # the first window, before the sender starts
        t0 = perf_counter()
        for win in it:
            waitall(reqs)
            reqs = [irecv(m, peer, tag) for m in win]
            send(ack, peer, ACK_TAG)
        waitall(reqs)
        send(ack, peer, ACK_TAG)
        t1 = perf_counter()
    else:
        t0 = perf_counter()
        for win in it:
            waitall([irecv(m, peer, tag) for m in win])
            send(ack, peer, ACK_TAG)
        t1 = perf_counter()
    return t1 - t0


def _bidir_loop(comm, peer: int, it, transmitter: bool, async_: bool) -> float:
    """Both sides post the receive, send, wait (`it`: each iteration's (send, receive) regions)."""
    tag = DATA_TAG
    send, irecv = comm.Send, comm.Irecv
    if async_:  # the next receive is posted as soon as one completes
        s, r = next(it)
        q = irecv(r, peer, tag)
        t0 = perf_counter()
        for ns, nr in it:
            send(s, peer, tag)
            q.Wait()
            q = irecv(nr, peer, tag)
            s = ns
        send(s, peer, tag)
        q.Wait()
        t1 = perf_counter()
    else:
        t0 = perf_counter()
        for s, r in it:
            q = irecv(r, peer, tag)
            send(s, peer, tag)
            q.Wait()
        t1 = perf_counter()
    return t1 - t0


def _bidir_window_loop(comm, peer: int, it, transmitter: bool, async_: bool) -> float:
    """Both sides post a window of receives, then a window of sends, then wait for all, as
    osu_bibw (`it`: each iteration's window of (send, receive) regions; --async is refused)."""
    from mpi4py import MPI

    tag = DATA_TAG
    isend, irecv, waitall = comm.Isend, comm.Irecv, MPI.Request.Waitall
    t0 = perf_counter()
    for win in it:
        recvs = [irecv(r, peer, tag) for _, r in win]
        waitall([isend(s, peer, tag) for s, _ in win])
        waitall(recvs)
    t1 = perf_counter()
    return t1 - t0


def _pingpong_loop(comm, peer: int, it, transmitter: bool, async_: bool) -> float:
    """One message there, one back, through the pools' regions (`it`: (send, receive) regions)."""
    tag = DATA_TAG
    send, recv, irecv = comm.Send, comm.Recv, comm.Irecv
    if transmitter:
        if async_:
            t0 = perf_counter()
            for s, r in it:
                q = irecv(r, peer, tag)
                send(s, peer, tag)
                q.Wait()
            t1 = perf_counter()
        else:
            t0 = perf_counter()
            for s, r in it:
                send(s, peer, tag)
                recv(r, peer, tag)
            t1 = perf_counter()
    elif async_:
        s, r = next(it)
        q = irecv(r, peer, tag)  # the first receive, before the transmitter starts
        t0 = perf_counter()
        for ns, nr in it:
            q.Wait()
            q = irecv(nr, peer, tag)
            send(s, peer, tag)
            s = ns
        q.Wait()
        send(s, peer, tag)
        t1 = perf_counter()
    else:
        t0 = perf_counter()
        for s, r in it:
            recv(r, peer, tag)
            send(s, peer, tag)
        t1 = perf_counter()
    return t1 - t0


_LOOPS = {"stream": _stream_loop, "bidir": _bidir_loop, "pingpong": _pingpong_loop}


def c_kernel_status() -> tuple[bool, str]:
    """Whether the C kernel can be used here, and why not (or how it was built)."""
    try:
        from npmpi import _build_info
    except ImportError:
        _build_info = None
    try:
        from npmpi import _ckernel
    except ImportError as exc:
        if _build_info is not None and not _build_info.CKERNEL_BUILT:
            reason = f"it was not built: {_build_info.CKERNEL_REASON}"
        else:
            reason = f"it cannot be imported ({exc})"
        return False, (
            f"the C kernel is unavailable: {reason}. Rebuild with an MPI compiler on PATH "
            "(scripts/setup.sh, or MPICC=/path/to/mpicc pip install --no-build-isolation .), "
            "or use --kernel python"
        )
    from mpi4py import MPI

    linked = _ckernel.library_version().strip()
    used = MPI.Get_library_version().strip()
    if linked.split("\n")[0] != used.split("\n")[0]:
        return False, (
            "the C kernel was built against a different MPI library than mpi4py uses "
            f"(C kernel: {linked.splitlines()[0][:60]!r}; mpi4py: {used.splitlines()[0][:60]!r}); "
            "rebuild npmpi with the mpicc of the MPI that mpi4py uses (MPICC=…)"
        )
    built_with = _build_info.MPI_C_COMPILER if _build_info is not None else "unknown mpicc"
    return True, f"built with {built_with}"


@dataclass(frozen=True)
class Kernel:
    """A kernel chosen by name, interpreted once: its two MPI loops, the clock they time with, the
    largest message one call carries with this MPI and how it was built (for the run file).

    Another protocol names its loops in each kernel itself (npmpi/protocols/, `Protocol.loops_in`):
    they take the link's endpoint (a `Link`, npmpi/core/protocol.py) as their first two arguments and
    otherwise the MPI loops' contract: same buffers, sizes, iterations, settings, the loop's elapsed
    seconds returned."""

    name: str
    pingpong: KernelFn
    transfer: TransferFn
    measure_clock: Callable[[], Any]  # -> npmpi.persize.clock.ClockInfo of the clock the loops read
    max_message_bytes: int
    note: str = ""


def get_kernels(name: str) -> Kernel:
    """The kernel of a name (one contract for both, see the loops' docstrings); KernelUnavailable
    says why it cannot be had here."""
    from mpi4py import MPI

    from npmpi.persize import clock

    large_counts = MPI.Get_version() >= (4, 0)  # mpi4py then uses MPI 4's large-count `_c` calls
    if name == "python":
        largest = 2**63 - 1 if large_counts else 2**31 - 1
        return Kernel(
            name,
            python_pingpong,
            python_transfer,
            clock.measure_python_clock,
            largest,
        )
    if name == "c":
        ok, why = c_kernel_status()
        if not ok:
            raise KernelUnavailable(why)
        from npmpi import _ckernel

        largest = int(_ckernel.MAX_COUNT) if large_counts else 2**31 - 1
        return Kernel(
            name,
            _ckernel.pingpong,
            _c_transfer,
            clock.measure_c_clock,
            largest,
            why,
        )
    raise KernelUnavailable(f"unknown kernel {name!r}; choose one of: {', '.join(KERNEL_NAMES)}")


def _c_transfer(
    comm,
    peer: int,
    sendbuf,
    recvbuf,
    nbytes: int,
    iterations: int,
    transmitter: bool,
    settings: TransferSettings,
    first: int = 0,
) -> float:
    """The C kernel's transfer loop with python_transfer's signature (the C call takes the
    settings' fields positionally; nothing here is timed)."""
    from npmpi import _ckernel

    s = settings
    return _ckernel.transfer(
        comm,
        peer,
        sendbuf,
        recvbuf,
        nbytes,
        iterations,
        transmitter,
        s.mode.name,
        s.window,
        s.async_,
        s.regions,
        s.stride,
        first,
    )
