"""The idle baselines: their windows, the idle power from both, drift, and disturbed baselines.

npmpi records idle power before the first size and after the last one (format 1.4; 1.3 files
have the first only). The window after the sweep loses its last `delay` seconds: the samples
describing them would have been taken after sampling stopped. A baseline is disturbed when a rank
used more than 5 % of a core during it or when its node was more than 10 % busy (other processes):
its idle power is then too high, and the dynamic power too low (docs/analysis.md).
"""

from __future__ import annotations

import math

import numpy as np

from npmpi_analysis.numbers import compute
from npmpi_analysis.numbers.compute import FLAG_NONE
from npmpi_analysis.numbers.timeline import WindowStats

MAX_RANK_CPU_FRACTION = 0.05  # a disturbed baseline: a rank used more than 5 % of a core
MAX_SYSTEM_BUSY_FRACTION = 0.10  # or the node's CPUs were more than 10 % busy (other processes)
NAMES = ("before", "after")


def baseline_windows(power_attrs: dict) -> tuple[tuple[float, float] | None, tuple[float, float] | None]:
    """(before, after) windows on rank 0's clock from the /power attributes; None where absent."""
    out = []
    for prefix in ("baseline", "baseline_after"):
        s, e = (
            compute.float_attr(power_attrs, f"{prefix}_start_unix_s"),
            compute.float_attr(power_attrs, f"{prefix}_end_unix_s"),
        )
        out.append((s, e) if s is not None and e is not None and e > s else None)
    return out[0], out[1]


def combine_idle(before: tuple[float, float], after: tuple[float, float]) -> tuple[float, float]:
    """(idle, sigma) from the two baselines' (mean, sigma): their average, with sigma² =
    (σ_b² + σ_a²)/4 + (I_a − I_b)²/12 (the idle power taken as anywhere between the two);
    one baseline alone where the other is missing."""
    (ib, sb), (ia, sa) = before, after
    if not math.isfinite(ib):
        return ia, sa
    if not math.isfinite(ia):
        return ib, sb
    return 0.5 * (ib + ia), math.sqrt((sb * sb + sa * sa) / 4.0 + (ia - ib) ** 2 / 12.0)


def combine_stats(before: WindowStats, after: WindowStats) -> WindowStats:
    """combine_idle for one-element WindowStats (a node's idle)."""
    idle, sigma = combine_idle(
        (float(before.mean[0]), float(before.sigma[0])), (float(after.mean[0]), float(after.sigma[0]))
    )
    count = int(before.count[0]) + int(after.count[0])
    flag = FLAG_NONE if not math.isfinite(idle) else min(int(before.flag[0]), int(after.flag[0]))
    return WindowStats(np.array([idle]), np.array([sigma]), np.array([count]), np.array([flag], np.int8))


def drift_notice(before: tuple[float, float], after: tuple[float, float], where: str) -> str | None:
    """A warning when the idle power after the sweep differs from before by more than their
    combined sigma, sqrt(σ_b² + σ_a²)."""
    (ib, sb), (ia, sa) = before, after
    if not (math.isfinite(ib) and math.isfinite(ia)):
        return None
    bound = math.hypot(sb, sa)
    if abs(ia - ib) <= bound:
        return None
    return (
        f"{where}: idle power drifted from {ib:.4g} ± {sb:.2g} W before the sweep to "
        f"{ia:.4g} ± {sa:.2g} W after it (more than their uncertainty, {bound:.2g} W): the idle "
        "figure is their average and its sigma includes the difference"
    )


def disturbed_notices(layout: dict, node_attrs: list[dict], windows: tuple, name: str) -> list[str]:
    """Warnings for each baseline during which a rank used more than 5 % of a core or a node was
    more than 10 % busy, from /layout/baseline_cpu_s and the nodes' baseline_*_system_busy_fraction."""
    out = []
    cpu = layout.get("baseline_cpu_s")
    cpu = np.asarray(cpu, dtype=float) if cpu is not None else None
    hosts = list(layout.get("host", []))
    for column, (label, window) in enumerate(zip(NAMES, windows, strict=True)):
        if window is None:
            continue
        length = window[1] - window[0]
        if cpu is not None and cpu.ndim == 2 and cpu.shape[1] > column:
            used = cpu[:, column]
            busy = np.flatnonzero(np.isfinite(used) & (used > MAX_RANK_CPU_FRACTION * length))
            for r in busy:
                host = f" on {hosts[r]}" if r < len(hosts) else ""
                out.append(
                    f"{name}: the baseline {label} the sweep was disturbed: rank {r}{host} used "
                    f"{used[r]:.3g} s of CPU in {length:.3g} s ({100 * used[r] / length:.0f} % of a core, "
                    f"above {100 * MAX_RANK_CPU_FRACTION:.0f} %): its idle power is too high"
                )
        key = "baseline_system_busy_fraction" if column == 0 else "baseline_after_system_busy_fraction"
        for i, attrs in enumerate(node_attrs):
            frac = compute.float_attr(attrs, key)
            if frac is not None and frac > MAX_SYSTEM_BUSY_FRACTION:
                out.append(
                    f"{name}: node {i} ({attrs.get('host', '')}) was {100 * frac:.0f} % busy during "
                    f"the baseline {label} the sweep (other processes; above "
                    f"{100 * MAX_SYSTEM_BUSY_FRACTION:.0f} %): its idle power is too high"
                )
    return out


def empty_baselines(where: str, windows, gaps, said) -> None:
    """Say which of a node's idle baselines ((window, WindowStats) before and after the sweep) holds
    no sample: a problem, unless one of its channels' recorded gaps (`gaps`: FaultInfo of kind gap)
    overlaps the window (its power rank was stopped, or gone on without: the file says so), which is a
    notice naming the gap; the idle power then comes from the other baseline, when it has samples."""
    names = ("", " after the sweep")
    empty = [bool(w) and stats.flag[0] == FLAG_NONE for w, stats in windows]
    for k, (window, _stats) in enumerate(windows):
        if not empty[k]:
            continue
        over = [f for f in gaps if f.first_unix_s <= window[1] and f.last_unix_s >= window[0]]
        line = f"{where}: no sample in or near the baseline window{names[k]}"
        if not over:
            said.problem(f"{line}: no idle power")
            continue
        other = windows[1 - k]
        source = (
            f"the idle power comes from the baseline {('before', 'after')[1 - k]} the sweep alone"
            if other[0] and not empty[1 - k]
            else "no idle power"
        )
        said.notice(f"{line}: a recorded gap covers it ({over[0].message}); {source}")
