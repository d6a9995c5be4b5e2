"""A measuring rank's CPU time over a size's trials: user and system seconds of the whole process
(every thread, so Open MPI's progress threads count) and the wall time of the same span.

Read around the trials, never inside a timed loop: one getrusage and one clock read at each end
(about a microsecond) cost nothing the trials' times see. Netperf's service demand is the same
idea: CPU time per unit of data moved (npmpi_analysis.numbers.cpu_cost turns these into µs per KiB).
"""

from __future__ import annotations

import math
import resource
import time

import numpy as np

from npmpi.runfile.format import CPU_DATASETS  # one rank's figures travel on CPU_TAG in this order

# How long this thread waited on a run queue for a CPU: the second field of Linux's
# /proc/thread-self/schedstat (ns, `run_delay`), read before and after each of a map pair's trials and
# around each size's trials. Open MPI's ranks spin in blocking receives, so on a busy host a pair
# whose ranks share a core waits for a CPU, not for the link, and looks slow (docs/clusters.md); the
# wait is the ranks' own evidence of that (/map/runq_wait_s, /pingpong/cpu_runqueue_wait_s).
# Elsewhere (not Linux, or a kernel without it) there is no value: NaN, never a guess.
SCHEDSTAT = ("/proc/thread-self/schedstat", "/proc/self/schedstat")


def _readable() -> str | None:
    for path in SCHEDSTAT:
        try:
            with open(path, "rb") as f:
                fields = f.read().split()
            if len(fields) >= 2:
                int(fields[1])
                return path
        except (OSError, ValueError):
            continue
    return None


_PATH = _readable()


def runq_wait_ns() -> int:
    """This thread's run-queue wait so far (ns); -1 when the system does not say."""
    if _PATH is None:
        return -1
    try:
        with open(_PATH, "rb") as f:
            return int(f.read().split()[1])
    except (OSError, ValueError, IndexError):
        return -1


def waited_s(before_ns: int, after_ns: int) -> float:
    """Seconds waited between two readings; NaN when either is unknown (or the counter went back)."""
    if before_ns < 0 or after_ns < before_ns:
        return math.nan
    return (after_ns - before_ns) / 1e9


class CpuSpan:
    """Start at the first trial, stop after the last: `stop()` gives the CPU_DATASETS' seconds.

    A rank that busy-polls never sleeps: its CPU time plus its wait for a CPU (runq_wait_ns below)
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
