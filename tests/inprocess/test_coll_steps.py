"""Every collective's step (npmpi/coll/step.py) on 2 and 4 ranks, in-process on every rank of
`mpirun -np 4 python -m pytest tests/inprocess` (tests/test_inprocess.py): each op's buffers, its
timed loop and its result check, in both kernels, without a job launch per case. Every assertion is
on data every rank holds (the checks are allgathered), so no rank is left waiting in a collective."""

from __future__ import annotations

import mmap

import numpy as np
import pytest
from mpi4py import MPI

from npmpi.coll.ops import OPS, REDUCE_OPS, default_sizes, expected
from npmpi.coll.options import CollOptions
from npmpi.coll.step import CORRUPT_ENV, CollStep

WORLD = MPI.COMM_WORLD

pytestmark = pytest.mark.skipif(
    WORLD.Get_size() != 4, reason="runs under mpirun -np 4 (tests/test_inprocess.py)"
)


def _c_kernel() -> bool:
    try:
        from npmpi import _ckernel
    except ImportError:
        return False
    return hasattr(_ckernel, "collective")


KERNELS = ["python", "c"] if _c_kernel() else ["python"]


@pytest.fixture(params=[2, 4], ids=["2 ranks", "4 ranks"])
def comm(request):
    """The ranks of one communicator of 2 (two at once: {0, 1} and {2, 3}) or of 4."""
    if request.param == 4:
        yield WORLD
        return
    sub = WORLD.Split(WORLD.Get_rank() // 2, WORLD.Get_rank())
    yield sub
    sub.Free()


def checks_everywhere(comm, extra: dict, sizes) -> list[bool]:
    """Each size: run the op a few times, then every rank of WORLD's verdict (all must agree)."""
    step = CollStep(comm, CollOptions(**{"check": True, **extra}))
    verdicts = []
    for size in sizes:
        step.set_size(size)
        for buf in (step.send, step.recv):  # as OSU's posix_memalign'd buffers (docs/collectives.md)
            assert not buf.size or buf.ctypes.data % mmap.PAGESIZE == 0, (size, buf.ctypes.data)
        seconds = step.run(3)
        assert seconds >= 0
        verdicts.append(all(WORLD.allgather(step.check())))
    return verdicts


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("op", list(OPS))
def test_every_op_gives_the_expected_result_on_every_rank(comm, op, kernel):
    n = comm.Get_size()
    sizes = (*default_sizes(OPS[op], 4, n)[:3], 64 * 1024) if op != "barrier" else (0,)
    extra = {"op": op, "dtype": "float32", "reduce_op": "sum", "kernel": kernel}
    assert checks_everywhere(comm, extra, sizes) == [True] * len(sizes)


@pytest.mark.parametrize("reduce_op", list(REDUCE_OPS))
@pytest.mark.parametrize("dtype", ["char", "uint8", "int32", "int64"])
def test_every_integer_reduction(comm, dtype, reduce_op):
    extra = {"op": "allreduce", "dtype": dtype, "reduce_op": reduce_op, "kernel": "python"}
    assert checks_everywhere(comm, extra, (8, 4096)) == [True, True]


@pytest.mark.parametrize("op", ["allreduce", "alltoall", "bcast", "reduce_scatter"])
def test_a_corrupted_result_is_seen(comm, op, monkeypatch):
    monkeypatch.setenv(CORRUPT_ENV, "64")
    extra = {"op": op, "dtype": "int32", "reduce_op": "max", "kernel": KERNELS[-1]}
    assert checks_everywhere(comm, extra, (32, 64, 128)) == [True, False, True]


def test_without_check_nothing_is_compared(monkeypatch):
    monkeypatch.setenv(CORRUPT_ENV, "64")
    extra = {"op": "allreduce", "dtype": "int32", "reduce_op": "sum", "kernel": "python", "check": False}
    step = CollStep(WORLD, CollOptions(**extra))
    step.set_size(64)
    step.run(2)
    assert step.check() and not step.verifies  # as OSU without -c: the result is not looked at
    want = expected(
        OPS["allreduce"], REDUCE_OPS["sum"], WORLD.Get_rank(), WORLD.Get_size(), 16, np.dtype("i4")
    )
    assert np.array_equal(step.recv, want)  # and left as the op gave it


@pytest.mark.parametrize("kernel", KERNELS)
def test_series_run_on_the_first_ranks_each_call_timed_as_osu(kernel):
    """A step of three series (allreduce on the first 2 ranks, then on 4, alltoall on 2): each
    rank selects only the series it is in, its result right on its sub-communicator; with
    --iterations osu every call is timed with a barrier after it, so a trial's time is below its
    wall-clock span, and the warm-up is OSU's skip."""
    import time

    series = [("allreduce", 2), ("allreduce", 4), ("alltoall", 2)]
    extra = {"op": "allreduce", "dtype": "int32", "reduce_op": "sum", "kernel": kernel, "check": True}
    step = CollStep(WORLD, CollOptions(**extra, iterations="osu"), series)
    verdicts = []
    for index, (_, n) in enumerate(series):
        ok = True
        if WORLD.Get_rank() < n:
            step.select(index)
            assert step.n == n and step.warmup(64, 1000) == 100 and step.warmup(16384, 100) == 10
            step.set_size(64)
            start = time.perf_counter()
            seconds = step.run(20)
            ok = step.check() and 0 < seconds < time.perf_counter() - start
        verdicts.append(all(WORLD.allgather(ok)))
    assert verdicts == [True, True, True]
