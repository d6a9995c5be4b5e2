"""The timer's resolution and the cost of reading it (the 2009 study assumed both negligible)."""

from __future__ import annotations

import time
from dataclasses import dataclass


@dataclass(frozen=True)
class ClockInfo:
    name: str
    resolution_s: float  # as reported by the OS
    smallest_step_s: float  # smallest non-zero difference seen between two reads
    read_cost_s: float  # mean cost of one read


def measure_python_clock(reads: int = 200_000) -> ClockInfo:
    """Measure time.perf_counter, the Python kernel's clock."""
    clock = time.perf_counter
    info = time.get_clock_info("perf_counter")
    step = float("inf")
    for _ in range(2000):
        a = clock()
        b = clock()
        while b == a:
            b = clock()
        step = min(step, b - a)
    t0 = clock()
    for _ in range(reads):
        clock()
    cost = (clock() - t0) / reads
    return ClockInfo(f"perf_counter ({info.implementation})", info.resolution, step, cost)


def measure_c_clock(reads: int = 200_000) -> ClockInfo:
    """Measure clock_gettime(CLOCK_MONOTONIC) as the C kernel reads it."""
    from npmpi import _ckernel

    resolution, cost = _ckernel.clock_info(reads)
    return ClockInfo("clock_gettime(CLOCK_MONOTONIC)", resolution, resolution, cost)
