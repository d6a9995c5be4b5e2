"""--protocol mpi: MPI two-sided send/receive, NetPIPE's NPmpi (the default).

The protocol's room: no options of its own, its link (link.py: the communicator itself); its loops
are each kernel's own (npmpi/persize/kernels.py and csrc/cmpi.c: a kernel is MPI's send/receive
loops, which every kind measures with)."""

from __future__ import annotations

from npmpi.core.config import DEFAULT_PROTOCOL
from npmpi.core.modes import MODE_BIDIR, MODE_PINGPONG, MODE_STREAM
from npmpi.core.protocol import Protocol

PROTOCOL = Protocol(
    name=DEFAULT_PROTOCOL,
    help_note="MPI two-sided send/receive, NetPIPE's NPmpi",
    modes=(MODE_PINGPONG, MODE_STREAM, MODE_BIDIR),
    kernels=("python", "c"),
    paired=True,
    async_ok=True,
    bidir_window_ok=True,
    link="npmpi.protocols.mpi.link:open_mpi_link",
    loops=None,  # each kernel's own loops: a kernel is MPI's send/receive loops
    in_header=False,  # the job's control channel: the header names only another layer
)
