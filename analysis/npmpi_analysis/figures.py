"""A figure as the analysis hands it out (npmpi_analysis.plots draws them): `Plot`, and rendering
every figure to file bytes without one figure's failure stopping the others."""

from __future__ import annotations

import io
from dataclasses import dataclass

DPI = 100


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
