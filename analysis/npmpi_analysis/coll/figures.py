"""The figures of coll files (coll/numbers.py): OSU's latency, nccl-tests' busbw and the energy
of one operation against message size, one line per file (an op, a rank count); and the energy of
one operation against the rank count, one line per op and size measured at several rank counts."""

from __future__ import annotations

import numpy as np

from npmpi_analysis.coll.numbers import coll_ranks, of
from npmpi_analysis.figures.render import FIGSIZE, Plot, size_axis

COLORS = ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown", "tab:pink", "tab:gray")


def _name(a) -> str:
    attrs = a.attrs
    return f"{a.label}: {attrs.get('coll_op', '?')}, {attrs.get('coll_ranks', '?')} ranks"


def collective_plots(runs: list) -> list[Plot | None]:
    """The `collectives` figure; when the files hold several ops at several rank counts, one such
    figure per rank count (collectives_Nranks), one line per op."""
    coll = [a for a in runs if of(a) is not None]
    ops = {str(a.attrs.get("coll_op", "")) for a in coll}
    counts = sorted({coll_ranks(a.attrs) for a in coll})
    if len(ops) < 2 or len(counts) < 2:
        return [plot_collectives(runs)]
    out = []
    for n in counts:
        plot = plot_collectives([a for a in coll if coll_ranks(a.attrs) == n])
        if plot is not None:
            plot.name = f"collectives_{n}ranks"
        out.append(plot)
    return out


def plot_collectives(runs: list) -> Plot | None:
    """From the top: OSU's average latency across ranks (the band: least to largest rank's), busbw,
    energy per operation ± σ, pJ per bus bit ± σ. None without a coll file that has a size above 0 B."""
    runs = [a for a in runs if of(a) is not None and np.any(a.bw.size_bytes > 0)]
    if not runs:
        return None
    from matplotlib.figure import Figure

    fig = Figure(figsize=(FIGSIZE[0], FIGSIZE[1] * 2.3))
    top, middle, bottom, per_bit = fig.subplots(4, 1, sharex=True)
    fig.subplots_adjust(left=0.12, right=0.95, bottom=0.06, top=0.93, hspace=0.08)
    caveats = set()
    for i, a in enumerate(runs):
        color, c, x = COLORS[i % len(COLORS)], of(a), a.bw.size_bytes.astype(float)
        keep = x > 0
        top.plot(x[keep], c.latency_avg_s[keep] * 1e6, "o-", ms=3, color=color, label=_name(a))
        top.fill_between(
            x[keep], c.latency_min_s[keep] * 1e6, c.latency_max_s[keep] * 1e6, color=color, alpha=0.2
        )
        label = f"{_name(a)} (x {a.attrs.get('coll_bus_factor_formula', '?')})"
        middle.plot(x[keep], c.busbw_bit_s[keep] / 1e9, "o-", ms=3, color=color, label=label)
        if c.energy_per_op_j is not None:
            bottom.errorbar(x[keep], c.energy_per_op_j[keep] * 1e6, yerr=c.energy_per_op_sigma_j[keep] * 1e6,
                            fmt="o-", ms=3, capsize=2, color=color, label=_name(a))  # fmt: skip
            bus = keep & np.isfinite(c.energy_pj_bus_bit)
            per_bit.errorbar(x[bus], c.energy_pj_bus_bit[bus], yerr=c.energy_sigma_pj_bus_bit[bus],
                             fmt="o-", ms=3, capsize=2, color=color, label=_name(a))  # fmt: skip
            caveats.add(a.caveat)
    top.set_yscale("log")
    top.set_ylabel("avg latency (µs)")
    middle.set_yscale("log")
    middle.set_ylabel("busbw (Gbit/s)")
    bottom.set_yscale("log")
    bottom.set_ylabel("energy per operation (µJ)")
    per_bit.set_yscale("log")
    per_bit.set_ylabel("energy per bus bit (pJ)")
    size_axis(per_bit, [a.bw.size_bytes for a in runs])
    per_bit.set_xlabel("message size per rank (bytes)")
    top.set_title(
        "Collectives: OSU's latency across ranks, nccl-tests' busbw, energy of one operation", fontsize=10
    )
    for ax in (top, middle, bottom, per_bit):
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7, loc="best")
    return Plot(
        "collectives",
        fig,
        "Per message size: the mean over the ranks of each rank's time per operation (band: the least "
        "and largest rank's), the bus bandwidth (algbw x the op's factor), and the energy of one "
        "operation (every node's power x the slowest rank's time per operation) ± σ, and the energy per "
        "bit each rank's link carries (every node's power / busbw) ± σ. A barrier (0 B) is not drawn here.",
        "; ".join(sorted(c for c in caveats if c)),
    )


def plot_energy_vs_ranks(runs: list) -> Plot | None:
    """Energy per operation against the rank count: for each op measured at two rank counts or more,
    one line per size they share (the smallest, a middle and the largest). None otherwise."""
    by_op: dict[str, list] = {}
    for a in runs:
        if of(a) is not None and of(a).energy_per_op_j is not None and coll_ranks(a.attrs):
            by_op.setdefault(str(a.attrs.get("coll_op", "?")), []).append(a)
    lines = []
    for op, files in sorted(by_op.items()):
        files = sorted(files, key=lambda a: coll_ranks(a.attrs))
        if len({coll_ranks(a.attrs) for a in files}) < 2:
            continue
        shared = sorted(set.intersection(*(set(a.bw.size_bytes.tolist()) for a in files)))
        # the smallest, a middle and the largest size: every size would hide the lines
        for size in sorted({shared[0], shared[len(shared) // 2], shared[-1]} if shared else set()):
            ranks, joules, sigma = [], [], []
            for a in files:
                k = int(np.flatnonzero(a.bw.size_bytes == size)[0])
                ranks.append(coll_ranks(a.attrs))
                joules.append(of(a).energy_per_op_j[k] * 1e6)
                sigma.append(of(a).energy_per_op_sigma_j[k] * 1e6)
            lines.append((f"{op} {size} B", ranks, joules, sigma))
    if not lines:
        return None
    from matplotlib.figure import Figure

    fig = Figure(figsize=FIGSIZE)
    ax = fig.subplots()
    for i, (label, ranks, joules, sigma) in enumerate(lines):
        ax.errorbar(
            ranks, joules, yerr=sigma, fmt="o-", ms=3, capsize=2, color=COLORS[i % len(COLORS)], label=label
        )
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("ranks taking part")
    ax.set_ylabel("energy per operation (µJ)")
    ax.set_title("How a collective's energy grows with the ranks", fontsize=10)
    ax.legend(fontsize=7, loc="best")
    caveat = "; ".join(sorted({a.caveat for a in runs if of(a) is not None and a.caveat}))
    return Plot(
        "collectives_energy_vs_ranks",
        fig,
        "Energy of one operation (every node's power x the time of one operation) ± σ against the ranks "
        "taking part, one line per op and message size measured at several rank counts.",
        caveat,
    )
