"""Each member's collective step (npmpi/kinds/group.py's GroupStep): preallocated numpy buffers and
one MPI collective per iteration on the group's own communicator, back to back, timed as a whole.

The Python kernel calls mpi4py's buffer methods (Allreduce, Allgather, Alltoall, Bcast, Reduce,
Reduce_scatter_block, Barrier) with the buffers and datatype bound once per size; the C kernel
(csrc/ccoll.c) runs the same calls in a C loop through the same MPI library. After a size's
trials, with --check, every member compares its receive buffer with the result the op must give
(npmpi/coll/ops.py: every rank's send values are known), untimed.
"""

from __future__ import annotations

import os
import re
import time

import numpy as np

from npmpi.coll.ops import DTYPES, OPS, REDUCE_OPS, expected, pattern
from npmpi.kinds.group import GroupStep

CORRUPT_ENV = "NPMPI_FAULT_CORRUPT_SIZE"  # fault injection: the last member's result is wrong at this size
C_CODES = {
    "allreduce": 0,
    "allgather": 1,
    "alltoall": 2,
    "bcast": 3,
    "reduce": 4,
    "reduce_scatter": 5,
    "barrier": 6,
}


def mpi_datatype(MPI, dtype_name: str, reduction: bool):
    """The MPI datatype of a --dtype: char is MPI_CHAR as OSU's, MPI_SIGNED_CHAR in a reduction (the
    standard defines reductions on the latter only; the same byte)."""
    d = DTYPES[dtype_name]
    return getattr(MPI, "SIGNED_CHAR" if reduction and d.mpi == "CHAR" else d.mpi)


def _fault_size() -> int | None:
    value = os.environ.get(CORRUPT_ENV, "")
    return int(value) if re.fullmatch(r"[0-9]{1,15}", value, re.ASCII) else None


class CollStep(GroupStep):
    """One member's collective: `extra` is the kind's options (op, dtype, reduce_op, check, kernel)."""

    def __init__(self, comm, extra: dict) -> None:
        from mpi4py import MPI

        self.comm, self.n, self.rank = comm, comm.Get_size(), comm.Get_rank()
        self.op, self.reduce_op = OPS[extra["op"]], REDUCE_OPS[extra["reduce_op"]]
        self.dtype = np.dtype(DTYPES[extra["dtype"]].numpy)
        self.mpi_type = mpi_datatype(MPI, extra["dtype"], self.op.reduction)
        self.mpi_op = getattr(MPI, self.reduce_op.mpi)
        self.verifies = bool(extra["check"])
        self.kernel = extra.get("kernel", "python")
        self.corrupt_at = _fault_size()
        self.size = 0
        self.set_size(0)

    def set_size(self, size: int) -> None:
        op, n, dt = self.op, self.n, self.dtype
        self.size, self.count = size, size // dt.itemsize
        send = pattern(self.rank, op.elements(op.send_blocks, self.count, n), dt)
        self.send = send
        self.recv = np.zeros(op.elements(op.recv_blocks, self.count, n), dtype=dt)
        if op.name == "bcast":  # one buffer: the root's values, the others' overwritten
            self.recv = send.copy() if self.rank == 0 else np.zeros_like(send)
        self.call = self._bind()

    def _bind(self):
        """The op once, its buffers and datatype bound."""
        comm, name = self.comm, self.op.name
        t, c = self.mpi_type, self.count
        s, r = [self.send, t], [self.recv, t]
        if name == "barrier":
            return comm.Barrier
        if name == "bcast":
            return lambda: comm.Bcast(r, 0)
        if name == "allreduce":
            return lambda: comm.Allreduce(s, r, self.mpi_op)
        if name == "reduce":
            return lambda: comm.Reduce(s, r, self.mpi_op, 0)
        if name == "reduce_scatter":
            return lambda: comm.Reduce_scatter_block(s, r, self.mpi_op)
        if name == "allgather":
            return lambda: comm.Allgather([self.send, c, t], [self.recv, c, t])
        return lambda: comm.Alltoall([self.send, c, t], [self.recv, c, t])

    def run(self, iterations: int) -> float:
        if self.kernel == "c":
            from npmpi import _ckernel

            return _ckernel.collective(
                self.comm,
                C_CODES[self.op.name],
                self.send,
                self.recv,
                self.count,
                self.mpi_type,
                self.mpi_op,
                iterations,
            )
        call = self.call
        start = time.perf_counter()
        for _ in range(iterations):
            call()
        return time.perf_counter() - start

    def check(self) -> bool:
        """Whether this member's receive buffer holds the op's result (always True without --check)."""
        if not self.verifies:
            return True
        if self.corrupt_at == self.size and self.rank == self.n - 1 and self.recv.size:
            self.recv[0] += 1  # as a wrong result from the network or the library would be
        want = expected(self.op, self.reduce_op, self.rank, self.n, self.count, self.dtype)
        if want is None:
            return True
        if self.dtype.kind == "f":
            return bool(np.allclose(self.recv, want, rtol=1e-6 * self.n, atol=0))
        return bool(np.array_equal(self.recv, want))
