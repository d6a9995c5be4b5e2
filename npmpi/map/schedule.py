"""The map's schedules: which members measure each other in which round (pure, no MPI).

`rounds` is the circle method (round-robin tournament): member 0 stays put, the others rotate one
place per round, and position k meets position m-1-k. With N even that is N-1 rounds of N/2
disjoint pairs; with N odd a phantom member makes N+1 positions, so there are N rounds and whoever
meets the phantom has a bye. Every pair meets exactly once and no member is in two pairs of a round.
`serial` measures one pair per round, N(N-1)/2 rounds, in the order (0,1), (0,2) ... (N-2,N-1).
"""

from __future__ import annotations

import numpy as np

SCHEDULE_ROUNDS = "rounds"
SCHEDULE_SERIAL = "serial"
SCHEDULES = (SCHEDULE_ROUNDS, SCHEDULE_SERIAL)

Round = list[tuple[int, int]]


def circle_rounds(n: int) -> list[Round]:
    """The circle method's rounds for n members: each a list of pairs (i, j), i < j."""
    if n < 2:
        raise ValueError(f"a map needs at least 2 members, {n} given")
    m = n if n % 2 == 0 else n + 1  # positions; member n is the phantom of an odd n
    rounds = []
    for r in range(m - 1):
        at = [0] + [1 + (k + r) % (m - 1) for k in range(m - 1)]
        pairs = [(min(at[k], at[m - 1 - k]), max(at[k], at[m - 1 - k])) for k in range(m // 2)]
        rounds.append(sorted(p for p in pairs if p[1] < n))
    return rounds


def serial_rounds(n: int) -> list[Round]:
    """One pair per round, every pair once."""
    if n < 2:
        raise ValueError(f"a map needs at least 2 members, {n} given")
    return [[(i, j)] for i in range(n) for j in range(i + 1, n)]


def make_rounds(schedule: str, n: int) -> list[Round]:
    """The rounds of a schedule by name (SCHEDULES)."""
    if schedule == SCHEDULE_ROUNDS:
        return circle_rounds(n)
    if schedule == SCHEDULE_SERIAL:
        return serial_rounds(n)
    raise ValueError(f"unknown schedule {schedule!r}; choose one of: {', '.join(SCHEDULES)}")


def round_matrix(rounds: list[Round], n: int) -> np.ndarray:
    """[n, n] int32: the round in which i and j meet (symmetric), -1 on the diagonal."""
    out = np.full((n, n), -1, dtype=np.int32)
    for r, pairs in enumerate(rounds):
        for i, j in pairs:
            out[i, j] = out[j, i] = r
    return out
