"""NetPIPE's message-size schedule and its rule for iterations per trial."""

from __future__ import annotations

import math
from dataclasses import dataclass

ZERO_TIME_S = 1e-6  # NetPIPE: `if (bwdata[n].t == 0.0) bwdata[n].t = 0.000001;`


@dataclass(frozen=True)
class SizePoint:
    """One message size of the sweep and the increment in force when it was generated.

    `group_end` marks the last size of a base point's perturbation group (n-p, n, n+p): NetPIPE
    checks its stop rule only there, before the next base point."""

    size_bytes: int
    increment_bytes: int
    group_end: bool = True


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
            points.append(SizePoint(length + pert, inc, pert == perts[-1]))
        length += inc
        nq += 1
    return points


def netpipe_repeats(
    run_time_s: float,
    previous_size_bytes: int,
    increment_bytes: int,
    previous_time_s: float,
    floor: int,
    maximum: int,
) -> int:
    """NetPIPE 3.7's nrepeat: max(RUNTM / ((b / (b - inc + 1)) * tlast), TRIALS), truncated.

    As in NetPIPE's netpipe.c, b is the size measured last (the first size itself before the
    first one), inc the increment of the size to come, tlast the last size's best time per
    message in NetPIPE's unit (one way for a ping-pong) and RUNTM the run time; TRIALS is the
    floor. A time that is zero (or not a number) counts as 1 us, NetPIPE's guard; a denominator
    that is not positive counts as 1; the result never exceeds `maximum`.
    """
    if not previous_time_s > 0 or not math.isfinite(previous_time_s):
        previous_time_s = ZERO_TIME_S
    b = max(previous_size_bytes, 1)
    factor = b / max(b - increment_bytes + 1.0, 1.0)
    estimate = run_time_s / (factor * previous_time_s)
    return int(min(max(estimate, floor), maximum))
