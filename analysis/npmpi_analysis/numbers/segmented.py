"""Piecewise straight lines y = a_k + b_k x through weighted points: the regimes and their breaks.

Segmented least squares (Bellman 1961; the dynamic program of Kleinberg and Tardos, "Algorithm
Design", 6.3) over points sorted by x. For each count of segments K from 1 to `max_segments`, the
dynamic program finds the breaks that minimise the total weighted residual sum of squares (RSS_K),
each segment holding at least `min_points` points; the count chosen minimises the modified
information criterion of Liu, Wu and Zidek (1997, for regressions with unknown change points),
n ln(RSS_K / n) + 0.299 (3K - 1) (ln n)^2.1 (two coefficients per segment and one place per break):
the plain BIC's ln n per parameter split one-regime data on 10-50 % of noisy draws (the best of
n places for a break is not one parameter's worth), this penalty on 1 in 40. Fixed
breaks (the user's) skip the search. Pure numpy, no files.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np


@dataclass
class LineFit:
    """The weighted least-squares line of one segment (points lo to hi, hi excluded)."""

    lo: int
    hi: int
    intercept: float
    slope: float
    rss: float  # weighted residual sum of squares


def _cumulative(x: np.ndarray, y: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, ...]:
    """Prefix sums of w, wx, wy, wxx, wxy, wyy (index k: the first k points), in float64."""

    def cum(v: np.ndarray) -> np.ndarray:
        return np.concatenate(([0.0], np.cumsum(v)))

    return cum(w), cum(w * x), cum(w * y), cum(w * x * x), cum(w * x * y), cum(w * y * y)


def _line(sums: tuple[np.ndarray, ...], lo, hi):
    """(intercept, slope, rss) of the weighted line through points lo..hi-1 (arrays broadcast)."""
    sw, sx, sy, sxx, sxy, syy = (c[hi] - c[lo] for c in sums)
    with np.errstate(divide="ignore", invalid="ignore"):
        # centred sums: the raw ones lose every digit when x spans 1 to 8e6 bytes
        mx, my = sx / sw, sy / sw
        cxx = sxx - sw * mx * mx
        cxy = sxy - sw * mx * my
        cyy = syy - sw * my * my
        slope = np.where(cxx > 0, cxy / cxx, 0.0)
        intercept = my - slope * mx
        rss = np.maximum(cyy - slope * cxy, 0.0)
    return intercept, slope, rss


def segment_rss(x: np.ndarray, y: np.ndarray, w: np.ndarray, min_points: int) -> np.ndarray:
    """[n+1, n+1] the RSS of the line through points i..j-1 (inf where fewer than min_points)."""
    n = len(x)
    sums = _cumulative(x, y, w)
    lo = np.arange(n + 1)[:, None]
    hi = np.arange(n + 1)[None, :]
    _a, _b, rss = _line(sums, lo, hi)
    rss = np.where(hi - lo >= min_points, rss, np.inf)
    return np.where(np.isfinite(rss), rss, np.inf)


def best_breaks(cost: np.ndarray, segments: int) -> tuple[float, list[int]]:
    """(least total cost, the break indices) of exactly `segments` segments over the n points."""
    n = cost.shape[0] - 1
    best = np.full((segments + 1, n + 1), np.inf)
    back = np.zeros((segments + 1, n + 1), dtype=np.int64)
    best[0, 0] = 0.0
    for k in range(1, segments + 1):
        # best[k, j] = min over i of best[k-1, i] + cost[i, j]
        total = best[k - 1][:, None] + cost
        back[k] = np.argmin(total, axis=0)
        best[k] = total[back[k], np.arange(n + 1)]
    if not math.isfinite(best[segments, n]):
        return math.inf, []
    breaks, j = [], n
    for k in range(segments, 0, -1):
        j = int(back[k, j])
        breaks.append(j)
    return float(best[segments, n]), sorted(breaks)[1:]  # the first is 0


def information(rss: float, n: int, segments: int) -> float:
    """The modified information criterion (Liu, Wu and Zidek) of `segments` lines of RSS `rss` at n
    points."""
    params = 3 * segments - 1
    return n * math.log(max(rss, 1e-300) / n) + params * 0.299 * math.log(n) ** 2.1


def choose_breaks(
    x: np.ndarray, y: np.ndarray, w: np.ndarray, min_points: int = 4, max_segments: int = 4
) -> list[int]:
    """The break indices (each the first point of a segment after the first) of the fit with the
    least information criterion; [] for one segment."""
    n = len(x)
    cost = segment_rss(x, y, w, min_points)
    chosen, least = [], math.inf
    for k in range(1, max(1, min(max_segments, n // min_points)) + 1):
        rss, breaks = best_breaks(cost, k)
        if not math.isfinite(rss):
            break
        bic = information(rss, n, k)
        if bic < least - 1e-9:
            chosen, least = breaks, bic
    return chosen


def fit_lines(x: np.ndarray, y: np.ndarray, w: np.ndarray, breaks: list[int]) -> list[LineFit]:
    """The weighted line of each segment between `breaks`."""
    sums = _cumulative(x, y, w)
    edges = [0, *breaks, len(x)]
    out = []
    for lo, hi in itertools.pairwise(edges):
        a, b, rss = _line(sums, lo, hi)
        out.append(LineFit(lo, hi, float(a), float(b), float(rss)))
    return out


def fit_lines_many(x: np.ndarray, ys: np.ndarray, w: np.ndarray, lo: int, hi: int) -> tuple[np.ndarray, ...]:
    """(intercepts, slopes) of the weighted line through points lo..hi-1 of each row of ys [B, n]
    (the bootstrap's resamples, all at once), with weights w [n] shared or [B, n] each row's own."""
    xs, ys = x[lo:hi][None, :], ys[:, lo:hi]
    ws = np.broadcast_to(w[..., lo:hi], ys.shape)
    with np.errstate(divide="ignore", invalid="ignore"):
        sw = ws.sum(axis=1, keepdims=True)
        mx = (ws * xs).sum(axis=1, keepdims=True) / sw
        dx = xs - mx
        cxx = (ws * dx * dx).sum(axis=1)
        my = (ws * ys).sum(axis=1) / sw[:, 0]
        slope = np.where(cxx > 0, (ws * dx * ys).sum(axis=1) / cxx, 0.0)
    return my - slope * mx[:, 0], slope
