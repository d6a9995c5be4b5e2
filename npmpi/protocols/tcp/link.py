"""--protocol tcp's link: a TCP connection between the pair's ranks, set up over MPI, as NPtcp's.

The reflector listens (on --tcp-address, else loopback when the pair shares a host, else its host
name's address), the transmitter connects: the host names, the listener's address, port and a
random token, and the connector's outcome travel on LINK_TAG before the sweep, so a port that
cannot be bound or a peer that never connects is one line on every rank (exit 2) within
--tcp-connect-timeout, nothing measured. The first bytes on a new connection are the token: a
stray connection to the port is refused. --socket-buffer sets SO_SNDBUF and SO_RCVBUF before
listen and connect (an accepted socket inherits the listener's), TCP_NODELAY is set as NetPIPE
does, and what the kernel granted is read back with getsockopt. --tcp-reconnect makes a fresh
connection at every trial's start (NetPIPE -r), outside the timed loop.
"""

from __future__ import annotations

import os
import secrets
import select
import socket
import struct
import time
from typing import Any

from npmpi.core.config import Options
from npmpi.core.errors import LinkError, LinkLost
from npmpi.core.messages import LINK_TAG

TOKEN_BYTES = 16
ACCEPT_POLL_S = 0.05
LISTEN_BACKLOG = 4
_SIOCGIFADDR = 0x8915


def _interface_addresses() -> list[str]:
    """This host's IPv4 addresses other than loopback, from its interfaces (Linux ioctl)."""
    import fcntl

    found = []
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for _, name in socket.if_nameindex():
            try:
                packed = fcntl.ioctl(s.fileno(), _SIOCGIFADDR, struct.pack("256s", name[:15].encode()))
            except OSError:
                continue
            address = socket.inet_ntoa(packed[20:24])
            if not address.startswith("127."):
                found.append(address)
    return found


def node_address() -> str:
    """The address of this rank's node: its host name's, else its first interface's (not loopback)."""
    try:
        for *_, sockaddr in socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET):
            if not str(sockaddr[0]).startswith("127."):
                return str(sockaddr[0])
    except OSError:
        pass
    addresses = _interface_addresses()
    if not addresses:
        raise LinkError(
            f"{socket.gethostname()} has no network address other than loopback for --protocol tcp; "
            "give --tcp-address"
        )
    return addresses[0]


def _fault(name: str) -> bool:
    """Fault injection for the test suite: NPMPI_FAULT_<NAME>=1."""
    return os.environ.get(f"NPMPI_FAULT_{name}") == "1"


class TcpLink:
    """One rank's end of its pair's TCP connection (`endpoint`: the socket and its descriptor).
    A link by the contract of npmpi.core.protocol.Link (not a subclass of it)."""

    protocol = "tcp"

    def __init__(self, opts: Options, me: int, peer: int, connector: bool) -> None:
        self.opts, self.me, self.peer, self.connector = opts, me, peer, connector
        self.timeout_s = opts.tcp_connect_timeout_s
        self.listener: socket.socket | None = None
        self.sock: socket.socket | None = None
        self.endpoint = (None, -1)
        self.address: tuple[str, int] = ("", 0)  # the listener's address and port
        self.token = b""
        self.connections = 0

    # -- set-up over MPI (both ranks of the pair, before the sweep)
    def listen_first(self, comm, same_host: bool) -> None:
        """Bind and listen, tell the connector where, accept its connection (bounded)."""
        address = self.opts.tcp_address or ("127.0.0.1" if same_host else "")
        offer: dict[str, Any]
        try:
            address = address or node_address()
            self.listener = self._socket(address)
            # as NPtcp: a --tcp-port whose last connection is in TIME_WAIT can be bound again at once
            # (a port another socket listens on still cannot)
            self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self.listener.bind((address, self.opts.tcp_port))
            self.listener.listen(LISTEN_BACKLOG)
            self.address = (address, self.listener.getsockname()[1])
            self.token = secrets.token_bytes(TOKEN_BYTES)
            offer = {"address": self.address, "token": self.token}
        except (OSError, LinkError) as exc:
            where = _hostport((address or "?", self.opts.tcp_port)) if self.opts.tcp_port else address or "?"
            offer = {"error": f"rank {self.me} cannot listen for TCP on {where}: {_why(exc)}"}
        comm.send(offer, dest=self.peer, tag=LINK_TAG)
        if "error" in offer:
            raise LinkError(offer["error"])
        self._accept(comm)

    def connect_first(self, comm) -> None:
        """Learn the listener's address, connect, say how it went (the listener waits for that)."""
        offer = comm.recv(source=self.peer, tag=LINK_TAG)
        if "error" in offer:
            raise LinkError(offer["error"])
        self.address, self.token = tuple(offer["address"]), offer["token"]
        outcome: dict[str, Any] = {"ok": True}
        try:
            if _fault("TCP_NO_CONNECT"):  # a peer that never connects (a firewall dropping SYNs)
                time.sleep(self.timeout_s)
                raise TimeoutError("timed out")
            self._connect()
        except OSError as exc:
            outcome = {"ok": False, "error": self._no_connection(_why(exc))}
        comm.send(outcome, dest=self.peer, tag=LINK_TAG)
        if not outcome["ok"]:
            raise LinkError(outcome["error"])

    def _no_connection(self, why: str) -> str:
        a, b = sorted((self.me, self.peer))
        return (
            f"no TCP connection between rank {a} and rank {b} at {_hostport(self.address)} "
            f"within {self.timeout_s:g} s (--tcp-connect-timeout): {why}; check that the ranks' hosts "
            "can reach each other there, or give --tcp-address"
        )

    def _accept(self, comm) -> None:
        """Accept the connector's connection; its failure, sent over MPI, ends the wait early."""
        deadline = time.monotonic() + self.timeout_s
        heard = False
        while self.sock is None:
            if not heard and comm.Iprobe(source=self.peer, tag=LINK_TAG):
                outcome = comm.recv(source=self.peer, tag=LINK_TAG)
                if not outcome["ok"]:
                    raise LinkError(outcome["error"])
                heard = True
            if time.monotonic() > deadline:
                raise LinkError(self._no_connection("the connection never came"))
            self._accept_once(min(ACCEPT_POLL_S, max(0.0, deadline - time.monotonic())))
        if not heard:
            comm.recv(source=self.peer, tag=LINK_TAG)  # sent right after the token: it is on its way

    def _accept_once(self, wait_s: float) -> None:
        """One bounded wait for a connection; a connection without the token is closed."""
        readable, _, _ = select.select([self.listener], [], [], wait_s)
        if not readable:
            return
        conn, _ = self.listener.accept()
        try:
            conn.settimeout(self.timeout_s)
            token = conn.recv(TOKEN_BYTES, socket.MSG_WAITALL)
        except OSError:
            token = b""
        if token != self.token:
            conn.close()
            return
        self._use(conn)

    def _socket(self, address: str) -> socket.socket:
        family = socket.AF_INET6 if ":" in address else socket.AF_INET
        s = socket.socket(family, socket.SOCK_STREAM)
        if self.opts.socket_buffer_bytes is not None:  # before listen/connect, as NetPIPE -b
            s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self.opts.socket_buffer_bytes)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self.opts.socket_buffer_bytes)
        return s

    def _connect(self) -> None:
        s = self._socket(self.address[0])
        try:
            s.settimeout(self.timeout_s)
            s.connect(self.address)
            s.sendall(self.token)
        except OSError:
            s.close()
            raise
        self._use(s)

    def _use(self, s: socket.socket) -> None:
        """The connection the loops use from now: blocking, TCP_NODELAY (as NetPIPE sets it)."""
        s.settimeout(None)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock = s
        self.endpoint = (s, s.fileno())
        self.connections += 1

    # -- the Link contract
    def before_trial(self) -> None:
        """--tcp-reconnect: both ends drop the connection and make a new one (untimed)."""
        if not self.opts.tcp_reconnect:
            return
        self._drop()
        try:
            if self.connector:
                self._connect()
            else:
                deadline = time.monotonic() + self.timeout_s
                while self.sock is None and time.monotonic() < deadline:
                    self._accept_once(ACCEPT_POLL_S)
        except OSError as exc:
            raise LinkLost(f"--tcp-reconnect: {self._no_connection(_why(exc))}") from None
        if self.sock is None:
            raise LinkLost(f"--tcp-reconnect: {self._no_connection('the connection never came')}")

    def settings(self) -> dict[str, Any]:
        s = self.sock
        granted = {}
        if s is not None:
            granted = {
                "local_address": _hostport(s.getsockname()),
                "peer_address": _hostport(s.getpeername()),
                "granted_sndbuf_bytes": s.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF),
                "granted_rcvbuf_bytes": s.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF),
                "tcp_nodelay": bool(s.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)),
            }
        return {
            "role": "connect" if self.connector else "listen",
            "socket_buffer_bytes": self.opts.socket_buffer_bytes,
            "reconnect_per_trial": bool(self.opts.tcp_reconnect),
            "connections": self.connections,
            **granted,
        }

    def reset(self) -> None:
        """Fault injection: end the connection with a reset (RST), as a failing network would."""
        if self.sock is not None:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self._drop()

    def _drop(self) -> None:
        if self.sock is not None:
            self.sock.close()
        self.sock, self.endpoint = None, (None, -1)

    def close(self) -> None:
        self._drop()
        if self.listener is not None:
            self.listener.close()
            self.listener = None


def _hostport(sockaddr) -> str:
    """ADDRESS:PORT, an IPv6 address in brackets ([::1]:5002)."""
    host = str(sockaddr[0])
    return f"[{host}]:{sockaddr[1]}" if ":" in host else f"{host}:{sockaddr[1]}"


def _why(exc: BaseException) -> str:
    return str(exc) if isinstance(exc, LinkError) else (exc.strerror or str(exc))


def open_tcp_link(comm, opts: Options, peer: int, transmitter: bool) -> TcpLink:
    """The pair's connection: the transmitter connects, its peer listens (both call this)."""
    from mpi4py import MPI

    host = MPI.Get_processor_name()
    peer_host = comm.sendrecv(host, dest=peer, sendtag=LINK_TAG, source=peer, recvtag=LINK_TAG)
    link = TcpLink(opts, comm.Get_rank(), peer, connector=transmitter)
    try:
        if transmitter:
            link.connect_first(comm)
        else:
            link.listen_first(comm, same_host=peer_host == host)
    except BaseException:
        link.close()
        raise
    return link
