"""A measuring rank's CPU time over a size's trials: user and system seconds of the whole process
(every thread, so Open MPI's progress threads count) and the wall time of the same span.

Read around the trials, never inside a timed loop: one getrusage and one clock read at each end
(about a microsecond) cost nothing the trials' times see. Netperf's service demand is the same
idea: CPU time per unit of data moved (npmpi_analysis.numbers.cpu_cost turns these into µs per KiB).
"""

from __future__ import annotations

import resource
import time

import numpy as np

from npmpi.core.cpuwait import runq_wait_ns, waited_s
from npmpi.runfile.format import CPU_DATASETS  # one rank's figures travel on CPU_TAG in this order


class CpuSpan:
    """Start at the first trial, stop after the last: `stop()` gives the CPU_DATASETS' seconds.

    A rank that busy-polls never sleeps: its CPU time plus its wait for a CPU (npmpi/core/cpuwait.py)
    is its wall time, so a % of a core below 100 on a shared host is told apart from a rank that blocks."""

    __slots__ = ("_usage", "_wait", "_wall")

    def __init__(self) -> None:
        self._usage = resource.getrusage(resource.RUSAGE_SELF)
        self._wait = runq_wait_ns()
        self._wall = time.perf_counter()

    def stop(self) -> np.ndarray:
        """float64 [user_s, system_s, wall_s, runqueue_wait_s] since the span started (sent as it is)."""
        wall = time.perf_counter() - self._wall
        wait = waited_s(self._wait, runq_wait_ns())
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return np.array(
            [usage.ru_utime - self._usage.ru_utime, usage.ru_stime - self._usage.ru_stime, wall, wait],
            dtype=np.float64,
        )


def receive(comm, ranks: list[int], tag: int) -> list[np.ndarray]:
    """Each rank's figures, sent on `tag` after its size's result (rank 0's side)."""
    out = []
    for rank in ranks:
        buf = np.empty(len(CPU_DATASETS), dtype=np.float64)
        comm.Recv(buf, rank, tag)
        out.append(buf)
    return out


def row_fields(ranks: list[int], figures: list[np.ndarray]) -> dict:
    """SizeResult's CPU fields: the ranks and, per field of CPU_DATASETS, one value per rank."""
    return {
        "cpu_ranks": list(ranks),
        **{name: [float(f[i]) for f in figures] for i, name in enumerate(CPU_DATASETS)},
    }
