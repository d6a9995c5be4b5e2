"""The figure of CPU cost per byte: CPU µs per KiB moved and % of a core vs message size, one colour
per run (the protocol ladder overlays mpi, tcp, rma and memcpy here), from npmpi_analysis.numbers.cpu_cost."""

from __future__ import annotations

import numpy as np

from npmpi_analysis.figures.render import FIGSIZE, Plot, size_axis

COLORS = ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown", "tab:pink", "tab:gray")
RANK_MARKERS = ("o", "s", "^", "v", "D", "P", "X", "*")


def _who(a, several: bool) -> str:
    kernel = a.attrs.get("kernel")
    return (f"{a.label} ({kernel})" if kernel else a.label) + ": " if several else ""


def plot_cpu_cost(runs: list) -> Plot | None:
    """Top: each run's CPU µs/KiB (mean of its measuring ranks, line; each rank, markers). Bottom: % of
    a core (solid) and % of a core plus the wait for a CPU (dotted: 100 for a rank that never sleeps).
    None when no run has CPU figures (files before format 1.7)."""
    runs = [a for a in runs if getattr(a, "cpu", None) is not None]
    if not runs:
        return None
    from matplotlib.figure import Figure

    fig = Figure(figsize=(FIGSIZE[0], FIGSIZE[1] * 1.4))
    top, bottom = fig.subplots(2, 1, sharex=True)
    fig.subplots_adjust(left=0.1, right=0.95, bottom=0.08, top=0.9, hspace=0.08)
    several = len(runs) > 1
    for i, a in enumerate(runs):
        c, cpu, x = COLORS[i % len(COLORS)], a.cpu, a.bw.size_bytes
        top.plot(x, cpu.mean_us_per_kib, "-", lw=1.4, color=c, label=f"{_who(a, several)}mean of ranks")
        for j, rank in enumerate(cpu.ranks[: len(RANK_MARKERS)]):
            # each rank's markers named in the legend for one run; with several the legend names runs
            label = None if several else f"rank {rank} ({cpu.roles[j]})"
            top.plot(x, cpu.us_per_kib[:, j], RANK_MARKERS[j], ms=3, color=c, alpha=0.5, label=label)
        label = f"{_who(a, several)}% of a core"
        bottom.plot(x, cpu.mean_core_percent, "o-", ms=3, lw=1, color=c, label=label)
        wanted = cpu.mean_core_and_wait_percent
        if np.isfinite(wanted).any():
            label = f"{_who(a, several)}% of a core + % waiting for one"
            bottom.plot(x, wanted, ":", lw=1.2, color=c, label=label)
    top.set_yscale("log")
    top.set_ylabel("CPU per KiB moved (µs/KiB)")
    bottom.set_ylabel("% of a core (mean of ranks)")
    bottom.axhline(100, color="grey", lw=0.6)
    size_axis(bottom, [a.bw.size_bytes for a in runs])
    names = ", ".join(f"{a.label} ({a.attrs.get('kernel', '?')} kernel)" for a in runs)
    top.set_title(f"CPU cost per byte (service demand) vs message size\n{names}", fontsize=10)
    top.legend(fontsize=7, loc="best")
    bottom.legend(fontsize=7, loc="best")
    return Plot(
        "cpu_per_kib",
        fig,
        "Process CPU time (user + system, every thread) of each measuring rank over a size's trials per KiB "
        "it sent and received, and as % of a core of the span's wall time. A rank that busy-polls "
        "(Open MPI's blocking receive) shows 100 % on the dotted line, where the wait for a CPU on a "
        "shared host is added.",
    )
