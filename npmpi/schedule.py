"""NetPIPE's message-size schedule and its rule for iterations per trial."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class SizePoint:
    """One message size of the sweep and the increment in force when it was generated."""

    size_bytes: int
    increment_bytes: int


def netpipe_schedule(lower: int, upper: int, perturbation: int) -> list[SizePoint]:
    """The sizes NetPIPE 3.7 tests between lower and upper.

    Base points start at `lower` and grow by an increment that doubles every other point
    (after the third). Around each base point `n` whose increment exceeds `perturbation + 1`,
    `n - p` and `n + p` are tested too, so the last sizes may pass `upper` by up to `p`.
    """
    if lower < 1 or upper < lower or perturbation < 0:
        raise ValueError(f"bad schedule bounds: lower={lower} upper={upper} p={perturbation}")
    points: list[SizePoint] = []
    inc = lower // 2 if lower > 1 else 1
    # NetPIPE 3.7 counts points from 1 when it starts above 1 B (measured against NPopenmpi -l):
    # the increment then first doubles after the second point, not the third
    length, nq = lower, (1 if lower > 1 else 0)
    while length <= upper:
        if nq > 2 and nq % 2 == 1:
            inc += inc
        perts = (-perturbation, 0, perturbation) if perturbation > 0 and inc > perturbation + 1 else (0,)
        for pert in perts:
            points.append(SizePoint(length + pert, inc))
        length += inc
        nq += 1
    return points


def powers_of_two_schedule(lower: int, upper: int) -> list[SizePoint]:
    """Sizes lower, 2·lower, 4·lower … up to upper (the schedule with perturbation 0 is not this)."""
    points = []
    size = lower
    while size <= upper:
        points.append(SizePoint(size, size))
        size *= 2
    return points


def next_iterations(
    target_time_s: float,
    previous_size_bytes: int,
    previous_round_trip_s: float,
    size_bytes: int,
    minimum: int,
    maximum: int,
) -> int:
    """Round trips for the next trial: i = r·o / (t·n), the paper's eq. 1 (NetPIPE's rule).

    r is the target trial time, o the previous size, t its mean time per round trip and n the
    new size: the previous size's rate is assumed to hold, so the trial lasts about r.
    """
    if previous_round_trip_s <= 0 or not math.isfinite(previous_round_trip_s):
        return maximum
    estimate = target_time_s * max(previous_size_bytes, 1) / (previous_round_trip_s * max(size_bytes, 1))
    return int(min(max(estimate, minimum), maximum))
