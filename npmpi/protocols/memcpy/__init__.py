"""--protocol memcpy: each measuring rank copies between its own two buffers, NetPIPE's memcpy module.

The protocol's room: its link (the rank's own second buffer) and its loops in Python and the C
kernel's entries are loops.py's (csrc/cmemcpy.c in C); it has no options of its own, but the buffer
arrangement (--buffers) decides what it copies between, so the file's protocol_settings record it.
"""

from __future__ import annotations

from npmpi.core.modes import MODE_PINGPONG, MODE_STREAM
from npmpi.core.protocol import Protocol

_LOOPS = "npmpi.protocols.memcpy.loops"

PROTOCOL = Protocol(
    name="memcpy",
    help_note="each measuring rank copies between its own two buffers, NetPIPE's memcpy module: "
    "the memory-bandwidth ceiling of a shared-memory transport",
    modes=(MODE_PINGPONG, MODE_STREAM),
    kernels=("python", "c"),
    paired=False,
    async_ok=False,
    option_fields=("buffers",),
    link="npmpi.protocols.memcpy.loops:open_memcpy_link",
    loops={
        "python": (f"{_LOOPS}:memcpy_pingpong", f"{_LOOPS}:memcpy_transfer"),
        "c": (f"{_LOOPS}:c_memcpy_pingpong", f"{_LOOPS}:c_memcpy_transfer"),
    },
)
