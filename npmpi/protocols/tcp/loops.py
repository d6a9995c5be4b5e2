"""--protocol tcp's timed loops in Python: blocking sendall/recv_into on the pair's connection.

The same contract as the MPI loops of npmpi/persize/kernels.py with the link's endpoint (socket,
descriptor) first: the loop alone is timed with perf_counter, received bytes land in the receive
pool's regions (so the message loop's pattern checks work unchanged), and a message is received
whole before the next step (recv_into with MSG_WAITALL, continued if the kernel returns early).
- pingpong: one message there and back, as NPtcp;
- stream: a window of messages one way, then a 1-byte acknowledgement (NPtcp -s, acknowledged);
- bidir: both ends send and receive at once. Two blocking sends of a message larger than the
  socket buffers would wait for each other forever, so the exchange runs on non-blocking sockets
  with poll(): each end sends what the kernel takes and receives what has arrived until both
  messages are complete (one thread, nothing else on the clock).
A broken connection (reset, closed, a short read at its end) raises LinkLost.
"""

from __future__ import annotations

import math
import select
import socket
from itertools import cycle, islice
from time import perf_counter

from npmpi.core.errors import LinkLost

WAITALL = socket.MSG_WAITALL


def _finish(recv_into, view: memoryview, got: int, nbytes: int) -> None:
    """The rest of a message a recv returned early from (a signal, a large message); EOF: lost."""
    while got < nbytes:
        n = recv_into(view[got:], nbytes - got, WAITALL)
        if n == 0:
            raise ConnectionResetError(0, "the peer closed the connection")
        got += n


def _closed() -> LinkLost:
    """A loop called on a link whose connection is already gone (no socket, a negative descriptor)."""
    return LinkLost("the TCP connection of the pair is closed")


def _lost(exc: OSError) -> LinkLost:
    why = exc.strerror or str(exc) or type(exc).__name__
    return LinkLost(f"the TCP connection of the pair broke during the sweep: {why}")


def tcp_pingpong(sock, fd: int, sendbuf, recvbuf, nbytes: int, iterations: int, transmitter: bool) -> float:
    """NPtcp's ping-pong: sendall, then receive the whole reply."""
    if sock is None:
        raise _closed()
    smsg, rmsg = memoryview(sendbuf)[:nbytes], memoryview(recvbuf)[:nbytes]
    send, recv_into = sock.sendall, sock.recv_into
    loop = range(iterations)
    try:
        if transmitter:
            t0 = perf_counter()
            for _ in loop:
                send(smsg)
                got = recv_into(rmsg, nbytes, WAITALL)
                if got != nbytes:
                    _finish(recv_into, rmsg, got, nbytes)
            t1 = perf_counter()
        else:
            t0 = perf_counter()
            for _ in loop:
                got = recv_into(rmsg, nbytes, WAITALL)
                if got != nbytes:
                    _finish(recv_into, rmsg, got, nbytes)
                send(smsg)
            t1 = perf_counter()
    except OSError as exc:
        raise _lost(exc) from None
    return t1 - t0


def _regions(buf, nbytes: int, regions: int, stride: int) -> list[memoryview]:
    view = memoryview(buf)
    return [view[k * stride : k * stride + nbytes] for k in range(regions)]


def tcp_transfer(
    sock,
    fd: int,
    sendbuf,
    recvbuf,
    nbytes: int,
    iterations: int,
    transmitter: bool,
    settings,
    first: int = 0,
) -> float:
    """Every mode over TCP; message m uses region m % regions of both pools, as the MPI loops
    (`settings`: npmpi.core.transfer.TransferSettings)."""
    if sock is None:
        raise _closed()
    mode, regions, window = settings.mode, settings.regions, settings.window
    windowed = mode.windowed
    smsgs = _regions(sendbuf, nbytes, regions, settings.stride)
    rmsgs = _regions(recvbuf, nbytes, regions, settings.stride)
    if iterations <= 0:
        return 0.0
    if windowed:
        mine = smsgs if transmitter else rmsgs
        period = regions // math.gcd(regions, window)
        windows = [[mine[(k * window + j) % regions] for j in range(window)] for k in range(period)]
        k = first % period
        it = islice(cycle(windows[k:] + windows[:k]), iterations)
    else:
        k = first % regions
        pairs = list(zip(smsgs, rmsgs, strict=True))
        it = islice(cycle(pairs[k:] + pairs[:k]), iterations)
    try:
        return _TCP_LOOPS[mode.name](sock, it, nbytes, transmitter)
    except OSError as exc:
        raise _lost(exc) from None


def _pingpong_loop(sock, it, nbytes: int, transmitter: bool) -> float:
    """One message there, one back, through the pools' regions."""
    send, recv_into = sock.sendall, sock.recv_into
    if transmitter:
        t0 = perf_counter()
        for s, r in it:
            send(s)
            got = recv_into(r, nbytes, WAITALL)
            if got != nbytes:
                _finish(recv_into, r, got, nbytes)
        t1 = perf_counter()
    else:
        t0 = perf_counter()
        for s, r in it:
            got = recv_into(r, nbytes, WAITALL)
            if got != nbytes:
                _finish(recv_into, r, got, nbytes)
            send(s)
        t1 = perf_counter()
    return t1 - t0


def _stream_loop(sock, it, nbytes: int, transmitter: bool) -> float:
    """A window of messages one way, then a 1-byte acknowledgement back."""
    send, recv_into = sock.sendall, sock.recv_into
    ack = memoryview(bytearray(1))
    if transmitter:
        t0 = perf_counter()
        for win in it:
            for m in win:
                send(m)
            if recv_into(ack, 1) != 1:
                raise ConnectionResetError(0, "the peer closed the connection")
        t1 = perf_counter()
    else:
        t0 = perf_counter()
        for win in it:
            for m in win:
                got = recv_into(m, nbytes, WAITALL)
                if got != nbytes:
                    _finish(recv_into, m, got, nbytes)
            send(ack)
        t1 = perf_counter()
    return t1 - t0


def _bidir_loop(sock, it, nbytes: int, transmitter: bool) -> float:
    """Both ends send and receive one message at once on a non-blocking socket (see the module)."""
    sock.setblocking(False)
    poller = select.poll()
    poller.register(sock.fileno(), select.POLLIN | select.POLLOUT)
    try:
        t0 = perf_counter()
        for s, r in it:
            _exchange(sock, poller, s, r, nbytes)
        t1 = perf_counter()
    finally:
        sock.setblocking(True)
    return t1 - t0


def _exchange(sock, poller, s: memoryview, r: memoryview, nbytes: int) -> None:
    """Send s and receive r at once: whatever the kernel takes or has, until both are whole."""
    sent = got = 0
    send, recv_into = sock.send, sock.recv_into
    while sent < nbytes or got < nbytes:
        moved = False
        if sent < nbytes:
            try:
                sent += send(s[sent:])
                moved = True
            except BlockingIOError:
                pass
        if got < nbytes:
            try:
                n = recv_into(r[got:])
            except BlockingIOError:
                n = -1
            if n == 0:
                raise ConnectionResetError(0, "the peer closed the connection")
            if n > 0:
                got += n
                moved = True
        if not moved:
            want = (select.POLLOUT if sent < nbytes else 0) | (select.POLLIN if got < nbytes else 0)
            poller.modify(sock.fileno(), want)
            poller.poll()


_TCP_LOOPS = {"pingpong": _pingpong_loop, "stream": _stream_loop, "bidir": _bidir_loop}


def c_tcp_pingpong(sock, fd: int, sendbuf, recvbuf, nbytes: int, iterations: int, transmitter: bool) -> float:
    """csrc/ctcp.c's ping-pong on the connection's descriptor; a broken connection: LinkLost."""
    from npmpi import _ckernel

    if fd < 0:
        raise _closed()
    try:
        return _ckernel.tcp_pingpong(fd, sendbuf, recvbuf, nbytes, iterations, transmitter)
    except OSError as exc:
        raise _lost(exc) from None


def c_tcp_transfer(
    sock,
    fd: int,
    sendbuf,
    recvbuf,
    nbytes: int,
    iterations: int,
    transmitter: bool,
    settings,
    first: int = 0,
) -> float:
    """csrc/ctcp.c's transfer loops (every mode) with python_transfer's signature."""
    from npmpi import _ckernel

    s = settings
    if fd < 0:
        raise _closed()
    try:
        return _ckernel.tcp_transfer(
            fd,
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
        )
    except OSError as exc:
        raise _lost(exc) from None
