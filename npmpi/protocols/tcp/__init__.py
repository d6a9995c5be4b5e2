"""--protocol tcp: blocking send/recv on a TCP connection between the pair's ranks, NetPIPE's NPtcp.

The protocol's room: its options and their checks (options.py), its link (link.py: the connection,
set up over MPI), its loops in Python and the C kernel's entries (loops.py; csrc/ctcp.c in C). MPI
only sets the connection up. This value names its link and loops, imported when a run uses them.
"""

from __future__ import annotations

from npmpi.core.modes import MODE_BIDIR, MODE_PINGPONG, MODE_STREAM
from npmpi.core.protocol import Protocol
from npmpi.protocols.tcp.options import OPTIONS, check_tcp_options

_LOOPS = "npmpi.protocols.tcp.loops"

PROTOCOL = Protocol(
    name="tcp",
    help_note="blocking send/recv on a TCP connection between the pair's ranks, NetPIPE's NPtcp; "
    "MPI only sets it up",
    modes=(MODE_PINGPONG, MODE_STREAM, MODE_BIDIR),
    kernels=("python", "c"),
    paired=True,
    async_ok=False,
    zero_bytes_ok=False,
    options=OPTIONS,
    check_options=check_tcp_options,
    option_fields=(
        "tcp_address",
        "tcp_port",
        "socket_buffer_bytes",
        "tcp_reconnect",
        "tcp_connect_timeout_s",
    ),
    link="npmpi.protocols.tcp.link:open_tcp_link",
    loops={
        "python": (f"{_LOOPS}:tcp_pingpong", f"{_LOOPS}:tcp_transfer"),
        "c": (f"{_LOOPS}:c_tcp_pingpong", f"{_LOOPS}:c_tcp_transfer"),
    },
)
