"""The protocols a run measures through, as NetPIPE's transport modules: one method, many layers.

Each protocol is one `Protocol` value (npmpi/core/protocol.py) in a module of its own here; this
registry is the one place that lists them. --protocol's help and checks, the protocol's options,
its link, its loops in each kernel, what it sets up before MPI and the file's protocol_settings all
come from the value: nothing else branches on a protocol's name. docs/architecture.md ("Adding a
protocol") has the contract.
"""

from __future__ import annotations

from npmpi.core.config import DEFAULT_PROTOCOL
from npmpi.core.protocol import Protocol
from npmpi.protocols import memcpy, mpi, rma, tcp

PROTOCOL_TABLE: dict[str, Protocol] = {
    p.PROTOCOL.name: p.PROTOCOL
    for p in (mpi, tcp, rma, memcpy)  # in --protocol's help order
}
PROTOCOLS = tuple(PROTOCOL_TABLE)
__all__ = [
    "DEFAULT_PROTOCOL",
    "PROTOCOLS",
    "PROTOCOL_TABLE",
    "Protocol",
    "protocol_named",
    "protocol_problem",
]


def protocol_named(name: str) -> Protocol:
    """The protocol of a name; ValueError for an unknown one."""
    try:
        return PROTOCOL_TABLE[name]
    except KeyError:
        raise ValueError(f"unknown protocol {name!r}") from None


def protocol_problem(
    name: str, mode: str, kernel: str, async_: bool, cache_cold: bool, lower_bytes: int = 1, window: int = 1
) -> str | None:
    """Why --protocol NAME cannot run with these options (one line), or None."""
    if name not in PROTOCOL_TABLE:
        return f"--protocol {name!r}: unknown protocol; choose one of: {', '.join(PROTOCOLS)}"
    return PROTOCOL_TABLE[name].problem(mode, kernel, async_, cache_cold, lower_bytes, window)
