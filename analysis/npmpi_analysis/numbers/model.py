"""A run in a few numbers: Hockney's model per regime, t(m) = alpha + 8m/beta, and the energy of one
message E(m) = e0 + eb 8m, total and dynamic, each with a 95 % bootstrap interval (docs/analysis.md,
"Models").

The time of one message per size is the mean of its trials' trial / (D i) (D the run's one-way
divisor); the bits per message are those the run's bandwidth counts (8 m F / D: a ping-pong's 8 m),
so beta is the table's bandwidth where it levels off. The regimes come from segmented least squares
(numbers/segmented.py) weighted by each size's spread, or from the user's breaks. The energy of one
message is the job's power over the size's window times that time, fitted in the same regimes on
the sizes whose power is not flagged, against the bits the energy per bit divides by (a collective:
every rank's). The intervals are percentiles of B resamples: each size's trials drawn with
replacement, each size's power drawn from its window mean's uncertainty, the idle power once per
resample (every size shares it); the breaks stay those of the data.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from npmpi_analysis.numbers import segmented
from npmpi_analysis.numbers.compute import BITS_PER_BYTE, run_mode_factors

DEFAULT_RESAMPLES = 1000
DEFAULT_SEED = 20090  # any fixed seed: the same file gives the same intervals
MIN_POINTS = 4  # sizes a regime found in the data holds at least (two left over for the residuals)
MIN_POINTS_FIXED = 3  # with the user's breaks
MAX_REGIMES = 4  # eager, rendezvous, cache to memory and one more at most
REL_FLOOR = 1e-3  # a size's weight: its time's sigma, at least 0.1 % of its time
CHUNK = 250  # resamples drawn at a time (memory: chunk x sizes x trials)
CHUNK_ELEMENTS = 2_000_000  # at most this many drawn trials at a time (16 MB a float array)
LEVEL = 95.0


@dataclass
class Param:
    """A fitted figure and its 95 % interval (NaN where undefined: a flat regime's beta is infinite)."""

    value: float
    lo: float
    hi: float

    def contains(self, x: float) -> bool:
        return self.lo <= x <= self.hi


@dataclass
class EnergyFit:
    """E(m) = e0 + eb x in one regime: J per message and J per bit, its fit quality, its points."""

    per_message_j: Param
    per_bit_j: Param
    r2: float
    max_residual: float
    sizes: int  # points fitted (unflagged sizes with power)
    per_bit_boot: np.ndarray | None = field(default=None, repr=False)  # the resamples' J per bit


@dataclass
class Regime:
    """One regime: sizes lo..hi, alpha and beta, and its energy models (None without power)."""

    size_lo_bytes: int
    size_hi_bytes: int
    sizes: int
    alpha_s: Param
    beta_bit_s: Param
    r2: float
    max_residual: float  # largest |measured - fitted| / measured
    energy: EnergyFit | None = None
    dynamic: EnergyFit | None = None
    alpha_boot: np.ndarray | None = field(default=None, repr=False)  # the resamples' alphas
    slope_boot: np.ndarray | None = field(default=None, repr=False)  # and 1 / beta


@dataclass
class RunModel:
    """The model of one run: its regimes, how they were found, and what was left out."""

    regimes: list[Regime]
    breaks_bytes: list[int]
    breaks_source: str  # "found" (information criterion) or "given" (--model-breaks)
    resamples: int
    seed: int
    fitted_x_bits: np.ndarray  # per size: bits per message of the time model (NaN: left out)
    time_s: np.ndarray  # per size: the fitted mean time per message
    time_sigma_s: np.ndarray  # per size: its sigma as the fit weighs it (size_sigma)
    fit_time_s: np.ndarray  # per size: the model's time
    energy_j: np.ndarray | None = None  # per size: J per message (NaN: no power)
    fit_energy_j: np.ndarray | None = None
    dynamic_j: np.ndarray | None = None
    energy_left_out: list[int] = field(default_factory=list)  # sizes whose power is flagged
    notices: list[str] = field(default_factory=list)
    resolution: object | None = None  # numbers/model_energy.Resolution, with power


class ModelError(ValueError):
    """The model cannot be fitted (too few sizes, breaks that are not the run's sizes)."""


def trial_times_per_message(a) -> tuple[np.ndarray, np.ndarray]:
    """([sizes, trials] each trial's time per message, trial / (D i), the finite ones first; their
    count per size)."""
    divisor = run_mode_factors(a.attrs)[1]
    with np.errstate(divide="ignore", invalid="ignore"):
        per_msg = a.bw.trial_s / (float(divisor) * a.bw.iterations.astype(float)[:, None])
    per_msg = np.where(np.isfinite(per_msg) & (per_msg > 0), per_msg, np.nan)
    return np.sort(per_msg, axis=1), np.isfinite(per_msg).sum(axis=1)


def mean_times(per_msg: np.ndarray, count: np.ndarray) -> np.ndarray:
    """Each size's mean time per message over its finite trials (NaN where none ran)."""
    with np.errstate(invalid="ignore"):
        return np.where(count > 0, np.nansum(per_msg, axis=1) / np.maximum(count, 1), np.nan)


def message_bits(a) -> np.ndarray:
    """Bits per message that the bandwidth counts: 8 m F / D (a ping-pong's 8 m)."""
    factor, divisor = run_mode_factors(a.attrs)
    return BITS_PER_BYTE * a.bw.size_bytes.astype(float) * factor / divisor


def resample_means(
    per_msg: np.ndarray, count: np.ndarray, rng: np.random.Generator, b: int
) -> tuple[np.ndarray, np.ndarray]:
    """([b, sizes] means of each size's trials drawn with replacement, as many as it has; [b, sizes]
    the sigma of each such mean as the fit weighs it, from the drawn trials: size_sigma's)."""
    n, width = per_msg.shape
    # drawn from the trials spread out by sqrt(k / (k - 1)) about their mean: the resamples' means
    # then vary as much as the mean of k trials does (plain draws from k values vary (k - 1) / k
    # as much: 14 % too little in variance at NetPIPE's 7 trials)
    k = np.maximum(count, 1)[:, None].astype(float)
    mean = np.where(np.isfinite(per_msg), per_msg, 0.0).sum(axis=1, keepdims=True) / k
    per_msg = mean + (per_msg - mean) * np.sqrt(np.where(k > 1, k / np.maximum(k - 1, 1), 1.0))
    u = rng.random((b, n, width))
    idx = np.minimum((u * np.maximum(count, 1)[None, :, None]).astype(np.int64), width - 1)
    drawn = np.take_along_axis(np.broadcast_to(per_msg, (b, n, width)), idx, axis=2)
    used = np.arange(width)[None, None, :] < count[None, :, None]
    kk = np.maximum(count, 1)[None, :]
    means = np.where(used, drawn, 0.0).sum(axis=2) / kk
    dev = np.where(used, drawn - means[:, :, None], 0.0)
    var = np.where(kk > 1, (dev * dev).sum(axis=2) / np.maximum(kk - 1, 1), np.nan)
    return means, _shrunk_sigma(var, kk, means)


def size_sigma(per_msg: np.ndarray, count: np.ndarray, mean: np.ndarray) -> np.ndarray:
    """Each size's sigma of its mean time: its trials' variance shrunk halfway to the run's typical
    relative variance (the median over sizes) at its time. Seven trials estimate a variance to
    about +-50 %; unshrunk, a size whose few trials happened to agree would weigh as much as all
    the others and its regime would be split off by chance."""
    with np.errstate(invalid="ignore"):
        var = row_variance(per_msg)
    return _shrunk_sigma(var[None, :], np.maximum(count, 1)[None, :], mean[None, :])[0]


def row_variance(x: np.ndarray) -> np.ndarray:
    """Each row's sample variance (ddof 1) of its finite values; NaN with fewer than two (no
    warning, as numpy's nanvar gives)."""
    finite = np.isfinite(x)
    k = finite.sum(axis=1)
    mean = np.where(finite, x, 0.0).sum(axis=1) / np.maximum(k, 1)
    dev = np.where(finite, x - mean[:, None], 0.0)
    return np.where(k > 1, (dev * dev).sum(axis=1) / np.maximum(k - 1, 1), np.nan)


def row_median(x: np.ndarray) -> np.ndarray:
    """Each row's median of its finite values; NaN where it has none (no warning)."""
    x = np.where(np.isfinite(x), x, np.nan)
    k = np.isfinite(x).sum(axis=1)
    ordered = np.sort(x, axis=1)  # NaN last
    lo = np.take_along_axis(ordered, np.maximum((k - 1) // 2, 0)[:, None], axis=1)[:, 0]
    hi = np.take_along_axis(ordered, np.maximum(k // 2, 0)[:, None].clip(max=max(x.shape[1] - 1, 0)), axis=1)[
        :, 0
    ]
    return np.where(k > 0, 0.5 * (lo + hi), np.nan)


def _shrunk_sigma(var: np.ndarray, count: np.ndarray, mean: np.ndarray) -> np.ndarray:
    """[rows, sizes] size_sigma of each row (a resample) from its variances and means."""
    with np.errstate(invalid="ignore", divide="ignore"):
        rel = var / mean**2
        typical = row_median(rel)[:, None]
    typical = np.where(np.isfinite(typical), typical, 0.0)
    pooled = typical * mean**2
    shrunk = np.where(np.isfinite(var), 0.5 * (var + pooled), pooled)
    return np.sqrt(shrunk / count)


def weights(y: np.ndarray, sigma: np.ndarray) -> np.ndarray:
    s = np.maximum(np.where(np.isfinite(sigma), sigma, 0.0), REL_FLOOR * np.abs(y))
    s = np.where(s > 0, s, 1.0)
    return 1.0 / s**2


def quality(x, y, w, fit) -> tuple[float, float]:
    """(weighted R², largest relative residual) of one segment's line."""
    xs, ys, ws = x[fit.lo : fit.hi], y[fit.lo : fit.hi], w[fit.lo : fit.hi]
    pred = fit.intercept + fit.slope * xs
    mean = (ws * ys).sum() / ws.sum()
    tss = float((ws * (ys - mean) ** 2).sum())
    r2 = 1.0 - fit.rss / tss if tss > 0 else (1.0 if fit.rss <= 1e-30 else math.nan)
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.abs(ys - pred) / np.abs(ys)
    rel = rel[np.isfinite(rel)]
    return float(r2), float(rel.max()) if rel.size else math.nan


def interval(samples: np.ndarray) -> tuple[float, float]:
    ok = samples[np.isfinite(samples)]
    if ok.size < max(10, 0.9 * samples.size):
        return math.nan, math.nan
    lo, hi = np.percentile(ok, [(100 - LEVEL) / 2, 100 - (100 - LEVEL) / 2])
    return float(lo), float(hi)


def _beta(slope: float, slopes: np.ndarray) -> Param:
    """beta = 1 / slope; a slope whose interval reaches 0 or below gives an unbounded beta."""
    lo_s, hi_s = interval(slopes)
    value = 1.0 / slope if slope > 0 else math.inf
    lo = 1.0 / hi_s if hi_s > 0 else math.inf
    hi = 1.0 / lo_s if lo_s > 0 else math.inf
    return Param(value, lo, hi)


def break_indices(size_bytes: np.ndarray, breaks_bytes: list[int], name: str) -> list[int]:
    """The row indices where the user's breaks start a regime; ModelError for a size not measured."""
    where = {int(s): k for k, s in enumerate(size_bytes)}
    out = []
    for b in sorted(set(breaks_bytes)):
        if b not in where:
            near = size_bytes[np.argmin(np.abs(size_bytes.astype(float) - b))] if len(size_bytes) else 0
            raise ModelError(
                f"{name}: --model-breaks {b}: not a message size of this run (the nearest is {int(near)} B)"
            )
        if where[b] > 0:
            out.append(where[b])
    return out


def fit_time(a, breaks_bytes: list[int] | None, resamples: int, seed: int):
    """The time model of the analysed run `a` (numbers/analyse.RunAnalysis) and what its energy
    model reuses: (model, the rows fitted, the regimes' lines, the resampled times [B, rows], the
    generator); ModelError when impossible."""
    name = a.path.rsplit("/", 1)[-1]
    per_msg, count = trial_times_per_message(a)
    mean_t = mean_times(per_msg, count)
    keep = np.isfinite(mean_t)
    given = breaks_bytes is not None
    if keep.sum() < (MIN_POINTS_FIXED if given else MIN_POINTS):
        raise ModelError(
            f"{name}: {int(keep.sum())} size(s) with a time: a model needs {MIN_POINTS} or more (no model)"
        )
    rows = np.flatnonzero(keep)
    x_all = message_bits(a)
    x, y = x_all[rows], mean_t[rows]
    sigma = size_sigma(per_msg[rows], count[rows], y)
    w = weights(y, sigma)
    if given:
        breaks = break_indices(a.bw.size_bytes[rows], breaks_bytes, name)
        if any(hi - lo < MIN_POINTS_FIXED for lo, hi in zip([0, *breaks], [*breaks, len(rows)], strict=True)):
            raise ModelError(
                f"{name}: --model-breaks leave a regime with fewer than {MIN_POINTS_FIXED} sizes (no model)"
            )
        source = "given"
    else:
        breaks = segmented.choose_breaks(x, y, w, MIN_POINTS, MAX_REGIMES)
        source = "found"
    fits = segmented.fit_lines(x, y, w, breaks)
    rng = np.random.default_rng(seed)
    chunk = max(10, min(CHUNK, CHUNK_ELEMENTS // max(per_msg.size, 1)))  # many trials: fewer at a time
    drawn = [
        resample_means(per_msg[rows], count[rows], rng, min(chunk, resamples - k))
        for k in range(0, resamples, chunk)
    ]
    boot_t = np.concatenate([d[0] for d in drawn], axis=0)
    boot_w = weights(boot_t, np.concatenate([d[1] for d in drawn], axis=0))
    regimes = []
    fit_t = np.full(len(mean_t), np.nan)
    for f in fits:
        a0, s0 = segmented.fit_lines_many(x, boot_t, boot_w, f.lo, f.hi)
        r2, worst = quality(x, y, w, f)
        lo, hi = interval(a0)
        regimes.append(
            Regime(
                size_lo_bytes=int(a.bw.size_bytes[rows[f.lo]]),
                size_hi_bytes=int(a.bw.size_bytes[rows[f.hi - 1]]),
                sizes=f.hi - f.lo,
                alpha_s=Param(f.intercept, lo, hi),
                beta_bit_s=_beta(f.slope, s0),
                r2=r2,
                max_residual=worst,
                alpha_boot=a0,
                slope_boot=s0,
            )
        )
        fit_t[rows[f.lo : f.hi]] = f.intercept + f.slope * x[f.lo : f.hi]
    model = RunModel(
        regimes=regimes,
        breaks_bytes=[int(a.bw.size_bytes[rows[k]]) for k in breaks],
        breaks_source=source,
        resamples=resamples,
        seed=seed,
        fitted_x_bits=np.where(keep, x_all, np.nan),
        time_s=mean_t,
        time_sigma_s=_spread_rows(sigma, rows, len(mean_t)),
        fit_time_s=fit_t,
    )
    return model, rows, fits, boot_t, rng


def _spread_rows(values: np.ndarray, rows: np.ndarray, n: int) -> np.ndarray:
    out = np.full(n, np.nan)
    out[rows] = values
    return out
