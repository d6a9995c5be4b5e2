"""The collectives' table: what each op moves per rank, its bandwidth factors, its expected result.

A size is OSU's message size per rank, m bytes (docs/collectives.md): the vector each rank gives to
allreduce, reduce and reduce_scatter (which leaves m/n on each rank), the block each rank gives to
allgather (it receives n m), the block each rank sends to each peer in alltoall (it sends and
receives n m), the root's buffer in bcast. barrier moves nothing: its only size is 0.

nccl-tests' figures: algbw = S / t with S = m for allreduce, reduce, bcast and reduce_scatter and
S = n m for allgather and alltoall (its "size", the whole buffer), and busbw = algbw x the op's bus
factor (allreduce 2(n-1)/n; allgather, reduce_scatter, alltoall (n-1)/n; bcast, reduce 1), the rate
each rank's link carries in an ideal ring, comparable across n and with the hardware's peak.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from npmpi.core.errors import UsageError


@dataclass(frozen=True)
class Dtype:
    name: str
    numpy: str  # numpy's dtype
    mpi: str  # the mpi4py attribute of its MPI datatype
    integer: bool


DTYPES = {
    d.name: d
    for d in (
        # OSU 7.x's default (-T mpi_char, every collective): one byte; reductions on MPI_CHAR are an
        # extension of the standard, so a reduction uses MPI_SIGNED_CHAR, the same byte
        Dtype("char", "i1", "CHAR", True),
        Dtype("int8", "i1", "INT8_T", True),
        Dtype("uint8", "u1", "UINT8_T", True),
        Dtype("int16", "i2", "INT16_T", True),
        Dtype("int32", "i4", "INT32_T", True),
        Dtype("int64", "i8", "INT64_T", True),
        Dtype("uint32", "u4", "UINT32_T", True),
        Dtype("uint64", "u8", "UINT64_T", True),
        Dtype("float32", "f4", "FLOAT", False),
        Dtype("float64", "f8", "DOUBLE", False),
    )
}
DEFAULT_DTYPE = "char"


@dataclass(frozen=True)
class ReduceOp:
    name: str
    mpi: str  # the mpi4py attribute of its MPI_Op
    ufunc: str  # numpy's, for the expected result
    bitwise: bool = False


REDUCE_OPS = {
    r.name: r
    for r in (
        ReduceOp("sum", "SUM", "add"),
        ReduceOp("prod", "PROD", "multiply"),
        ReduceOp("max", "MAX", "maximum"),
        ReduceOp("min", "MIN", "minimum"),
        ReduceOp("band", "BAND", "bitwise_and", True),
        ReduceOp("bor", "BOR", "bitwise_or", True),
        ReduceOp("bxor", "BXOR", "bitwise_xor", True),
    )
}
DEFAULT_REDUCE_OP = "sum"


def _ring(n: int) -> float:
    return (n - 1) / n


@dataclass(frozen=True)
class CollOp:
    name: str
    method: str  # mpi4py's buffer method (Comm.<method>)
    reduction: bool = False
    rooted: bool = False  # root 0 (bcast, reduce)
    send_blocks: str = "1"  # the send buffer in m: "1" or "n" (alltoall)
    recv_blocks: str = "1"  # the receive buffer in m: "1", "n" or "1/n" (reduce_scatter)
    algbw_ranks: bool = False  # S = n m (allgather, alltoall), else S = m
    bus_factor: Callable[[int], float] = lambda n: 1.0
    bus_factor_text: str = "1"

    @property
    def moves_data(self) -> bool:
        return self.method != "Barrier"

    def elements(self, blocks: str, count: int, n: int) -> int:
        return {"0": 0, "1": count, "n": n * count, "1/n": count // n}[blocks if self.moves_data else "0"]


OPS = {
    o.name: o
    for o in (
        CollOp(
            "allreduce",
            "Allreduce",
            reduction=True,
            bus_factor=lambda n: 2 * _ring(n),
            bus_factor_text="2(n-1)/n",
        ),
        CollOp(
            "allgather",
            "Allgather",
            recv_blocks="n",
            algbw_ranks=True,
            bus_factor=_ring,
            bus_factor_text="(n-1)/n",
        ),
        CollOp(
            "alltoall",
            "Alltoall",
            send_blocks="n",
            recv_blocks="n",
            algbw_ranks=True,
            bus_factor=_ring,
            bus_factor_text="(n-1)/n",
        ),
        CollOp("bcast", "Bcast", rooted=True),
        CollOp("reduce", "Reduce", reduction=True, rooted=True),
        CollOp(
            "reduce_scatter",
            "Reduce_scatter_block",
            reduction=True,
            recv_blocks="1/n",
            bus_factor=_ring,
            bus_factor_text="(n-1)/n",
        ),
        CollOp("barrier", "Barrier", bus_factor=lambda n: 0.0, bus_factor_text="0 (no data)"),
    )
}
SIZE_MEANING = {
    "allreduce": "bytes of the vector each rank gives (and receives)",
    "reduce": "bytes of the vector each rank gives (root 0 receives the result)",
    "bcast": "bytes root 0 sends to every rank",
    "allgather": "bytes each rank gives (each receives ranks x size)",
    "alltoall": "bytes each rank sends to each rank (each sends and receives ranks x size)",
    "reduce_scatter": "bytes of the vector each rank gives (each receives size / ranks)",
    "barrier": "none (a barrier moves no data)",
}
MAX_DEFAULT_SIZE = 1 << 20  # OSU's collectives: up to 1 MiB


def check_choice(op: str, dtype: str, reduce_op: str) -> tuple[CollOp, Dtype, ReduceOp]:
    """The op, datatype and reduction named; UsageError (one line) for an unknown name or a pair that
    MPI does not define (a bitwise op on a float)."""
    if op not in OPS:
        raise UsageError(f"--op {op!r}: unknown; choose one of {', '.join(OPS)}")
    if dtype not in DTYPES:
        raise UsageError(f"--dtype {dtype!r}: unknown; choose one of {', '.join(DTYPES)}")
    if reduce_op not in REDUCE_OPS:
        raise UsageError(f"--reduce-op {reduce_op!r}: unknown; choose one of {', '.join(REDUCE_OPS)}")
    o, d, r = OPS[op], DTYPES[dtype], REDUCE_OPS[reduce_op]
    if o.reduction and r.bitwise and not d.integer:
        raise UsageError(
            f"--reduce-op {reduce_op} is a bitwise operation, MPI defines it on integers only: "
            f"not on --dtype {dtype}; choose an integer --dtype or --reduce-op sum, prod, max or min"
        )
    return o, d, r


def default_sizes(op: CollOp, itemsize: int, n: int) -> tuple[int, ...]:
    """OSU's sizes: powers of two from the datatype's size to 1 MiB; barrier's only size is 0.
    reduce_scatter: from n items, each power rounded up to a multiple of n items, so that every rank
    gets a whole share of the size reported (with 3 ranks of 1-byte items: 6, 9, 18, 33 … B; a
    power of two would leave a remainder that no rank reduces while the figures count it)."""
    if not op.moves_data:
        return (0,)
    share = itemsize * (n if op.recv_blocks == "1/n" else 1)
    powers = [1 << k for k in range(21) if share <= 1 << k <= MAX_DEFAULT_SIZE]
    return tuple(sorted({-(-p // share) * share for p in powers}))


def size_problem(op: CollOp, itemsize: int, n: int | None, sizes) -> str | None:
    """Why a size cannot be measured (not a whole number of items; for reduce_scatter not a whole
    share per rank; barrier moves no data), None when every size can; n None: the rank count is not
    known yet."""
    if not op.moves_data:
        return (
            None
            if tuple(sizes) == (0,)
            else "--op barrier moves no data: leave out --sizes (its only size is 0)"
        )
    for size in sizes:
        if size % itemsize:
            return f"--sizes: {size} B is not a whole number of {itemsize}-byte items of the --dtype"
        if n is not None and op.recv_blocks == "1/n" and size % (itemsize * n):
            return (
                f"--sizes: {size} B does not split into {n} equal shares of whole items for "
                f"reduce_scatter ({n} ranks x {itemsize} B): give multiples of {itemsize * n} B"
            )
        if size == 0:
            return "--sizes: 0 B is no collective: give sizes from the datatype's size"
    return None


PATTERN_PERIOD = 5


def pattern(rank: int, elements: int, dtype: np.dtype, out: np.ndarray | None = None) -> np.ndarray:
    """Rank `rank`'s send values: small integers (exact in every datatype, sums of a few dozen ranks
    never overflow a byte) that differ from rank to rank and along the buffer: element i is
    (i + 7 rank) mod 5 + 1. Written five at a time into the result alone: no temporary of another
    type (an int64 index of a 1 GiB char buffer would take 8 GiB); into `out` when given (a buffer of
    `elements` of `dtype`)."""
    period = ((np.arange(PATTERN_PERIOD) + 7 * rank) % PATTERN_PERIOD + 1).astype(dtype)
    out = np.empty(elements, dtype=dtype) if out is None else out
    whole = elements - elements % PATTERN_PERIOD
    out[:whole].reshape(-1, PATTERN_PERIOD)[:] = period
    out[whole:] = period[: elements - whole]
    return out


def expected(
    op: CollOp, reduce_op: ReduceOp, rank: int, n: int, count: int, dtype: np.dtype
) -> np.ndarray | None:
    """What rank `rank`'s receive buffer must hold after the op (None: nothing, as a reduce's
    non-root), with `count` items per block."""
    if not op.moves_data or (op.rooted and op.reduction and rank != 0):
        return None
    if op.name == "bcast":
        return pattern(0, count, dtype)
    if op.name == "allgather":
        return np.concatenate([pattern(s, count, dtype) for s in range(n)])
    if op.name == "alltoall":
        return np.concatenate(
            [pattern(s, n * count, dtype)[rank * count : (rank + 1) * count] for s in range(n)]
        )
    ufunc = getattr(np, reduce_op.ufunc)
    whole = ufunc.reduce(np.stack([pattern(s, count, dtype) for s in range(n)]), axis=0).astype(dtype)
    if op.recv_blocks == "1/n":
        share = count // n
        return whole[rank * share : (rank + 1) * share]
    return whole
