"""A cluster map's text outputs: the terminal summary and matrices, CSV, JSON and the HTML report."""

from __future__ import annotations

import math
from typing import Any, BinaryIO

import numpy as np

from npmpi.core.modes import MODE_TABLE
from npmpi.core.units import format_size_iec as format_size
from npmpi.runfile.maprows import warnings_off
from npmpi_analysis.map import model as map_model
from npmpi_analysis.map.conditions import map_lines, map_matrices, map_summary, pair_columns
from npmpi_analysis.map.outliers import (
    CHANGE_TEXT,
    K_MAD,
    MAD_SCALE,
    MIN_EFFECT,
    THRESHOLD_TEXT,
    lowest_nodes,
)
from npmpi_analysis.map.plan import plan_summary, plan_text
from npmpi_analysis.numbers.compute import FLAG_NAMES, FLAG_OK

MATRIX_MAX = 16  # hosts up to which the terminal shows the matrices
HTML_MATRIX_MAX = 64
NO_POWER = "no power data in this file (run npmpi map with --meter to measure it): latency and bandwidth only"


def _g(x: float, digits: int = 4) -> str:
    return f"{x:.{digits}g}" if x is not None and math.isfinite(x) else "-"


def matrix_cells(names: list[str], x: np.ndarray, digits: int = 4) -> tuple[list[str], list[list[str]]]:
    """Headers and rows of one [N, N] matrix ('-' where undefined)."""
    return ["", *names], [[name, *(_g(v, digits) for v in row)] for name, row in zip(names, x, strict=True)]


def _render(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    lines = [headers, *rows]
    return "\n".join(
        "  "
        + "  ".join(
            c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True))
        )
        for r in lines
    )


def matrices(a) -> list[tuple[str, np.ndarray, int]]:
    """(title, matrix, digits) of every matrix the outputs show."""
    out = [
        (f"latency (us, one-way, best trial) at {format_size(int(a.size_bytes[0]))}", a.latency_s * 1e6, 4)
    ]
    for k, s in enumerate(a.size_bytes):
        out.append(
            (
                f"bandwidth (Gbit/s, 10^9 bit/s, best trial) at {format_size(int(s))}",
                a.bandwidth_bit_s[k] / 1e9,
                4,
            )
        )
    if a.energy is not None:
        caveat = f" [power {a.caveat}]" if a.caveat else ""
        for k, s in enumerate(a.size_bytes):
            out.append(
                (f"energy per bit (pJ/bit) at {format_size(int(s))}{caveat}", a.energy.energy_pj_bit[k], 4)
            )
            if a.energy.dynamic_pj_bit is not None:
                out.append(
                    (
                        f"dynamic energy per bit (pJ/bit) at {format_size(int(s))}{caveat}",
                        a.energy.dynamic_pj_bit[k],
                        4,
                    )
                )
    return out


def summary(a) -> dict[str, Any]:
    """The map's key facts as JSON-able values."""
    m = a.map_attrs
    n = a.nodes
    pairs = n * (n - 1) // 2
    upper = np.triu(np.ones((n, n), dtype=bool), 1)
    out = {
        "label": a.label,
        "path": a.path,
        "status": a.status,
        "schedule": str(m.get("schedule", "")),
        "per_rank": bool(m.get("per_rank", False)),
        "kernel": str(m.get("kernel", a.attrs.get("kernel", ""))),
        "mode": str(m.get("mode", "")),
        "rounds": int(m["n_rounds"]) if isinstance(m.get("n_rounds"), (int, np.integer)) else None,
        "hosts": a.names,
        "size_bytes": [int(s) for s in a.size_bytes],
        "pairs": pairs,
        "pairs_measured": [int((np.isfinite(a.best_s[k]) & upper).sum()) for k in range(len(a.size_bytes))],
        "has_power": a.energy is not None,
        "power_caveat": a.caveat,
        "median_latency_s": _median(a.latency_s[upper]),
        "median_bandwidth_bit_s": [_median(a.bandwidth_bit_s[k][upper]) for k in range(len(a.size_bytes))],
    }
    if a.energy is not None:
        out["median_energy_pj_bit"] = [
            _median(a.energy.energy_pj_bit[k][upper]) for k in range(len(a.size_bytes))
        ]
        out["idle_power_w"] = {nd.host: _f(nd.idle.mean[0]) for nd in a.power.nodes}
        out["idle_power_sigma_w"] = {nd.host: _f(nd.idle.sigma[0]) for nd in a.power.nodes}
        flags = a.energy.flag[:, upper]
        out["flagged_pairs"] = {
            FLAG_NAMES[c]: int((flags == c).sum()) for c in range(1, len(FLAG_NAMES)) if (flags == c).any()
        }
    out["resolution"] = map_model.resolution(a)
    return {**out, **map_summary(a.conditions), **map_model.summary(a.model, upper), **plan_summary(a)}


def _median(x: np.ndarray) -> float | None:
    x = x[np.isfinite(x)]
    return float(np.median(x)) if x.size else None


def _f(x) -> float | None:
    x = float(x)
    return x if math.isfinite(x) else None


def summary_text(a, show_matrices: bool = True) -> str:
    """The map's facts, matrices (up to MATRIX_MAX hosts) and named outliers, as text."""
    s = summary(a)
    out = [f"{a.label}: {a.path}  (cluster map)"]
    msg = str(a.map_attrs.get("status_message", "") or "")
    out.append(f"  status: {s['status']}{' (' + msg + ')' if msg else ''}")
    rounds = f" ({s['rounds']} rounds)" if s["rounds"] is not None else ""
    out.append(
        f"  schedule: {s['schedule'] or '?'}{rounds}; "
        f"{'every rank' if s['per_rank'] else 'one rank per node'}; "
        f"kernel {s['kernel'] or '?'}, mode {s['mode'] or '?'}"
    )
    out.append(f"  directions: {directions_text(a.map_attrs)}")
    out += plan_text(a)
    shown_names = a.names if a.nodes <= MATRIX_MAX else [*a.names[:8], "…", *a.names[-2:]]
    out.append(f"  hosts ({a.nodes}): {', '.join(shown_names)}")
    measured = ", ".join(
        f"{d}/{s['pairs']} at {format_size(z)}"
        for d, z in zip(s["pairs_measured"], s["size_bytes"], strict=True)
    )
    out.append(f"  sizes: {', '.join(format_size(z) for z in s['size_bytes'])}; pairs measured: {measured}")
    lat = s["median_latency_s"]
    out.append(
        f"  median link: latency {_g(lat * 1e6 if lat else math.nan)} us; bandwidth "
        + ", ".join(
            f"{_g((b or math.nan) / 1e9)} Gbit/s at {format_size(z)}"
            for b, z in zip(s["median_bandwidth_bit_s"], s["size_bytes"], strict=True)
        )
    )
    out += map_model.summary_line(s, len(s["size_bytes"])) + map_model.resolution_line(s, s["size_bytes"])
    if not s["has_power"]:
        out.append(f"  power: {NO_POWER}")
    else:
        out += _power_lines(a, s)
    if show_matrices and a.nodes <= MATRIX_MAX:
        for title, x, digits in matrices(a):
            out.append(f"  {title}:")
            out.append(_render(*matrix_cells(a.names, x, digits)))
    elif show_matrices:
        out.append(f"  ({a.nodes} hosts: the matrices are in --csv, --json, --plots and --report)")
        out += lowest_nodes(a)
    out += outlier_lines(a) + map_lines(a.conditions)
    from npmpi_analysis.report import summarise_alike

    for note in summarise_alike(a.notices):  # one per node of 4,096: the first few and a count
        out.append(f"  notice: {note}")
    return "\n".join(out)


def directions_text(map_attrs: dict) -> str:
    """What a map's cell (i, j) measures: one direction, or the round trip of a ping-pong."""
    if str(map_attrs.get("directions", "one")) == "both":
        return "each measured apart: row i, column j is i -> j (the matrices are asymmetric)"
    mode = str(map_attrs.get("mode", "pingpong"))
    if mode in MODE_TABLE and not MODE_TABLE[mode].round_trip:
        return "one: the lower rank streamed to the higher; the matrices repeat it both ways"
    return (
        f"the round trip ({mode}: both directions in every iteration): a link slow one way reads as slow "
        "as its round trip, and which direction is slow is not told apart (--mode stream measures each)"
    )


def _power_lines(a, s: dict) -> list[str]:
    own = a.energy is not None and a.energy.own_windows
    where = "its own window (its round's start to its end)" if own else "its round's window"
    out = [f"  power: {a.caveat or 'measured'}; a pair's power is its two nodes' over {where}"]
    for nd in a.power.nodes[:MATRIX_MAX]:
        out.append(
            f"  node {nd.index} {nd.host}: idle {_g(nd.idle.mean[0])} ± {_g(nd.idle.sigma[0], 2)} W, "
            f"{nd.samples} samples"
        )
    if len(a.power.nodes) > MATRIX_MAX:
        out.append(f"  ({len(a.power.nodes) - MATRIX_MAX} more nodes' idle power: see --json)")
    med = ", ".join(
        f"{_g(x if x is not None else math.nan)} pJ/bit at {format_size(z)}"
        for x, z in zip(s["median_energy_pj_bit"], s["size_bytes"], strict=True)
    )
    out.append(f"  median energy per bit: {med}")
    for name, count in s["flagged_pairs"].items():
        out.append(f"  flagged '{name}': {count} pair-size(s) (see docs/analysis.md, What is flagged)")
    return out


def outlier_lines(a) -> list[str]:
    """'outliers (rule): ' then one sentence a line, or 'none named'; with a second measurement
    (/map/confirm_*), only the confirmed ones, then those not measured again (the budget) and the
    others not confirmed, each with why."""
    from npmpi_analysis.map.confirmed import (
        confirm_summary,
        confirm_words,
        not_measured,
        not_measured_words,
        unconfirmed_words,
    )

    facts = confirm_summary(a)
    if facts is None:
        out = [f"  outliers ({THRESHOLD_TEXT}):"]
        return out + ([f"    {f.sentence}" for f in a.outliers] or ["    none named"])
    out = [
        f"  outliers confirmed by measuring each suspect again, {confirm_words(facts)} ({THRESHOLD_TEXT}):"
    ]
    left_out = [f for f in a.outliers if not_measured(f)]
    out += [f"    {f.sentence}{meanwhile(f)}" for f in a.outliers if f.confirmed] or [
        "    none confirmed" if left_out else "    none named"
    ]
    out += [f"  not measured again: {f.sentence}; {not_measured_words(facts)}" for f in left_out]
    return out + [
        f"  not confirmed: {f.sentence}; {unconfirmed_words(f)}{meanwhile(f)}"
        for f in a.outliers
        if f.confirmed is False and not not_measured(f)
    ]


def meanwhile(f) -> str:
    """'; while measured again: h4 throttled (3 events)' ("" when nothing moved)."""
    return f"; while measured again: {f.confirm_conditions}" if f.confirm_conditions else ""


def change_text(change) -> str:
    """Two maps compared: the median ratios and the links and nodes that changed."""
    out = [f"comparison {change.after} / {change.before} (after / before, per link):"]
    for metric, size, med in change.medians:
        out.append(f"  median {metric} ratio {_g(med, 4)} at {format_size(size)}")
    if 2 <= len(change.names) <= MATRIX_MAX:  # fewer hosts in common: nothing compared (a notice)
        for k, s in enumerate(change.size_bytes):
            out.append(f"  bandwidth after / before at {format_size(int(s))}:")
            out.append(_render(*matrix_cells(change.names, change.bandwidth_ratio[k], 3)))
    out.append(f"  changed beyond the median change ({CHANGE_TEXT}):")
    out += [f"    {f.sentence}" for f in change.findings] or ["    none named"]
    out += map_model.verdict_line(change.model_verdicts)
    out += [f"  notice: {n}" for n in change.notes]
    return "\n".join(out)


# ---------------------------------------------------------------- exports


def pair_rows(a) -> list[dict[str, Any]]:
    """One row per pair (i < j) and size, units in the keys; with directions measured apart one
    row per direction (host_a -> host_b)."""
    rows = []
    e = a.energy
    n = a.nodes
    directed = str(a.map_attrs.get("directions", "one")) == "both"
    pairs = [(i, j) for i in range(n) for j in range(n) if i != j] if directed else a.pairs()
    for k, size in enumerate(a.size_bytes):
        for i, j in pairs:
            row = {
                "map": a.label,
                "host_a": a.names[i],
                "host_b": a.names[j],
                "size_bytes": int(size),
                "round": int(a.round[i, j]),
                "trials": int(a.trials_run[k, i, j]),
                "trials_stalled": int(a.trials_stalled[k, i, j]),
                "best_one_way_s": float(a.best_s[k, i, j]),
                "latency_s": float(a.latency_s[i, j]),
                "bandwidth_bit_s": float(a.bandwidth_bit_s[k, i, j]),
                "bandwidth_mean_bit_s": float(a.mean_bit_s[k, i, j]),
                "bandwidth_sigma_bit_s": float(a.sigma_bit_s[k, i, j]),
                "bytes_moved": int(a.bytes_moved[k, i, j]),
            }
            if e is not None:
                flag = int(e.flag[k, i, j])
                row.update(
                    {
                        "window_s": float(e.window_s[k, i, j]),
                        "power_w": float(e.power_w[k, i, j]),
                        "power_sigma_w": float(e.power_sigma_w[k, i, j]),
                        "power_flag": FLAG_NAMES[flag] or FLAG_NAMES[FLAG_OK],
                        "power_flag_reason": str(e.flag_reason[k, i, j]) if e.flag_reason is not None else "",
                        "power_label": a.caveat or "measured",
                        "energy_pj_bit": float(e.energy_pj_bit[k, i, j]),
                        "energy_sigma_pj_bit": float(e.energy_sigma_pj_bit[k, i, j]),
                        "dynamic_energy_pj_bit": float(e.dynamic_pj_bit[k, i, j])
                        if e.dynamic_pj_bit is not None
                        else math.nan,
                        "dynamic_energy_sigma_pj_bit": float(e.dynamic_sigma_pj_bit[k, i, j])
                        if e.dynamic_sigma_pj_bit is not None
                        else math.nan,
                    }
                )
            row.update(pair_columns(a.conditions, k, i, j, int(size), row.get("energy_pj_bit")))
            row.update(map_model.pair_columns(a.model, i, j))
            rows.append(row)
    return rows


def csv_bytes(analyses: list) -> bytes:
    """Every map's pair rows; an undefined figure is an empty cell (built a column at a time by
    npmpi_analysis.map.csv_rows: the bytes of rows_csv_bytes(pair_rows))."""
    from npmpi_analysis.map.csv_rows import csv_bytes as columns_csv

    return columns_csv(analyses)


def write_csv(f: BinaryIO, analyses: list) -> None:
    """csv_bytes(analyses) written into `f` a block of rows at a time."""
    from npmpi_analysis.map.csv_rows import csv_parts

    for part in csv_parts(analyses):
        f.write(part)


def _finding(f) -> dict[str, Any]:
    return {
        "kind": f.kind,
        "names": list(f.names),
        "metric": f.metric,
        "size_bytes": f.size_bytes,
        "ratio": f.ratio,
        "value": f.value,
        "reference": f.reference,
        "slow_links": f.slow_links,
        "links": f.links,
        "sentence": f.sentence,
        "confirmed": f.confirmed,
        "confirm_ratio": f.confirm_ratio,
        "confirm_slowest_reference_ratio": f.confirm_slowest_ratio,
        "confirm_scatter_s": None if f.confirm_scatter is None else list(f.confirm_scatter),
        "confirm_runq_wait_fraction": f.confirm_wait_fraction,
        "confirm_reason": f.confirm_reason,
        "confirm_conditions": f.confirm_conditions,
    }


def map_doc(a, pairs: bool = True) -> dict[str, Any]:
    """One map in the JSON: summary, matrices (null where undefined), outliers, notices; without
    `pairs` (the largest maps: csv_rows.is_bulk), each node's figures instead of the matrices."""
    from npmpi_analysis.map.csv_rows import pair_sizes

    head = {"summary": summary(a), "notices": a.notices, "problems": a.problems}
    if not pairs:
        return {
            **head,
            "outliers": [_finding(f) for f in a.outliers],
            "matrices_left_out": (
                f"{pair_sizes([a]):,} pair-sizes: the per-pair matrices "
                "are left out of the JSON (gigabytes of text no JSON reader loads); every pair is in "
                "--csv, in the heat maps of --plots and in the run file"
            ),
            "nodes": node_figures(a),
        }
    doc = {
        **head,
        "round": a.round,
        "latency_s": a.latency_s,
        "bandwidth_bit_s": a.bandwidth_bit_s,
        "bandwidth_mean_bit_s": np.asarray(a.mean_bit_s),  # a rows map's: PairMatrix, its dense matrix
        "bandwidth_sigma_bit_s": np.asarray(a.sigma_bit_s),
        "bytes_moved": np.asarray(a.bytes_moved),
        "trials_stalled": a.trials_stalled,
        "outliers": [_finding(f) for f in a.outliers],
        **map_matrices(a.conditions),
        **map_model.matrices(a.model),
    }
    if a.energy is not None:
        e = a.energy
        doc.update(
            {
                "power_w": e.power_w,
                "power_sigma_w": e.power_sigma_w,
                "energy_pj_bit": e.energy_pj_bit,
                "energy_sigma_pj_bit": e.energy_sigma_pj_bit,
                "dynamic_energy_pj_bit": e.dynamic_pj_bit,
                "dynamic_energy_sigma_pj_bit": e.dynamic_sigma_pj_bit,
                "power_flag": np.vectorize(lambda c: FLAG_NAMES[c] or FLAG_NAMES[FLAG_OK])(e.flag),
                "power_flag_reason": e.flag_reason,
            }
        )
    return doc


def node_figures(a) -> dict[str, Any]:
    """Each node's links summed up (the JSON of a map too large for its matrices): the median of its
    links' latency and, at each size, of their bandwidth, its slowest link's bandwidth and partner
    (null for a node with no measured link)."""
    names = np.asarray(a.names, dtype=object)
    with np.errstate(invalid="ignore"), warnings_off():  # a node with no measured link: NaN
        latency = np.nanmedian(a.latency_s, axis=1)
        bw = [np.asarray(a.bandwidth_bit_s[k], dtype=float) for k in range(len(a.size_bytes))]
        median = [np.nanmedian(x, axis=1) for x in bw]
    slowest = [np.argmin(np.where(np.isfinite(x), x, np.inf), axis=1) for x in bw]
    low = [x[np.arange(a.nodes), j] for x, j in zip(bw, slowest, strict=True)]
    return {
        "host": list(a.names),
        "median_latency_s": latency,
        "median_bandwidth_bit_s": np.array(median),
        "slowest_link_bandwidth_bit_s": np.array(low),
        "slowest_link_partner": [
            [str(names[j[i]]) if np.isfinite(x[i]) else None for i in range(a.nodes)]
            for x, j in zip(low, slowest, strict=True)
        ],
    }


def json_doc(analyses: list, changes: list) -> dict[str, Any]:
    """The JSON's document: the thresholds, each map's (map_doc) and each comparison."""
    from npmpi_analysis.map.csv_rows import is_bulk

    pairs = not is_bulk(analyses)
    return {
        "format": "npmpi-map-analysis",
        "format_version": "1.0",
        "thresholds": {
            "mad_scale": MAD_SCALE,
            "k_mad": K_MAD,
            "min_effect": MIN_EFFECT,
            "rule": THRESHOLD_TEXT,
            "change_rule": CHANGE_TEXT,
        },
        "maps": [map_doc(a, pairs) for a in analyses],
        "comparison": [
            {
                "before": c.before,
                "after": c.after,
                "hosts": c.names,
                "size_bytes": c.size_bytes,
                "latency_ratio": c.latency_ratio,
                "bandwidth_ratio": c.bandwidth_ratio,
                "changes": [_finding(f) for f in c.findings],
                "model_verdicts": c.model_verdicts,
                "notes": c.notes,
            }
            for c in changes
        ],
    }


def json_bytes(analyses: list, changes: list) -> bytes:
    from npmpi_analysis.json_text import dumps

    return (dumps(json_doc(analyses, changes)) + "\n").encode()


def write_json(f: BinaryIO, analyses: list, changes: list) -> None:
    """json_bytes(analyses, changes) written into `f` a part at a time."""
    from npmpi_analysis.json_text import dump

    dump(json_doc(analyses, changes), f)
    f.write(b"\n")
