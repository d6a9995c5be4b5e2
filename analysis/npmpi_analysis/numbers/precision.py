"""What `--precision P` gave a run (docs/file-format.md 1.11): per size the 95 % interval's half-width
of its mean trial time over that mean, computed again from the stored trials (the slowest pair's or
member's, as the figures use; the sweep stopped on rank 0's own), whether it is within P, and how
many trials it took; a summary of the sizes that reached P and those that stopped at the cap or at
--max-trials."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from npmpi.core.sampling import relative_halfwidth
from npmpi_analysis.numbers.compute import float_attr


def asked(attrs: dict) -> float | None:
    """The file's --precision (a fraction), None without one."""
    value = attrs.get("precision")
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating)):
        return None
    value = float(value)
    return value if math.isfinite(value) and value > 0 else None


def half_widths(trial_s: np.ndarray) -> np.ndarray:
    """Per size, the relative 95 % half-width of its trials' mean (inf with fewer than two)."""
    return np.array(
        [relative_halfwidth([t for t in row if math.isfinite(t)]) for row in trial_s], dtype=float
    )


def size_columns(a, k: int) -> dict[str, Any]:
    """Size k's precision columns (none without --precision)."""
    p = asked(a.attrs)
    if p is None or a.bw.trial_s is None:
        return {}
    hw = relative_halfwidth([t for t in a.bw.trial_s[k] if math.isfinite(t)])
    return {"precision_rel_halfwidth": hw, "precision_reached": bool(hw <= p)}


def summary(a) -> dict[str, Any] | None:
    """The run's precision: asked, reached at how many sizes, the sizes that were not, the trials."""
    p = asked(a.attrs)
    if p is None or a.bw.trial_s is None or not a.sizes:
        return None
    hw = half_widths(a.bw.trial_s)
    missed = [int(s) for s, h in zip(a.bw.size_bytes, hw, strict=True) if not h <= p]
    trials = a.bw.trials_run
    return {
        "precision": p,
        "precision_cap_s": float_attr(a.attrs, "precision_cap_s"),
        "max_trials": int(m) if (m := float_attr(a.attrs, "precision_max_trials")) is not None else None,
        "sizes_reached": int(len(hw) - len(missed)),
        "sizes": len(hw),
        "sizes_not_reached_bytes": missed,
        "trials_min": int(trials.min()),
        "trials_median": float(np.median(trials)),
        "trials_max": int(trials.max()),
    }


def lines(s: dict[str, Any] | None) -> list[str]:
    """The console's precision line."""
    if not s:
        return []
    missed = s["sizes_not_reached_bytes"]
    where = ""
    if missed:
        shown = ", ".join(f"{b} B" for b in missed[:5]) + (f", … ({len(missed)})" if len(missed) > 5 else "")
        where = f"; not at {shown}: their trials stopped at the cap or at --max-trials"
    return [
        f"  precision: {s['precision'] * 100:g} % asked (95 % interval of each size's mean trial time); "
        f"reached at {s['sizes_reached']} of {s['sizes']} sizes with {s['trials_min']} to {s['trials_max']} "
        f"trials (median {s['trials_median']:g}){where}"
    ]
