"""Meter-delay calibration: the shift that best lines up a power trace with a known load schedule.

The load follows a pseudo-random on/off sequence whose bursts have random lengths, so its edges fall
at every phase of the meter's sample clock (a square wave would alias with it) and no periodic
noise can mimic it. For each candidate delay d the load that was running d seconds before each
sample is correlated with the sample's power; the best d is refined below the grid step by a
parabola through the peak. The uncertainty comes from a jackknife over contiguous segments of the
run, and the correlation at the peak is the quality: when the load does not show in the power,
no delay is reported, and the reason says so.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

DEFAULT_DURATION_S = 60.0
DEFAULT_BURST_MIN_S = 1.5
DEFAULT_BURST_MAX_S = 4.0
DEFAULT_MAX_DELAY_S = 5.0
GRID_STEP_S = 0.01
MIN_QUALITY = 0.5  # correlation at the peak below this: the load is not visible in the power
JACKKNIFE_SEGMENTS = 8


@dataclass(frozen=True)
class LoadSchedule:
    """On/off load: level[k] holds from edge[k] to edge[k+1] (seconds from the schedule's start)."""

    edges_s: np.ndarray  # len n+1, starts at 0
    levels: np.ndarray  # len n, 0 or 1

    @property
    def duration_s(self) -> float:
        return float(self.edges_s[-1])

    def level_at(self, t_s: np.ndarray) -> np.ndarray:
        """Load level at times t (seconds from the start); 0 outside the schedule."""
        k = np.searchsorted(self.edges_s, t_s, side="right") - 1
        inside = (k >= 0) & (k < len(self.levels))
        out = np.zeros(np.shape(t_s))
        out[inside] = self.levels[k[inside]]
        return out


def make_schedule(duration_s: float, burst_min_s: float, burst_max_s: float, seed: int) -> LoadSchedule:
    """Alternating idle/load bursts of random length, starting and ending idle."""
    rng = np.random.default_rng(seed)
    edges, levels = [0.0], []
    t, level = 0.0, 0
    while t < duration_s:
        t = min(t + rng.uniform(burst_min_s, burst_max_s), duration_s)
        edges.append(t)
        levels.append(level)
        level = 1 - level
    if levels[-1] == 1:  # end idle so the last edge is seen settling
        edges.append(duration_s + burst_max_s)
        levels.append(0)
    return LoadSchedule(np.array(edges), np.array(levels, dtype=float))


@dataclass(frozen=True)
class DelayEstimate:
    """A meter's reporting delay, or why none could be measured (delay_s is None then)."""

    delay_s: float | None
    uncertainty_s: float | None
    quality: float
    samples: int
    reason: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


def _correlations(t: np.ndarray, w: np.ndarray, schedule: LoadSchedule, delays: np.ndarray) -> np.ndarray:
    """Pearson correlation between power and the load d seconds earlier, for every d."""
    out = np.full(len(delays), np.nan)
    wc = w - w.mean()
    wn = np.sqrt(np.sum(wc * wc))
    if wn == 0:
        return out
    for i, d in enumerate(delays):
        x = schedule.level_at(t - d)
        xc = x - x.mean()
        xn = np.sqrt(np.sum(xc * xc))
        if xn > 0:
            out[i] = float(np.sum(xc * wc) / (xn * wn))
    return out


def _peak(t, w, schedule, delays) -> tuple[float, float, float]:
    """(best delay, correlation there, width of the plateau of equal best correlation)."""
    c = _correlations(t, w, schedule, delays)
    if np.all(np.isnan(c)):
        return math.nan, math.nan, math.nan
    k = int(np.nanargmax(c))
    best_c = c[k]
    # the load is a step function, so the correlation is flat while no edge crosses a sample: take
    # the middle of the flat top, not its first point
    lo, hi = k, k
    while lo > 0 and c[lo - 1] >= best_c - 1e-12:
        lo -= 1
    while hi < len(c) - 1 and c[hi + 1] >= best_c - 1e-12:
        hi += 1
    step = delays[1] - delays[0]
    if hi > lo:
        return float(0.5 * (delays[lo] + delays[hi])), float(best_c), float((hi - lo) * step)
    best = float(delays[k])
    if 0 < k < len(delays) - 1 and np.all(np.isfinite(c[k - 1 : k + 2])):
        y0, y1, y2 = c[k - 1], c[k], c[k + 1]
        denom = y0 - 2 * y1 + y2
        if denom < 0:  # a true maximum: refine between grid points
            best += 0.5 * (y0 - y2) / denom * step
    return best, float(best_c), 0.0


def estimate_delay(
    sample_t_s: np.ndarray,
    sample_w: np.ndarray,
    schedule: LoadSchedule,
    max_delay_s: float = DEFAULT_MAX_DELAY_S,
    step_s: float = GRID_STEP_S,
) -> DelayEstimate:
    """Delay of a meter from samples (seconds from the schedule's start, watts) taken under `schedule`."""
    ok = np.isfinite(sample_t_s) & np.isfinite(sample_w)
    t, w = np.asarray(sample_t_s)[ok], np.asarray(sample_w)[ok]
    n = len(t)
    if n < 10:
        return DelayEstimate(None, None, 0.0, n, f"only {n} samples: run longer or sample faster")
    delays = np.arange(0.0, max_delay_s + step_s / 2, step_s)
    best, quality, width = _peak(t, w, schedule, delays)
    if not math.isfinite(best) or quality < MIN_QUALITY:
        q = 0.0 if not math.isfinite(quality) else quality
        return DelayEstimate(
            None,
            None,
            q,
            n,
            f"the load is not visible in the power (best correlation {q:.2f} < {MIN_QUALITY}): the meter "
            "does not respond to this node's load, the load is too small next to the noise, or the delay "
            f"exceeds --max-delay {max_delay_s:g} s",
        )
    # jackknife: drop one contiguous segment at a time
    bounds = np.linspace(t[0], t[-1] + 1e-9, JACKKNIFE_SEGMENTS + 1)
    seg = np.searchsorted(bounds, t, side="right") - 1
    estimates = []
    for k in range(JACKKNIFE_SEGMENTS):
        keep = seg != k
        if keep.sum() >= 10:
            d, _, _ = _peak(t[keep], w[keep], schedule, delays)
            if math.isfinite(d):
                estimates.append(d)
    m = len(estimates)
    if m >= 2:
        est = np.array(estimates)
        spread = math.sqrt((m - 1) / m * float(np.sum((est - est.mean()) ** 2)))
    else:
        spread = math.nan
    # the flat top of the correlation is as good as its middle (a uniform spread: width/sqrt(12)); never
    # claim better than the grid step
    flat = width / math.sqrt(12)
    uncertainty = max(math.hypot(spread if math.isfinite(spread) else width / 2, flat), step_s)
    if best >= max_delay_s - step_s:
        return DelayEstimate(
            None,
            None,
            quality,
            n,
            f"the best shift lies at the search limit ({max_delay_s:g} s): raise --max-delay",
        )
    return DelayEstimate(best, uncertainty, quality, n)
