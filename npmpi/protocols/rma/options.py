"""--protocol rma's own options, declared and checked: --rma-op (put or get) and --rma-sync (fence
or lock) (their Options fields: npmpi/core/config.py)."""

from __future__ import annotations

from npmpi.core.errors import UsageError
from npmpi.core.modes import mode_named
from npmpi.core.protocol import ProtocolOption

RMA_OPS = ("put", "get")  # MPI_Put into the peer's window, MPI_Get from it
RMA_SYNCS = ("fence", "lock")  # MPI_Win_fence epochs, passive-target MPI_Win_lock/unlock

OPTIONS = (
    ProtocolOption(
        "--rma-op",
        "rma: 'put' writes each message into the peer's window (over its receive buffer), "
        "'get' reads it from the peer's window (over its send buffer) (NetPIPE -g) (default: put)",
        "OP",
    ),
    ProtocolOption(
        "--rma-sync",
        "rma: 'fence' (MPI_Win_fence epochs, NPmpi2's) or 'lock' (passive target: "
        "MPI_Win_lock/put/MPI_Win_unlock per message, then a flag the peer polls) (default: fence)",
        "SYNC",
    ),
)


def check_rma_options(ns) -> dict:
    """--rma-op and --rma-sync checked (a get pulls data towards the side that starts, which a
    one-way flow from the transmitter, a stream's, does not allow)."""
    fields = {}
    for dest, flag, choices in (("rma_op", "--rma-op", RMA_OPS), ("rma_sync", "--rma-sync", RMA_SYNCS)):
        value = getattr(ns, dest)
        if value is None:
            continue
        if value.strip().lower() not in choices:
            raise UsageError(f"{flag} {value!r}: choose one of: {', '.join(choices)}")
        fields[dest] = value.strip().lower()
    if fields.get("rma_op") == "get" and not mode_named(ns.mode).round_trip:
        raise UsageError(
            f"--rma-op get cannot run --mode {ns.mode} (a stream's data flows from the transmitter, a get "
            "pulls it towards the side that calls it); use --rma-op put, or --mode pingpong or bidir"
        )
    return fields
