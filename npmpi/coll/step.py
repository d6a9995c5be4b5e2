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
from npmpi.coll.options import CollOptions
from npmpi.core.buffers import HUGE_PAGES_SYSTEM, allocate
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


def page_aligned(elements: int, dtype: np.dtype) -> np.ndarray:
    """A page-aligned buffer of `elements` of `dtype` of its own (as OSU's buffers), unfilled."""
    if not elements:
        return np.zeros(0, dtype=dtype)
    return allocate(elements * dtype.itemsize, HUGE_PAGES_SYSTEM).view(dtype)


def _fault_size() -> int | None:
    value = os.environ.get(CORRUPT_ENV, "")
    return int(value) if re.fullmatch(r"[0-9]{1,15}", value, re.ASCII) else None


class CollStep(GroupStep):
    """One member's collective: `extra` is the kind's options (npmpi/coll/options.py: op, dtype,
    reduce_op, check, kernel, iterations); `series` the (op, ranks) of each series
    (npmpi/coll/series.py), None: one, extra.op on every rank of `comm`. Each rank count has its
    sub-communicator of the first ranks of `comm` (built here: every rank of `comm` constructs its step)."""

    def __init__(self, comm, extra: CollOptions, series: list[tuple[str, int]] | None = None) -> None:
        from mpi4py import MPI

        self.whole = comm
        self.series = series or [(extra.op, comm.Get_size())]
        self.subs = {}
        for n in sorted({ranks for _, ranks in self.series}):
            if n == comm.Get_size():
                self.subs[n] = comm
                continue
            sub = comm.Split(0 if comm.Get_rank() < n else MPI.UNDEFINED, comm.Get_rank())
            self.subs[n] = None if sub == MPI.COMM_NULL else sub
        self.reduce_op = REDUCE_OPS[extra.reduce_op]
        self.dtype_name, self.dtype = extra.dtype, np.dtype(DTYPES[extra.dtype].numpy)
        self.mpi_op = getattr(MPI, self.reduce_op.mpi)
        self.verifies = bool(extra.check)
        self.kernel = extra.kernel
        self.osu = extra.iterations == "osu"
        self.corrupt_at = _fault_size()
        mine = [i for i, (_, ranks) in enumerate(self.series) if self.subs[ranks] is not None]
        if mine:  # a rank beyond every count of --ranks only waits
            self.select(mine[0])

    def select(self, series: int) -> None:
        """Series `series`: its op on its rank count's communicator (this rank is one of its ranks)."""
        from mpi4py import MPI

        op, ranks = self.series[series]
        self.comm = self.subs[ranks]
        self.n, self.rank = self.comm.Get_size(), self.comm.Get_rank()
        self.op = OPS[op]
        self.mpi_type = mpi_datatype(MPI, self.dtype_name, self.op.reduction)
        self.size = 0
        self.set_size(0)

    def warmup(self, size: int, iterations: int) -> int:
        """OSU's skipped calls with --iterations osu, else a tenth of a trial."""
        if self.osu:
            from npmpi.coll.series import osu_counts

            return osu_counts(size)[1]
        return super().warmup(size, iterations)

    def set_size(self, size: int) -> None:
        op, n, dt = self.op, self.n, self.dtype
        self.size, self.count = size, size // dt.itemsize
        # the last size's buffers go before this size's come; each written in place, every page
        # touched: the message's bytes and no more (no temporary of another type, no copy)
        self.send = self.recv = self.call = None
        elements = op.elements(op.send_blocks, self.count, n)
        self.send = pattern(self.rank, elements, dt, page_aligned(elements, dt))
        if op.name == "bcast":  # one buffer: the root's values, the others' overwritten
            self.recv = self.send if self.rank == 0 else page_aligned(elements, dt)
        else:
            self.recv = page_aligned(op.elements(op.recv_blocks, self.count, n), dt)
        if self.recv is not self.send:
            self.recv[:] = 0
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
                int(self.osu),
            )
        call = self.call
        if self.osu:  # as OSU: each call timed on its own, a barrier after it, untimed
            barrier, clock, total = self.comm.Barrier, time.perf_counter, 0.0
            for _ in range(iterations):
                start = clock()
                call()
                total += clock() - start
                barrier()
            return total
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
