"""One channel's stored samples made ready for the analysis: the valid ones, and their per-sample
extras of format 1.6 (the meter's opening of each reading, a network meter's request times)."""

from __future__ import annotations

import math

import numpy as np

from npmpi.core.periods import MIN_CHANGES, change_times, refresh_period_s
from npmpi_analysis.numbers import compute

# No meter channel of one node (a wall meter, a PDU outlet, a BMC, RAPL, a GPU) reads a megawatt: such a
# value is a corrupt sample or a unit mix-up (mW or µW stored as W), not power.
MAX_PLAUSIBLE_CHANNEL_W = 1e6
MAX_REFRESH_S = 3600.0  # a stored refresh period above this is not one


def valid_samples(ch, where: str, problems: list[str]) -> tuple[np.ndarray, ...]:
    """(time, power, energy, kept) of one channel, invalid samples dropped and reported (`kept`: which
    of the stored samples are left, for the per-sample extras)."""
    t = np.asarray(ch.time_unix_s, dtype=float)
    p = np.asarray(ch.power_w, dtype=float)
    energy = getattr(ch, "energy_j", None)
    n = min(len(t), len(p))
    t, p = t[:n], p[:n]
    e = np.full(n, np.nan)
    if energy is not None:
        energy = np.asarray(energy, dtype=float)[:n]
        e[: len(energy)] = energy
    bad_t = ~np.isfinite(t) | (t < 0)
    if bad_t.any():
        k = int(np.argmax(bad_t))
        problems.append(
            f"{where}/time_unix_s: {int(bad_t.sum())} NaN or negative time(s) (first at sample {k}): "
            "those samples are ignored"
        )
    bad_p = ~bad_t & (~np.isfinite(p) | (p < 0) | (p > MAX_PLAUSIBLE_CHANNEL_W))
    if bad_p.any():
        k = int(np.argmax(bad_p))
        problems.append(
            f"{where}/power_w: {int(bad_p.sum())} NaN, negative or implausible (above "
            f"{MAX_PLAUSIBLE_CHANNEL_W:.0e} W) power value(s) (first at sample {k}: {p[k]:g} W): "
            "those samples are ignored"
        )
    keep = ~(bad_t | bad_p)
    return t[keep], p[keep], e[keep], keep


def sample_extras(ch, kept: np.ndarray) -> dict[str, np.ndarray]:
    """The channel's format 1.6 per-sample datasets (open_epoch, request times) of the kept samples."""
    stored = getattr(ch, "extra", None) or {}
    n = len(kept)
    return {k: np.asarray(v, dtype=float)[:n][kept] for k, v in stored.items() if len(v) >= n}


def stamp_sigma_s(extra: dict[str, np.ndarray]) -> float:
    """The uncertainty of a network meter's time stamps (format 1.6): each reading is stamped at the
    middle of its request, so the reading was made within half the request's duration of its stamp;
    the median half-duration (0 without request times)."""
    start, end = extra.get("request_start_unix_s"), extra.get("request_end_unix_s")
    if start is None or end is None:
        return 0.0
    half = 0.5 * (end - start)
    half = half[np.isfinite(half) & (half >= 0)]
    return float(np.median(half)) if len(half) else 0.0


def sample_interval(attrs: dict, t: np.ndarray) -> float:
    """The channel's sample interval: as stored, else the meter's natural one, else the samples' median
    spacing, else 1 s."""
    interval = compute.float_attr(attrs, "sample_interval_s")
    if interval is None or interval <= 0:
        interval = compute.float_attr(attrs, "natural_interval_s")
    if (interval is None or interval <= 0) and len(t) > 1:
        interval = float(np.median(np.diff(np.sort(t))))
    return interval if interval is not None and interval > 0 else 1.0


def refresh_period(
    attrs: dict, t: np.ndarray, p: np.ndarray, extra: dict[str, np.ndarray]
) -> tuple[float, str]:
    """(refresh period, whence) of a meter that serves a value until its device refreshes it (a
    Redfish BMC: its channel has `update_period_s`): measured here from the distinct readings (their
    ReadingTime where stored, else the times the power changed), else the meter's measurement over the
    run, else the one taken at open; (0, '') for other channels. A reading is as old as one period."""
    if "update_period_s" not in attrs:
        return 0.0, ""
    stamps = extra.get("reading_time_unix_s")
    if stamps is not None and np.isfinite(stamps).sum() >= MIN_CHANGES:
        period = refresh_period_s(change_times(stamps, stamps), exact=True)
    else:
        period = refresh_period_s(change_times(t, p))
    if math.isfinite(period):
        return period, "the readings (analysis)"
    for key, whence in (
        ("update_period_measured_s", "the meter, over the run"),
        ("update_period_s", "at open"),
    ):
        value = compute.float_attr(attrs, key)
        if value is not None and 0 < value <= MAX_REFRESH_S:  # a corrupt attribute is not a period
            return (
                value,
                f"{whence} ({attrs.get('update_period_source', '')})" if key == "update_period_s" else whence,
            )
    return 0.0, ""
