"""Drift a run's file lets the analysis see (docs/analysis.md, "Models"): within the sizes, each
trial's time against its place in the size's trials (a warm-up, a clock ramping); across the run, each
size's departure from the model against when the size was measured (temperature, a neighbour's
job). Each a least-squares slope with its 95 % interval; a slope whose interval holds 0 is no drift.

With the sizes in ascending order (NetPIPE's) a drift across the run moves with the size, and the
model's regimes absorb part of it: `--order random` measures the sizes in a random order, so what
is left over against time is drift alone.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

Z975 = 1.96
MIN_POINTS = 6


def slope_interval(x: np.ndarray, y: np.ndarray) -> tuple[float, float, float, int]:
    """(slope, its 95 % half-width, the points' span in x, the points) of y on x by least squares."""
    ok = np.isfinite(x) & np.isfinite(y)
    x, y = x[ok], y[ok]
    n = len(x)
    if n < MIN_POINTS or np.ptp(x) == 0:
        return math.nan, math.nan, math.nan, n
    dx = x - x.mean()
    sxx = float((dx * dx).sum())
    slope = float((dx * (y - y.mean())).sum() / sxx)
    resid = y - y.mean() - slope * dx
    s2 = float((resid**2).sum()) / (n - 2)
    return slope, Z975 * math.sqrt(s2 / sxx), float(np.ptp(x)), n


def _entry(slope: float, half: float, span: float, n: int, per: str, scale: float) -> dict[str, Any]:
    drifts = math.isfinite(slope) and abs(slope) > half
    return {
        f"slope_percent_per_{per}": slope * scale if math.isfinite(slope) else None,
        f"slope_lo_percent_per_{per}": (slope - half) * scale if math.isfinite(half) else None,
        f"slope_hi_percent_per_{per}": (slope + half) * scale if math.isfinite(half) else None,
        "span": span if math.isfinite(span) else None,
        "points": n,
        "drift": drifts,
    }


def drift(a) -> dict[str, Any]:
    """{"within_sizes": the trials' time against their order (percent per trial), "across_run": each
    size's residual from the model against its start (percent per minute)}, each None where the file
    does not let it be seen."""
    out: dict[str, Any] = {"within_sizes": None, "across_run": None}
    trial_s = a.bw.trial_s
    if trial_s is not None and trial_s.ndim == 2 and trial_s.shape[1] >= 3:
        finite = np.isfinite(trial_s)
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = np.where(finite, trial_s, 0.0).sum(axis=1, keepdims=True) / finite.sum(
                axis=1, keepdims=True
            )
            rel = trial_s / mean - 1.0
        order = np.broadcast_to(np.arange(trial_s.shape[1], dtype=float), trial_s.shape)
        out["within_sizes"] = _entry(*slope_interval(order.ravel(), rel.ravel()), "trial", 100.0)
    model = getattr(a, "model", None)
    starts = a.window_start_unix_s[np.isfinite(a.window_start_unix_s)]
    if model is not None and starts.size:
        with np.errstate(invalid="ignore", divide="ignore"):
            resid = model.time_s / model.fit_time_s - 1.0
        minutes = (a.window_start_unix_s - starts.min()) / 60.0
        out["across_run"] = _entry(*slope_interval(minutes, resid), "minute", 100.0)
    return out


def lines(d: dict[str, Any], order: str) -> list[str]:
    """The console's drift lines (none where nothing could be seen)."""
    out = []
    w = d.get("within_sizes")
    if w and w["slope_percent_per_trial"] is not None:
        verdict = "drift" if w["drift"] else "no drift"
        out.append(
            f"  drift within sizes: {verdict} ({w['slope_percent_per_trial']:+.3g} % per trial "
            f"[{w['slope_lo_percent_per_trial']:+.3g}, {w['slope_hi_percent_per_trial']:+.3g}] of the "
            "size's mean, over its trials in order)"
        )
    r = d.get("across_run")
    if r and r["slope_percent_per_minute"] is not None:
        verdict = "drift" if r["drift"] else "no drift"
        caveat = "" if order == "random" else "; sizes in ascending order: the model absorbs part of a drift"
        out.append(
            f"  drift across the run: {verdict} ({r['slope_percent_per_minute']:+.3g} % per minute "
            f"[{r['slope_lo_percent_per_minute']:+.3g}, {r['slope_hi_percent_per_minute']:+.3g}] of the "
            f"sizes' departure from the model, over {r['span']:.3g} minutes{caveat})"
        )
    return out
