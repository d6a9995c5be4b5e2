"""The trend figure (`npmpi-analyze --trend`): each followed figure against the runs' start dates;
between changes the runs' median and their spread (± K_MAD x MAD x MAD_SCALE) as a band, a flagged
change circled with the conditions that changed written beside it."""

from __future__ import annotations

import math
from datetime import datetime, timezone

from npmpi_analysis.figures.render import FIGSIZE, Plot
from npmpi_analysis.trend import numbers as tr


def _when(p: tr.TrendPoint) -> datetime:
    return datetime.fromtimestamp(p.start_unix_s, timezone.utc)


def trend_plot(t: tr.Trend) -> Plot:
    from matplotlib.dates import AutoDateLocator, ConciseDateFormatter
    from matplotlib.figure import Figure

    fig = Figure(figsize=(FIGSIZE[0], FIGSIZE[1] * 1.5))
    axes = fig.subplots(len(tr.FIGURES), 1, sharex=True, squeeze=False)[:, 0]
    fig.subplots_adjust(left=0.13, right=0.97, top=0.93, bottom=0.08, hspace=0.12)
    dated = [k for k, p in enumerate(t.points) if math.isfinite(p.start_unix_s)]
    for ax, (key, head, unit, scale) in zip(axes, tr.FIGURES, strict=True):
        x = [_when(t.points[k]) for k in dated]
        y = [t.points[k].values[key] * scale for k in dated]
        ax.plot(x, y, "o-", color="tab:blue", markersize=4, lw=1)
        for first, last, med, mad in t.stretches.get(key, []):
            span = [_when(p) for p in t.points[first : last + 1] if math.isfinite(p.start_unix_s)]
            if not span:
                continue
            band = tr.K_MAD * tr.MAD_SCALE * mad * scale
            ax.fill_between(
                [span[0], span[-1]], med * scale - band, med * scale + band, color="gray", alpha=0.2
            )
            ax.plot([span[0], span[-1]], [med * scale] * 2, color="gray", lw=0.8)
        for k in dated:
            p = t.points[k]
            if key in p.changes:
                xi, yi = _when(p), p.values[key] * scale
                ax.plot([xi], [yi], "o", ms=11, mfc="none", mec="firebrick", mew=1.5)
                why = ", ".join(f"{n} {a}->{b}" for n, (a, b) in p.changed_conditions.items())
                if why:
                    ax.annotate(
                        why[:60], (xi, yi), xytext=(-6, 8), textcoords="offset points", fontsize=7, ha="right"
                    )
        ax.set_ylabel(f"{head}\n({unit})", fontsize=8)
        ax.grid(True, alpha=0.3)
    locator = AutoDateLocator()
    axes[-1].xaxis.set_major_locator(locator)
    axes[-1].xaxis.set_major_formatter(ConciseDateFormatter(locator))
    axes[-1].set_xlabel("run start (UTC)")
    fig.suptitle(f"npmpi trend: {len(t.points)} runs; circled: a change ({tr.K_MAD:g} MAD rule)", fontsize=10)
    return Plot(
        "trend",
        fig,
        f"Latency, peak bandwidth and least energy per bit of each run by start date; band: between "
        f"changes, the runs' median ± {tr.K_MAD:g} x MAD x {tr.MAD_SCALE}; circled: {tr.CHANGE_RULE}.",
    )
