"""How a sweep samples its sizes: the order it measures them in (--order, --order-seed) and how
many trials each gets (--precision, --precision-cap, --max-trials). No MPI here: rank 0's sweep
(npmpi/persize/transmitter.py) and a group kind's coordinator (npmpi/kinds/group.py) use these rules.

Order. `ascending` is NetPIPE's: each size after the one before, the first size's iterations from a
latency probe, the next size's from the last one's time. `random` measures the same sizes in a
permutation drawn from numpy's PCG64 generator seeded with the seed (`default_rng(seed)`), so a slow
drift (temperature, clock frequency, a neighbour's job) spreads over all sizes instead of reading as
a size effect. A size's iterations then come from its own estimate (`nearest_time`): the measured
size nearest to it (in ratio, within a factor of 2), its time scaled up linearly when the size is
larger; with no measured size that near, an untimed probe of the size itself.

Precision. With a relative precision P, a size's trials go on past --trials until the 95 %
confidence interval of its mean trial time, t(0.975, n-1) · s / √n, is within P of the mean, or its
trials have taken the cap (seconds from the first trial's start), or --max-trials ran.
"""

from __future__ import annotations

import math
import secrets
import time
from collections.abc import Callable, Sequence

ORDER_ASCENDING, ORDER_RANDOM = "ascending", "random"
ORDERS = (ORDER_ASCENDING, ORDER_RANDOM)
MAX_SEED = 2**32 - 1
DEFAULT_MAX_TRIALS = 100
MAX_MAX_TRIALS = 10_000
CAP_TARGET_FACTOR = 10  # the default cap: 10 × --trials × --target-time per size
NEAR_FACTOR = 2.0  # a measured size this near (ratio) gives a size's iterations; else a probe

# t(0.975, df) for df = 1..30 (two-sided 95 %)
_T975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip


def draw_seed() -> int:
    """A fresh seed for --order random without --order-seed (stored in the file)."""
    return secrets.randbelow(MAX_SEED + 1)


def permutations(counts: Sequence[int], seed: int) -> list[list[int]]:
    """One permutation of range(count) per count, drawn in turn from default_rng(seed)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    return [[int(i) for i in rng.permutation(n)] for n in counts]


def measure_order(count: int, opts, series: int = 0, counts: Sequence[int] | None = None) -> list[int]:
    """The indices of `count` sizes in the order `opts` measures them (a coll file's series `series`
    of the series' `counts`: the series-th permutation drawn)."""
    if getattr(opts, "size_order", ORDER_ASCENDING) != ORDER_RANDOM:
        return list(range(count))
    counts = list(counts) if counts is not None else [count]
    return permutations(counts, int(opts.order_seed))[series]


def t975(df: int) -> float:
    """Student's t quantile 0.975 for `df` degrees of freedom (a table to 30, then a series in 1/df)."""
    if df < 1:
        return math.inf
    if df <= len(_T975):
        return _T975[df - 1]
    z = 1.959964
    g1 = (z**3 + z) / 4
    g2 = (5 * z**5 + 16 * z**3 + 3 * z) / 96
    g3 = (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / 384
    return z + g1 / df + g2 / df**2 + g3 / df**3


def relative_halfwidth(times: Sequence[float]) -> float:
    """t(0.975, n-1) · s / √n over the mean of `times` (inf with fewer than 2 or a mean ≤ 0)."""
    n = len(times)
    if n < 2:
        return math.inf
    mean = sum(times) / n
    if not mean > 0:
        return math.inf
    var = sum((t - mean) ** 2 for t in times) / (n - 1)
    return t975(n - 1) * math.sqrt(var) / math.sqrt(n) / mean


def trials_bound(opts) -> int:
    """The most trials a size may take: --max-trials with --precision, else --trials."""
    return max(opts.max_trials, opts.trials) if getattr(opts, "precision", None) else opts.trials


def cap_s(opts) -> float:
    """Seconds a size's trials may take with --precision: --precision-cap, else 10 × trials × target."""
    if opts.precision_cap_s is not None:
        return opts.precision_cap_s
    return CAP_TARGET_FACTOR * opts.trials * opts.target_time_s


def should_stop(
    times: Sequence[float], first_start: float, now: float, minimum: int, precision: float, cap: float
) -> bool:
    """Whether a size's trials end after `times` (each trial's seconds): at least `minimum` trials
    and the relative 95 % half-width within `precision`, or the cap's seconds since `first_start`."""
    if len(times) < minimum:
        return False
    return relative_halfwidth(times) <= precision or now - first_start >= cap


def stop_rule(opts) -> Callable[[list], bool] | None:
    """The driver's `enough(trials)` for --precision (each trial a tuple: seconds, wall start, ...),
    None without it."""
    if not getattr(opts, "precision", None):
        return None
    precision, cap, minimum = opts.precision, cap_s(opts), opts.trials

    def enough(trials: list) -> bool:
        times = [t[0] for t in trials]
        return should_stop(times, trials[0][1], time.time(), minimum, precision, cap)

    return enough


def precision_fields(opts, times: Sequence[float]) -> tuple[dict[str, int], dict[str, float]]:
    """A row's per-size precision columns (integers, floats); empty without --precision."""
    if not getattr(opts, "precision", None):
        return {}, {}
    hw = relative_halfwidth(times)
    return {"precision_reached": int(hw <= opts.precision)}, {"precision_rel_halfwidth": hw}


def nearest_time(size: int, measured: dict[int, float]) -> float | None:
    """The expected time of `size` from the measured size nearest to it in ratio (within NEAR_FACTOR):
    its time, scaled by size / that size when `size` is larger; None when none is that near."""
    best = None
    for other, t in measured.items():
        ratio = max(size, 1) / max(other, 1)
        distance = max(ratio, 1 / ratio)
        if distance <= NEAR_FACTOR and (best is None or distance < best[0]):
            best = (distance, other, t)
    if best is None:
        return None
    _, other, t = best
    return t * max(1.0, max(size, 1) / max(other, 1))


def file_attrs(opts) -> dict:
    """The root attributes that say how the sizes were sampled (format 1.11)."""
    order = getattr(opts, "size_order", ORDER_ASCENDING)
    out = {"size_order": order}
    if order == ORDER_RANDOM:
        out["size_order_seed"] = int(opts.order_seed)
    if getattr(opts, "precision", None):
        out["precision"] = float(opts.precision)
        out["precision_cap_s"] = cap_s(opts)
        out["precision_max_trials"] = trials_bound(opts)
    return out
