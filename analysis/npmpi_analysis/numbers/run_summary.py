"""A run's analysis as plain values: its summary (the JSON's, the console's source) and its per-size
rows (the CSV's columns), from an analysed run (numbers/analyse.RunAnalysis)."""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np

from npmpi_analysis.numbers import (
    compute,
    conditions,
    cpu_cost,
    model_drift,
    model_energy,
    model_summary,
    precision,
)
from npmpi_analysis.numbers.compute import FLAG_NAMES, FLAG_OK
from npmpi_analysis.numbers.fabric import (
    group_summary,
    parts_summary,
    size_columns,
)


def _f(x) -> float | None:
    """A JSON-safe float: None for NaN and infinities."""
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else None


def _argmax(x: np.ndarray) -> int | None:
    x = np.asarray(x, dtype=float)
    if x.size == 0 or not np.isfinite(x).any():
        return None
    return int(np.nanargmax(np.where(np.isfinite(x), x, np.nan)))


def _argmin(x: np.ndarray) -> int | None:
    x = np.asarray(x, dtype=float)
    if x.size == 0 or not np.isfinite(x).any():
        return None
    return int(np.nanargmin(np.where(np.isfinite(x), x, np.nan)))


def summarise(a) -> dict[str, Any]:
    """The key figures and the run's metadata as plain JSON-able values."""
    out = _run_metadata(a)
    _add_bandwidth_figures(out, a)
    if a.cpu is not None:
        out.update(cpu_cost.summary(a.cpu, a.bw.size_bytes, _argmax(a.bw.peak_bit_s)))
    if a.kind_figures is not None:
        out.update(a.kind_figures.summary())
    out.update(conditions.summary(a.conditions) if a.conditions is not None else {})
    out["has_power"] = a.power is not None
    out["model"] = model_summary.summary(a.model, a.model_note)
    out["drift"] = model_drift.drift(a)
    out["precision"] = precision.summary(a)
    if a.power is None:
        return out
    t0 = _add_power_figures(out, a)
    out["nodes"] = _node_rows(a.power.nodes, t0)
    if a.fabric is not None:
        out["fabric"] = {**_node_rows([a.fabric.group], t0)[0], **group_summary(a.fabric)}
        out["energy_parts"] = parts_summary(a.fabric, a.bw.size_bytes)
    return out


def _run_metadata(a) -> dict[str, Any]:
    attrs = a.attrs
    hosts = list(dict.fromkeys(str(h) for h in a.layout.get("host", [])))
    try:
        options = json.loads(str(attrs.get("options_json", "{}")))
    except (ValueError, RecursionError):
        options = {}
    out: dict[str, Any] = {
        "label": a.label,
        "path": a.path,
        "status": str(attrs.get("status", "")),
        "status_message": str(attrs.get("status_message", "")),
        "sizes_analysed": a.sizes,
        "kernel": str(attrs.get("kernel", "")),
        "protocol": compute.protocol_of(attrs),
        "protocol_settings": str(attrs.get("protocol_settings", "")),
        "mpi_library_version": str(attrs.get("mpi_library_version", "")),
        "mpi4py_version": str(attrs.get("mpi4py_version", "")),
        "npmpi_version": str(attrs.get("npmpi_version", "")),
        "format_version": str(attrs.get("format_version", "")),
        "platform": str(attrs.get("platform", "")),
        "python_version": str(attrs.get("python_version", "")),
        "command_line": str(attrs.get("command_line", "")),
        "created_utc": str(attrs.get("created_utc", "")),
        "hosts": hosts,
        "world_size": attrs.get("world_size"),
        "node_count": attrs.get("node_count"),
        "pair_crosses_nodes": attrs.get("pair_crosses_nodes"),
        "trials_per_size": options.get("trials") if isinstance(options, dict) else None,
        "timing_comparable": attrs.get("timing_comparable"),
        "stopped_early": str(attrs.get("stopped_early", "")),
        "buffers": str(attrs.get("buffers", "")),
        "huge_pages": str(attrs.get("huge_pages", "")),
        "thp_policy": str(attrs.get("thp_policy", "")),
        "thread_level_pair": str(attrs.get("thread_level_pair", "")),
    }
    return out


def _add_bandwidth_figures(out: dict[str, Any], a) -> None:
    bw = a.bw
    k = _argmax(bw.peak_bit_s)
    out["peak_bandwidth_bit_s"] = _f(bw.peak_bit_s[k]) if k is not None else None
    out["peak_bandwidth_size_bytes"] = int(bw.size_bytes[k]) if k is not None else None
    out["latency_s"] = _f(bw.one_way_s[0]) if a.sizes else None
    out["latency_size_bytes"] = int(bw.size_bytes[0]) if a.sizes else None
    k = _argmin(bw.one_way_s)
    out["min_latency_s"] = _f(bw.one_way_s[k]) if k is not None else None
    finite = a.window_start_unix_s[np.isfinite(a.window_start_unix_s)]  # with power or without
    out["first_trial_unix_s"] = _f(float(finite.min()) if finite.size else math.nan)


def _add_power_figures(out: dict[str, Any], a) -> float:
    """The power and energy figures; returns the first trial's start (the faults' time origin)."""
    bw = a.bw
    pw = a.power
    out["power_caveat"] = pw.caveat
    out["power_labels"] = sorted(set(pw.labels))
    # the headline figures come from the sizes without a flag; only when every size is flagged from
    # those, and the figure names its size's flag
    trusted = pw.job_flag == FLAG_OK
    pick = trusted if trusted.any() else np.ones(len(trusted), dtype=bool)
    flags = a.flag_names()
    k = _argmax(np.where(pick, a.rate.rate_bit_j, np.nan))
    out["peak_energy_rate_bit_j"] = _f(a.rate.rate_bit_j[k]) if k is not None else None
    out["peak_energy_rate_sigma_bit_j"] = _f(a.rate.sigma_bit_j[k]) if k is not None else None
    out["peak_energy_rate_size_bytes"] = int(bw.size_bytes[k]) if k is not None else None
    out["peak_energy_rate_flag"] = flags[k] if k is not None else ""
    k = _argmin(np.where(pick, a.energy_pj_bit, np.nan))
    out["min_energy_pj_bit"] = _f(a.energy_pj_bit[k]) if k is not None else None
    out["min_energy_sigma_pj_bit"] = _f(a.energy_sigma_pj_bit[k]) if k is not None else None
    out["min_energy_size_bytes"] = int(bw.size_bytes[k]) if k is not None else None
    out["min_energy_flag"] = flags[k] if k is not None else ""
    out["headline_sizes"] = "unflagged" if trusted.any() else "only flagged sizes"
    if a.dynamic_pj_bit is not None and k is not None:
        out["dynamic_energy_pj_bit_at_min"] = _f(a.dynamic_pj_bit[k])
        out["dynamic_energy_sigma_pj_bit_at_min"] = _f(a.dynamic_sigma_pj_bit[k])
        low = a.dynamic_not_above_idle is not None and bool(a.dynamic_not_above_idle[k])
        out["dynamic_not_above_idle_at_min"] = low
        out["dynamic_energy_bound_pj_bit_at_min"] = _f(a.dynamic_bound_pj_bit[k]) if low else None
    out["correlation_bandwidth_energy_rate"] = _f(a.correlation)
    out["power_constant"] = compute.power_constant(pw.job_w, pw.job_sigma_w)
    out["idle_power_w"] = _f(pw.idle_w)
    out["idle_power_sigma_w"] = _f(pw.idle_sigma_w)
    out["active_power_w"] = _f(pw.active_w)
    out["active_power_sigma_w"] = _f(pw.active_sigma_w)
    out["baseline_unix_s"] = list(pw.baseline) if pw.baseline else None
    out["baseline_after_unix_s"] = list(pw.baseline_after) if pw.baseline_after else None
    out["idle_before_power_w"] = _f(pw.idle_before_w)
    out["idle_before_power_sigma_w"] = _f(pw.idle_before_sigma_w)
    out["idle_after_power_w"] = _f(pw.idle_after_w)
    out["idle_after_power_sigma_w"] = _f(pw.idle_after_sigma_w)
    out["idle_drift"] = bool(pw.idle_drift)
    out["flagged_sizes"] = {
        name: sum(1 for f in flags if f == name) for name in FLAG_NAMES[1:] if name in flags
    }
    out["recorded_gaps"] = [
        {"size_bytes": int(bw.size_bytes[k]), "reason": reason}
        for k, reason in enumerate(pw.gap_reasons)
        if reason and k < a.sizes
    ]
    out["meter_delay_override_s"] = a.meter_delay_override_s
    return out["first_trial_unix_s"] if out["first_trial_unix_s"] is not None else math.nan


def _node_rows(nodes, t0: float) -> list[dict[str, Any]]:
    return [
        {
            "node": n.index,
            "host": n.host,
            "samples": n.samples,
            "sample_interval_s": n.interval_s,
            "clock_offset": n.offset_note,
            "idle_power_w": _f(n.idle.mean[0]),
            "idle_power_sigma_w": _f(n.idle.sigma[0]),
            "active_power_w": _f(n.active.mean[0]),
            "active_power_sigma_w": _f(n.active.sigma[0]),
            "faults": sum(len(c.faults) for c in n.channels),
            "channels": [
                {
                    "channel": c.index,
                    "kind": c.kind,
                    "spec": c.spec,
                    "label": c.label,
                    "description": c.description,
                    "sample_interval_s": c.sample_interval_s,
                    "meter_delay_s": c.delay_s,
                    "meter_delay_source": c.delay_source,
                    "meter_delay_uncertainty_s": _f(c.delay_uncertainty_s),
                    "power_method": c.method,
                    "power_resolution_w": _f(c.resolution_w),
                    "samples": c.samples,
                    "refresh_period_s": _f(c.refresh[0]) if c.refresh[1] else None,  # a BMC's
                    "refresh_period_source": c.refresh[1],
                    "in_node_total": c.in_total,
                    "node_total_note": c.total_note,
                    "faults": _fault_rows(c, t0),
                }
                for c in n.channels
            ],
        }
        for n in nodes
    ]


def _fault_rows(c, t0: float) -> list[dict[str, Any]]:
    """A channel's fault records, times on rank 0's clock and since the first trial."""
    return [
        {
            "time_unix_s": _f(f.first_unix_s),
            "last_time_unix_s": _f(f.last_unix_s),
            "since_first_trial_s": _f(f.first_unix_s - t0),
            "last_since_first_trial_s": _f(f.last_unix_s - t0),
            "count": f.count,
            "kind": f.kind,
            "message": f.message,
        }
        for f in c.fault_records
    ]


def size_rows(a) -> list[dict[str, Any]]:
    """One dict per message size: every per-size figure, units in the keys (NaN kept as float)."""
    bw = a.bw
    rows = []
    flags = a.flag_names()
    lat_avg, lat_max = compute.latency_spread_s(bw)
    msg_rate = compute.message_rate_per_s(bw, compute.run_mode_factors(a.attrs)[0])
    for k in range(a.sizes):
        row: dict[str, Any] = {
            "run": a.label,
            "size_bytes": int(bw.size_bytes[k]),
            "iterations": int(bw.iterations[k]),
            "trials": int(bw.trials_run[k]),
            "best_trial_s": float(bw.best_s[k]),
            "trial_mean_s": float(bw.trial_mean_s[k]),
            "trial_sigma_s": float(bw.trial_sigma_s[k]),
            "one_way_s": float(bw.one_way_s[k]),
            "latency_min_s": float(bw.one_way_s[k]),
            "latency_avg_s": float(lat_avg[k]),
            "latency_max_s": float(lat_max[k]),
            "message_rate_per_s": float(msg_rate[k]),
            "bandwidth_peak_bit_s": float(bw.peak_bit_s[k]),
            "bandwidth_mean_bit_s": float(bw.mean_bit_s[k]),
            "bandwidth_sigma_bit_s": float(bw.sigma_bit_s[k]),
            "bandwidth_min_bit_s": float(bw.min_bit_s[k]),
            "bandwidth_max_bit_s": float(bw.max_bit_s[k]),
            "window_start_unix_s": float(a.window_start_unix_s[k]),
            "window_end_unix_s": float(a.window_end_unix_s[k]),
        }
        if a.power is not None:
            pw = a.power
            row.update(
                {
                    "power_w": float(pw.job_w[k]),
                    "power_sigma_w": float(pw.job_sigma_w[k]),
                    "power_flag": flags[k] or FLAG_NAMES[FLAG_OK],
                    "power_flag_reason": pw.gap_reasons[k] if k < len(pw.gap_reasons) else "",
                    "energy_rate_bit_j": float(a.rate.rate_bit_j[k]),
                    "energy_rate_sigma_bit_j": float(a.rate.sigma_bit_j[k]),
                    "energy_rate_low_bit_j": float(a.rate.low_bit_j[k]),
                    "energy_rate_high_bit_j": float(a.rate.high_bit_j[k]),
                    "energy_pj_bit": float(a.energy_pj_bit[k]),
                    "energy_sigma_pj_bit": float(a.energy_sigma_pj_bit[k]),
                    "dynamic_power_w": float(a.dynamic_w[k]) if a.dynamic_w is not None else math.nan,
                    "dynamic_energy_pj_bit": float(a.dynamic_pj_bit[k])
                    if a.dynamic_pj_bit is not None
                    else math.nan,
                    "dynamic_energy_sigma_pj_bit": float(a.dynamic_sigma_pj_bit[k])
                    if a.dynamic_sigma_pj_bit is not None
                    else math.nan,
                    **_dynamic_flag_columns(a, k),
                    **_resolution_columns(a, k),
                }
            )
            for n in pw.nodes:
                row[f"node{n.index}_power_w"] = float(n.sizes.mean[k])
                row[f"node{n.index}_power_sigma_w"] = float(n.sizes.sigma[k])
                row[f"node{n.index}_readings"] = int(n.readings[k]) if n.readings is not None else -1
                row[f"node{n.index}_distinct_readings"] = int(n.sizes.count[k])
            if a.fabric is not None:
                row.update(size_columns(a.fabric, k))
        if a.cpu is not None:
            row.update(cpu_cost.size_columns(a.cpu, k))
        if a.kind_figures is not None:
            row.update(a.kind_figures.size_columns(k))
        if a.conditions is not None:
            row.update(conditions.size_columns(a.conditions, k, row.get("energy_pj_bit")))
        row.update(precision.size_columns(a, k))
        rows.append(row)
    return rows


DYNAMIC_NOT_ABOVE_IDLE = "not above idle"


def _dynamic_flag_columns(a, k: int) -> dict[str, Any]:
    """A size's dynamic-energy flag ('not above idle' or '') and, so flagged, its 2-sigma bound."""
    low = a.dynamic_not_above_idle is not None and bool(a.dynamic_not_above_idle[k])
    return {
        "dynamic_flag": DYNAMIC_NOT_ABOVE_IDLE if low else "",
        "dynamic_energy_bound_pj_bit": float(a.dynamic_bound_pj_bit[k]) if low else math.nan,
    }


def _resolution_columns(a, k: int) -> dict[str, Any]:
    """The smallest dynamic power, energy of one message and energy per bit the run tells from zero
    at size k (numbers/model_energy.py), and whether its dynamic power lies below it."""
    res = a.resolution
    if res is None:
        return {}
    return {
        "dynamic_resolution_w": float(res.power_w[k]),
        "dynamic_resolution_j": float(res.per_message_j[k]),
        "dynamic_resolution_pj_bit": float(res.per_bit_j[k]) * 1e12,
        "dynamic_below_resolution": model_energy.below_resolution(a, k),
    }
