"""--protocol mpi's link: nothing to open, the communicator and the peer's rank are the link (the
MPI send/receive loops' first two arguments; the loops are each kernel's own, npmpi/persize/kernels.py)."""

from __future__ import annotations

from npmpi.core.config import Options
from npmpi.core.protocol import Link


class MpiLink(Link):
    """MPI two-sided send/receive: the communicator and the peer's rank."""

    protocol = "mpi"

    def __init__(self, comm, peer: int) -> None:
        self.comm, self.peer = comm, peer
        self.endpoint = (comm, peer)


def open_mpi_link(comm, opts: Options, peer: int, transmitter: bool) -> Link:
    """--protocol mpi's opener (npmpi/protocols/mpi/): nothing to open, the communicator is the link."""
    return MpiLink(comm, peer)
