"""The figure of energy per bit in three parts: the nodes, the fabric (/power/fabric) and their total,
each with its dynamic part, vs message size (npmpi_analysis.numbers.fabric computes them)."""

from __future__ import annotations

import numpy as np

from npmpi_analysis.figures.render import FIGSIZE, Plot, caveat_banner, size_axis
from npmpi_analysis.numbers import compute

PART_STYLE = {"nodes": ("tab:blue", "o"), "fabric": ("tab:green", "s"), "total": ("black", "^")}


def plot_energy_parts(a, several: bool) -> Plot | None:
    """Energy per bit of the nodes, the fabric and the total ± σ (solid) and their dynamic parts
    (dashed) vs size; None for a run without fabric power. Each curve names its label when not measured."""
    if getattr(a, "fabric", None) is None:
        return None
    from matplotlib.figure import Figure

    fig = Figure(figsize=FIGSIZE)
    ax = fig.subplots()
    fig.subplots_adjust(left=0.1, right=0.95, bottom=0.11, top=0.86)
    x = a.bw.size_bytes
    for name, part in a.fabric.parts.items():
        color, marker = PART_STYLE[name]
        label = f"{name} ± σ" + (f" ({part.caveat})" if part.caveat else "")
        ax.errorbar(
            x,
            part.energy_pj_bit,
            yerr=part.energy_sigma_pj_bit,
            fmt=f"{marker}-",
            ms=3,
            lw=1,
            color=color,
            elinewidth=0.8,
            label=label,
        )
        low = part.dynamic_not_above_idle
        dyn = np.where(~low & (part.dynamic_pj_bit > 0), part.dynamic_pj_bit, np.nan)
        if np.isfinite(dyn).any():
            ax.plot(x, dyn, f"{marker}--", ms=2, lw=0.8, color=color, alpha=0.6, label=f"{name}, dynamic")
        if low.any():  # noise-sized or negative: marked at their 2σ bound, never dropped
            label = f"{name}, dynamic not above idle (< 2σ bound)"
            ax.plot(x[low], part.dynamic_bound_pj_bit[low], "v", ms=4, color=color, mfc="none", label=label)
    ax.set_yscale("log")
    size_axis(ax, [x])
    caveat = a.fabric.parts["total"].caveat  # the nodes' and the fabric's labels together
    ax.set_ylabel("energy per bit (pJ/bit)" + (f" ({caveat})" if caveat else ""))
    ax.set_title(
        f"Energy per bit: nodes, fabric and total vs message size\n{a.label} "
        f"({a.attrs.get('kernel', '?')} kernel, {compute.mode_label(a.attrs)})",
        fontsize=10,
    )
    ax.legend(fontsize=8, loc="best")
    caveat_banner(fig, [caveat])
    return Plot(
        f"energy_per_bit_parts{'_' + a.label if several else ''}",
        fig,
        f"{a.label}: energy per bit p/b of the nodes, of the fabric (switches, shared PDUs: "
        "/power/fabric) and of both, ± σ, and each part's dynamic energy per bit (p − idle)/b (dashed). "
        "The fabric's share is an upper bound for this pair unless the switch carries no other "
        "traffic; its idle is the switch's own.",
        caveat,
    )
