"""--protocol rma: MPI one-sided puts (or gets) into the peer's window, NetPIPE's NPmpi2.

The protocol's room: its options (--rma-op, --rma-sync) and their checks (options.py), its link
(link.py: the pair's communicator and windows, and the osc/ucx set-up before MPI, which keeps Open
MPI's declining osc/ucx quiet on a node without an RDMA device), its loops in Python and the C
kernel's entries (loops.py; csrc/crma.c in C). This value names its link, loops and set-up,
imported when a run uses them.
"""

from __future__ import annotations

from npmpi.core.modes import MODE_BIDIR, MODE_PINGPONG, MODE_STREAM
from npmpi.core.protocol import Protocol
from npmpi.protocols.rma.options import OPTIONS, check_rma_options

_LOOPS = "npmpi.protocols.rma.loops"

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
    link="npmpi.protocols.rma.link:open_rma_link",
    loops={
        "python": (f"{_LOOPS}:rma_pingpong", f"{_LOOPS}:rma_transfer"),
        "c": (f"{_LOOPS}:c_rma_pingpong", f"{_LOOPS}:c_rma_transfer"),
    },
    before_mpi_setup="npmpi.protocols.rma.link:quiet_declining_osc_ucx",
)
