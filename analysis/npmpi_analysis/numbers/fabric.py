"""The fabric's power (`/power/fabric`: switches, a PDU feeding several nodes) and energy per bit in
three parts: the NODES (the job's power, as without a fabric), the FABRIC, and their TOTAL.

The fabric's channels are read like a node's (npmpi_analysis.numbers.node_power): on the time line of the
node whose power rank sampled them, in the same size windows and idle baselines. Each part gets
its power per size, its idle power before and after the sweep (combined as for the nodes,
npmpi_analysis.numbers.baselines), its energy per bit p/b and dynamic energy per bit (p - idle)/b with
their uncertainties (npmpi_analysis.numbers.compute). The total is the nodes' power plus the fabric's, σ
in quadrature; its idle is the sum of both idles in each baseline, combined the same way.

A switch's power belongs to all the traffic through it: the fabric's share is an upper bound for
one pair unless the switch carries nothing else, and its idle part is the switch's own idle
(docs/power.md). A run without /power/fabric gives no FabricResult and no fabric columns.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from npmpi.runfile.format import FABRIC_GROUP
from npmpi_analysis.numbers import baselines, compute
from npmpi_analysis.numbers.compute import FLAG_NAMES, FLAG_OK
from npmpi_analysis.numbers.faults import flag_recorded_gaps
from npmpi_analysis.numbers.node_power import NodePower, caveat_for, node_group_power
from npmpi_analysis.numbers.said import Said

PARTS = ("nodes", "fabric", "total")
UPPER_BOUND_NOTE = (
    "the fabric's share is an upper bound for this pair unless the switch carries no other traffic; "
    "its idle is the switch's own (docs/power.md)"
)


@dataclass
class EnergyPart:
    """One part (nodes, fabric or total): power and energy per bit per size, and its idle power."""

    name: str
    power_w: np.ndarray
    power_sigma_w: np.ndarray
    flag: np.ndarray
    idle_before: tuple[float, float]  # (W, σ) in the baseline before the sweep
    idle_after: tuple[float, float]
    idle: tuple[float, float]  # both combined (npmpi_analysis.numbers.baselines.combine_idle)
    active: tuple[float, float]  # the whole sweep
    labels: list[str]
    energy_pj_bit: np.ndarray = field(default_factory=lambda: np.zeros(0))
    energy_sigma_pj_bit: np.ndarray = field(default_factory=lambda: np.zeros(0))
    dynamic_pj_bit: np.ndarray = field(default_factory=lambda: np.zeros(0))  # NaN without a baseline
    dynamic_sigma_pj_bit: np.ndarray = field(default_factory=lambda: np.zeros(0))
    # where the power above idle is not above its sigma: the dynamic part's 2-sigma bound (compute)
    dynamic_not_above_idle: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    dynamic_bound_pj_bit: np.ndarray = field(default_factory=lambda: np.zeros(0))

    @property
    def caveat(self) -> str:
        return caveat_for(self.labels)


@dataclass
class FabricResult:
    """The fabric's channels in the run's windows, and the three parts' energy per bit."""

    group: NodePower  # the fabric's channels, read as a node's
    attrs: dict[str, Any]  # /power/fabric's attributes
    parts: dict[str, EnergyPart]
    gap_reasons: list[str]


def energy_figures(part: EnergyPart, b: np.ndarray, sigma_b: np.ndarray) -> EnergyPart:
    """Fill a part's energy per bit and dynamic energy per bit (in place) from the mean bandwidth."""
    part.energy_pj_bit, part.energy_sigma_pj_bit = compute.energy_per_bit_pj(
        b, sigma_b, part.power_w, part.power_sigma_w
    )
    idle_w, idle_sigma_w = part.idle
    if math.isfinite(idle_w):
        dyn_sigma_w = np.sqrt(part.power_sigma_w**2 + idle_sigma_w**2)
        part.dynamic_pj_bit, part.dynamic_sigma_pj_bit = compute.energy_per_bit_pj(
            b, sigma_b, part.power_w - idle_w, dyn_sigma_w
        )
        part.dynamic_not_above_idle, part.dynamic_bound_pj_bit = compute.not_above_idle(
            b, part.power_w - idle_w, dyn_sigma_w
        )
    else:
        part.dynamic_pj_bit = part.dynamic_sigma_pj_bit = np.full(len(b), np.nan)
        part.dynamic_not_above_idle, part.dynamic_bound_pj_bit = (
            np.zeros(len(b), bool),
            np.full(len(b), np.nan),
        )
    return part


def _sum(x: tuple[float, float], y: tuple[float, float]) -> tuple[float, float]:
    return x[0] + y[0], math.hypot(x[1], y[1])


def _part(name: str, w, sigma, flag, before, after, active, labels) -> EnergyPart:
    w, sigma = np.asarray(w, dtype=float), np.asarray(sigma, dtype=float)
    idle = baselines.combine_idle(before, after)
    return EnergyPart(name, w, sigma, np.asarray(flag, np.int8), before, after, idle, active, list(labels))


def _one(stats) -> tuple[float, float]:
    return float(stats.mean[0]), float(stats.sigma[0])


def energy_parts(power, fabric: NodePower, fabric_flag: np.ndarray, bw) -> dict[str, EnergyPart]:
    """The nodes (the job's PowerResult), the fabric (its NodePower) and their total."""
    nodes = _part(
        "nodes",
        power.job_w,
        power.job_sigma_w,
        power.job_flag,
        (power.idle_before_w, power.idle_before_sigma_w),
        (power.idle_after_w, power.idle_after_sigma_w),
        (power.active_w, power.active_sigma_w),
        power.labels,
    )
    fab = _part(
        "fabric",
        fabric.sizes.mean,
        fabric.sizes.sigma,
        fabric_flag,
        _one(fabric.idle_before),
        _one(fabric.idle_after),
        _one(fabric.active),
        [c.label for c in fabric.channels],
    )
    total = _part(
        "total",
        nodes.power_w + fab.power_w,
        np.hypot(nodes.power_sigma_w, fab.power_sigma_w),
        np.maximum(nodes.flag, fab.flag),
        _sum(nodes.idle_before, fab.idle_before),
        _sum(nodes.idle_after, fab.idle_after),
        _sum(nodes.active, fab.active),
        nodes.labels + fab.labels,
    )
    return {p.name: energy_figures(p, bw.mean_bit_s, bw.sigma_bit_s) for p in (nodes, fab, total)}


def analyse_fabric(run, power, bw, starts, ends, delay_override, said: Said) -> FabricResult | None:
    """The fabric's power and the three parts' energy per bit; None without /power/fabric, without
    node power, or without any fabric sample (a notice or problem says why)."""
    fabric = getattr(run, "fabric", None)
    if fabric is None:
        return None
    name = run.path.name
    if not fabric.channels:
        skipped = fabric.attrs.get("meters_skipped") or []
        skipped = [skipped] if isinstance(skipped, str) and skipped else list(skipped or [])
        why = f"every fabric meter was skipped (--meter-optional): {'; '.join(map(str, skipped))}"
        said.notice(f"{name}: no fabric power: {why if skipped else 'no fabric channel'}")
        return None
    if power is None:
        said.notice(f"{name}: the fabric's power is not analysed: the run has no node power")
        return None
    node = int(compute.float_attr(fabric.attrs, "node_index") or 0)
    baseline, after = baselines.baseline_windows(run.power_attrs)
    fs, fe = starts[np.isfinite(starts)], ends[np.isfinite(ends)]
    sweep = (float(fs.min()), float(fe.max())) if fs.size and fe.size else (math.nan, math.nan)
    windows = (baseline, after, sweep)
    group, _ = node_group_power(node, fabric, run, starts, ends, windows, delay_override, said, FABRIC_GROUP)
    if not group.samples:
        return None
    flag = group.sizes.flag.astype(np.int8)
    faults = [(f"fabric {c.kind}", f) for c in group.channels for f in c.fault_records]
    reasons = flag_recorded_gaps(faults, starts, ends, flag)
    parts = energy_parts(power, group, flag, bw)
    return FabricResult(group=group, attrs=dict(fabric.attrs), parts=parts, gap_reasons=reasons)


# ---------------------------------------------------------------- outputs


def _f(x) -> float | None:
    x = float(x)
    return x if math.isfinite(x) else None


def label_text(part: EnergyPart) -> str:
    """'measured', or the caveat (e.g. 'SIMULATED, not measured')."""
    return part.caveat or "measured"


def size_columns(fabric: FabricResult, k: int) -> dict[str, Any]:
    """The fabric's and the total's per-size columns of the CSV/JSON (the nodes' are power_w, …)."""
    row: dict[str, Any] = {}
    for name in ("fabric", "total"):
        p = fabric.parts[name]
        row.update(
            {
                f"{name}_power_w": float(p.power_w[k]),
                f"{name}_power_sigma_w": float(p.power_sigma_w[k]),
                f"{name}_power_flag": FLAG_NAMES[int(p.flag[k])] or FLAG_NAMES[FLAG_OK],
                f"{name}_power_label": label_text(p),
                f"{name}_energy_pj_bit": float(p.energy_pj_bit[k]),
                f"{name}_energy_sigma_pj_bit": float(p.energy_sigma_pj_bit[k]),
                f"{name}_dynamic_energy_pj_bit": float(p.dynamic_pj_bit[k]),
                f"{name}_dynamic_energy_sigma_pj_bit": float(p.dynamic_sigma_pj_bit[k]),
                f"{name}_dynamic_flag": "not above idle" if p.dynamic_not_above_idle[k] else "",
                f"{name}_dynamic_energy_bound_pj_bit": float(p.dynamic_bound_pj_bit[k]),
            }
        )
    row["fabric_power_flag_reason"] = fabric.gap_reasons[k] if k < len(fabric.gap_reasons) else ""
    return row


def _least(x: np.ndarray) -> int | None:
    x = np.asarray(x, dtype=float)
    ok = np.isfinite(x)
    return int(np.flatnonzero(ok)[np.argmin(x[ok])]) if ok.any() else None


def parts_summary(fabric: FabricResult, size_bytes: np.ndarray) -> dict[str, Any]:
    """Each part's figures at the size of least total energy per bit, its least energy per bit and
    its idle power (JSON summary's `energy_parts`)."""
    k = _least(fabric.parts["total"].energy_pj_bit)
    out: dict[str, Any] = {"size_bytes": int(size_bytes[k]) if k is not None else None}
    for name, p in fabric.parts.items():
        least = _least(p.energy_pj_bit)
        out[name] = {
            "label": label_text(p),
            "labels": sorted(set(p.labels)),
            "energy_pj_bit": _f(p.energy_pj_bit[k]) if k is not None else None,
            "energy_sigma_pj_bit": _f(p.energy_sigma_pj_bit[k]) if k is not None else None,
            "dynamic_energy_pj_bit": _f(p.dynamic_pj_bit[k]) if k is not None else None,
            "dynamic_energy_sigma_pj_bit": _f(p.dynamic_sigma_pj_bit[k]) if k is not None else None,
            "dynamic_not_above_idle": bool(p.dynamic_not_above_idle[k]) if k is not None else False,
            "dynamic_energy_bound_pj_bit": _f(p.dynamic_bound_pj_bit[k]) if k is not None else None,
            "min_energy_pj_bit": _f(p.energy_pj_bit[least]) if least is not None else None,
            "min_energy_size_bytes": int(size_bytes[least]) if least is not None else None,
            "idle_power_w": _f(p.idle[0]),
            "idle_power_sigma_w": _f(p.idle[1]),
            "idle_before_power_w": _f(p.idle_before[0]),
            "idle_before_power_sigma_w": _f(p.idle_before[1]),
            "idle_after_power_w": _f(p.idle_after[0]),
            "idle_after_power_sigma_w": _f(p.idle_after[1]),
            "active_power_w": _f(p.active[0]),
            "active_power_sigma_w": _f(p.active[1]),
        }
    out["note"] = UPPER_BOUND_NOTE
    return out


def group_summary(fabric: FabricResult) -> dict[str, Any]:
    """What the JSON summary's `fabric` adds to its channel rows: who sampled it, what was skipped."""
    a = fabric.attrs
    skipped = a.get("meters_skipped") or []
    return {
        "power_rank": a.get("power_rank"),
        "node_index": a.get("node_index"),
        "meter_specs": list(a.get("meter_specs") or []),
        "meters_skipped": [skipped] if isinstance(skipped, str) else list(skipped),
    }


def _pm(x, s, pm: str) -> str:
    if x is None:
        return "-"
    return f"{x:.4g} {pm} {s:.2g}" if s is not None else f"{x:.4g}"


def _dynamic_cell(p: dict[str, Any], pm: str) -> str:
    """A part's dynamic pJ/bit ± σ, or its 2σ bound where it is not above idle."""
    if p.get("dynamic_not_above_idle") and p.get("dynamic_energy_bound_pj_bit") is not None:
        return f"< {p['dynamic_energy_bound_pj_bit']:.2g} (2σ)"
    return _pm(p["dynamic_energy_pj_bit"], p["dynamic_energy_sigma_pj_bit"], pm)


def part_cells(parts: dict[str, Any], pm: str = "±") -> tuple[list[str], list[list[str]]]:
    """The summary's rows of the three parts (headers, cells): energy per bit at the size of least
    total, dynamic part, idle before/after, least energy per bit, label."""
    headers = [
        "part",
        f"pJ/bit {pm} σ",
        f"dynamic pJ/bit {pm} σ",
        f"idle W {pm} σ",
        "idle before W",
        "idle after W",
        "least pJ/bit (at B)",
        "power is",
    ]
    rows = []
    for name in PARTS:
        p = parts[name]
        least = p["min_energy_pj_bit"]
        rows.append(
            [
                name,
                _pm(p["energy_pj_bit"], p["energy_sigma_pj_bit"], pm),
                _dynamic_cell(p, pm),
                _pm(p["idle_power_w"], p["idle_power_sigma_w"], pm),
                _pm(p["idle_before_power_w"], p["idle_before_power_sigma_w"], pm),
                _pm(p["idle_after_power_w"], p["idle_after_power_sigma_w"], pm),
                f"{least:.4g} ({p['min_energy_size_bytes']})" if least is not None else "-",
                p["label"],
            ]
        )
    return headers, rows


def fabric_line(f: dict[str, Any], pm: str = "±") -> str:
    """The summary's line on the fabric's channels: who sampled them, idle and active power."""
    chans = ", ".join(
        f"{c['kind']} {c['spec']} ({c['label'] or 'unlabelled'}, every {c['sample_interval_s']:.3g} s)"
        for c in f["channels"]
    )
    return (
        f"fabric (sampled by rank {f['power_rank']} on node {f['node_index']}, {f['host']}): idle "
        f"{_pm(f['idle_power_w'], f['idle_power_sigma_w'], pm)} W, active "
        f"{_pm(f['active_power_w'], f['active_power_sigma_w'], pm)} W, {f['samples']} samples, "
        f"{f['faults']} fault(s); {chans}"
    )
