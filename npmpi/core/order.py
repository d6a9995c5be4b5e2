"""The order a run or a coll measures its sizes in (`--order`, docs/file-format.md 1.11).

`ascending` is NetPIPE's: each size's iterations follow from the size before it. `random` measures
them in a seeded random permutation, so that a slow drift (temperature, a frequency, a neighbour's
job) spreads over the sizes instead of reading as a size effect; each size's iterations then follow
from the sizes measured so far (`RateBook`: Hockney's straight line between the nearest measured
sizes below and above, or the one below scaled up by the size ratio), never from a size far away.
The seed is `--order-seed`, or drawn once by the process that measures (rank 0), and stored in the
file (`size_order_seed`), so the same order can be measured again.
"""

from __future__ import annotations

import bisect
import secrets

import numpy as np

ASCENDING, RANDOM = "ascending", "random"
ORDERS = (ASCENDING, RANDOM)
NO_SEED = -1  # the stored seed of an ascending run

_drawn: int | None = None


def order_seed(opts) -> int:
    """The seed in force: --order-seed, else one drawn once in this process (NO_SEED ascending)."""
    global _drawn
    if getattr(opts, "size_order", ASCENDING) != RANDOM:
        return NO_SEED
    given = getattr(opts, "size_order_seed", None)
    if given is not None:
        return int(given)
    if _drawn is None:
        _drawn = secrets.randbelow(2**31)
    return _drawn


def ordered(items: list, opts, stream: int = 0) -> list:
    """`items` in the order they are measured: as given (ascending), or permuted by the seed (each
    `stream`, e.g. a coll file's series, its own permutation)."""
    if getattr(opts, "size_order", ASCENDING) != RANDOM or len(items) < 2:
        return list(items)
    rng = np.random.default_rng([order_seed(opts), stream])
    return [items[k] for k in rng.permutation(len(items))]


class RateBook:
    """The time per unit (a message, an operation) of every size measured so far, for the next
    size's estimate."""

    def __init__(self) -> None:
        self.sizes: list[int] = []
        self.times: list[float] = []

    def add(self, size: int, seconds: float) -> None:
        if not (seconds > 0):
            return
        k = bisect.bisect_left(self.sizes, size)
        if k < len(self.sizes) and self.sizes[k] == size:
            self.times[k] = seconds
            return
        self.sizes.insert(k, size)
        self.times.insert(k, seconds)

    def __bool__(self) -> bool:
        return bool(self.sizes)

    def estimate(self, size: int) -> float:
        """The time per unit expected at `size`: between two measured sizes the straight line through
        them; above the largest its time scaled by the size ratio (an upper bound past the latency:
        trials come out shorter, never longer); below the smallest its time; 0 with nothing yet."""
        if not self.sizes:
            return 0.0
        k = bisect.bisect_left(self.sizes, size)
        if k < len(self.sizes) and self.sizes[k] == size:
            return self.times[k]
        if k == 0:
            return self.times[0]
        lo, t_lo = self.sizes[k - 1], self.times[k - 1]
        if k == len(self.sizes):
            return t_lo * max(1.0, size / max(lo, 1))
        hi, t_hi = self.sizes[k], self.times[k]
        return max(t_lo + (t_hi - t_lo) * (size - lo) / (hi - lo), min(t_lo, t_hi))
