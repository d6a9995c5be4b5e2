"""Time lines and windows: a node's clock readings put on rank 0's time line, and the statistics of
a series of samples over windows (each message size's trials, a baseline) with the flag that says
how far to trust them (numbers/compute.py's FLAG_*)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from npmpi_analysis.numbers.compute import FLAG_GAP, FLAG_NONE, FLAG_OK, FLAG_SHORT


def node_to_rank0(
    t_node: np.ndarray,
    offset_start_s: float,
    measured_start_unix_s: float,
    offset_end_s: float | None = None,
    measured_end_unix_s: float | None = None,
) -> np.ndarray:
    """Put a node's clock readings on rank 0's time line: t0 = t_node - offset(t0).

    offset(t) = a + s (t - m) is linear in rank 0's time between the start and end measurements
    (npmpi.power.clocksync.interpolate_offset); solving t0 + a + s (t0 - m) = t_node exactly gives
    t0 = (t_node - a + s m) / (1 + s). Without an end measurement the offset is constant.
    """
    t_node = np.asarray(t_node, dtype=float)
    a, m = float(offset_start_s), float(measured_start_unix_s)
    if (
        offset_end_s is None
        or measured_end_unix_s is None
        or not np.isfinite(offset_end_s)
        or not np.isfinite(measured_end_unix_s)
        or measured_end_unix_s <= m
    ):
        return t_node - a
    s = (float(offset_end_s) - a) / (float(measured_end_unix_s) - m)
    # written around m so large epoch values keep their precision
    return m + (t_node - m - a) / (1.0 + s)


@dataclass
class WindowStats:
    """Mean and standard deviation of the samples of each window, how many, and a flag."""

    mean: np.ndarray
    sigma: np.ndarray
    count: np.ndarray
    flag: np.ndarray  # int codes FLAG_*, names in FLAG_NAMES


def window_stats(
    t: np.ndarray, y: np.ndarray, starts: np.ndarray, ends: np.ndarray, interval_s: float
) -> WindowStats:
    """Per window [start, end]: mean and std (ddof 0) of the samples with start <= t <= end.

    `t` must be sorted. A window shorter than `interval_s` (the meter's sample interval), or one that
    holds no sample, takes the samples inside it plus the nearest sample on each side, if that
    sample lies within 1.5 intervals of the window, and is flagged; one with none is NaN, flagged.
    Prefix sums give every window in O(len(t) + windows log len(t)).
    """
    t = np.asarray(t, dtype=float)
    y = np.asarray(y, dtype=float)
    starts = np.asarray(starts, dtype=float)
    ends = np.asarray(ends, dtype=float)
    nw = len(starts)
    n = len(t)
    flag = np.full(nw, FLAG_OK, dtype=np.int8)
    if nw == 0:
        z = np.zeros(0)
        return WindowStats(z, z, np.zeros(0, dtype=np.int64), flag)
    valid = np.isfinite(starts) & np.isfinite(ends) & (ends >= starts)
    s = np.where(valid, starts, 0.0)
    e = np.where(valid, ends, 0.0)
    lo = np.searchsorted(t, s, side="left")
    hi = np.searchsorted(t, e, side="right")
    short = (e - s) < interval_s
    empty = hi <= lo
    near = valid & (short | empty)
    reach = 1.5 * interval_s
    if n:
        before = np.clip(lo - 1, 0, n - 1)
        after = np.clip(hi, 0, n - 1)
        take_before = near & (lo > 0) & (t[before] >= s - reach)
        take_after = near & (hi < n) & (t[after] <= e + reach)
        lo = np.where(take_before, lo - 1, lo)
        hi = np.where(take_after, hi + 1, hi)
    count = np.where(valid, hi - lo, 0)
    ref = float(np.mean(y)) if n else 0.0  # subtract a reference: prefix sums of squares keep precision
    d = y - ref
    c1 = np.concatenate(([0.0], np.cumsum(d)))
    c2 = np.concatenate(([0.0], np.cumsum(d * d)))
    with np.errstate(divide="ignore", invalid="ignore"):
        s1 = c1[hi] - c1[lo]
        s2 = c2[hi] - c2[lo]
        m1 = s1 / count
        mean = np.where(count > 0, ref + m1, np.nan)
        var = np.where(count > 0, np.maximum(s2 / count - m1 * m1, 0.0), np.nan)
        # what is left of a constant signal after the prefix sums' rounding is not spread: zero it
        eps = np.finfo(float).eps
        noise = (
            8
            * eps
            * ((np.abs(c2[hi]) + np.abs(c2[lo])) + np.abs(m1) * (np.abs(c1[hi]) + np.abs(c1[lo])))
            / count
        )
        var = np.where(var <= noise, 0.0, var)
    flag[near & short] = FLAG_SHORT
    flag[near & ~short] = FLAG_GAP
    flag[(count == 0) | ~valid] = FLAG_NONE
    return WindowStats(mean, np.sqrt(var), count, flag)
