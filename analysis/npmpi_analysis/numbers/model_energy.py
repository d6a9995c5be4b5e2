"""The energy half of a run's model (numbers/model.py) and what the meter can resolve.

The energy of one message at a size is the job's power over the size's window times the mean time
of one message; it is fitted as E(m) = e0 + eb x in the time model's regimes, x the bits the energy
per bit divides by, on the sizes whose power is not flagged. The dynamic energy takes the power
above the idle baselines. Resolution: a size's power is the mean of n distinct readings of spread
s (its sigma_p), so its uncertainty is s / sqrt(n); the smallest dynamic power the run can tell
from zero at a size is twice that combined with the idle mean's, and the smallest dynamic energy
per message that power times the time of one message. A window D seconds long holds about D / tau
readings (tau: the meter's sample period or refresh, the longer), so resolving a dynamic power P
takes D >= s_idle² tau / ((P/2)² - u_idle²), s_idle the readings' spread at idle, u_idle the idle
mean's uncertainty.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from npmpi_analysis.numbers import segmented
from npmpi_analysis.numbers.compute import FLAG_OK
from npmpi_analysis.numbers.kinds import ranks_moving
from npmpi_analysis.numbers.model import (
    DEFAULT_RESAMPLES,
    DEFAULT_SEED,
    EnergyFit,
    Param,
    RunModel,
    fit_time,
    interval,
    mean_times,
    message_bits,
    quality,
    trial_times_per_message,
    weights,
)

RESOLUTION_SIGMAS = 2.0  # a dynamic power is told from zero beyond two of its sigmas
MIN_ENERGY_POINTS = 2


@dataclass
class Resolution:
    """What the meter resolves in this run, per size and overall."""

    power_w: np.ndarray  # per size: the smallest dynamic power told from zero
    per_message_j: np.ndarray  # per size: that power x the time of one message
    per_bit_j: np.ndarray  # per size: that power / the bits per second the energy divides by
    reading_sigma_w: float  # the job's readings' spread at idle (every node's, in quadrature)
    idle_mean_sigma_w: float  # the idle power's own uncertainty
    period_s: float  # the slowest meter's sample period or refresh
    trials: int  # trials per size (the median)

    def window_for(self, power_w: float) -> float:
        """Seconds of window per size to tell `power_w` of dynamic power from zero (inf: never,
        the idle baselines' own uncertainty is larger; 0: any window)."""
        half = power_w / RESOLUTION_SIGMAS
        room = half * half - self.idle_mean_sigma_w**2
        if room <= 0:
            return math.inf
        return self.reading_sigma_w**2 * self.period_s / room


def energy_bits(a) -> np.ndarray:
    """Bits per message that energy per bit divides by: every rank's for a collective."""
    return message_bits(a) * ranks_moving(a.attrs)


def _readings(a) -> np.ndarray:
    """Per size: the fewest distinct readings any node had in its window (at least 1)."""
    counts = [np.asarray(n.sizes.count, dtype=float) for n in a.power.nodes]
    if not counts:
        return np.ones(a.sizes)
    return np.maximum(np.min(np.vstack(counts), axis=0), 1.0)


def power_mean_sigma(a) -> np.ndarray:
    """Per size the uncertainty of the job's window power as a mean: sigma_p over the square root of
    the fewest distinct readings a node had (0 where unknown)."""
    u = np.asarray(a.power.job_sigma_w, dtype=float) / np.sqrt(_readings(a))
    return np.where(np.isfinite(u), u, 0.0)


def _idle_mean_sigma(a) -> tuple[float, float]:
    """(the job's idle readings' spread, the idle mean's uncertainty) over every node."""
    spread2 = mean2 = 0.0
    for n in a.power.nodes:
        s = float(n.idle.sigma[0]) if len(n.idle.sigma) else math.nan
        c = float(n.idle.count[0]) if len(n.idle.count) else 0.0
        if math.isfinite(s):
            spread2 += s * s
            mean2 += s * s / max(c, 1.0)
    if not math.isfinite(a.power.idle_w):
        return math.sqrt(spread2), math.nan
    return math.sqrt(spread2), math.sqrt(mean2)


def _period(a) -> float:
    periods = [
        max(float(c.sample_interval_s or 0.0), float(c.refresh[0] or 0.0))
        for n in a.power.nodes
        for c in n.channels
    ]
    periods = [p for p in periods if math.isfinite(p) and p > 0]
    return max(periods) if periods else math.nan


def resolution(a, time_s: np.ndarray) -> Resolution:
    """What the run's meters resolve, from its power figures and each size's time per message."""
    pw = a.power
    own = np.where(np.isfinite(pw.job_sigma_w), pw.job_sigma_w, np.nan) / np.sqrt(_readings(a))
    spread, idle_u = _idle_mean_sigma(a)
    power = RESOLUTION_SIGMAS * np.sqrt(own**2 + (idle_u if math.isfinite(idle_u) else 0.0) ** 2)
    with np.errstate(divide="ignore", invalid="ignore"):
        per_bit = power * time_s / energy_bits(a)
    trials = int(np.median(a.bw.trials_run)) if a.sizes else 0
    return Resolution(power, power * time_s, per_bit, spread, idle_u, _period(a), trials)


def run_resolution(a) -> Resolution | None:
    """What the run's meters resolve per size (None without power or an idle baseline)."""
    if a.power is None or not math.isfinite(a.power.idle_w):
        return None
    return resolution(a, mean_times(*trial_times_per_message(a)))


def below_resolution(a, k: int) -> bool:
    """Whether size k's dynamic power lies below what the run resolves there."""
    res = getattr(a, "resolution", None)
    if res is None or a.dynamic_w is None:
        return False
    dyn, floor = float(a.dynamic_w[k]), float(res.power_w[k])
    return math.isfinite(dyn) and math.isfinite(floor) and abs(dyn) < floor


def fit_model(
    a, breaks_bytes: list[int] | None = None, resamples: int = DEFAULT_RESAMPLES, seed: int = DEFAULT_SEED
) -> RunModel:
    """The model of the analysed run `a`: time, and energy where it has power; ModelError when
    impossible (numbers/model.py)."""
    model, rows, fits, boot_t, rng = fit_time(a, breaks_bytes, resamples, seed)
    if a.power is not None:
        fit_energy(a, model, rows, fits, boot_t, rng, a.path.rsplit("/", 1)[-1])
    return model


def fit_energy(a, model, rows: np.ndarray, fits, boot_t: np.ndarray, rng: np.random.Generator, name: str):
    """Fill `model`'s energy fields and each regime's energy and dynamic fits."""
    pw = a.power
    t = model.time_s
    x_all = energy_bits(a)
    p = np.asarray(pw.job_w, dtype=float)
    u = power_mean_sigma(a)
    flagged = np.asarray(pw.job_flag) != FLAG_OK
    good = np.isfinite(p) & np.isfinite(t) & ~flagged
    model.energy_left_out = [int(a.bw.size_bytes[k]) for k in np.flatnonzero(flagged & np.isfinite(t))]
    if model.energy_left_out:
        model.notices.append(
            f"{name}: the energy model leaves out {len(model.energy_left_out)} size(s) whose power is "
            f"flagged (first: {model.energy_left_out[0]} B)"
        )
    model.energy_j = p * t
    idle = pw.idle_w if math.isfinite(pw.idle_w) else math.nan
    _spread, idle_u = _idle_mean_sigma(a)
    model.dynamic_j = (p - idle) * t if math.isfinite(idle) else None
    model.resolution = resolution(a, t)
    # resamples: [B, len(rows)] times; each size's power and the one idle power drawn per resample
    b = boot_t.shape[0]
    p_rows, u_rows = p[rows], u[rows]
    draw_p = p_rows[None, :] + rng.standard_normal((b, len(rows))) * u_rows[None, :]
    boot_e = draw_p * boot_t
    boot_d = None
    if model.dynamic_j is not None:
        draw_i = idle + rng.standard_normal((b, 1)) * (idle_u if math.isfinite(idle_u) else 0.0)
        boot_d = (draw_p - draw_i) * boot_t
    fit_e = np.full(len(t), np.nan)
    for regime, f in zip(model.regimes, fits, strict=True):
        pick = np.arange(f.lo, f.hi)[good[rows[f.lo : f.hi]]]  # positions within rows
        if len(pick) < MIN_ENERGY_POINTS:
            model.notices.append(
                f"{name}: {regime.size_lo_bytes}-{regime.size_hi_bytes} B: {len(pick)} size(s) with "
                "unflagged power: no energy model for this regime"
            )
            continue
        idx = rows[pick]
        x = x_all[idx]
        e = model.energy_j[idx]
        sigma_e = np.sqrt((t[idx] * u[idx]) ** 2 + (p[idx] * model.time_sigma_s[idx]) ** 2)
        regime.energy, line = _fit(x, e, weights(e, sigma_e), boot_e[:, pick])
        fit_e[idx] = line
        if boot_d is not None:
            d = model.dynamic_j[idx]
            regime.dynamic, _ = _fit(x, d, weights(np.abs(e), sigma_e), boot_d[:, pick])
    model.fit_energy_j = fit_e


def _fit(x: np.ndarray, y: np.ndarray, w: np.ndarray, boot: np.ndarray) -> tuple[EnergyFit, np.ndarray]:
    """One regime's line E = e0 + eb x with its bootstrap intervals, and the fitted values."""
    (line,) = segmented.fit_lines(x, y, w, [])
    a0, s0 = segmented.fit_lines_many(x, boot, w, 0, len(x))
    r2, worst = quality(x, y, w, line)
    lo0, hi0 = interval(a0)
    lo1, hi1 = interval(s0)
    fit = EnergyFit(
        per_message_j=Param(line.intercept, lo0, hi0),
        per_bit_j=Param(line.slope, lo1, hi1),
        r2=r2,
        max_residual=worst,
        sizes=len(x),
        per_bit_boot=s0,
    )
    return fit, line.intercept + line.slope * x
