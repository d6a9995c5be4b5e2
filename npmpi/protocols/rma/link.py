"""--protocol rma's link: the pair's own communicator and its MPI windows, as NetPIPE's NPmpi2.

A window is collective over the ranks that create it, so each pair gets a communicator of its two
ranks (`MPI_Comm_create_group`, collective over the pair alone: the power ranks and the other pairs
never take part). The data window covers the buffer the peer reaches: the receive pool for a put,
the send pool for a get. It is created the first time a loop meets that buffer, before the clock
starts: once per run with pools that live as long as the run (`--buffers separate`), once per size
with NetPIPE's one buffer per size (NPmpi2 itself creates a window per size). Both ranks meet a new
buffer in the same call, because both re-allocate it for the same size command; the link keeps
the last buffer alive, so a new one is never mistaken for it by its address.

A small flag window (one int64 per rank) is created at open: it tells whether one-sided windows
work here at all (a failure is one line before the sweep) and, with `--rma-sync lock`, carries the
turn: a passive target learns that a message arrived only from a flag the origin sets after the
message's unlock (docs/netpipe-comparison.md, "rma").
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from npmpi.core.config import Options
from npmpi.core.errors import LinkError

PAIR_GROUP_TAG = 26  # MPI_Comm_create_group's tag: pairs are disjoint, one tag serves them all


RDMA_DEVICES = Path("/sys/class/infiniband")  # InfiniBand and RoCE devices (mlx5_0, rxe0, ...)
OSC_VARIABLE = "OMPI_MCA_osc"
_osc_set_here = False  # whether this process set OMPI_MCA_osc itself (stored in protocol_settings)


def quiet_declining_osc_ucx(environ=os.environ, devices: Path = RDMA_DEVICES) -> bool:
    """Before MPI starts, on a node without an RDMA device: Open MPI 5's osc/ucx finds no device
    there, declines, and prints `Error: OSC UCX component priority set inside component query
    failed` at every window created (open-mpi/ompi#12517, #14086: "a normal outcome" with no UCX
    transport for one-sided operations), a dozen lines in a sweep that look like a failure. The
    component one-sided operations then use is the same without it, so OMPI_MCA_osc=^ucx is set,
    never over the user's own OMPI_MCA_osc (or mpirun's --mca osc, which arrives as that variable)
    and never on a node with an RDMA device, where osc/ucx is the component one wants. MPICH and
    other libraries ignore the variable. True when it was set here."""
    global _osc_set_here
    if OSC_VARIABLE in environ:
        return False
    try:
        if any(devices.iterdir()):
            return False
    except OSError:
        pass  # no such class: no RDMA device
    environ[OSC_VARIABLE] = "^ucx"
    _osc_set_here = environ is os.environ
    return True


class RmaLink:
    """One rank's side of a pair's one-sided link: the pair communicator, its windows, the flags."""

    protocol = "rma"

    def __init__(self, comm, opts: Options, peer: int, transmitter: bool) -> None:
        from mpi4py import MPI

        self.opts = opts
        self.get = opts.rma_op == "get"
        self.lock = opts.rma_sync == "lock"
        self.transmitter = transmitter
        me = comm.Get_rank()
        ranks = [me, peer] if transmitter else [peer, me]
        group = comm.Get_group().Incl(ranks)
        try:
            self.pair_comm = comm.Create_group(group, PAIR_GROUP_TAG)
        except MPI.Exception as exc:
            raise LinkError(f"--protocol rma: the pair's communicator could not be made: {exc}") from None
        finally:
            group.Free()
        self.peer = 1 - self.pair_comm.Get_rank()
        self.endpoint = (self, self.peer)
        self.flags = np.zeros(1, dtype=np.int64)  # the peer's turn flag lands here (lock)
        self.seq = np.zeros(1, dtype=np.int64)  # the origin buffer of this rank's flag
        try:
            self.flag_win = MPI.Win.Create(self.flags, 8, MPI.INFO_NULL, self.pair_comm)
        except MPI.Exception as exc:
            raise LinkError(
                f"--protocol rma: this MPI cannot create a one-sided window here ({exc}); "
                "check its osc components (ompi_info | grep osc)"
            ) from None
        self.model = "unified" if self.flag_win.Get_attr(MPI.WIN_MODEL) == MPI.WIN_UNIFIED else "separate"
        self._win = None
        self._win_buf = None
        self.windows_created = 0

    def window_for(self, buf) -> Any:
        """The data window over `buf` (collective over the pair when `buf` is new; untimed)."""
        if buf is self._win_buf:
            return self._win
        from mpi4py import MPI

        if self._win is not None:
            self._win.Free()
        self._win = MPI.Win.Create(buf, 1, MPI.INFO_NULL, self.pair_comm)
        self._win_buf = buf
        self.windows_created += 1
        return self._win

    def before_trial(self) -> None:
        """Nothing per trial (npmpi.core.protocol.Link's contract, kept without subclassing it)."""

    def settings(self) -> dict[str, Any]:
        """The operation, the synchronisation, what the window covers and the MPI's memory model."""
        per_size = self.opts.buffers == "netpipe"
        return {
            "op": "MPI_Get" if self.get else "MPI_Put",
            "sync": "MPI_Win_lock/unlock (shared), flag by MPI_Accumulate" if self.lock else "MPI_Win_fence",
            "window_over": "send buffer" if self.get else "receive buffer",
            "window_bytes": None if per_size else int(self.opts.pool_bytes),
            "window_per_size": per_size,
            "memory_model": self.model,
            "ompi_mca_osc": os.environ.get(OSC_VARIABLE),  # the one-sided components Open MPI may use
            "ompi_mca_osc_set_by_npmpi": _osc_set_here,  # quiet_declining_osc_ucx, no RDMA device
        }

    def reset(self) -> None:
        """Fault injection (NPMPI_FAULT_LINK_RESET_SIZE): nothing here can be broken as a network
        would be, so it does nothing (npmpi.core.protocol.Link.reset)."""

    def close(self) -> None:
        """Free the windows and the pair communicator (collective over the pair)."""
        if self._win is not None:
            self._win.Free()
            self._win = self._win_buf = None
        if self.flag_win is not None:
            self.flag_win.Free()
            self.flag_win = None
        if self.pair_comm is not None:
            self.pair_comm.Free()
            self.pair_comm = None


def open_rma_link(comm, opts: Options, peer: int, transmitter: bool) -> RmaLink:
    """The pair's one-sided link (both ranks call it together); LinkError says why not."""
    return RmaLink(comm, opts, peer, transmitter)
