"""--protocol tcp's own options, declared and checked: where to listen, the socket buffers, a
connection per trial, how long to wait for it (their Options fields: npmpi/core/config.py)."""

from __future__ import annotations

import ipaddress
import math

from npmpi.core.errors import UsageError
from npmpi.core.protocol import ProtocolOption
from npmpi.core.units import parse_number, parse_size_bytes, parse_whole

MAX_TCP_PORT = 65535
# SO_SNDBUF/SO_RCVBUF take an int; Linux doubles the value and caps it at net.core.*mem_max
MIN_SOCKET_BUFFER_BYTES = 1024
MAX_SOCKET_BUFFER_BYTES = 1 << 30
MAX_CONNECT_TIMEOUT_S = 3600.0

OPTIONS = (
    ProtocolOption(
        "--tcp-address",
        "tcp: the IP address each listening rank binds and its peer connects to (default: the "
        "address of the rank's host name; loopback when the pair shares a host)",
        "ADDR",
    ),
    ProtocolOption(
        "--tcp-port",
        "tcp: the port the listening rank binds (default: 0, any free port)",
        "PORT",
    ),
    ProtocolOption(
        "--socket-buffer",
        "tcp: SO_SNDBUF and SO_RCVBUF of both ends, set before listen/connect (NetPIPE -b); "
        f"{MIN_SOCKET_BUFFER_BYTES} B to 1G, suffixes K, M, G; what the kernel granted is stored "
        "(Linux doubles it) (default: the system's, auto-tuned)",
        "BYTES",
    ),
    ProtocolOption(
        "--tcp-reconnect",
        "tcp: a fresh connection for every trial, made outside the timed loop (NetPIPE -r)",
    ),
    ProtocolOption(
        "--tcp-connect-timeout",
        "tcp: how long a pair waits for its connection before the run gives up (default: 10)",
        "SECONDS",
    ),
)


def check_tcp_options(ns) -> dict:
    """--tcp-address, --tcp-port, --socket-buffer, --tcp-connect-timeout and --tcp-reconnect
    checked: their Options fields."""
    fields: dict = {}
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
