"""One meter channel's power over time windows, and the uncertainty of each (docs/analysis.md).

A reading is one of three things (the channel's `averaging` and `energy_from_counter` attributes,
docs/meters.md):
- a cumulative energy counter (RAPL, NVML total energy): the energy between two readings of one
  stretch is exact; a window's energy is the counter interpolated at the window's edges;
- an average over the span before its stamp (RAPL-derived power, the estimate model, NVML power):
  each reading is weighted by how much of its span lies inside the window;
- an instantaneous value (Watts Up?, IPMI, hwmon input, replay): the samples inside the window.
A counter is turned into spans too (the power between consecutive readings of one stretch), so
both span kinds share one computation: the window's mean power is the integral of the spans'
piecewise-constant power over the window divided by the time they cover, which for a counter
equals the interpolated energy difference over the covered time (P = ΔE/Δt).

Every figure is on rank 0's time line with the meter's delay removed (npmpi_analysis.numbers.node_power).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from npmpi_analysis.numbers import timeline
from npmpi_analysis.numbers.compute import FLAG_GAP, FLAG_NONE, FLAG_OK, FLAG_SHORT
from npmpi_analysis.numbers.timeline import WindowStats

METHOD_COUNTER = "counter"
METHOD_AVERAGE = "average"
METHOD_INSTANT = "instant"
MIN_COVERAGE = 0.5  # a window whose readings cover less of it than this is flagged 'gap'
SQRT12 = math.sqrt(12.0)  # a uniform rounding error of one step q has sigma q / sqrt(12)


@dataclass
class ChannelReadings:
    """One channel's readings, ready for windows: times sorted, on rank 0's clock, delay removed."""

    t: np.ndarray
    p: np.ndarray
    method: str
    interval_s: float
    lo: np.ndarray  # spans (average and counter methods): [lo, hi] with power pw; empty for instant
    hi: np.ndarray
    pw: np.ndarray
    resolution_w: float = 0.0
    energy_resolution_j: float = 0.0
    sigma_delay_s: float = 0.0
    sigma_offset_s: float = 0.0
    sigma_stamp_s: float = 0.0  # a network meter's time stamps: half its requests' typical duration


def segment_breaks(
    t: np.ndarray,
    fault_t: np.ndarray,
    epoch: np.ndarray | None = None,
    repeated: list[tuple[float, float]] | tuple = (),
) -> np.ndarray:
    """True at each reading that starts a new stretch: the first reading, a reading of another opening
    of the meter than the previous one (`epoch`, format 1.6: each reading's opening), or, in a file
    without epochs, a fault since the previous reading. A repeated fault stored as one record spans
    (first, last) with reopenings anywhere inside: without epochs every reading in that span starts
    a stretch of its own, so no counter or averaging span joins two openings."""
    brk = np.ones(len(t), dtype=bool)
    if len(t) < 2:
        return brk
    brk[1:] = False
    if epoch is not None and len(epoch) == len(t):
        ep = np.asarray(epoch, dtype=float)
        brk[1:] |= ep[1:] != ep[:-1]  # NaN (a reading of no known opening) breaks too
        return brk
    ft = np.sort(np.asarray(fault_t, dtype=float))
    ft = ft[np.isfinite(ft)]
    if len(ft):
        # a fault between readings i-1 and i: the count of faults up to t changes
        k = np.searchsorted(ft, t, side="right")
        brk[1:] |= k[1:] > k[:-1]
    for first, last in repeated:
        if np.isfinite(first) and np.isfinite(last):
            inside = (t >= first) & (t <= last)
            brk |= inside
            after = np.searchsorted(t, last, side="right")
            if after < len(t):
                brk[after] = True
    return brk


def counter_spans(t: np.ndarray, e: np.ndarray, breaks: np.ndarray) -> tuple[np.ndarray, ...]:
    """(lo, hi, power) between consecutive counter readings of one stretch. The counter restarts
    at 0 when the meter is opened again: a drop, a non-finite value or a fault starts a new
    stretch (the energy before a stretch's first reading is unknown, so no span ends there).

    A counter is known where it changes: a reading that repeats the previous value is left out
    (the first reading of a value is kept). A device that refreshes its counter less often than
    it is read (a BMC's EnergykWh every 0.25 s read every 0.23 s) repeats stale values; spans
    ending at a stale repeat would put all of the energy in the next span and read 0 W in windows
    between them. Without repeats each span runs from one change to the next and its power is the
    mean over it, whether the counter was stale or no quantum was crossed."""
    if len(t) < 2:
        z = np.zeros(0)
        return z, z, z
    keep = np.ones(len(t), dtype=bool)
    keep[1:] = breaks[1:] | (e[1:] != e[:-1]) | ~np.isfinite(e[1:])
    idx = np.flatnonzero(keep)
    crossed = np.cumsum(breaks)[idx]  # a fault between two kept readings breaks the span
    t, e = t[idx], e[idx]
    de = np.diff(e)
    dt = np.diff(t)
    ok = (crossed[1:] == crossed[:-1]) & np.isfinite(de) & (de >= 0) & (dt > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        pw = de / dt
    return t[:-1][ok], t[1:][ok], pw[ok]


def average_spans(
    t: np.ndarray, p: np.ndarray, averaging: str, averaging_s: float, interval_s: float, breaks: np.ndarray
) -> tuple[np.ndarray, ...]:
    """(lo, hi, power) of readings that average the span before their stamp: since the previous
    reading ('previous'; a stretch's first reading is taken to cover one sample interval) or over
    a fixed span ('fixed')."""
    if not len(t):
        z = np.zeros(0)
        return z, z, z
    if averaging == "fixed":
        lo = t - averaging_s
    else:
        lo = np.empty(len(t))
        lo[0] = t[0] - interval_s
        lo[1:] = np.where(breaks[1:], t[1:] - interval_s, t[:-1])
        lo = np.maximum(lo, np.concatenate(([-np.inf], t[:-1])))  # spans never overlap
    return lo, t.copy(), p.copy()


def _integral(lo, hi, c_full, c_pw, c_pwlo, c_len, c_lo, t):
    """(integral of the spans' power up to t, time they cover up to t), for every t."""
    j1 = np.searchsorted(hi, t, side="right")  # spans wholly before t
    j2 = np.searchsorted(lo, t, side="right")  # spans begun by t
    j2 = np.maximum(j1, j2)
    energy = c_full[j1] + t * (c_pw[j2] - c_pw[j1]) - (c_pwlo[j2] - c_pwlo[j1])
    covered = c_len[j1] + t * (j2 - j1) - (c_lo[j2] - c_lo[j1])
    return energy, covered


def span_means(
    lo: np.ndarray, hi: np.ndarray, pw: np.ndarray, starts: np.ndarray, ends: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Per window [start, end]: the spans' power weighted by their overlap with it, and the seconds
    of the window they cover. Prefix sums: O((spans + windows) log spans)."""
    starts = np.asarray(starts, dtype=float)
    ends = np.asarray(ends, dtype=float)
    if not len(lo):
        return np.full(len(starts), np.nan), np.zeros(len(starts))
    ref = float(lo[0])  # times relative to the first span keep the prefix sums precise
    lo, hi = lo - ref, hi - ref
    length = hi - lo

    def cum(x):
        return np.concatenate(([0.0], np.cumsum(x)))

    sums = (cum(pw * length), cum(pw), cum(pw * lo), cum(length), cum(lo))
    valid = np.isfinite(starts) & np.isfinite(ends) & (ends >= starts)
    s = np.where(valid, starts - ref, 0.0)
    e = np.where(valid, ends - ref, 0.0)
    e_s, k_s = _integral(lo, hi, *sums, s)
    e_e, k_e = _integral(lo, hi, *sums, e)
    covered = np.where(valid, k_e - k_s, 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        mean = np.where(covered > 1e-12 * np.maximum(np.abs(e - s), 1e-9), (e_e - e_s) / covered, np.nan)
    return mean, np.maximum(covered, 0.0)


def distinct(p: np.ndarray) -> np.ndarray:
    """True for each reading that differs from the previous one: a meter polled faster than it
    updates repeats its last value, and a repeat is not a new, independent reading."""
    keep = np.ones(len(p), dtype=bool)
    if len(p) > 1:
        keep[1:] = p[1:] != p[:-1]
    return keep


def _spread(values: np.ndarray, first: np.ndarray, last: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(std with ddof 0, count) of values[first:last] for each pair of indices, by prefix sums."""
    first = np.clip(first, 0, len(values))
    last = np.clip(np.maximum(last, first), 0, len(values))
    if len(first):  # only the part of the series the windows reach
        low, high = int(first.min()), int(last.max())
        values, first, last = values[low:high], first - low, last - low
    ref = float(np.mean(values)) if len(values) else 0.0
    d = values - ref
    c0 = np.arange(len(values) + 1, dtype=float)
    c1 = np.concatenate(([0.0], np.cumsum(d)))
    c2 = np.concatenate(([0.0], np.cumsum(d * d)))
    first = np.clip(first, 0, len(values))
    last = np.clip(np.maximum(last, first), 0, len(values))
    n = c0[last] - c0[first]
    with np.errstate(divide="ignore", invalid="ignore"):
        m1 = (c1[last] - c1[first]) / n
        var = np.where(n > 1, np.maximum((c2[last] - c2[first]) / n - m1 * m1, 0.0), 0.0)
    # rounding left over from a constant series is not spread
    var = np.where(var <= 1e-12 * (ref * ref + 1e-30), 0.0, var)
    return np.sqrt(var), n.astype(np.int64)


def _reading_spread(ch: ChannelReadings, starts: np.ndarray, ends: np.ndarray):
    """(spread of the distinct readings of each window, their count): the readings whose time (or
    span) meets the window; when fewer than two, the spread of the window's neighbourhood (one
    sample interval either side), so a one-sample window does not claim to be exact."""
    s = np.where(np.isfinite(starts), starts, 0.0)
    e = np.where(np.isfinite(ends), ends, 0.0)
    if ch.method == METHOD_INSTANT:
        keep = distinct(ch.p)
        v, lo_of, hi_of = ch.p[keep], ch.t[keep], ch.t[keep]
        # the samples window_stats takes (those inside, or the nearest ones for a short window)
        inside = timeline.window_stats(hi_of, v, starts, ends, ch.interval_s)
        spread, count = np.where(np.isfinite(inside.sigma), inside.sigma, 0.0), inside.count
    else:
        keep = distinct(ch.pw)
        v, lo_of, hi_of = ch.pw[keep], ch.lo[keep], ch.hi[keep]
        # the spans that meet the window: hi > start and lo < end
        first = np.searchsorted(hi_of, s, side="right")
        last = np.searchsorted(lo_of, e, side="left")
        spread, count = _spread(v, first, last)
    lonely = count < 2
    if lonely.any():  # the neighbourhood of the windows with fewer than two distinct readings
        wide_first = np.searchsorted(hi_of, s[lonely] - ch.interval_s, side="left")
        wide_last = np.searchsorted(lo_of, e[lonely] + ch.interval_s, side="right")
        spread = spread.copy()
        spread[lonely] = _spread(v, wide_first, wide_last)[0]
    return spread, count


def window_means(ch: ChannelReadings, starts: np.ndarray, ends: np.ndarray) -> WindowStats:
    """Mean power per window with its flag and count (sigma left for window_power to fill)."""
    starts = np.asarray(starts, dtype=float)
    ends = np.asarray(ends, dtype=float)
    nearest = timeline.window_stats(ch.t, ch.p, starts, ends, ch.interval_s)
    if ch.method == METHOD_INSTANT:
        return nearest
    mean, covered = span_means(ch.lo, ch.hi, ch.pw, starts, ends)
    length = ends - starts
    flag = np.full(len(starts), FLAG_OK, dtype=np.int8)
    with np.errstate(invalid="ignore"):
        flag[length < ch.interval_s] = FLAG_SHORT
        flag[(flag == FLAG_OK) & (covered < MIN_COVERAGE * length)] = FLAG_GAP
    # a window no span reaches (a gap between stretches): the nearest readings, as for instant ones
    none = ~np.isfinite(mean)
    mean = np.where(none, nearest.mean, mean)
    flag = np.where(none, np.maximum(nearest.flag, FLAG_GAP), flag).astype(np.int8)
    flag[~np.isfinite(mean)] = FLAG_NONE
    return WindowStats(mean, np.zeros(len(starts)), nearest.count, flag)


def _means_and_shift_terms(ch: ChannelReadings, starts: np.ndarray, ends: np.ndarray):
    """The windows' WindowStats and, for the delay's, the clock offset's and the time stamps' sigma,
    half the change of each window's mean when it moves by -sigma and +sigma (one pass over the
    readings), added in quadrature."""
    n = len(starts)
    sigmas = [s for s in (ch.sigma_delay_s, ch.sigma_offset_s, ch.sigma_stamp_s) if s > 0]
    shifts = [0.0] + [k for s in sigmas for k in (s, -s)]
    stats = window_means(
        ch, np.concatenate([starts + k for k in shifts]), np.concatenate([ends + k for k in shifts])
    )
    own = WindowStats(stats.mean[:n], stats.sigma[:n], stats.count[:n], stats.flag[:n])
    squared = np.zeros(n)
    for k in range(1, len(sigmas) + 1):
        up, down = stats.mean[(2 * k - 1) * n : 2 * k * n], stats.mean[2 * k * n : (2 * k + 1) * n]
        term = 0.5 * np.abs(up - down)
        squared += np.where(np.isfinite(term), term, 0.0) ** 2
    return own, np.sqrt(squared)


def window_power(ch: ChannelReadings, starts: np.ndarray, ends: np.ndarray) -> WindowStats:
    """Mean power of each window and sigma_p (docs/analysis.md, "Uncertainty of the power"):
    sigma_p² = max(spread, resolution/sqrt 12)² + delay term² + clock-offset term² + time-stamp term²
    (a network meter's request: half its duration) (+ for a counter:
    its resolution at both edges, and no spread: the counter integrates every reading's power)."""
    starts = np.asarray(starts, dtype=float)
    ends = np.asarray(ends, dtype=float)
    stats, shifted = _means_and_shift_terms(ch, starts, ends)
    spread, count = _reading_spread(ch, starts, ends)
    floor = ch.resolution_w / SQRT12
    if ch.method == METHOD_COUNTER:
        length = np.maximum(ends - starts, 1e-12)
        own = math.sqrt(2.0) * (ch.energy_resolution_j / SQRT12) / length
        # a window the counter's spans do not reach took the nearest readings: their spread counts
        own = np.where(stats.flag >= FLAG_GAP, np.maximum(spread, floor), own)
    else:
        own = np.maximum(spread, floor)
    sigma = np.sqrt(own**2 + shifted**2)
    sigma = np.where(np.isfinite(stats.mean), sigma, np.nan)
    count = np.where(stats.flag == FLAG_NONE, 0, count)
    return WindowStats(stats.mean, sigma, count.astype(np.int64), stats.flag)


def empty_stats(n: int) -> WindowStats:
    """n windows without power (NaN, no samples, flagged none)."""
    return WindowStats(
        np.full(n, np.nan), np.full(n, np.nan), np.zeros(n, dtype=np.int64), np.full(n, FLAG_NONE, np.int8)
    )


def take(stats: WindowStats, k: slice) -> WindowStats:
    """The windows k of stats."""
    return WindowStats(stats.mean[k], stats.sigma[k], stats.count[k], stats.flag[k])


def sum_channels(parts: list[WindowStats]) -> WindowStats:
    """A node's windows from its channels': powers summed, sigmas in quadrature, the fewest samples
    and the most serious flag."""
    if len(parts) == 1:
        return parts[0]
    return WindowStats(
        np.sum([s.mean for s in parts], axis=0),
        np.sqrt(np.sum([s.sigma**2 for s in parts], axis=0)),
        np.min([s.count for s in parts], axis=0),
        np.max([s.flag for s in parts], axis=0).astype(np.int8),
    )


def merged_instant(readings: list[ChannelReadings], t: np.ndarray, p: np.ndarray) -> ChannelReadings:
    """Instantaneous channels of one node summed on the densest channel's times (as one channel:
    its samples' mean and spread per window, the coarsest interval, resolutions in quadrature)."""
    z = np.zeros(0)
    return ChannelReadings(
        t=t,
        p=p,
        method=METHOD_INSTANT,
        interval_s=max(r.interval_s for r in readings),
        lo=z,
        hi=z,
        pw=z,
        resolution_w=math.sqrt(sum(r.resolution_w**2 for r in readings)),
        sigma_delay_s=max(r.sigma_delay_s for r in readings),
        sigma_offset_s=max(r.sigma_offset_s for r in readings),
        sigma_stamp_s=max(r.sigma_stamp_s for r in readings),
    )


def resample_sum(series: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """Sum several (t, y) series on one time line: the densest series' times inside the span all cover.

    Each series is linearly interpolated onto those times. Empty if the spans do not overlap.
    """
    series = [(t, y) for t, y in series if len(t)]
    if not series:
        return np.zeros(0), np.zeros(0)
    if len(series) == 1:
        return series[0]
    first = max(t[0] for t, _ in series)
    last = min(t[-1] for t, _ in series)
    grid_t = max(series, key=lambda ty: len(ty[0]))[0]
    lo = np.searchsorted(grid_t, first, side="left")
    hi = np.searchsorted(grid_t, last, side="right")
    grid = grid_t[lo:hi]
    total = np.zeros(len(grid))
    for t, y in series:
        total += np.interp(grid, t, y)
    return grid, total


def decimate(t: np.ndarray, y: np.ndarray, max_points: int) -> tuple[np.ndarray, ...]:
    """At most max_points bins: (mean t, mean y, min y, max y) per bin, for plotting long series."""
    n = len(t)
    if n <= max_points:
        return t, y, y, y
    edges = np.linspace(0, n, max_points + 1).astype(np.int64)[:-1]
    counts = np.diff(np.append(edges, n))
    tm = np.add.reduceat(t, edges) / counts
    ym = np.add.reduceat(y, edges) / counts
    return tm, ym, np.minimum.reduceat(y, edges), np.maximum.reduceat(y, edges)
