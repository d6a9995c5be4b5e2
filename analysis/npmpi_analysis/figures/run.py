"""The figures: the paper's plot set (its figures 2-18), extended to several nodes and runs.

Every function takes the analysed runs and returns `Plot`s (a name, a matplotlib Figure made
without pyplot, a caption). Figures that compare runs overlay them; figures of one run's details
get the run's label in their name when several runs are shown. Every figure that shows power, or
a figure derived from it, says when the power is estimated or simulated.
"""

from __future__ import annotations

import numpy as np

from npmpi.core.units import format_size_bytes
from npmpi_analysis.figures.cpu import plot_cpu_cost
from npmpi_analysis.figures.fabric import plot_energy_parts
from npmpi_analysis.figures.model import plot_model
from npmpi_analysis.figures.render import FIGSIZE, Plot
from npmpi_analysis.figures.render import caveat_banner as _caveat_text
from npmpi_analysis.figures.render import size_axis as _size_axis
from npmpi_analysis.numbers import compute, kinds
from npmpi_analysis.numbers.analyse import RunAnalysis
from npmpi_analysis.numbers.compute import FLAG_OK

COLORS = ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown", "tab:pink", "tab:gray")


def _figure(rows: int = 1, sharex: bool = False):
    """A Figure (no pyplot) with fixed margins: room for a two-line title, a caveat and a twin axis."""
    from matplotlib.figure import Figure

    height = FIGSIZE[1] if rows == 1 else FIGSIZE[1] * 1.4
    fig = Figure(figsize=(FIGSIZE[0], height))
    axes = fig.subplots(rows, 1, sharex=sharex, squeeze=False)[:, 0]
    top = 1 - 0.72 / height  # inches kept above the axes for the title lines and the caveat
    fig.subplots_adjust(left=0.1, right=0.9, bottom=0.55 / height, top=top, hspace=0.08)
    return fig, axes


def _power_ylabel(what: str, caveats: list[str]) -> str:
    texts = sorted({c for c in caveats if c})
    return f"{what} ({'; '.join(texts)})" if texts else what


def _legend_label(a: RunAnalysis, what: str, several: bool) -> str:
    kernel = a.attrs.get("kernel")
    who = f"{a.label} ({kernel})" if kernel else a.label
    return f"{who}: {what}" if several else what


def _suffix(a: RunAnalysis, several: bool) -> str:
    return f"_{a.label}" if several else ""


def _title(ax, text: str, runs: list[RunAnalysis]) -> None:
    sub = ", ".join(
        f"{a.label} ({a.attrs.get('kernel', '?')} kernel, {compute.mode_label(a.attrs)}, "
        f"{len(set(a.layout.get('host', [])))} host(s))"
        for a in runs
    )
    ax.set_title(f"{text}\n{sub}", fontsize=10)


# ---------------------------------------------------------------- the figures


def plot_bandwidth(runs: list[RunAnalysis]) -> Plot:
    """Bandwidth vs size: best trial, mean ± sigma_b and the trials' spread (paper figs 2, 5, 6)."""
    fig, (ax,) = _figure()
    several = len(runs) > 1
    for i, a in enumerate(runs):
        c = COLORS[i % len(COLORS)]
        bw, x = a.bw, a.bw.size_bytes
        ax.fill_between(
            x,
            bw.min_bit_s / 1e9,
            bw.max_bit_s / 1e9,
            color=c,
            alpha=0.2,
            lw=0,
            label=_legend_label(a, "trial spread (min-max)", several),
        )
        ax.plot(x, bw.peak_bit_s / 1e9, color=c, lw=1.4, label=_legend_label(a, "best trial", several))
        ax.errorbar(
            x,
            bw.mean_bit_s / 1e9,
            yerr=bw.sigma_bit_s / 1e9,
            fmt=".",
            ms=3,
            color=c,
            elinewidth=0.8,
            alpha=0.7,
            label=_legend_label(a, "mean ± σ_b", several),
        )
    _size_axis(ax, [a.bw.size_bytes for a in runs])
    ax.set_ylabel("bandwidth (Gbit/s, 10^9 bit/s)")
    _title(ax, "Bandwidth vs message size", runs)
    ax.legend(fontsize=8)
    return Plot("bandwidth", fig, "Bandwidth of the best trial, mean ± σ_b and the spread of the trials.")


def plot_latency(runs: list[RunAnalysis]) -> Plot:
    """One-way latency of the best trial vs size (paper figs 17, 18)."""
    fig, (ax,) = _figure()
    several = len(runs) > 1
    for i, a in enumerate(runs):
        ax.plot(
            a.bw.size_bytes,
            a.bw.one_way_s * 1e6,
            ".-",
            ms=3,
            lw=1,
            color=COLORS[i % len(COLORS)],
            label=_legend_label(a, "one-way time of the best trial", several),
        )
    _size_axis(ax, [a.bw.size_bytes for a in runs])
    ax.set_yscale("log")
    ax.set_ylabel("one-way latency (µs)")
    _title(ax, "Latency vs message size", runs)
    ax.legend(fontsize=8)
    return Plot("latency", fig, "One-way time of the best trial (best trial / 2 iterations).")


def _mark_flagged(ax, a: RunAnalysis, x: np.ndarray, y: np.ndarray, color: str, several: bool) -> None:
    flagged = a.power.job_flag != FLAG_OK
    if flagged.any():
        ax.plot(
            x[flagged],
            y[flagged],
            "x",
            color=color,
            ms=5,
            label=_legend_label(
                a, "flagged: window shorter than the sample interval, a gap, or a recorded gap", several
            ),
        )


def _errorbars(ax, x, y, yerr, color: str, label: str, **extra) -> None:
    """One run's line with error bars, as every power figure draws it."""
    ax.errorbar(x, y, yerr=yerr, fmt="o-", ms=3, lw=1, color=color, elinewidth=0.8, label=label, **extra)


def _finish_power_plot(figure: tuple, runs: list[RunAnalysis], ylabel: str, title: str, text: str) -> Plot:
    """Size axis, the y label (marked estimated/simulated where so), title, legend and caveats of a
    power figure over message size; `figure` is (name, fig, ax, legend location)."""
    name, fig, ax, legend_loc = figure
    caveats = [a.caveat for a in runs]
    _size_axis(ax, [a.bw.size_bytes for a in runs])
    ax.set_ylabel(_power_ylabel(ylabel, caveats))
    _title(ax, title, runs)
    ax.legend(fontsize=8, loc=legend_loc)
    _caveat_text(fig, caveats)
    return Plot(name, fig, text, "; ".join(sorted({c for c in caveats if c})))


def _twin_figure(runs: list[RunAnalysis]):
    """A figure with a second y axis (the bandwidth, dashed): fig, ax, ax2, several runs."""
    fig, (ax,) = _figure()
    return fig, ax, ax.twinx(), len(runs) > 1


def plot_power_bandwidth(runs: list[RunAnalysis]) -> Plot | None:
    """The job's mean power ± sigma_p and the bandwidth vs size (paper figs 3, 7-10)."""
    runs = [a for a in runs if a.power is not None]
    if not runs:
        return None
    fig, ax, ax2, several = _twin_figure(runs)
    for i, a in enumerate(runs):
        c = COLORS[i % len(COLORS)]
        x = a.bw.size_bytes
        _errorbars(ax, x, a.power.job_w, a.power.job_sigma_w, c, _legend_label(a, "power ± σ_p", several))
        _mark_flagged(ax, a, x, a.power.job_w, "black", several)
        ax2.plot(x, a.bw.mean_bit_s / 1e9, "--", lw=1, color=c, alpha=0.8)
        if np.isfinite(a.power.idle_w):
            ax.axhline(
                a.power.idle_w, color=c, ls=":", lw=1, label=_legend_label(a, "idle baseline", several)
            )
    ax2.set_ylabel("bandwidth, dashed (Gbit/s)")
    return _finish_power_plot(
        ("power_bandwidth", fig, ax, "upper left"),
        runs,
        "power of all nodes (W)",
        "Power and bandwidth vs message size",
        "Mean power of all nodes in each size's window (± σ_p, solid) and the mean bandwidth (dashed).",
    )


def _correlation_says_something(a: RunAnalysis) -> bool:
    """A correlation worth printing: defined, and the power not constant (compute.power_constant)."""
    return bool(np.isfinite(a.correlation)) and not compute.power_constant(a.power.job_w, a.power.job_sigma_w)


def plot_energy_rate(runs: list[RunAnalysis]) -> Plot | None:
    """Energy rate with the paper's bounds as error bars, and the bandwidth (paper figs 4, 11, 12)."""
    runs = [a for a in runs if a.power is not None]
    if not runs:
        return None
    fig, ax, ax2, several = _twin_figure(runs)
    for i, a in enumerate(runs):
        c = COLORS[i % len(COLORS)]
        x = a.bw.size_bytes
        r = a.rate.rate_bit_j / 1e6
        lo = np.where(np.isfinite(a.rate.low_bit_j), r - a.rate.low_bit_j / 1e6, 0.0)
        hi = np.where(np.isfinite(a.rate.high_bit_j), a.rate.high_bit_j / 1e6 - r, 0.0)
        label = _legend_label(a, "energy rate (bounds (b∓σ_b)/(p±σ_p))", several)
        _errorbars(ax, x, r, np.vstack([np.maximum(lo, 0), np.maximum(hi, 0)]), c, label, capsize=1.5)
        _mark_flagged(ax, a, x, r, "black", several)
        # black for one run: in the run's colour it would vanish under the energy rate it tracks
        bw_color = c if several else "black"
        ax2.plot(x, a.bw.mean_bit_s / 1e9, "--", lw=1, color=bw_color, alpha=0.8)
        ax.plot(
            [], [], "--", lw=1, color=bw_color, label=_legend_label(a, "mean bandwidth (right axis)", several)
        )
    ax2.set_ylabel("bandwidth, dashed (Gbit/s)")
    corr = "; ".join(f"{a.label}: r = {a.correlation:.4f}" for a in runs if _correlation_says_something(a))
    return _finish_power_plot(
        ("energy_rate", fig, ax, "upper left"),
        runs,
        "energy rate (Mbit/J)",
        "Energy rate and bandwidth vs message size" + (f" (corrcoef {corr})" if corr else ""),
        "Energy rate r = b/p (bits per joule) with the bounds (b+σ_b)/(p−σ_p) and (b−σ_b)/(p+σ_p), "
        "and the mean bandwidth (dashed).",
    )


def plot_energy_per_bit(runs: list[RunAnalysis]) -> Plot | None:
    """Energy per bit, total and dynamic (above the idle baseline), vs size."""
    runs = [a for a in runs if a.power is not None]
    if not runs:
        return None
    fig, (ax,) = _figure()
    several = len(runs) > 1
    for i, a in enumerate(runs):
        c = COLORS[i % len(COLORS)]
        x = a.bw.size_bytes
        _errorbars(ax, x, a.energy_pj_bit, a.energy_sigma_pj_bit, c, _legend_label(a, "total ± σ", several))
        if a.dynamic_pj_bit is not None:
            low = a.dynamic_not_above_idle
            dyn = np.where(~low, a.dynamic_pj_bit, np.nan)
            if np.isfinite(dyn).any():
                label = _legend_label(a, "dynamic", several)
                ax.plot(x, dyn, "s--", ms=3, lw=1, color=c, alpha=0.7, label=label)
            if low.any():  # noise-sized or negative: marked at their 2σ upper bound, never dropped
                label = _legend_label(a, "dynamic not above idle (< 2σ bound)", several)
                ax.plot(x[low], a.dynamic_bound_pj_bit[low], "v", ms=5, color=c, mfc="none", label=label)
    ax.set_yscale("log")
    return _finish_power_plot(
        ("energy_per_bit", fig, ax, "best"),
        runs,
        "energy per bit (pJ/bit)",
        "Energy per bit vs message size (dynamic: power above the idle baseline)",
        "Energy per bit moved, p/b, and its dynamic part (p − idle)/b, in picojoules per bit. Where the "
        "power above idle is not above its own σ (or negative) the dynamic part is noise: an open "
        "triangle marks its upper bound (value + 2σ) instead.",
    )


def plot_scaled(a: RunAnalysis, several: bool) -> Plot | None:
    """Scaled energy rate, bandwidth and their difference (paper figs 13, 14)."""
    if a.power is None:
        return None
    fig, (ax,) = _figure()
    x = a.bw.size_bytes
    sr = compute.scaled(a.rate.rate_bit_j)
    sb = compute.scaled(a.bw.mean_bit_s)
    # the energy rate wide and pale under a thin bandwidth line: both show where they coincide
    label = _power_ylabel("energy rate / its peak", [a.caveat])
    ax.plot(x, sr, "o-", ms=6, lw=4, alpha=0.45, color=COLORS[0], label=label)
    ax.plot(x, sb, "s--", ms=2.5, lw=1, color=COLORS[1], label="bandwidth / its peak")
    ax.plot(x, sb - sr, "k.-", ms=3, lw=1, label="difference (bandwidth − energy rate)")
    ax.axhline(0, color="gray", lw=0.5)
    _size_axis(ax, [x])
    ax.set_ylabel("scaled (1 = peak)")
    corr = f" (corrcoef {a.correlation:.4f})" if _correlation_says_something(a) else ""
    _title(ax, f"Scaled energy rate, bandwidth and their difference{corr}", [a])
    ax.legend(fontsize=8)
    _caveat_text(fig, [a.caveat])
    return Plot(
        f"scaled_energy_rate{_suffix(a, several)}",
        fig,
        f"{a.label}: energy rate and bandwidth divided by their peaks, and their difference.",
        a.caveat,
    )


def plot_iterations(a: RunAnalysis, several: bool) -> Plot:
    """Iterations per trial and the mean trial time vs time into the run (paper figs 15, 16)."""
    fig, (ax,) = _figure()
    ax2 = ax.twinx()
    start = a.window_start_unix_s
    t0 = np.nanmin(start) if np.isfinite(start).any() else np.nan
    if np.isfinite(t0):
        x, xlabel = start - t0, "time since the first trial (s)"
    else:
        x, xlabel = np.arange(a.sizes, dtype=float), "message size index (no wall-clock times)"
    ax.plot(x, a.bw.iterations, "o-", ms=3, lw=1, color=COLORS[0], label="iterations per trial")
    ax2.plot(x, a.bw.trial_mean_s, "s--", ms=3, lw=1, color=COLORS[1], label="mean trial time")
    ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("iterations (round trips) per trial", color=COLORS[0])
    ax2.set_ylabel("mean trial time (s)", color=COLORS[1])
    ax.grid(True, alpha=0.3)
    _title(ax, "Number of iterations and average trial time vs time", [a])
    return Plot(
        f"iterations{_suffix(a, several)}",
        fig,
        f"{a.label}: round trips per trial (set from the previous size's time) and the mean trial time.",
    )


def _size_marks(ax, a: RunAnalysis, t0: float) -> None:
    starts = a.window_start_unix_s - t0
    ok = np.isfinite(starts)
    if not ok.any():
        return
    ax.vlines(starts[ok], 0, 1, transform=ax.get_xaxis_transform(), colors="0.6", lw=0.4, alpha=0.6)


def plot_power_time(a: RunAnalysis, several: bool) -> Plot | None:
    """Each node's power and the job's sum over time, sizes marked, baseline shaded."""
    if a.power is None:
        return None
    pw = a.power
    one = len(pw.nodes) == 1  # one node: its power is the job's, a second panel would repeat it
    fig, axes = _figure(rows=1) if one else _figure(rows=2, sharex=True)
    ax1, ax2 = axes[0], axes[-1]
    start = a.window_start_unix_s
    t0 = float(np.nanmin(start)) if np.isfinite(start).any() else 0.0
    if len(pw.series_t):
        ax1.fill_between(
            pw.series_t - t0, pw.series_min_w, pw.series_max_w, color=COLORS[0], alpha=0.25, lw=0
        )
        who = f"node 0 ({pw.nodes[0].host}): all the job's nodes" if one else "all nodes (summed)"
        ax1.plot(pw.series_t - t0, pw.series_w, color=COLORS[0], lw=0.8, label=who)
    many = len(pw.nodes) > 10
    for n in [] if one else pw.nodes:
        if len(n.plot_t):
            ax2.plot(
                n.plot_t - t0,
                n.plot_w,
                lw=0.5 if many else 0.8,
                alpha=0.6 if many else 0.9,
                label=None if many else f"node {n.index} ({n.host})",
            )
    for ax in axes:
        _size_marks(ax, a, t0)
        for window in (pw.baseline, pw.baseline_after):  # the idle baselines before and after the sweep
            if window:
                ax.axvspan(window[0] - t0, window[1] - t0, color="gold", alpha=0.3, lw=0)
        ax.grid(True, alpha=0.3)
    ax1.axvspan(0, 0, color="gold", alpha=0.3, label="idle baseline")
    ax1.plot([], [], color="0.6", lw=0.6, label="start of each message size")
    _mark_faults(a, tuple(axes), t0)
    ax1.set_ylabel(_power_ylabel("job power (W)", [a.caveat]), fontsize=9)
    ax2.set_xlabel("time since the first trial, rank 0's clock (s)")
    ax1.legend(fontsize=7, loc="upper left")
    if not one:
        ax2.set_ylabel(_power_ylabel("node power (W)", [a.caveat]), fontsize=9)
    if many:
        ax2.text(0.01, 0.95, f"{len(pw.nodes)} nodes", transform=ax2.transAxes, fontsize=8, va="top")
    elif not one:
        ax2.legend(fontsize=7, loc="upper left")
    _label_sizes(ax1, a, t0)
    _title(ax1, "Power over time (samples aligned to rank 0's clock, meter delay removed)", [a])
    ax1.set_title(ax1.get_title(), fontsize=10, pad=12)  # room for the size labels above the axes
    _caveat_text(fig, [a.caveat])
    return Plot(
        f"power_time{_suffix(a, several)}",
        fig,
        f"{a.label}: power of all nodes (band = min-max per plotted bin)"
        + ("" if one else " (top) and of each node (bottom)")
        + " over time; grey lines mark the start of each message size, the shaded spans are the idle "
        "baselines before and after the sweep, red dashed lines mark meter faults and red spans "
        "recorded gaps in sampling.",
        a.caveat,
    )


def _mark_faults(a: RunAnalysis, axes, t0: float) -> None:
    """Meter faults as red dashed lines (first occurrence), recorded sampling gaps as red spans."""
    faults = [f for n in a.power.nodes for c in n.channels for f in c.fault_records]
    gaps = [
        f for f in faults if f.kind == "gap" and np.isfinite(f.first_unix_s) and np.isfinite(f.last_unix_s)
    ]
    lines = [f.first_unix_s - t0 for f in faults if f.kind != "gap" and np.isfinite(f.first_unix_s)]
    for ax in axes:
        for g in gaps:
            ax.axvspan(g.first_unix_s - t0, g.last_unix_s - t0, color="red", alpha=0.2, lw=0)
        if lines:
            ax.vlines(lines, 0, 1, transform=ax.get_xaxis_transform(), colors="red", lw=0.8, linestyles="--")
    if gaps:
        axes[0].fill_between(
            [], [], [], color="red", alpha=0.2, lw=0, label=f"recorded sampling gap ({len(gaps)})"
        )
    if lines:
        axes[0].plot([], [], color="red", lw=0.8, ls="--", label=f"meter fault ({len(lines)})")


def _label_sizes(ax, a: RunAnalysis, t0: float) -> None:
    """Name a handful of message sizes just above the axes (where no legend or data can cover them)."""
    starts = a.window_start_unix_s - t0
    idx = np.flatnonzero(np.isfinite(starts))
    if not idx.size:
        return
    pick = idx[np.unique(np.linspace(0, idx.size - 1, min(6, idx.size)).astype(int))]
    for k in pick:
        ax.text(
            starts[k],
            1.005,
            format_size_bytes(int(a.bw.size_bytes[k])) + " B",
            transform=ax.get_xaxis_transform(),
            fontsize=7,
            color="0.3",
            ha="left",
            va="bottom",
        )


def plot_power_nodes(a: RunAnalysis, several: bool) -> Plot | None:
    """Each node's contribution to the job's power per size (stacked); none for a single node, whose
    one band would only repeat the job's power (power_bandwidth)."""
    if a.power is None:
        return None
    nodes = [n for n in a.power.nodes if n.samples]
    if len(nodes) < 2:
        return None
    fig, (ax,) = _figure()
    x = a.bw.size_bytes
    ys = np.vstack([np.nan_to_num(n.sizes.mean, nan=0.0) for n in nodes])
    many = len(nodes) > 10
    labels = () if many else [f"node {n.index} ({n.host})" for n in nodes]
    ax.stackplot(x, ys, labels=labels, alpha=0.85)
    _size_axis(ax, [x])
    ax.set_ylabel(_power_ylabel("power, stacked by node (W)", [a.caveat]))
    _title(ax, "Each node's contribution to the job's power", [a])
    if many:
        ax.text(0.01, 0.95, f"{len(nodes)} nodes", transform=ax.transAxes, fontsize=8, va="top")
    else:
        ax.legend(fontsize=8, loc="lower right")
    _caveat_text(fig, [a.caveat])
    return Plot(
        f"power_nodes{_suffix(a, several)}",
        fig,
        f"{a.label}: mean power of each node in each size's window, stacked: the top is the job's power.",
        a.caveat,
    )


def all_plots(runs: list[RunAnalysis]) -> list[Plot]:
    """Every figure for these runs (overlays first, then each run's own)."""
    runs = [a for a in runs if a.sizes]
    if not runs:
        return []
    several = len(runs) > 1
    out: list[Plot | None] = [
        plot_bandwidth(runs),
        plot_latency(runs),
        plot_power_bandwidth(runs),
        plot_energy_rate(runs),
        plot_energy_per_bit(runs),
        plot_cpu_cost(runs),
        *kinds.plots(runs),  # what the runs' kinds add (coll files: the collectives' figures)
    ]
    for a in runs:
        out += [
            plot_scaled(a, several) if np.any(a.bw.size_bytes > 0) else None,
            plot_iterations(a, several),
            plot_power_time(a, several),
            plot_power_nodes(a, several),
            plot_energy_parts(a, several),
            plot_model(a, several),
        ]
    return [p for p in out if p is not None]
