"""Text outputs: the terminal table and summary, CSV, JSON, NetPIPE's np.out, the HTML report."""

from __future__ import annotations

import json
import math
import re
from typing import Any

import numpy as np

from npmpi_analysis.numbers import conditions
from npmpi_analysis.numbers.analyse import RunAnalysis, size_rows
from npmpi_analysis.numbers.compute import (
    FLAG_NAMES,
    latency_spread_s,
    message_rate_per_s,
    mode_label,
    pipelined,
    protocol_label,
    run_mode_factors,
    shows_message_rate,
)
from npmpi_analysis.numbers.cpu_cost import summary_lines as cpu_summary_lines
from npmpi_analysis.numbers.fabric import fabric_line, part_cells
from npmpi_analysis.numbers.kinds import json_extras
from npmpi_analysis.numbers.model_energy import below_resolution
from npmpi_analysis.numbers.run_comparison import compare
from npmpi_analysis.outfiles import rows_csv_bytes

NO_POWER = "no power data in this file (run npmpi with --meter to measure it): bandwidth and latency only"
FLAG_TEXT = {
    "short": "window shorter than the meter's sample interval: power from the nearest samples",
    "gap": "no sample inside the window: power from the nearest samples",
    "none": "no sample in or near the window: no power",
    "recorded gap": "the window overlaps a recorded gap in sampling (a stopped power rank): see the reasons",
}


def short_number(x: float, digits: int = 4) -> str:
    return f"{x:.{digits}g}" if x is not None and math.isfinite(x) else "-"


_g = short_number


def _nan(x: float | None) -> float:
    return math.nan if x is None else x


def _pm(x: float, s: float, pm: str, digits: int = 4) -> str:
    if x is None or not math.isfinite(x):
        return "-"
    return f"{x:.{digits}g} {pm} {_g(s, 2)}"


def render_table(headers: list[str], rows: list[list[str]], left: int = 0) -> str:
    """Aligned columns under one header line: the first `left` columns to the left, the rest right."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]

    def line(cells: list[str]) -> str:
        out = [
            c.ljust(w) if i < left else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ]
        return "  ".join(out).rstrip()

    return "\n".join([line(headers)] + [line(r) for r in rows])


def table_cells(a: RunAnalysis, pm: str = "±", micro: str = "us") -> tuple[list[str], list[list[str]]]:
    """Headers and formatted cells of the per-size table (bandwidth, latency, and power when measured)."""
    bw = a.bw
    lat_avg, lat_max = latency_spread_s(bw)
    rate = message_rate_per_s(bw, run_mode_factors(a.attrs)[0]) if shows_message_rate(a.attrs) else None
    headers = ["bytes", "iters", "best Gbit/s", f"mean Gbit/s {pm} σ"]
    first = f"t/msg {micro}" if pipelined(a.attrs) else f"latency {micro}"  # a window in flight: no latency
    headers += [first, f"avg {micro}", f"max {micro}"] + (["msg/s"] if rate is not None else [])
    if a.power is not None:
        headers += [f"power W {pm} σ", f"Mbit/J {pm} σ", f"pJ/bit {pm} σ", f"dyn pJ/bit {pm} σ", "flag"]
    cond_headers = conditions.TABLE_HEADERS if a.conditions is not None else []
    headers = _beside_energy(a, headers, [f"CPU {micro}/KiB", "% core"] * (a.cpu is not None) + cond_headers)
    flags = a.flag_names()
    rows = []
    for k in range(a.sizes):
        row = [
            str(int(bw.size_bytes[k])),
            str(int(bw.iterations[k])),
            _g(bw.peak_bit_s[k] / 1e9),
            _pm(bw.mean_bit_s[k] / 1e9, bw.sigma_bit_s[k] / 1e9, pm),
            _g(bw.one_way_s[k] * 1e6),
            _g(lat_avg[k] * 1e6),
            _g(lat_max[k] * 1e6),
            *([_g(rate[k])] if rate is not None else []),
        ]
        if a.power is not None:
            row += [
                _pm(a.power.job_w[k], a.power.job_sigma_w[k], pm),
                _pm(a.rate.rate_bit_j[k] / 1e6, a.rate.sigma_bit_j[k] / 1e6, pm),
                _pm(a.energy_pj_bit[k], a.energy_sigma_pj_bit[k], pm),
                dynamic_text(a, k, pm),
                flags[k],
            ]
        cpu = [_g(a.cpu.mean_us_per_kib[k]), _g(a.cpu.mean_core_percent[k], 3)] if a.cpu is not None else []
        rows.append(_beside_energy(a, row, cpu + conditions.table_cells(a.conditions, k)))
    return headers, rows


def _beside_energy(a: RunAnalysis, cells: list[str], cpu: list[str]) -> list[str]:
    """The CPU cells (format 1.7; mean of the measuring ranks) and the conditions' (GHz, flag) after
    pJ/bit, before the power flag (or at the end without power); the cells as they are without them."""
    if not cpu:
        return cells
    return [*cells[:-1], *cpu, cells[-1]] if a.power is not None else [*cells, *cpu]


def dynamic_text(a: RunAnalysis, k: int, pm: str) -> str:
    """A size's dynamic energy per bit: value ± sigma, or its 2-sigma bound where the power above idle
    is not above its own sigma ('< 520 (2σ)': noise is never shown as a number)."""
    if a.dynamic_pj_bit is None:
        return "-"
    if a.dynamic_not_above_idle is not None and a.dynamic_not_above_idle[k]:
        return f"< {_g(a.dynamic_bound_pj_bit[k], 2)} (2σ)"
    if below_resolution(a, k):  # above its sigma, below what the meter resolves in this window
        return f"below resolution (< {_g(a.resolution.per_bit_j[k] * 1e12, 2)})"
    return _pm(a.dynamic_pj_bit[k], a.dynamic_sigma_pj_bit[k], pm)


def size_table(a: RunAnalysis, pm: str = "±") -> str:
    """The per-size table as aligned text."""
    return render_table(*table_cells(a, pm))


def _delay_text(c: dict, pm: str) -> str:
    if c["meter_delay_source"] == "none":
        return "0 s (none recorded)"
    unc = c.get("meter_delay_uncertainty_s")
    value = _pm(c["meter_delay_s"], unc, pm, 3) if unc is not None else f"{_g(c['meter_delay_s'], 3)}"
    return f"{value} s ({c['meter_delay_source']})"


def summary_text(a: RunAnalysis, pm: str = "±") -> str:
    """The run's key figures and metadata, one fact a line."""
    s = a.summary()
    return "\n".join(header_lines(a, s) + rate_lines(a, s) + detail_lines(a, s, pm))


def by_file(analyses: list[RunAnalysis]) -> list[list[RunAnalysis]]:
    """The analyses in their order, those of one file (its series) together."""
    out: list[list[RunAnalysis]] = []
    for a in analyses:
        if out and out[-1][0].path == a.path:
            out[-1].append(a)
        else:
            out.append([a])
    return out


def header_lines(a: RunAnalysis, s: dict) -> list[str]:
    """What the file is: its path, status, kernel and library, mode, platform, hosts, command."""
    out = [f"{a.label}: {a.path}"]
    status = s["status"] + (f" ({s['status_message']})" if s["status_message"] else "")
    out.append(f"  status: {status}; {s['sizes_analysed']} sizes analysed")
    out.append(f"  kernel: {s['kernel'] or '?'}; MPI library: {s['mpi_library_version'] or '?'}")
    out.append(f"  mode: {mode_label(a.attrs)}")
    out.append(f"  protocol: {protocol_label(a.attrs)}")
    if s["buffers"]:  # format 1.3
        out.append(
            f"  buffers: {s['buffers']}; huge pages: {s['huge_pages']} "
            f"(kernel policy {s['thp_policy'] or '?'}); "
            f"MPI thread level of the pair: {s['thread_level_pair'] or '?'}"
        )
    out.append(
        f"  platform: {s['platform'] or '?'}; Python {s['python_version'] or '?'}; "
        f"npmpi {s['npmpi_version'] or '?'}; mpi4py {s['mpi4py_version'] or '?'}"
    )
    crosses = s.get("pair_crosses_nodes")
    pair = "" if crosses is None else ("; pair across nodes" if crosses else "; pair within one node")
    out.append(
        f"  hosts: {', '.join(s['hosts']) or '?'} ({s.get('node_count', '?')} node(s), "
        f"{s.get('world_size', '?')} ranks{pair})"
    )
    if s["command_line"]:
        out.append(f"  command: {s['command_line']}")
    return out


def rate_lines(a: RunAnalysis, s: dict) -> list[str]:
    """A sweep's peak bandwidth and its latency (or time per message of a window in flight)."""
    out = []
    if s["peak_bandwidth_bit_s"] is not None:
        peak = s["peak_bandwidth_bit_s"]
        out.append(
            f"  peak bandwidth: {peak / 1e9:.4g} Gbit/s ({peak / 8e6:.1f} MB/s) at "
            f"{s['peak_bandwidth_size_bytes']} B (best trial)"
        )
    if s["latency_s"] is not None and pipelined(a.attrs):
        out.append(
            f"  time per message: {s['latency_s'] * 1e6:.4g} us at {s['latency_size_bytes']} B "
            f"(lowest {s['min_latency_s'] * 1e6:.4g} us; a window in flight: 1 / the message rate, "
            "not a latency)"
        )
    elif s["latency_s"] is not None:
        out.append(
            f"  latency: {s['latency_s'] * 1e6:.4g} us one-way at {s['latency_size_bytes']} B "
            f"(lowest {s['min_latency_s'] * 1e6:.4g} us)"
        )
    return out


def detail_lines(a: RunAnalysis, s: dict, pm: str = "±") -> list[str]:
    """The CPU's, the conditions' and the power's lines, and the notices."""
    out = cpu_summary_lines(s) + conditions.summary_lines(s)
    if not s["has_power"]:
        out.append(f"  power: {NO_POWER}")
    else:
        _power_lines(s, out, pm)
    for note in summarise_alike(a.notices):
        out.append(f"  notice: {note}")
    return out


def _power_lines(s: dict, out: list[str], pm: str) -> None:
    """The summary's power lines: caveat, energy figures, idle and active power, nodes, flags, gaps."""
    out.append(f"  power: {s['power_caveat'] or 'measured'} (channels: {', '.join(s['power_labels'])})")
    only = " — every size is flagged" if s.get("headline_sizes") == "only flagged sizes" else ""
    if s["peak_energy_rate_bit_j"] is not None:
        rate = _pm(s["peak_energy_rate_bit_j"] / 1e6, _nan(s["peak_energy_rate_sigma_bit_j"]) / 1e6, pm)
        where = f"{s['peak_energy_rate_size_bytes']} B{_flag_note(s.get('peak_energy_rate_flag'), only)}"
        out.append(f"  peak energy rate: {rate} Mbit/J at {where} (mean bandwidth / power of all nodes)")
    if s["min_energy_pj_bit"] is not None:
        least = _pm(s["min_energy_pj_bit"], _nan(s.get("min_energy_sigma_pj_bit")), pm)
        where = f"{s['min_energy_size_bytes']} B{_flag_note(s.get('min_energy_flag'), only)}"
        out.append(f"  least energy per bit: {least} pJ/bit at {where}{_dynamic_note(s, pm)}")
    corr = s["correlation_bandwidth_energy_rate"]
    if corr is None:
        out.append("  correlation bandwidth vs energy rate: undefined (fewer than 2 sizes with power)")
    elif s.get("power_constant"):
        out.append(
            f"  correlation bandwidth vs energy rate: {_g(corr, 4)}, which says nothing here: the power "
            "was constant within its σ_p, so the energy rate is the bandwidth over a constant"
        )
    else:
        out.append(f"  correlation bandwidth vs energy rate: {_g(corr, 6)} (numpy.corrcoef over the sizes)")
    idle = _pm(s["idle_power_w"], _nan(s["idle_power_sigma_w"]), pm)
    active = _pm(s["active_power_w"], _nan(s["active_power_sigma_w"]), pm)
    out.append(f"  all nodes: idle {idle} W, active {active} W")
    if s.get("idle_before_power_w") is not None or s.get("idle_after_power_w") is not None:
        before = _pm(s["idle_before_power_w"], _nan(s["idle_before_power_sigma_w"]), pm)
        after = _pm(s["idle_after_power_w"], _nan(s["idle_after_power_sigma_w"]), pm)
        drift = " (drifted more than their uncertainty)" if s.get("idle_drift") else ""
        out.append(f"  idle baselines: before the sweep {before} W, after it {after} W{drift}")
    for n in _nodes_to_show(s["nodes"], out):
        chans = ", ".join(
            f"{c['kind']} ({c['label'] or 'unlabelled'}, every {_g(c['sample_interval_s'], 3)} s, "
            f"delay {_delay_text(c, pm)})"
            + ("" if c.get("in_node_total", True) else f" [not in the node's total: {c['node_total_note']}]")
            for c in n["channels"]
        )
        out.append(
            f"  node {n['node']} {n['host']}: idle "
            f"{_pm(n['idle_power_w'], _nan(n['idle_power_sigma_w']), pm)} W, "
            f"active {_pm(n['active_power_w'], _nan(n['active_power_sigma_w']), pm)} W, "
            f"{n['samples']} samples, {n['faults']} fault(s); clock offset {n['clock_offset']}; {chans}"
        )
        out += [f"    {line}" for line in fault_lines(n)]
    if s.get("fabric"):
        out.append(f"  {fabric_line(s['fabric'], pm)}")
        out += [f"    {line}" for line in fault_lines(s["fabric"])]
    if s.get("energy_parts"):
        parts = s["energy_parts"]
        out.append(
            f"  energy per bit at {parts['size_bytes']} B (least total), nodes + fabric; {parts['note']}:"
        )
        out += [f"    {line}" for line in render_table(*part_cells(parts, pm), left=1).splitlines()]
    for name, count in s["flagged_sizes"].items():
        out.append(f"  flagged '{name}': {count} size(s): {FLAG_TEXT[name]}")
    for g in s["recorded_gaps"]:
        out.append(f"    {g['size_bytes']} B: {g['reason']}")


def _flag_note(flag: str | None, only: str) -> str:
    """What a headline figure's size is flagged, if it is (then every size is: the others are chosen)."""
    return f" (flagged '{flag}'{only})" if flag else ""


def _dynamic_note(s: dict, pm: str) -> str:
    """The dynamic part of the least energy per bit: its value ± sigma, or 'not above idle' and its bound."""
    if s.get("dynamic_energy_pj_bit_at_min") is None:
        return ""
    if s.get("dynamic_not_above_idle_at_min"):
        bound = s.get("dynamic_energy_bound_pj_bit_at_min")
        return f", dynamic not above idle (< {_g(bound, 2)} pJ/bit, 2σ)"
    dyn = _pm(s["dynamic_energy_pj_bit_at_min"], _nan(s.get("dynamic_energy_sigma_pj_bit_at_min")), pm)
    return f", dynamic {dyn} pJ/bit"


MAX_NODE_LINES = 64
MAX_ALIKE = 3  # problems or notices of one kind printed before "and N more like it"


def summarise_alike(lines: list[str], keep: int = MAX_ALIKE) -> list[str]:
    """`lines` (problems, notices) with long runs of one kind, the same text but for its numbers (one
    per node or channel), cut to the first `keep` and a count of the rest; linear time."""
    groups: dict[str, list[str]] = {}
    for line in lines:
        groups.setdefault(re.sub(r"[0-9]+", "#", line), []).append(line)
    out = []
    for items in groups.values():
        out += items[:keep]
        if len(items) > keep:
            out.append(f"… and {len(items) - keep} more like the last one")
    return out


def _nodes_to_show(nodes: list[dict], out: list[str]) -> list[dict]:
    """The nodes given a line of their own (those with samples, at most MAX_NODE_LINES); one line
    for the others is added to `out` (thousands of nodes must not print thousands of lines)."""
    empty = [f"node {n['node']} {n['host']}" for n in nodes if not n["samples"]]
    sampled = [n for n in nodes if n["samples"]]
    if empty:
        out.append(f"  {len(empty)} node(s) without power samples: {_first_and_last(empty)}")
    if len(sampled) > MAX_NODE_LINES:
        out.append(f"  {len(sampled) - MAX_NODE_LINES} node(s) after the first {MAX_NODE_LINES}: see --json")
    return sampled[:MAX_NODE_LINES]


def _first_and_last(names: list[str]) -> str:
    return ", ".join(names) if len(names) <= 3 else f"{names[0]}, {names[1]}, … {names[-1]}"


def since_text(x: float | None) -> str:
    return f"{x:+.1f} s" if x is not None else "?"


def fault_cells(n: dict) -> list[list[str]]:
    """One row per fault record of a node: channel, time since the first trial, count, kind, message."""
    rows = []
    for c in n["channels"]:
        for f in c["faults"]:
            until = since_text(f["last_since_first_trial_s"]) if f["count"] > 1 or f["kind"] == "gap" else ""
            rows.append(
                [
                    f"{c['channel']} {c['kind']}",
                    since_text(f["since_first_trial_s"]),
                    str(f["count"]),
                    until,
                    f["kind"],
                    f["message"],
                ]
            )
    return rows


def fault_lines(n: dict) -> list[str]:
    """The node's faults as text lines: when (since the first trial), how often, what."""
    out = []
    for ch, since, count, until, _kind, message in fault_cells(n):
        times = f" x{count}" if count != "1" else ""
        span = f" until {until}" if until else ""
        out.append(f"fault, channel {ch}, at {since}{times}{span}: {message}")
    return out


def comparison_text(analyses: list[RunAnalysis]) -> str:
    """Key figures side by side, with each run's ratio to the first."""
    rows = compare([a.summary() for a in analyses])
    labels = [a.label for a in analyses]
    headers = ["figure", *labels, *(f"{lab}/{labels[0]}" for lab in labels[1:])]
    body = []
    for r in rows:
        unit = f" ({r['unit']})" if r["unit"] else ""
        body.append(
            [r["figure"] + unit]
            + [_g(v, 5) if v is not None else "-" for v in r["values"]]
            + [f"{x:.3f}" if x is not None else "-" for x in r["ratio_to_first"][1:]]
        )
    table = render_table(headers, body, left=1)
    return "comparison (ratios to the first run):\n" + table


# ---------------------------------------------------------------- exports


def _clean(x: Any) -> Any:
    """NaN and infinities to None, numpy scalars to Python: strict JSON."""
    if isinstance(x, dict):
        return {k: _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    if isinstance(x, np.generic):
        x = x.item()
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def csv_bytes(analyses: list[RunAnalysis]) -> bytes:
    """One row per run and size; empty cells where a figure is undefined."""
    rows = [r for a in analyses for r in size_rows(a)]
    return rows_csv_bytes(rows)


def json_bytes(analyses: list[RunAnalysis]) -> bytes:
    doc = {
        "format": "npmpi-analysis",
        "format_version": "1.0",
        "flags": {name: FLAG_TEXT[name] for name in FLAG_NAMES[1:]},
        "dynamic_flags": {
            "not above idle": "the power above idle is not above its own sigma (or is negative): the "
            "dynamic energy per bit is only bounded, by dynamic_energy_bound_pj_bit (value + 2 sigma)"
        },
        "runs": [
            {
                "summary": a.summary(),
                "notices": a.notices,
                "problems": a.problems,
                "sizes": size_rows(a),
            }
            for a in analyses
        ],
        "comparison": compare([a.summary() for a in analyses]) if len(analyses) > 1 else [],
        **json_extras(analyses),
    }
    return (json.dumps(_clean(doc), indent=1, allow_nan=False) + "\n").encode()
