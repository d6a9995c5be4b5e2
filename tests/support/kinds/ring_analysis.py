"""The ring kind's own numbers in the analysis, as a contributor would add them (tests/test_kinds.py;
docs/architecture.md, "Adding a benchmark kind"): one value registered by name through
NPMPI_ANALYSIS_KINDS=ring=ring_analysis:KIND, its hooks in this module; nothing else in the analysis
knows the ring. Its rows stay a run's; it adds, per size, the time of one step of the ring (every
member passes its message one hop), each link's bandwidth over that step and, with power, the
energy of one step."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from npmpi_analysis.numbers.kinds import KindAnalysis

KIND = KindAnalysis("ring", rows="ring_analysis", words="a ring file")


@dataclass
class RingFigures:
    members: int
    step_s: np.ndarray  # the best trial over its iterations: one step of the ring
    link_bit_s: np.ndarray  # a message over one step: each link carries one message a step
    energy_per_step_j: np.ndarray | None

    def summary(self) -> dict:
        return {"ring": {"members": self.members}}

    def size_columns(self, k: int) -> dict:
        row = {"ring_step_s": float(self.step_s[k]), "ring_link_bit_s": float(self.link_bit_s[k])}
        if self.energy_per_step_j is not None:
            row["ring_energy_per_step_j"] = float(self.energy_per_step_j[k])
        return row


def figures(run, bw, power) -> RingFigures:
    members = int(run.attrs.get("bytes_per_iteration_factor", 0))
    step = bw.best_s / bw.iterations
    link = 8.0 * bw.size_bytes / step
    energy = power.job_w * step if power is not None else None
    return RingFigures(members, step, link, energy)


def text(a, render_table) -> str:
    r = a.kind_figures
    rows = [
        [str(int(m)), f"{s * 1e6:.4g}", f"{b / 1e9:.4g}"]
        for m, s, b in zip(a.bw.size_bytes, r.step_s, r.link_bit_s, strict=True)
    ]
    heading = f"ring of {r.members} ranks: one step = every member's message one hop"
    return heading + "\n" + render_table(["bytes", "step us", "link Gbit/s"], rows)


def measurement(attrs: dict) -> str:
    members = attrs.get("bytes_per_iteration_factor")
    known = isinstance(members, (int, np.integer)) or (isinstance(members, float) and math.isfinite(members))
    return f"a ring of {int(members)} ranks" if known else "a ring"
