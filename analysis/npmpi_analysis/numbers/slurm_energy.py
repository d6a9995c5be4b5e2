"""Slurm's own count of a run's energy (format 1.6: the step's ConsumedEnergy) beside npmpi's, as
one notice: users check one against the other.

Slurm's number covers the whole step (start-up included) on the step's nodes; npmpi's is the
energy of its channels from their first to their last sample on its power nodes (power integrated
over time, trapezoids; spans without samples for more than MAX_GAP_S are left out). The notice says
both spans, and when npmpi's channels were estimated or simulated.
"""

from __future__ import annotations

import math

import numpy as np

MAX_GAP_S = 5.0


def channel_energy_j(t: np.ndarray, p: np.ndarray) -> tuple[float, float, float]:
    """(joules, first time, last time) of one channel's samples; NaN joules without two samples."""
    ok = np.isfinite(t) & np.isfinite(p)
    t, p = t[ok], p[ok]
    if len(t) < 2:
        return math.nan, math.nan, math.nan
    dt = np.diff(t)
    keep = (dt > 0) & (dt <= MAX_GAP_S)
    joules = float(np.sum(0.5 * (p[1:] + p[:-1])[keep] * dt[keep]))
    return joules, float(t[0]), float(t[-1])


def npmpi_energy(run) -> tuple[float, float, int, set[str]]:
    """(joules, span s, nodes, labels) of every power channel of the run."""
    total, first, last, labels, nodes = 0.0, math.inf, -math.inf, set(), 0
    for node in run.power or []:
        counted = False
        for ch in node.channels:
            if ch.time_unix_s is None or ch.power_w is None:
                continue
            joules, t0, t1 = channel_energy_j(
                np.asarray(ch.time_unix_s, float), np.asarray(ch.power_w, float)
            )
            if math.isnan(joules):
                continue
            total += joules
            first, last = min(first, t0), max(last, t1)
            labels.add(ch.label)
            counted = True
        nodes += counted
    return total, (last - first) if nodes else math.nan, nodes, labels


def slurm_energy_notice(run) -> str | None:
    """The notice comparing Slurm's ConsumedEnergy with npmpi's energy; None for files without it."""
    a = run.attrs
    if "slurm_consumed_energy_j" not in a:
        return None
    name = run.path.name
    step = str(a.get("slurm_energy_step", "") or "")
    try:
        slurm_j = float(a["slurm_consumed_energy_j"])
    except (TypeError, ValueError):
        slurm_j = math.nan
    if not math.isfinite(slurm_j):
        note = str(a.get("slurm_energy_note", "") or "absent")
        return f"{name}: Slurm's energy count of the step: {note}"
    mine, span_s, nodes, labels = npmpi_energy(run)
    source = str(a.get("slurm_energy_source", "") or "")
    text = f"{name}: Slurm's ConsumedEnergy of step {step} ({source}): {slurm_j:.6g} J over the whole step; "
    if nodes == 0:
        return text + "npmpi measured no power to compare it with"
    kind = "" if labels <= {"measured"} else f" ({'/'.join(sorted(labels - {'measured'}))}, not measured)"
    return (
        text + f"npmpi{kind}: {mine:.6g} J on its {nodes} power node(s) over its {span_s:.1f} s of samples "
        f"(ratio {slurm_j / mine:.3g}; the step's span also holds the start-up)"
        if mine > 0
        else text + "npmpi's channels hold no energy to compare it with"
    )
