"""A cluster map's model per link: t = alpha + 8m/beta and the energy per bit eb (the slope of the
energy of one message against its bits) through each pair's sizes, with 95 % intervals (docs/
analysis.md, "Models").

Each pair's mean one-way time per size and its sigma (the standard deviation of the mean of its
trials, stalled trials left out: map/analyse.py) give a weighted straight line in closed form for
all pairs at once; its coefficients are linear in the means, so their variances follow exactly
from the sizes' sigmas (with two sizes, the line through both points), and the interval is
t(0.975, trials - 1) of them (Student's t: 2.45 at NetPIPE's 7 trials). beta's interval is the
slope's inverted. The energy of one message at a size is the pair's energy per bit times its bits,
its sigma the energy per bit's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from npmpi.runfile.maprows import ROW_BLOCK_CELLS, row_blocks

T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262,
        10: 2.228, 12: 2.179, 15: 2.131, 20: 2.086, 30: 2.042}  # fmt: skip
REL_FLOOR = 1e-3


def t975(df: np.ndarray) -> np.ndarray:
    """Student's t quantile 0.975 for `df` degrees of freedom (the table's next lower entry; 1.96
    beyond 30; NaN below 1)."""
    keys = np.array(sorted(T975))
    values = np.array([T975[k] for k in keys])
    df = np.asarray(df, dtype=float)
    idx = np.searchsorted(keys, np.where(df >= 1, df, 1), side="right") - 1
    out = np.where(df > 30, 1.96, values[np.clip(idx, 0, len(keys) - 1)])
    return np.where(df >= 1, out, np.nan)


@dataclass
class Line:
    """[N, N] per pair: intercept and slope with their 95 % half-widths."""

    intercept: np.ndarray
    intercept_half: np.ndarray
    slope: np.ndarray
    slope_half: np.ndarray


def weighted_lines(x: np.ndarray, y: np.ndarray, sigma: np.ndarray, quantile: np.ndarray) -> Line:
    """Lines y = a + b x through y [S, N, N] at x [S] weighted by 1/sigma² (at least 0.1 % of y),
    the half-widths `quantile` [N, N] times the coefficients' standard deviations."""
    ok = np.isfinite(y) & np.isfinite(sigma)
    s = np.maximum(np.where(ok, sigma, 0.0), REL_FLOOR * np.abs(np.where(ok, y, 0.0)))
    w = np.where(ok & (s > 0), 1.0 / np.where(s > 0, s, 1.0) ** 2, 0.0)
    xs = x[:, None, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        sw = w.sum(axis=0)
        mx = (w * xs).sum(axis=0) / sw
        my = (w * np.where(ok, y, 0.0)).sum(axis=0) / sw
        dx = xs - mx
        sxx = (w * dx * dx).sum(axis=0)
        slope = (w * dx * np.where(ok, y, 0.0)).sum(axis=0) / sxx
        intercept = my - slope * mx
        var_slope = 1.0 / sxx
        var_intercept = 1.0 / sw + mx * mx * var_slope
    two = ok.sum(axis=0) >= 2
    nan = np.full(slope.shape, np.nan)
    return Line(
        np.where(two, intercept, nan),
        np.where(two, quantile * np.sqrt(var_intercept), nan),
        np.where(two, slope, nan),
        np.where(two, quantile * np.sqrt(var_slope), nan),
    )


@dataclass
class LinkModels:
    """[N, N] per link: alpha, beta and the energy per bit with their 95 % intervals."""

    alpha_s: np.ndarray
    alpha_lo_s: np.ndarray
    alpha_hi_s: np.ndarray
    beta_bit_s: np.ndarray
    beta_lo_bit_s: np.ndarray
    beta_hi_bit_s: np.ndarray
    energy_per_bit_j: np.ndarray | None
    energy_per_bit_lo_j: np.ndarray | None
    energy_per_bit_hi_j: np.ndarray | None


def _inverse(slope: np.ndarray, half: np.ndarray) -> tuple[np.ndarray, ...]:
    """(1/slope, its interval) from the slope's: an interval reaching 0 leaves beta unbounded above."""
    with np.errstate(divide="ignore", invalid="ignore"):
        lo_s, hi_s = slope - half, slope + half
        value = np.where(slope > 0, 1.0 / slope, np.inf)
        lo = np.where(hi_s > 0, 1.0 / hi_s, np.inf)
        hi = np.where(lo_s > 0, 1.0 / lo_s, np.inf)
    bad = ~np.isfinite(slope)
    return tuple(np.where(bad, np.nan, v) for v in (value, lo, hi))


MODEL_BLOCK = ROW_BLOCK_CELLS  # the lines are made a block of rows at a time (their temporaries, a dozen
# [S, rows, N] arrays, were 2.2 GB at 4,096 nodes), the same numbers


def link_models(a) -> LinkModels | None:
    """The model of every link of the analysed map `a` (map/analyse.MapAnalysis); None with fewer
    than two sizes."""
    if len(a.size_bytes) < 2:
        return None
    energy = a.energy is not None
    out = LinkModels(*(np.empty(a.mean_bit_s.shape[1:]) for _ in range(6)), *((None,) * 3))
    if energy:
        out.energy_per_bit_j, out.energy_per_bit_lo_j, out.energy_per_bit_hi_j = (
            np.empty(a.mean_bit_s.shape[1:]) for _ in range(3)
        )
    s, n, _ = a.mean_bit_s.shape
    for rows in row_blocks(n, s * n, MODEL_BLOCK):
        _models_of_rows(a, rows, out)
    return out


def _models_of_rows(a, rows: slice, out: LinkModels) -> None:
    """The models of the links in `rows` of the matrices, into `out`."""
    bits = 8.0 * a.size_bytes.astype(float)
    mean_b, sigma_b = a.mean_bit_s[:, rows], a.sigma_bit_s[:, rows]
    with np.errstate(divide="ignore", invalid="ignore"):
        t = bits[:, None, None] / mean_b
        sigma_t = t * sigma_b / mean_b
    kept = a.trials_run[:, rows] - a.trials_stalled[:, rows]
    q = t975(np.min(np.where(kept > 0, kept, 0), axis=0) - 1.0)
    line = weighted_lines(bits, t, sigma_t, q)
    del t, sigma_t
    beta, beta_lo, beta_hi = _inverse(line.slope, line.slope_half)
    out.alpha_s[rows] = line.intercept
    out.alpha_lo_s[rows] = line.intercept - line.intercept_half
    out.alpha_hi_s[rows] = line.intercept + line.intercept_half
    out.beta_bit_s[rows], out.beta_lo_bit_s[rows], out.beta_hi_bit_s[rows] = beta, beta_lo, beta_hi
    if a.energy is not None:
        e = a.energy.energy_pj_bit[:, rows] * 1e-12 * bits[:, None, None]
        se = a.energy.energy_sigma_pj_bit[:, rows] * 1e-12 * bits[:, None, None]
        energy = weighted_lines(bits, e, se, q)
        out.energy_per_bit_j[rows] = energy.slope
        out.energy_per_bit_lo_j[rows] = energy.slope - energy.slope_half
        out.energy_per_bit_hi_j[rows] = energy.slope + energy.slope_half


NAMES = (
    ("model_alpha_s", "alpha_s"),
    ("model_alpha_lo_s", "alpha_lo_s"),
    ("model_alpha_hi_s", "alpha_hi_s"),
    ("model_beta_bit_s", "beta_bit_s"),
    ("model_beta_lo_bit_s", "beta_lo_bit_s"),
    ("model_beta_hi_bit_s", "beta_hi_bit_s"),
    ("model_energy_per_bit_j", "energy_per_bit_j"),
    ("model_energy_per_bit_lo_j", "energy_per_bit_lo_j"),
    ("model_energy_per_bit_hi_j", "energy_per_bit_hi_j"),
)


def pair_columns(lm: LinkModels | None, i: int, j: int) -> dict[str, float]:
    """The map CSV's model columns of link (i, j)."""
    if lm is None:
        return {}
    return {col: float(getattr(lm, attr)[i, j]) for col, attr in NAMES if getattr(lm, attr) is not None}


def matrices(lm: LinkModels | None) -> dict[str, Any]:
    """The map JSON's model matrices."""
    if lm is None:
        return {}
    return {col: getattr(lm, attr) for col, attr in NAMES if getattr(lm, attr) is not None}


def _median(x: np.ndarray) -> float | None:
    x = x[np.isfinite(x)]
    return float(np.median(x)) if x.size else None


def summary(lm: LinkModels | None, upper: np.ndarray) -> dict[str, Any]:
    """The medians over the links of alpha, beta and the energy per bit."""
    if lm is None:
        return {}
    out = {
        "median_model_alpha_s": _median(lm.alpha_s[upper]),
        "median_model_beta_bit_s": _median(lm.beta_bit_s[upper]),
    }
    if lm.energy_per_bit_j is not None:
        out["median_model_energy_per_bit_j"] = _median(lm.energy_per_bit_j[upper])
    return out


def resolution_line(s: dict[str, Any], sizes: list[int]) -> list[str]:
    """The text summary's line of what the meters resolve per pair."""
    res = s.get("resolution") or {}
    watts = res.get("dynamic_power_resolution_w_median") or []
    if not any(w is not None for w in watts):
        return []
    per_bit = res.get("dynamic_resolution_pj_bit_median") or []
    parts = [
        f"{w:.3g} W ({b:.3g} pJ/bit) at {z} B"
        for w, b, z in zip(watts, per_bit, sizes, strict=False)
        if w is not None and b is not None
    ]
    return [
        "  resolution: a pair's dynamic power is told from zero above (median over the pairs) "
        + "; ".join(parts)
    ]


def summary_line(s: dict[str, Any], sizes: int) -> list[str]:
    """The text summary's line of the links' model."""
    if s.get("median_model_alpha_s") is None:
        return []
    beta = s.get("median_model_beta_bit_s")
    text = (
        f"  model per link (t = alpha + bits/beta through its {sizes} sizes; each with a 95 % interval in "
        f"the CSV and JSON): median alpha {s['median_model_alpha_s'] * 1e6:.4g} us, median beta "
        + (f"{beta * 1e-9:.4g} Gbit/s" if beta is not None else "-")
    )
    e = s.get("median_model_energy_per_bit_j")
    if e is not None and math.isfinite(e):
        text += f", median energy per bit {e * 1e12:.4g} pJ/bit"
    return [text]


def _log_sigma(value: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """The sigma of ln(value) from a 95 % interval (half its log width over 1.96); NaN where the
    interval is not positive and finite."""
    with np.errstate(divide="ignore", invalid="ignore"):
        ok = (lo > 0) & np.isfinite(hi) & (value > 0)
        return np.where(
            ok, (np.log(np.where(ok, hi, 1.0)) - np.log(np.where(ok, lo, 1.0))) / (2 * 1.96), np.nan
        )


def link_verdicts(before, after, ia: list[int], ib: list[int]) -> dict[str, dict[str, int]]:
    """Per common link (i < j of `after`'s order), after / before of alpha and beta with a 95 %
    interval (the two maps' intervals combined on a log scale): how many links are the same within
    noise, faster and slower ({} without both models)."""
    m0, m1 = before.model, after.model
    if m0 is None or m1 is None or len(ia) < 2:
        return {}
    pick1, pick0 = np.ix_(ia, ia), np.ix_(ib, ib)
    upper = np.triu(np.ones((len(ia), len(ia)), dtype=bool), 1)
    out = {}
    for name, up_is_slower in (("alpha", True), ("beta", False)):
        fields_ = (
            ("alpha_s", "alpha_lo_s", "alpha_hi_s")
            if name == "alpha"
            else ("beta_bit_s", "beta_lo_bit_s", "beta_hi_bit_s")
        )
        v1, lo1, hi1 = (getattr(m1, f)[pick1] for f in fields_)
        v0, lo0, hi0 = (getattr(m0, f)[pick0] for f in fields_)
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.log(v1 / v0)
            sigma = np.sqrt(_log_sigma(v1, lo1, hi1) ** 2 + _log_sigma(v0, lo0, hi0) ** 2)
        ok = upper & np.isfinite(ratio) & np.isfinite(sigma)
        above, below = ok & (ratio - 1.96 * sigma > 0), ok & (ratio + 1.96 * sigma < 0)
        slower, faster = (above, below) if up_is_slower else (below, above)
        out[name] = {
            "links": int(ok.sum()),
            "same": int((ok & ~above & ~below).sum()),
            "faster": int(faster.sum()),
            "slower": int(slower.sum()),
        }
    return out


def verdict_line(verdicts: dict[str, dict[str, int]]) -> list[str]:
    """The comparison's line of the links' models beyond noise."""
    if not verdicts:
        return []
    parts = [
        f"{name}: {v['slower']} slower, {v['faster']} faster, {v['same']} the same within noise"
        for name, v in verdicts.items()
    ]
    links = max(v["links"] for v in verdicts.values())
    return [
        f"  each link's model, after / before beyond its 95 % interval ({links} links): " + "; ".join(parts)
    ]


def resolution(a) -> dict[str, Any]:
    """What the meters resolve in a map, per size the median over its pairs: the smallest dynamic
    power told from zero, 2 sqrt(u_pair² + u_idle²), u_pair the pair's σ_p over the square root of
    the readings its window holds (its length over the slowest meter's period) and u_idle the idle
    mean's of its two nodes (the median node's, twice); and that power per bit moved ({} without
    power)."""
    e, power = a.energy, getattr(a, "power", None)
    if e is None or power is None:
        return {}
    periods = [
        max(float(c.sample_interval_s or 0.0), float(c.refresh[0] or 0.0))
        for nd in power.nodes
        for c in nd.channels
    ]
    periods = [p for p in periods if math.isfinite(p) and p > 0]
    period = max(periods) if periods else math.nan
    idle_u = [
        float(nd.idle.sigma[0]) / math.sqrt(max(float(nd.idle.count[0]), 1.0))
        for nd in power.nodes
        if len(nd.idle.sigma) and math.isfinite(float(nd.idle.sigma[0]))
    ]
    u_idle2 = 2 * float(np.median(idle_u)) ** 2 if idle_u else 0.0
    with np.errstate(divide="ignore", invalid="ignore"):
        readings = np.maximum(e.window_s / period, 1.0) if math.isfinite(period) else np.ones_like(e.window_s)
        res_w = 2.0 * np.sqrt((e.power_sigma_w / np.sqrt(readings)) ** 2 + u_idle2)
        res_pj_bit = res_w * e.energy_pj_bit / e.power_w
    n = a.nodes
    upper = np.triu(np.ones((n, n), dtype=bool), 1)
    return {
        "dynamic_power_resolution_w_median": [_median(res_w[k][upper]) for k in range(len(a.size_bytes))],
        "dynamic_resolution_pj_bit_median": [_median(res_pj_bit[k][upper]) for k in range(len(a.size_bytes))],
        "meter_period_s": period if math.isfinite(period) else None,
    }
