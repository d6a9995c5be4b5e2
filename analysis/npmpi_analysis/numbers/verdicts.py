"""Differences that are real: each later run's ratio to the first, per size and per model parameter,
with a 95 % interval from resampling both runs' trials (and their power), and a verdict: 'same'
within noise when the interval holds 1, else 'faster'/'slower' (time), 'better'/'worse' (energy)
(docs/analysis.md, "Models").

Per size: the ratio of the mean time of one message (later / first) and of the energy of one
message, the power drawn from its window mean's uncertainty. Per parameter: the first run's regimes,
the later run fitted with the first run's breaks so that the regimes are the same sizes (and
another seed, so that the two runs are resampled apart); alpha's
ratio (a larger alpha is slower), beta's (a larger beta is faster) and the energy per bit's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from npmpi_analysis.numbers.compute import FLAG_OK
from npmpi_analysis.numbers.model import (
    LEVEL,
    ModelError,
    mean_times,
    resample_means,
    trial_times_per_message,
)
from npmpi_analysis.numbers.model_energy import fit_model, power_mean_sigma

SAME, FASTER, SLOWER, BETTER, WORSE = "same", "faster", "slower", "better", "worse"
RESAMPLES = 1000
SEED = 20091


@dataclass
class Ratio:
    """later / first, its 95 % interval and the verdict."""

    ratio: float
    lo: float
    hi: float
    verdict: str  # same, faster, slower, better, worse ('' where undefined)

    def text(self) -> str:
        """'same within noise' or 'slower by 12 % [8, 15]'."""
        if not self.verdict:
            return "-"
        if self.verdict == SAME:
            return f"same within noise ({self.ratio:.3g} [{self.lo:.3g}, {self.hi:.3g}])"
        pct = [abs(v - 1) * 100 for v in (self.ratio, self.lo, self.hi)]
        low, high = sorted(pct[1:])
        return f"{self.verdict} by {pct[0]:.3g} % [{low:.3g}, {high:.3g}]"


def judge(ratio: float, samples: np.ndarray, up: str, down: str) -> Ratio:
    """The interval of `samples` and the verdict: `up` when it lies above 1, `down` below."""
    ok = samples[np.isfinite(samples)]
    if not math.isfinite(ratio) or ok.size < 0.9 * max(samples.size, 1) or ok.size < 10:
        return Ratio(ratio, math.nan, math.nan, "")
    lo, hi = (float(v) for v in np.percentile(ok, [(100 - LEVEL) / 2, 100 - (100 - LEVEL) / 2]))
    verdict = SAME if lo <= 1.0 <= hi else (up if lo > 1.0 else down)
    return Ratio(ratio, lo, hi, verdict)


def _rows_of(a, sizes: list[int]) -> np.ndarray:
    first: dict[int, int] = {}
    for k, s in enumerate(a.bw.size_bytes):
        first.setdefault(int(s), k)
    return np.array([first[s] for s in sizes], dtype=np.int64)


def _draws(
    a, rows: np.ndarray, rng, b: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray | None]:
    """(mean times, their resamples [b, n], energies of one message, their resamples) at `rows`; a
    size of one trial has no spread to judge by: its resamples are NaN (no verdict)."""
    per_msg, count = trial_times_per_message(a)
    per_msg, count = per_msg[rows], count[rows]
    t = mean_times(per_msg, count)
    boot_t = resample_means(per_msg, count, rng, b)[0]
    boot_t[:, count < 2] = np.nan
    if a.power is None:
        return t, boot_t, None, None
    p = np.asarray(a.power.job_w, dtype=float)[rows]
    flagged = np.asarray(a.power.job_flag)[rows] != FLAG_OK
    u = power_mean_sigma(a)[rows]
    p = np.where(flagged, np.nan, p)
    boot_p = p[None, :] + rng.standard_normal(boot_t.shape) * u[None, :]
    return t, boot_t, p * t, boot_p * boot_t


def size_verdicts(first, later, sizes: list[int], resamples: int = RESAMPLES, seed: int = SEED) -> dict:
    """{"time": [Ratio per size], "energy": [Ratio per size] or None}: `later` against `first`."""
    rng = np.random.default_rng(seed)
    t0, bt0, e0, be0 = _draws(first, _rows_of(first, sizes), rng, resamples)
    t1, bt1, e1, be1 = _draws(later, _rows_of(later, sizes), rng, resamples)
    with np.errstate(divide="ignore", invalid="ignore"):
        time = [judge(t1[k] / t0[k], bt1[:, k] / bt0[:, k], SLOWER, FASTER) for k in range(len(sizes))]
        energy = None
        if e0 is not None and e1 is not None:
            energy = [judge(e1[k] / e0[k], be1[:, k] / be0[:, k], WORSE, BETTER) for k in range(len(sizes))]
    return {"time": time, "energy": energy}


def parameter_verdicts(first, later) -> tuple[list[dict], str]:
    """Per regime of the first run's model: alpha's, beta's and the energy per bit's ratio (later /
    first) with verdicts; and a note when there is nothing to compare (no model, other sizes)."""
    m0 = first.model
    if m0 is None or later.model is None:
        return [], "no model in one of the runs"
    try:  # the later run in the first run's regimes, resampled apart from the first (another seed)
        m1 = fit_model(later, list(m0.breaks_bytes), m0.resamples, m0.seed + 1)
    except ModelError as exc:
        return [], f"the first run's regimes do not fit the other ({exc})"
    out = []
    for r0, r1 in zip(m0.regimes, m1.regimes, strict=False):
        row = {"size_lo_bytes": r0.size_lo_bytes, "size_hi_bytes": r0.size_hi_bytes}
        with np.errstate(divide="ignore", invalid="ignore"):
            row["alpha"] = judge(
                r1.alpha_s.value / r0.alpha_s.value, r1.alpha_boot / r0.alpha_boot, SLOWER, FASTER
            )
            beta = r1.beta_bit_s.value / r0.beta_bit_s.value
            row["beta"] = judge(beta, r0.slope_boot / r1.slope_boot, FASTER, SLOWER)
            e0, e1 = r0.energy, getattr(r1, "energy", None)
            if (
                e0 is not None
                and e1 is not None
                and e0.per_bit_boot is not None
                and e1.per_bit_boot is not None
            ):
                row["energy_per_bit"] = judge(
                    e1.per_bit_j.value / e0.per_bit_j.value, e1.per_bit_boot / e0.per_bit_boot, WORSE, BETTER
                )
        out.append(row)
    return out, ""


def summary_lines(analyses, sizes: list[int]) -> list[str]:
    """The console's verdicts: per later run, how many sizes are the same, faster or slower (the
    largest difference with its interval), and each model parameter's verdict."""
    first = analyses[0]
    out = [
        "differences beyond noise (95 % intervals, resampling both runs' trials; ratios to the first run):"
    ]
    for later in analyses[1:]:
        v = size_verdicts(first, later, sizes)
        for what, rows in (("time per message", v["time"]), ("energy per message", v["energy"])):
            if rows:
                out.append(f"  {later.label} vs {first.label}, {what}: {_counts(rows, sizes)}")
        params, note = parameter_verdicts(first, later)
        for row in params:
            where = f"{row['size_lo_bytes']}-{row['size_hi_bytes']} B"
            parts = [
                f"{name} {row[name].text()}" for name in ("alpha", "beta", "energy_per_bit") if name in row
            ]
            out.append(f"  {later.label} vs {first.label}, model {where}: " + "; ".join(parts))
        if note:
            out.append(f"  {later.label} vs {first.label}, model: not compared: {note}")
    return out


def _counts(rows: list[Ratio], sizes: list[int]) -> str:
    words = [r.verdict for r in rows]
    parts = [f"{words.count(w)} size(s) {w if w != SAME else 'same within noise'}" for w in
             (SAME, FASTER, SLOWER, BETTER, WORSE) if words.count(w)]  # fmt: skip
    moved = [k for k, r in enumerate(rows) if r.verdict not in (SAME, "")]
    if moved:
        k = max(moved, key=lambda j: abs(rows[j].ratio - 1))
        parts.append(f"largest at {sizes[k]} B: {rows[k].text()}")
    return "; ".join(parts) or "nothing to compare"


def csv_columns(first, later, sizes: list[int]) -> dict[str, list]:
    """The comparison CSV's verdict columns of `later`: time and energy ratio, lo, hi, verdict."""
    v = size_verdicts(first, later, sizes)
    out: dict[str, list] = {}
    for what, rows in (("time", v["time"]), ("energy", v["energy"])):
        if rows is None:
            continue
        lab = later.label
        out[f"{lab}_{what}_ratio"] = [r.ratio for r in rows]
        out[f"{lab}_{what}_ratio_lo"] = [r.lo for r in rows]
        out[f"{lab}_{what}_ratio_hi"] = [r.hi for r in rows]
        out[f"{lab}_{what}_verdict"] = [r.verdict for r in rows]
    return out
