"""The model's figure: each size's measured time and energy of one message beside the fitted regimes
(log-log), their relative residuals below, the breaks marked (numbers/model.py)."""

from __future__ import annotations

import numpy as np

from npmpi_analysis.figures.render import FIGSIZE, Plot, caveat_banner, size_axis


def _panel(ax_top, ax_res, x, measured, fitted, breaks, ylabel: str, color: str) -> None:
    ok = np.isfinite(measured) & (measured > 0)
    ax_top.plot(x[ok], measured[ok], "o", ms=3, color=color, label="measured (mean of trials)")
    line = np.isfinite(fitted) & (fitted > 0)
    ax_top.plot(x[line], fitted[line], "-", lw=1.2, color="black", label="model")
    ax_top.set_yscale("log")
    ax_top.set_ylabel(ylabel)
    both = ok & np.isfinite(fitted)
    with np.errstate(divide="ignore", invalid="ignore"):
        res = 100.0 * (measured - fitted) / fitted
    ax_res.plot(x[both], res[both], ".", ms=4, color=color)
    ax_res.axhline(0, color="gray", lw=0.6)
    ax_res.set_ylabel("residual %")
    for b in breaks:
        for ax in (ax_top, ax_res):
            ax.axvline(b, color="gray", ls=":", lw=0.8)
    size_axis(ax_res, [x])
    size_axis(ax_top, [x])
    ax_top.set_xlabel("")
    ax_top.tick_params(labelbottom=False)
    ax_top.legend(fontsize=8, loc="upper left")


def plot_model(a, several: bool) -> Plot | None:
    """Time (and, with power, energy) of one message: measured, fitted, residuals."""
    m = a.model
    if m is None:
        return None
    from matplotlib.figure import Figure

    energy = m.energy_j is not None and np.isfinite(m.fit_energy_j).any()
    cols = 2 if energy else 1
    fig = Figure(figsize=(FIGSIZE[0] * (1.6 if energy else 1.0), FIGSIZE[1] * 1.3))
    grid = fig.add_gridspec(2, cols, height_ratios=(3, 1), hspace=0.08, wspace=0.3)
    fig.subplots_adjust(left=0.09, right=0.97, bottom=0.1, top=0.86)
    x = a.bw.size_bytes.astype(float)
    panels = [(m.time_s * 1e6, m.fit_time_s * 1e6, "time of one message (us)", "tab:blue")]
    if energy:
        panels.append((m.energy_j * 1e9, m.fit_energy_j * 1e9, "energy of one message (nJ)", "tab:red"))
    for col, (measured, fitted, ylabel, color) in enumerate(panels):
        top = fig.add_subplot(grid[0, col])
        res = fig.add_subplot(grid[1, col], sharex=top)
        _panel(top, res, x, measured, fitted, m.breaks_bytes, ylabel, color)
    source = "breaks given" if m.breaks_source == "given" else "breaks found in the data"
    fig.suptitle(
        f"{a.label}: t = alpha + bits/beta{' and E = E0 + Eb bits' if energy else ''} per regime "
        f"({len(m.regimes)} regime(s), {source})",
        fontsize=10,
    )
    caveat_banner(fig, [a.caveat])
    return Plot(
        f"model{'_' + a.label if several else ''}",
        fig,
        f"{a.label}: the time{' and energy' if energy else ''} of one message per size, measured (mean of "
        "the trials) and fitted by the model's regimes (dotted lines: breaks), with the relative residuals.",
        a.caveat,
    )
