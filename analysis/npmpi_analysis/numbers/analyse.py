"""One run's analysis: bandwidth, latency, power, energy rate, energy per bit, and its summary."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from npmpi_analysis.numbers import (
    compute,
    conditions,
    cpu_cost,
    kinds,
    model_energy,
    model_summary,
)
from npmpi_analysis.numbers.compute import FLAG_NAMES, Bandwidth, EnergyRate
from npmpi_analysis.numbers.fabric import (
    FabricResult,
    analyse_fabric,
)
from npmpi_analysis.numbers.node_power import PowerResult, analyse_power, no_power_notice
from npmpi_analysis.numbers.run_summary import size_rows, summarise  # noqa: F401 (size_rows: the API's)
from npmpi_analysis.numbers.said import Said
from npmpi_analysis.numbers.slurm_energy import slurm_energy_notice


@dataclass
class RunAnalysis:
    """Everything the outputs show about one run file."""

    label: str
    path: str
    attrs: dict[str, Any]
    layout: dict[str, Any]
    bw: Bandwidth
    window_start_unix_s: np.ndarray
    window_end_unix_s: np.ndarray
    power: PowerResult | None
    rate: EnergyRate | None
    energy_pj_bit: np.ndarray | None
    energy_sigma_pj_bit: np.ndarray | None
    dynamic_w: np.ndarray | None
    dynamic_pj_bit: np.ndarray | None
    dynamic_sigma_pj_bit: np.ndarray | None
    correlation: float
    meter_delay_override_s: float | None
    notices: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    fabric: FabricResult | None = None  # /power/fabric: the fabric's and the total's energy per bit
    # per size: True where the power above idle is not above its own sigma (or negative): the dynamic
    # energy is then only bounded, by dynamic_bound_pj_bit (its value plus 2 sigma, never below 2 sigma)
    dynamic_not_above_idle: np.ndarray | None = None
    dynamic_bound_pj_bit: np.ndarray | None = None
    cpu: cpu_cost.CpuCost | None = None  # CPU per KiB and % of a core per size and rank (format 1.7)
    kind_figures: Any = None  # the numbers the file's kind adds (npmpi_analysis/numbers/kinds.py), else None
    conditions: conditions.CondFigures | None = None  # core frequency, throttling, wire bytes, else None
    model: Any = None  # numbers/model.RunModel: the regimes' alpha, beta and energy (None: see model_note)
    model_note: str = ""  # why there is no model
    resolution: Any = None  # numbers/model_energy.Resolution: what the meters resolve per size

    @property
    def sizes(self) -> int:
        return len(self.bw.size_bytes)

    @property
    def caveat(self) -> str:
        return self.power.caveat if self.power else ""

    def flag_names(self) -> list[str]:
        if self.power is None:
            return [""] * self.sizes
        return [FLAG_NAMES[int(c)] for c in self.power.job_flag]

    def summary(self) -> dict[str, Any]:
        return summarise(self)


MAX_LABEL_CHARS = 60  # figure and np.out file names take the label: far below a name's 255 bytes


def run_label(path_name: str, taken: set[str]) -> str:
    """A short unique label for legends and file names: the file's stem, made unique."""
    stem = re.sub(r"[^A-Za-z0-9_.+-]+", "_", path_name.rsplit(".", 1)[0])[:MAX_LABEL_CHARS] or "run"
    label, k = stem, 2
    while label in taken:
        label = f"{stem}-{k}"
        k += 1
    taken.add(label)
    return label


def trial_windows(pp) -> tuple[np.ndarray, np.ndarray]:
    """Each size's window on rank 0's clock: first trial start to last trial end (trials that ran)."""
    ran = np.isfinite(pp.trial_s)
    starts = np.where(ran, pp.trial_start_unix_s, np.inf)
    ends = np.where(ran, pp.trial_end_unix_s, -np.inf)
    with np.errstate(invalid="ignore"):
        s = np.min(np.where(np.isnan(starts), np.inf, starts), axis=1) if len(pp) else np.zeros(0)
        e = np.max(np.where(np.isnan(ends), -np.inf, ends), axis=1) if len(pp) else np.zeros(0)
    # a trial that ran without a wall-clock stamp leaves the size without a window
    missing = np.any(ran & (~np.isfinite(pp.trial_start_unix_s) | ~np.isfinite(pp.trial_end_unix_s)), axis=1)
    bad = missing | ~np.isfinite(s) | ~np.isfinite(e) | (e < s)
    s = np.where(bad, np.nan, s)
    e = np.where(bad, np.nan, e)
    return s.astype(float), e.astype(float)


def analyse_run(run, label: str, meter_delay_s: float | None = None, model_options=None) -> RunAnalysis:
    """Analyse a loaded run (npmpi.runfile.reader.Run); problems found are listed, not raised.
    `model_options`: numbers/model_summary.ModelOptions (default: breaks found in the data)."""
    a = _analyse(run, label, meter_delay_s)
    a.model, a.model_note, refused = model_summary.fitted(a, model_options)
    a.resolution = model_energy.run_resolution(a)
    if refused:  # the user's --model-breaks do not fit this run
        a.problems.append(a.model_note)
    return a


def _analyse(run, label: str, meter_delay_s: float | None) -> RunAnalysis:
    pp = run.pingpong
    bw = compute.bandwidth(pp.size_bytes, pp.iterations, pp.trial_s, *compute.run_mode_factors(run.attrs))
    starts, ends = trial_windows(pp)
    said = Said(list(run.notices))
    notices, problems = said.notices, said.problems
    name = run.path.name
    if len(pp) == 0:
        problems.append(f"{name}: /pingpong holds no completed message size: nothing to analyse")
    power = analyse_power(run, starts, ends, meter_delay_s)
    skipped = no_power_notice(run)
    if skipped:
        notices.append(skipped)
    slurm = slurm_energy_notice(run)  # Slurm's own count of the step's energy, beside npmpi's (1.6)
    if slurm:
        notices.append(slurm)
    no_window = np.isnan(starts)
    if power is not None and no_window.any():
        k = int(np.argmax(no_window))
        problems.append(
            f"{name}: /pingpong/trial_start_unix_s, trial_end_unix_s: {int(no_window.sum())} size(s) without "
            f"valid wall-clock trial times (first: row {k}, {int(pp.size_bytes[k])} B): no power for them"
        )
    ebw = compute.energy_basis(bw, kinds.ranks_moving(run.attrs))  # energy per bit: every rank's bits
    rate = epb = epb_sigma = dyn_w = dyn = dyn_sigma = low = bound = None
    corr = math.nan
    if power is not None:
        notices.extend(power.notices)
        problems.extend(power.problems)
        b, sb = ebw.mean_bit_s, ebw.sigma_bit_s
        rate = compute.energy_rate(b, sb, power.job_w, power.job_sigma_w)
        epb, epb_sigma = compute.energy_per_bit_pj(b, sb, power.job_w, power.job_sigma_w)
        if math.isfinite(power.idle_w):
            dyn_w = power.job_w - power.idle_w
            dyn_sigma_w = np.sqrt(power.job_sigma_w**2 + power.idle_sigma_w**2)
            dyn, dyn_sigma = compute.energy_per_bit_pj(b, sb, dyn_w, dyn_sigma_w)
            low, bound = compute.not_above_idle(b, dyn_w, dyn_sigma_w)
        corr = compute.correlation(b, rate.rate_bit_j)
    fabric = analyse_fabric(run, power, ebw, starts, ends, meter_delay_s, said)
    cpu, cond = cpu_cost.analyse_cpu(run, bw.trials_run), conditions.analyse_conditions(run, bw.trials_run)
    notices += (cpu.impossible if cpu is not None else []) + (cond.warnings if cond is not None else [])
    return RunAnalysis(
        label=label,
        path=str(run.path),
        attrs=dict(run.attrs),
        layout={k: list(np.asarray(v).tolist()) for k, v in run.layout.items()},
        bw=bw,
        window_start_unix_s=starts,
        window_end_unix_s=ends,
        power=power,
        rate=rate,
        energy_pj_bit=epb,
        energy_sigma_pj_bit=epb_sigma,
        dynamic_w=dyn_w,
        dynamic_pj_bit=dyn,
        dynamic_sigma_pj_bit=dyn_sigma,
        correlation=corr,
        meter_delay_override_s=meter_delay_s,
        notices=notices,
        problems=problems,
        fabric=fabric,
        dynamic_not_above_idle=low,
        dynamic_bound_pj_bit=bound,
        cpu=cpu,
        kind_figures=kinds.figures(run, bw, power),
        conditions=cond,
    )
