"""Several runs side by side per message size (the protocol ladder's table): each run's latency,
bandwidth, energy per bit and CPU per KiB, and each later run's ratio to the first run's, at the
sizes every run measured (text, CSV, HTML).

A figure no run has (energy per bit without meters, CPU per KiB in files before format 1.7) is
left out; a run without it where another has it shows '-' (an empty CSV cell).
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from npmpi_analysis.numbers import kinds
from npmpi_analysis.numbers.analyse import RunAnalysis


@dataclass(frozen=True)
class Figure:
    """One per-size figure of the table: its name, where a run has it, its unit and CSV column."""

    what: str
    values: Callable[[RunAnalysis], np.ndarray | None]  # per size, in the CSV's (SI) unit; None: not had
    scale: float  # CSV unit -> the unit shown
    unit: str
    column: str
    mixed: bool = False  # shown only where some runs' kinds add figures and others' do not


FIGURES = (
    Figure("latency", lambda a: a.bw.one_way_s, 1e6, "us", "latency_min_s"),
    Figure("bandwidth", lambda a: a.bw.peak_bit_s, 1e-9, "Gbit/s", "bandwidth_peak_bit_s"),
    Figure("energy per bit", lambda a: a.energy_pj_bit, 1.0, "pJ/bit", "energy_pj_bit"),
    Figure(
        "CPU per KiB",
        lambda a: a.cpu.mean_us_per_kib if a.cpu is not None else None,
        1.0,
        "us/KiB",
        "cpu_us_per_kib",
    ),
)


def common_sizes(analyses: list[RunAnalysis]) -> list[int]:
    """The message sizes every run measured, ascending."""
    sizes = set(int(s) for s in analyses[0].bw.size_bytes)
    for a in analyses[1:]:
        sizes &= set(int(s) for s in a.bw.size_bytes)
    return sorted(sizes)


def _values(a: RunAnalysis, figure: Figure, sizes: list[int]) -> list[float]:
    """The run's figure at each size (its first row of that size); NaN where it has none."""
    column = figure.values(a)
    if column is None:
        return [math.nan] * len(sizes)
    first_row: dict[int, int] = {}
    for k, s in enumerate(a.bw.size_bytes):
        first_row.setdefault(int(s), k)
    column = np.asarray(column, dtype=float)
    return [float(column[first_row[s]]) for s in sizes]


def _ratio(x: float, ref: float) -> float:
    return x / ref if math.isfinite(x) and math.isfinite(ref) and ref > 0 else math.nan


def shown_figures(analyses: list[RunAnalysis]) -> list[Figure]:
    """The figures at least one run has, those the runs' kinds add after the common ones (a mixed
    one: where some runs' kinds add figures and others' do not, a coll file beside a pair's run)."""
    added = {a.kind_figures is not None for a in analyses}
    return [
        f
        for f in FIGURES + tuple(kinds.comparison_figures(analyses))
        if any(f.values(a) is not None for a in analyses) and (not f.mixed or len(added) == 2)
    ]


def comparison_rows(analyses: list[RunAnalysis]) -> tuple[list[int], dict[str, list[list[float]]]]:
    """(sizes, {CSV column: [per run: values at the sizes, in the CSV's units]})."""
    sizes = common_sizes(analyses)
    return sizes, {f.column: [_values(a, f, sizes) for a in analyses] for f in shown_figures(analyses)}


def _cell(x: float, digits: int = 4) -> str:
    return f"{x:.{digits}g}" if math.isfinite(x) else "-"


def comparison_blocks(analyses: list[RunAnalysis]) -> list[tuple[str, list[str], list[list[str]]]]:
    """One table per figure: (title, headers, cells): bytes, each run's value, each later run's ratio
    to the first."""
    sizes, values = comparison_rows(analyses)
    labels = [a.label for a in analyses]
    blocks = []
    for f in shown_figures(analyses):
        headers = ["bytes", *(f"{lab} {f.what} {f.unit}" for lab in labels)]
        headers += [f"{lab}/{labels[0]}" for lab in labels[1:]]
        rows = []
        for k, size in enumerate(sizes):
            runs = [v[k] for v in values[f.column]]
            rows.append(
                [
                    str(size),
                    *(_cell(x * f.scale) for x in runs),
                    *(_cell(_ratio(x, runs[0]), 3) for x in runs[1:]),
                ]
            )
        blocks.append((f"{f.what} ({f.unit})", headers, rows))
    return blocks


def comparison_csv_bytes(analyses: list[RunAnalysis]) -> bytes:
    """One row per common size: each run's figures in SI units and their ratios to the first run, then
    each later run's time and energy of one message against the first's with 95 % intervals and
    verdicts (numbers/verdicts.py)."""
    from npmpi_analysis.numbers.verdicts import csv_columns

    sizes, values = comparison_rows(analyses)
    labels = [a.label for a in analyses]
    figures = shown_figures(analyses)
    verdicts = {k: v for a in analyses[1:] for k, v in csv_columns(analyses[0], a, sizes).items()}
    fields = ["size_bytes"]
    for f in figures:
        fields += [f"{lab}_{f.column}" for lab in labels] + [f"{lab}_{f.column}_ratio" for lab in labels[1:]]
    fields += list(verdicts)
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(fields)
    for k, size in enumerate(sizes):
        row: list = [size]
        for f in figures:
            runs = [v[k] for v in values[f.column]]
            row += [repr(x) if math.isfinite(x) else "" for x in runs]
            row += [repr(r) if math.isfinite(r := _ratio(x, runs[0])) else "" for x in runs[1:]]
        row += [_csv_cell(column[k]) for column in verdicts.values()]
        w.writerow(row)
    return buf.getvalue().encode()


def _csv_cell(x) -> str:
    if isinstance(x, str):
        return x
    return repr(float(x)) if math.isfinite(x) else ""
