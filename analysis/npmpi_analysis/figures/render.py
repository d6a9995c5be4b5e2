"""A figure as the analysis hands it out (npmpi_analysis.figures.run draws them): `Plot`, rendering
every figure to file bytes without one figure's failure stopping the others, and the parts every
figure shares (the message-size axis, the estimated/simulated banner)."""

from __future__ import annotations

import io
from dataclasses import dataclass

import numpy as np

from npmpi.core.units import format_size_bytes

DPI = 100
FIGSIZE = (8.0, 5.0)  # inches: every figure of one axis


@dataclass
class Plot:
    name: str  # file name without extension
    figure: object  # matplotlib.figure.Figure
    caption: str
    caveat: str = ""  # e.g. "ESTIMATED, not measured": also written into the file's metadata

    def render(self, fmt: str) -> bytes:
        buf = io.BytesIO()
        desc = f"{self.caption} Power: {self.caveat}." if self.caveat else self.caption
        if fmt == "pdf":
            meta = {"Title": self.name, "Subject": desc}
        else:
            meta = {"Title": self.name, "Description": desc}
        self.figure.savefig(buf, format=fmt, dpi=DPI, metadata=meta)
        return buf.getvalue()


def render_all(plots: list[Plot], fmt: str) -> tuple[list[tuple[Plot, bytes]], list[str]]:
    """(plot, file bytes) of every figure that can be drawn, and a note for each that cannot (e.g.
    nothing positive to put on a logarithmic axis): a figure never stops the other outputs."""
    done, skipped = [], []
    for p in plots:
        try:
            done.append((p, p.render(fmt)))
        except (ValueError, OverflowError, FloatingPointError, RuntimeError) as exc:
            skipped.append(f"figure {p.name} not drawn: {str(exc)[:200]}")
    return done, skipped


def write_figures(
    plots: list[Plot], fmt: str, files: dict | None, force: bool, for_report: bool, write
) -> tuple[int, list[tuple], list[str]]:
    """Draw the figures into `files` (name -> path, None without --plots) with `write(path, data,
    force)`, and as PNG for an HTML report when `for_report` (drawn once when the files are PNG);
    returns (figures written, the report's (name, caption, png, caveat), notes of figures skipped)."""
    pngs: dict[str, bytes] = {}
    skipped: list[str] = []
    count = 0
    if files is not None:
        rendered, skipped = render_all(plots, fmt)
        for p, data in rendered:
            if fmt == "png":
                pngs[p.name] = data
            write(files[p.name], data, force)
        count = len(rendered)
    if for_report and (files is None or fmt != "png"):
        rendered, skipped = render_all(plots, "png")
        pngs = {p.name: data for p, data in rendered}
    return count, [(p.name, p.caption, pngs[p.name], p.caveat) for p in plots if p.name in pngs], skipped


CAVEAT_COLOR = "firebrick"


def size_axis(ax, sizes: list[np.ndarray]) -> None:
    """Log-scaled message-size axis with ticks every factor of 4 labelled 1, 4, …, 1K, 4K, … 4M."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    ax.set_xscale("log", base=2)
    allsizes = np.concatenate([s[s > 0] for s in sizes]) if sizes else np.zeros(0)
    if allsizes.size:
        lo, hi = int(np.floor(np.log2(allsizes.min()))), int(np.ceil(np.log2(allsizes.max())))
        step = 2 if hi - lo <= 16 else 4
        ticks = [2.0**k for k in range(lo - lo % 2, hi + 1, step)]
        ax.xaxis.set_major_locator(FixedLocator(ticks))
        ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _pos: format_size_bytes(round(x))))
    ax.set_xlabel("message size (bytes; K = 2^10, M = 2^20)")
    ax.grid(True, which="major", alpha=0.3)


def caveat_banner(fig, caveats: list[str]) -> None:
    """The red line above a figure saying the power is estimated or simulated (nothing if measured)."""
    texts = sorted({c for c in caveats if c})
    if texts:
        fig.text(
            0.5,
            0.995,
            "Power is " + "; ".join(texts),
            color=CAVEAT_COLOR,
            fontsize=9,
            fontweight="bold",
            ha="center",
            va="top",
        )
