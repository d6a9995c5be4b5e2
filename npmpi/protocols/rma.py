"""--protocol rma: MPI one-sided puts (or gets) into the peer's window, NetPIPE's NPmpi2.

Its options (--rma-op, --rma-sync) are declared and checked here; its link is
npmpi/sweep/rmalink.py's, its loops npmpi/sweep/rmaloops.py's (csrc/crma.c in C). Before MPI starts
it keeps Open MPI's declining osc/ucx quiet on a node without an RDMA device.
"""

from __future__ import annotations

from npmpi.core.errors import UsageError
from npmpi.core.modes import MODE_BIDIR, MODE_PINGPONG, MODE_STREAM, mode_named
from npmpi.protocols.base import Protocol, ProtocolOption

RMA_OPS = ("put", "get")  # MPI_Put into the peer's window, MPI_Get from it
RMA_SYNCS = ("fence", "lock")  # MPI_Win_fence epochs, passive-target MPI_Win_lock/unlock
_LOOPS = "npmpi.sweep.rmaloops"

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


PROTOCOL = Protocol(
    name="rma",
    help_note="MPI one-sided MPI_Put (or --rma-op get) into the peer's window, fences (or "
    "--rma-sync lock) as the synchronisation, NetPIPE's NPmpi2",
    modes=(MODE_PINGPONG, MODE_STREAM, MODE_BIDIR),
    kernels=("python", "c"),
    paired=True,
    async_ok=False,
    options=OPTIONS,
    check_options=check_rma_options,
    option_fields=("rma_op", "rma_sync"),
    link="npmpi.sweep.rmalink:open_rma_link",
    loops={
        "python": (f"{_LOOPS}:rma_pingpong", f"{_LOOPS}:rma_transfer"),
        "c": (f"{_LOOPS}:c_rma_pingpong", f"{_LOOPS}:c_rma_transfer"),
    },
    before_mpi_setup="npmpi.sweep.rmalink:quiet_declining_osc_ucx",
)
