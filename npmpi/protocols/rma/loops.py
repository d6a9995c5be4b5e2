"""--protocol rma's timed loops in Python (mpi4py Win.Put/Get/Fence/Lock/Unlock) and the C kernel's.

NetPIPE's NPmpi2 round trip: one side puts its message into the peer's window and both close the
epoch with a fence, then the peer puts it back and both fence again: two operations and two fences
per round trip, each side's `SendData` being "put, fence" and its `RecvData` "fence". A get pulls:
the reflector first gets the transmitter's message, then the transmitter gets it back, so the
message travels there and back as with a put (and NetPIPE's one buffer per size keeps the
transmitter's pattern). Every call starts with an untimed fence (NPmpi2's `Sync` before a trial):
after it no remote operation can reach a buffer the message loop is still clearing or checking.

With `--rma-sync lock` each message is its own passive-target epoch, MPI_Win_lock(shared) / op /
MPI_Win_unlock (the unlock completes it at the target), followed by the turn flag: an
MPI_Accumulate(REPLACE) of the message's number into the peer's flag window, flushed, which the
peer polls with MPI_Win_sync (the memory barrier and progress a passive target needs). The flag
window stays locked (lock_all) for the call; each call starts with the flags cleared and a barrier
of the pair, untimed.

Stream: a window of puts, then one fence (lock: one epoch holding the window's puts, then the flag);
bidir: both sides' operations, then one fence (lock: each side its epoch and flag, then waits for
the peer's). Message m uses region m % regions of the pools, as in the MPI loops.
"""

from __future__ import annotations

import math
from itertools import cycle, islice
from time import perf_counter

from npmpi.core.transfer import PLAIN

_cache: dict[tuple, tuple] = {}


def _messages(link, sendbuf, recvbuf, nbytes: int, regions: int, stride: int):
    """Per region, (origin spec, target (displacement, count, MPI.BYTE)): a put sends from the
    send pool into the peer's receive pool, a get reads the peer's send pool into the receive pool."""
    from mpi4py import MPI

    key = (id(link), id(sendbuf), id(recvbuf), nbytes, regions, stride)
    found = _cache.get(key)
    if found is None or found[0] is not sendbuf or found[1] is not recvbuf:
        local = recvbuf if link.get else sendbuf
        ops = [
            (_spec(local[k * stride : k * stride + nbytes]), (k * stride, nbytes, MPI.BYTE))
            for k in range(regions)
        ]
        _cache.clear()
        found = (sendbuf, recvbuf, ops)
        _cache[key] = found
    return found[2]


def _spec(view) -> list:
    """[buffer, MPI.BYTE] wrapped once (npmpi.persize.kernels.message_spec's reason)."""
    from mpi4py import MPI

    return [MPI.buffer(view), MPI.BYTE]


def _rotated(items: list, first: int) -> list:
    k = first % len(items)
    return items[k:] + items[:k] if k else items


def _sequence(ops: list, first: int, iterations: int, per: int):
    """Each iteration's message (per == 1) or window of messages (a stream), from iteration
    `first`, lazily: a million iterations never build a million-item list."""
    n = len(ops)
    if per == 1:
        return islice(cycle(_rotated(ops, first)), iterations)
    period = n // math.gcd(n, per)
    windows = [[ops[(k * per + j) % n] for j in range(per)] for k in range(period)]
    return islice(cycle(_rotated(windows, first)), iterations)


def rma_pingpong(link, peer: int, sendbuf, recvbuf, nbytes: int, iterations: int, transmitter: bool) -> float:
    """NPmpi2's ping-pong on NetPIPE's buffers: the transfer loop with one region."""
    return rma_transfer(link, peer, sendbuf, recvbuf, nbytes, iterations, transmitter, PLAIN, 0)


def rma_transfer(
    link,
    peer: int,
    sendbuf,
    recvbuf,
    nbytes: int,
    iterations: int,
    transmitter: bool,
    settings,
    first: int = 0,
) -> float:
    """Every mode's one-sided loop (the window is made or reused before the clock starts)."""
    win = link.window_for(sendbuf if link.get else recvbuf)
    mode = settings.mode.name
    per = settings.window  # messages one way per iteration
    ops = _messages(link, sendbuf, recvbuf, nbytes, settings.regions, settings.stride)
    seq = _sequence(ops, first, max(iterations, 0), per)
    op = win.Get if link.get else win.Put
    if link.lock:
        return _LOCK_LOOPS[mode](link, win, op, peer, seq, iterations, per, transmitter)
    return _FENCE_LOOPS[mode](win, op, peer, seq, iterations, per, transmitter != link.get)


def _fence_pingpong(win, op, peer: int, seq: list, iterations: int, per: int, first_mover: bool) -> float:
    """Put (or get), fence; fence — the first mover's half first, then the other's."""
    fence = win.Fence
    fence()
    if first_mover:
        t0 = perf_counter()
        for o, t in seq:
            op(o, peer, t)
            fence()
            fence()
        t1 = perf_counter()
    else:
        t0 = perf_counter()
        for o, t in seq:
            fence()
            op(o, peer, t)
            fence()
        t1 = perf_counter()
    return t1 - t0


def _fence_stream(win, op, peer: int, seq: list, iterations: int, per: int, first_mover: bool) -> float:
    """A window of puts, then one fence (the target only fences)."""
    fence = win.Fence
    fence()
    if first_mover:
        t0 = perf_counter()
        for w in seq:
            for o, t in w:
                op(o, peer, t)
            fence()
        t1 = perf_counter()
    else:
        t0 = perf_counter()
        for _ in range(iterations):
            fence()
        t1 = perf_counter()
    return t1 - t0


def _fence_bidir(win, op, peer: int, seq: list, iterations: int, per: int, first_mover: bool) -> float:
    """Both sides' operation, then one fence."""
    fence = win.Fence
    fence()
    t0 = perf_counter()
    for o, t in seq:
        op(o, peer, t)
        fence()
    t1 = perf_counter()
    return t1 - t0


def _lock_start(link):
    """Untimed: clear the flag, open the flag window's epoch, meet the peer."""
    link.flags[0] = 0
    link.flag_win.Lock_all()
    link.pair_comm.Barrier()


def _lock_tools(link, win, peer: int):
    """The hoisted calls of the lock loops: (lock, unlock, notify(k), wait(k))."""
    from mpi4py import MPI

    fw = link.flag_win
    lock, unlock, shared = win.Lock, win.Unlock, MPI.LOCK_SHARED
    acc, flush, sync = fw.Accumulate, fw.Flush, fw.Sync
    seqbuf, flags = link.seq, link.flags
    src, dst, replace = [seqbuf, MPI.INT64_T], (0, 1, MPI.INT64_T), MPI.REPLACE

    def notify(k: int) -> None:
        seqbuf[0] = k
        acc(src, peer, dst, replace)
        flush(peer)

    iprobe, any_source, any_tag = link.pair_comm.Iprobe, MPI.ANY_SOURCE, MPI.ANY_TAG

    def wait(k: int) -> None:  # Win_sync: visibility; Iprobe: progress (csrc/crma.c's wait_flag)
        while flags[0] < k:
            sync()
            iprobe(any_source, any_tag)

    return (lambda: lock(peer, shared)), (lambda: unlock(peer)), notify, wait


def _lock_pingpong(
    link, win, op, peer: int, seq: list, iterations: int, per: int, transmitter: bool
) -> float:
    """Lock, op, unlock, raise the peer's flag; then wait for the peer's turn."""
    lock, unlock, notify, wait = _lock_tools(link, win, peer)
    first_mover = transmitter != link.get
    _lock_start(link)
    t0 = perf_counter()
    for k, (o, t) in enumerate(seq, 1):
        if not first_mover:
            wait(k)
        lock()
        op(o, peer, t)
        unlock()
        notify(k)
        if first_mover:
            wait(k)
    t1 = perf_counter()
    link.flag_win.Unlock_all()
    return t1 - t0


def _lock_stream(link, win, op, peer: int, seq: list, iterations: int, per: int, transmitter: bool) -> float:
    """One epoch of a window of puts, then the flag; the target only waits for the flags."""
    lock, unlock, notify, wait = _lock_tools(link, win, peer)
    _lock_start(link)
    if transmitter:
        t0 = perf_counter()
        for k, w in enumerate(seq, 1):
            lock()
            for o, t in w:
                op(o, peer, t)
            unlock()
            notify(k)
        t1 = perf_counter()
    else:
        t0 = perf_counter()
        for k in range(1, iterations + 1):
            wait(k)
        t1 = perf_counter()
    link.flag_win.Unlock_all()
    return t1 - t0


def _lock_bidir(link, win, op, peer: int, seq: list, iterations: int, per: int, transmitter: bool) -> float:
    """Both sides: their epoch and flag, then wait for the peer's flag."""
    lock, unlock, notify, wait = _lock_tools(link, win, peer)
    _lock_start(link)
    t0 = perf_counter()
    for k, (o, t) in enumerate(seq, 1):
        lock()
        op(o, peer, t)
        unlock()
        notify(k)
        wait(k)
    t1 = perf_counter()
    link.flag_win.Unlock_all()
    return t1 - t0


_FENCE_LOOPS = {"pingpong": _fence_pingpong, "stream": _fence_stream, "bidir": _fence_bidir}
_LOCK_LOOPS = {"pingpong": _lock_pingpong, "stream": _lock_stream, "bidir": _lock_bidir}


def c_rma_pingpong(
    link, peer: int, sendbuf, recvbuf, nbytes: int, iterations: int, transmitter: bool
) -> float:
    """The C kernel's ping-pong on NetPIPE's buffers (one region)."""
    return c_rma_transfer(link, peer, sendbuf, recvbuf, nbytes, iterations, transmitter, PLAIN, 0)


def c_rma_transfer(
    link,
    peer: int,
    sendbuf,
    recvbuf,
    nbytes: int,
    iterations: int,
    transmitter: bool,
    settings,
    first: int = 0,
) -> float:
    """The C kernel's one-sided loops (csrc/crma.c) with rma_transfer's contract: the window is
    made here, untimed, and handed to C with the flag window and the pair communicator."""
    from npmpi import _ckernel

    win = link.window_for(sendbuf if link.get else recvbuf)
    s = settings
    return _ckernel.rma_transfer(
        link.pair_comm,
        win,
        link.flag_win,
        link.flags,
        peer,
        sendbuf,
        recvbuf,
        nbytes,
        iterations,
        transmitter,
        s.mode.name,
        s.window,
        s.regions,
        s.stride,
        first,
        link.get,
        link.lock,
    )
