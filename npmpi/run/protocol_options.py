"""--protocol and its options (one block of declarations, one check), shared by the run's parser.

The protocol list and its notes come from the registry (npmpi/core/protocols.py); a protocol a
mode or kernel cannot do is refused here, before MPI starts, in one line (exit 2).
"""

from __future__ import annotations

import argparse
import ipaddress
import math

from npmpi.core.errors import UsageError
from npmpi.core.modes import MODE_STREAM
from npmpi.core.protocols import (
    DEFAULT_PROTOCOL,
    PROTOCOL_RMA,
    PROTOCOL_TABLE,
    PROTOCOL_TCP,
    protocol_problem,
)
from npmpi.core.units import parse_number, parse_size_bytes, parse_whole

MAX_TCP_PORT = 65535
# SO_SNDBUF/SO_RCVBUF take an int; Linux doubles the value and caps it at net.core.*mem_max
MIN_SOCKET_BUFFER_BYTES = 1024
MAX_SOCKET_BUFFER_BYTES = 1 << 30
MAX_CONNECT_TIMEOUT_S = 3600.0
# options that only mean something with one protocol: (dest, flag, protocol, value when not given)
_ONLY_WITH = (
    ("tcp_address", "--tcp-address", PROTOCOL_TCP, None),
    ("tcp_port", "--tcp-port", PROTOCOL_TCP, None),
    ("socket_buffer", "--socket-buffer", PROTOCOL_TCP, None),
    ("tcp_reconnect", "--tcp-reconnect", PROTOCOL_TCP, False),
    ("tcp_connect_timeout", "--tcp-connect-timeout", PROTOCOL_TCP, None),
    ("rma_op", "--rma-op", PROTOCOL_RMA, None),
    ("rma_sync", "--rma-sync", PROTOCOL_RMA, None),
)
RMA_OPS = ("put", "get")  # MPI_Put into the peer's window, MPI_Get from it
RMA_SYNCS = ("fence", "lock")  # MPI_Win_fence epochs, passive-target MPI_Win_lock/unlock


def _text(text: str) -> str:
    return text


def add_protocol_options(p: argparse.ArgumentParser) -> None:
    """--protocol (the list generated from the registry) and each protocol's own options."""
    g = p.add_argument_group("protocol (the layer the timed loop goes through, NetPIPE's modules)")
    g.add_argument(
        "--protocol",
        default=DEFAULT_PROTOCOL,
        metavar="NAME",
        help="; ".join(f"'{x.name}': {x.help_note}" for x in PROTOCOL_TABLE.values())
        + " (default: %(default)s)",
    )
    g.add_argument(
        "--tcp-address",
        type=_text,
        default=None,
        metavar="ADDR",
        help="tcp: the IP address each listening rank binds and its peer connects to (default: the "
        "address of the rank's host name; loopback when the pair shares a host)",
    )
    g.add_argument(
        "--tcp-port",
        type=_text,
        default=None,
        metavar="PORT",
        help="tcp: the port the listening rank binds (default: 0, any free port)",
    )
    g.add_argument(
        "--socket-buffer",
        type=_text,
        default=None,
        metavar="BYTES",
        help="tcp: SO_SNDBUF and SO_RCVBUF of both ends, set before listen/connect (NetPIPE -b); "
        f"{MIN_SOCKET_BUFFER_BYTES} B to 1G, suffixes K, M, G; what the kernel granted is stored "
        "(Linux doubles it) (default: the system's, auto-tuned)",
    )
    g.add_argument(
        "--tcp-reconnect",
        action="store_true",
        help="tcp: a fresh connection for every trial, made outside the timed loop (NetPIPE -r)",
    )
    g.add_argument(
        "--tcp-connect-timeout",
        type=_text,
        default=None,
        metavar="SECONDS",
        help="tcp: how long a pair waits for its connection before the run gives up (default: 10)",
    )
    g.add_argument(
        "--rma-op",
        type=_text,
        default=None,
        metavar="OP",
        help="rma: 'put' writes each message into the peer's window (over its receive buffer), "
        "'get' reads it from the peer's window (over its send buffer) (NetPIPE -g) (default: put)",
    )
    g.add_argument(
        "--rma-sync",
        type=_text,
        default=None,
        metavar="SYNC",
        help="rma: 'fence' (MPI_Win_fence epochs, NPmpi2's) or 'lock' (passive target: "
        "MPI_Win_lock/put/MPI_Win_unlock per message, then a flag the peer polls) (default: fence)",
    )


def check_protocol_options(ns: argparse.Namespace) -> dict:
    """Check --protocol against the mode and kernel and its own options; the Options fields."""
    problem = protocol_problem(ns.protocol, ns.mode, ns.kernel, ns.async_, ns.cache_cold, ns.lower)
    if problem:
        raise UsageError(problem)
    for dest, flag, only, unset in _ONLY_WITH:
        if getattr(ns, dest) != unset and ns.protocol != only:
            raise UsageError(f"{flag} only applies to --protocol {only} (this run: --protocol {ns.protocol})")
    fields: dict = {"protocol": ns.protocol}
    if ns.tcp_address is not None:
        try:
            fields["tcp_address"] = str(ipaddress.ip_address(ns.tcp_address.strip()))
        except ValueError:
            raise UsageError(f"--tcp-address {ns.tcp_address!r}: not an IPv4 or IPv6 address") from None
    if ns.tcp_port is not None:
        # 0 is the default, any free port (the kernel's choice), as the help says: given, it means the same
        fields["tcp_port"] = _bounded_whole("--tcp-port", ns.tcp_port, 0, MAX_TCP_PORT, "a port number")
    if ns.socket_buffer is not None:
        fields["socket_buffer_bytes"] = _socket_buffer(ns.socket_buffer)
    if ns.tcp_connect_timeout is not None:
        fields["tcp_connect_timeout_s"] = _timeout(ns.tcp_connect_timeout)
    fields["tcp_reconnect"] = bool(ns.tcp_reconnect)
    fields.update(_rma_fields(ns))
    return fields


def _rma_fields(ns: argparse.Namespace) -> dict:
    """--rma-op and --rma-sync checked (a get pulls data towards the side that starts, which a
    stream's one-way flow from the transmitter does not allow)."""
    fields = {}
    for dest, flag, choices in (("rma_op", "--rma-op", RMA_OPS), ("rma_sync", "--rma-sync", RMA_SYNCS)):
        value = getattr(ns, dest)
        if value is None:
            continue
        if value.strip().lower() not in choices:
            raise UsageError(f"{flag} {value!r}: choose one of: {', '.join(choices)}")
        fields[dest] = value.strip().lower()
    if fields.get("rma_op") == "get" and ns.mode == MODE_STREAM:
        raise UsageError(
            "--rma-op get cannot run --mode stream (a stream's data flows from the transmitter, a get "
            "pulls it towards the side that calls it); use --rma-op put, or --mode pingpong or bidir"
        )
    return fields


def _bounded_whole(flag: str, text: str, low: int, high: int, what: str) -> int:
    try:
        value = parse_whole(text)
    except ValueError:
        raise UsageError(f"{flag} {text!r}: expected {what}, a whole number {low}..{high}") from None
    if not low <= value <= high:
        raise UsageError(f"{flag} {value}: out of range; expected {what} from {low} to {high}")
    return value


def _socket_buffer(text: str) -> int:
    try:
        value = parse_size_bytes(text)
    except ValueError as exc:
        raise UsageError(f"--socket-buffer {text!r}: {exc}") from None
    if not MIN_SOCKET_BUFFER_BYTES <= value <= MAX_SOCKET_BUFFER_BYTES:
        raise UsageError(
            f"--socket-buffer {text}: {value} B is out of range; give {MIN_SOCKET_BUFFER_BYTES} B to 1G"
        )
    return value


def _timeout(text: str) -> float:
    try:
        value = parse_number(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and 0 < value <= MAX_CONNECT_TIMEOUT_S):
        raise UsageError(
            f"--tcp-connect-timeout {text!r}: expected seconds, more than 0 and at most "
            f"{MAX_CONNECT_TIMEOUT_S:g}"
        )
    return value
