"""One channel's stored samples made ready for the analysis: the valid ones, and their per-sample
extras of format 1.6 (the meter's opening of each reading, a network meter's request times)."""

from __future__ import annotations

import numpy as np

# No meter channel of one node (a wall meter, a PDU outlet, a BMC, RAPL, a GPU) reads a megawatt: such a
# value is a corrupt sample or a unit mix-up (mW or µW stored as W), not power.
MAX_PLAUSIBLE_CHANNEL_W = 1e6


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
