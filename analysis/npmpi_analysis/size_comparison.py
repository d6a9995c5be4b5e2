"""Several runs side by side per message size: each run's latency and bandwidth and its ratio to
the first run's, at the sizes every run measured (text, CSV, HTML)."""

from __future__ import annotations

import csv
import io
import math

import numpy as np

from npmpi_analysis.analyse import RunAnalysis

# (what, per-size array of the run's Bandwidth, scale to the unit shown, unit, CSV column)
FIGURES = (
    ("latency", "one_way_s", 1e6, "us", "latency_min_s"),
    ("bandwidth", "peak_bit_s", 1e-9, "Gbit/s", "bandwidth_peak_bit_s"),
)


def common_sizes(analyses: list[RunAnalysis]) -> list[int]:
    """The message sizes every run measured, ascending."""
    sizes = set(int(s) for s in analyses[0].bw.size_bytes)
    for a in analyses[1:]:
        sizes &= set(int(s) for s in a.bw.size_bytes)
    return sorted(sizes)


def _values(a: RunAnalysis, attr: str, sizes: list[int]) -> list[float]:
    """The run's figure at each size (its first row of that size)."""
    first_row = {}
    for k, s in enumerate(a.bw.size_bytes):
        first_row.setdefault(int(s), k)
    column = np.asarray(getattr(a.bw, attr), dtype=float)
    return [float(column[first_row[s]]) for s in sizes]


def _ratio(x: float, ref: float) -> float:
    return x / ref if math.isfinite(x) and math.isfinite(ref) and ref > 0 else math.nan


def comparison_rows(analyses: list[RunAnalysis]) -> tuple[list[int], dict[str, list[list[float]]]]:
    """(sizes, {figure: [per run: values at the sizes, in the CSV's units]})."""
    sizes = common_sizes(analyses)
    return sizes, {attr: [_values(a, attr, sizes) for a in analyses] for _, attr, *_ in FIGURES}


def _cell(x: float, digits: int = 4) -> str:
    return f"{x:.{digits}g}" if math.isfinite(x) else "-"


def comparison_cells(analyses: list[RunAnalysis]) -> tuple[list[str], list[list[str]]]:
    """Headers and cells: bytes, then per figure each run's value and each later run's ratio."""
    sizes, values = comparison_rows(analyses)
    labels = [a.label for a in analyses]
    headers = ["bytes"]
    for what, _attr, _scale, unit, _col in FIGURES:
        headers += [f"{lab} {what} {unit}" for lab in labels]
        headers += [f"{lab}/{labels[0]}" for lab in labels[1:]]
    rows = []
    for k, size in enumerate(sizes):
        row = [str(size)]
        for _what, attr, scale, _unit, _col in FIGURES:
            runs = [v[k] for v in values[attr]]
            row += [_cell(x * scale) for x in runs]
            row += [_cell(_ratio(x, runs[0]), 3) for x in runs[1:]]
        rows.append(row)
    return headers, rows


def comparison_csv_bytes(analyses: list[RunAnalysis]) -> bytes:
    """One row per common size: each run's figures in SI units and their ratios to the first run."""
    sizes, values = comparison_rows(analyses)
    labels = [a.label for a in analyses]
    fields = ["size_bytes"]
    for _what, _attr, _scale, _unit, col in FIGURES:
        fields += [f"{lab}_{col}" for lab in labels] + [f"{lab}_{col}_ratio" for lab in labels[1:]]
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(fields)
    for k, size in enumerate(sizes):
        row: list = [size]
        for _what, attr, *_ in FIGURES:
            runs = [v[k] for v in values[attr]]
            row += [repr(x) if math.isfinite(x) else "" for x in runs]
            row += [repr(r) if math.isfinite(r := _ratio(x, runs[0])) else "" for x in runs[1:]]
        w.writerow(row)
    return buf.getvalue().encode()
