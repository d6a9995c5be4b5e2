"""A run file as data, for notebooks and scripts: `npmpi_analysis.open_run(path)` (docs/analysis.md,
"Python API"; an example in docs/notebook.md).

This module's names are the public contract, versioned by API_VERSION: a column or key is only
added within a major version; one renamed or removed bumps the major version, and the old name is
kept for one release with a DeprecationWarning. Every number is the one `npmpi-analyze` writes to
its CSV and JSON: the tables are built from the same rows (npmpi_analysis.numbers.analyse.size_rows,
npmpi_analysis.map.report.pair_rows) and the summary is the JSON's. The objects behind them
(`RunData.analysis`) are the analysis's internals and change between releases.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

API_VERSION = "1.0"
NO_PANDAS = "to_pandas() needs pandas: pip install 'npmpi[pandas]' (or pip install pandas)"


def _column_dtype(values: list) -> np.dtype:
    """One column's dtype: bool, int64, float64 (None and missing cells NaN) or a str wide enough."""
    present = [v for v in values if v is not None]
    if present and all(isinstance(v, (bool, np.bool_)) for v in present) and len(present) == len(values):
        return np.dtype(bool)
    if present and all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in present):
        return np.dtype(np.int64) if len(present) == len(values) else np.dtype(float)
    if all(isinstance(v, (int, float, np.integer, np.floating)) for v in present):
        return np.dtype(float)
    width = max((len(str(v)) for v in present), default=1)
    return np.dtype(f"U{max(width, 1)}")


def _cell(v, dtype: np.dtype):
    if v is None:
        return "" if dtype.kind == "U" else math.nan
    return str(v) if dtype.kind == "U" else v


class Table:
    """Rows with named columns, the units in the names (`latency_min_s`, `energy_pj_bit`), as the
    CSV's. `.array` is a numpy structured array; `table["size_bytes"]` a column; `.records()` plain
    dicts; `.to_pandas()` a DataFrame (pandas optional). An undefined figure is NaN, as the CSV's
    empty cell; a cell a row does not have (a column of another run) NaN or ''."""

    def __init__(self, rows: list[dict[str, Any]], columns: list[str] | None = None) -> None:
        names = columns if columns is not None else list(dict.fromkeys(k for r in rows for k in r))
        cells = {n: [r.get(n) for r in rows] for n in names}
        dtypes = [(n, _column_dtype(cells[n])) for n in names]
        self.array = np.zeros(len(rows), dtype=dtypes)
        for n, dt in dtypes:
            self.array[n] = [_cell(v, dt) for v in cells[n]]

    @classmethod
    def of_array(cls, array: np.ndarray) -> Table:
        """A table of a structured array as it is."""
        t = cls.__new__(cls)
        t.array = array
        return t

    @property
    def columns(self) -> list[str]:
        return list(self.array.dtype.names or ())

    def __len__(self) -> int:
        return len(self.array)

    def __getitem__(self, name: str) -> np.ndarray:
        return self.array[name]

    def __iter__(self):
        return iter(self.records())

    def __repr__(self) -> str:
        names = self.columns
        more = f", … ({len(names)} columns)" if len(names) > 6 else ""
        return f"Table({len(self)} rows: {', '.join(names[:6])}{more})"

    def records(self) -> list[dict[str, Any]]:
        """One dict per row, Python scalars."""
        names = self.columns
        return [dict(zip(names, row, strict=True)) for row in self.array.tolist()]

    def to_pandas(self):
        """A pandas DataFrame of the table; ImportError saying what to install without pandas."""
        try:
            import pandas
        except ImportError:
            raise ImportError(NO_PANDAS) from None
        return pandas.DataFrame.from_records(self.array)


@dataclass
class RunData:
    """One npmpi file opened: a run, a coll run or a cluster map (calibrate writes JSON, not one of these).

    kind: the file's root attribute `kind` ("run", "map", "coll", ...).
    sizes: the per-size table (a map: one row per pair and size), the columns of `npmpi-analyze --csv`.
    summary: the summary of `npmpi-analyze --json` (its "summary" object).
    faults: one row per meter fault record (node, host, channel, times on rank 0's clock, count, kind,
    message). channels: one row per meter channel. node_attrs: each power node's attributes (host,
    clock offsets, and the conditions a file records there). power_samples(): the samples the analysis used.
    notices, problems: what npmpi-analyze prints (a problem makes it exit 1)."""

    kind: str
    path: Path
    label: str
    attrs: dict[str, Any] = field(repr=False)
    sizes: Table
    summary: dict[str, Any] = field(repr=False)
    faults: Table
    channels: Table
    notices: list[str] = field(default_factory=list, repr=False)
    problems: list[str] = field(default_factory=list)
    node_attrs: list[dict[str, Any]] = field(default_factory=list, repr=False)  # each power node's
    analysis: Any = field(default=None, repr=False)  # the analysis's own object: internal
    _loaded: Any = field(default=None, repr=False)
    _meter_delay_s: float | None = field(default=None, repr=False)
    series: list[RunData] = field(default_factory=list, repr=False)  # a coll file's, when several

    def to_pandas(self):
        """The per-size table as a pandas DataFrame (pandas optional)."""
        return self.sizes.to_pandas()

    @property
    def model(self) -> Table:
        """The model's regimes (docs/analysis.md, "Models"), one row each with the columns of
        `npmpi-analyze --model-csv`: alpha_s, beta_bit_s, energy_per_message_j, energy_per_bit_j
        (total and dynamic_), each with _lo and _hi, r2, max_residual; empty for a map or a run
        without a model (`summary["model"]["note"]` says why)."""
        from npmpi_analysis.numbers.model_summary import regime_rows

        rows = [
            {"run": d.label, "regime": k + 1, **row}
            for d in (self.series or [self])
            if hasattr(getattr(d.analysis, "model", None), "regimes")  # a map's links: its tables
            for k, row in enumerate(regime_rows(d.analysis.model))
        ]
        return Table(rows) if rows else Table([], MODEL_COLUMNS)

    def power_samples(self, node: int | None = None, channel: int | None = None) -> Table:
        """The meter samples the analysis used, one row each: node (-1: the fabric's devices), host,
        channel, time_unix_s (on rank 0's clock, moved earlier by the channel's meter delay, as the
        analysis places them), power_w. Invalid samples (NaN, negative) are left out, as there."""
        return Table.of_array(_samples(self._loaded, self._meter_delay_s, node, channel))


MODEL_COLUMNS = ["run", "regime", "size_lo_bytes", "size_hi_bytes", "alpha_s", "beta_bit_s"]
FAULT_COLUMNS = ["node", "host", "channel", "channel_kind", "time_unix_s", "last_time_unix_s"]
FAULT_COLUMNS += ["since_first_trial_s", "last_since_first_trial_s", "count", "kind", "message"]
CHANNEL_COLUMNS = ["node", "host", "channel", "kind", "label", "spec", "sample_interval_s"]
CHANNEL_COLUMNS += ["meter_delay_s", "meter_delay_source", "power_method", "samples", "in_node_total"]


def open_run(
    path: str | os.PathLike, meter_delay_s: float | None = None, label: str | None = None
) -> RunData:
    """Open the npmpi file at `path` (any kind) and analyse it as `npmpi-analyze` does.

    meter_delay_s: as --meter-delay (None: each channel's calibrated delay). label: the run's name in
    the tables (default: the file's stem, as npmpi-analyze names it). A coll file of several series
    gives each series' RunData in `series` and their rows together in `sizes`, as the CSV. Raises
    npmpi.core.errors.RunFileError (one line: what is wrong and where) when nothing can be read, and
    ValueError for a meter delay that --meter-delay would refuse (negative, NaN)."""
    from npmpi_analysis.numbers.analyse import run_label
    from npmpi_analysis.numbers.kinds import file_kind, own_analysis

    if meter_delay_s is not None and not (math.isfinite(meter_delay_s) and meter_delay_s >= 0):
        raise ValueError(f"meter_delay_s={meter_delay_s}: give a delay of 0 seconds or more (or None)")
    p = Path(path)
    kind = file_kind(p)
    label = label or run_label(p.name, set())
    _, own = own_analysis([kind])
    if own is not None:  # a kind with an analysis of its own (a map): its module gives the fields
        f = own.api_fields(p, label, meter_delay_s)
        tables = {"sizes": Table(f["sizes"]), "faults": Table(f["faults"], FAULT_COLUMNS)}
        tables["channels"] = Table(f["channels"], CHANNEL_COLUMNS)
        return RunData(**{**f, **tables, "path": p, "label": label, "_meter_delay_s": meter_delay_s})
    return _open_rows(p, kind, label, meter_delay_s)


def _open_rows(p: Path, kind: str, label: str, meter_delay_s: float | None) -> RunData:
    """A run's or coll file's data. A coll file of several series (ops, rank counts) is analysed one
    series at a time, as npmpi-analyze does: `series` holds each one's RunData (labelled FILE-OP-N);
    the file's `sizes` are their rows one after the other (the CSV's) and its `summary` is
    {"series": [each one's summary]}."""
    from dataclasses import replace

    from npmpi_analysis.loading import load
    from npmpi_analysis.numbers.kinds import series

    run, load_problems = load(p)
    parts = series(run, label, load_problems)  # the problems of the file's series join its own
    if not parts:
        from npmpi.core.errors import RunFileError

        raise RunFileError("; ".join(load_problems))
    if len(parts) == 1:
        return _analysed(p, kind, parts[0][0], label, meter_delay_s, load_problems)[0]
    done = [_analysed(p, kind, part, name, meter_delay_s, load_problems) for part, name in parts]
    series = [one for one, _ in done]
    rows = [row for _, rows in done for row in rows]
    return replace(
        series[0],
        label=label,
        attrs=dict(run.attrs),
        sizes=Table(rows),
        summary={"series": [one.summary for one in series]},
        notices=list(dict.fromkeys(n for one in series for n in one.notices)),
        problems=list(dict.fromkeys(n for one in series for n in one.problems)),
        series=series,
    )


def _analysed(
    p: Path, kind: str, run, label: str, meter_delay_s: float | None, load_problems
) -> tuple[RunData, list[dict[str, Any]]]:
    """One run's (or series') data, and its rows as the CSV's (a file of series joins them)."""
    from npmpi_analysis.numbers.analyse import analyse_run, size_rows
    from npmpi_analysis.numbers.faults import channel_rows, fault_rows

    a = analyse_run(run, label, meter_delay_s)
    a.problems[:0] = load_problems
    summary = a.summary()
    t0 = summary.get("first_trial_unix_s")
    rows = size_rows(a)
    data = RunData(
        kind=kind,
        path=p,
        label=label,
        attrs=dict(a.attrs),
        sizes=Table(rows),
        summary=summary,
        faults=Table(fault_rows(a.power, a.fabric, t0), FAULT_COLUMNS),
        channels=Table(channel_rows(a.power, a.fabric), CHANNEL_COLUMNS),
        notices=list(a.notices),
        problems=list(a.problems),
        node_attrs=[dict(n.attrs) for n in run.power],
        analysis=a,
        _loaded=run,
        _meter_delay_s=meter_delay_s,
    )
    return data, rows


def _samples(loaded, meter_delay_s, node: int | None, channel: int | None) -> np.ndarray:
    """Each channel's samples as the analysis places them (npmpi_analysis.numbers.node_power)."""
    from npmpi_analysis.numbers import compute
    from npmpi_analysis.numbers.channel_power import align_node, channel_series
    from npmpi_analysis.numbers.said import Said

    groups = list(enumerate(getattr(loaded, "power", None) or []))
    fabric = getattr(loaded, "fabric", None)
    if fabric is not None:
        groups.append((-1, fabric))
    parts = []
    for i, n in groups:
        if node is not None and i != node:
            continue
        host = str(n.attrs.get("host", "")) or (f"node{i}" if i >= 0 else "fabric")
        attrs = compute.checked_timing_attrs(n.attrs, "", [])
        align, _note = align_node(attrs, "", Said())
        for j, ch in enumerate(n.channels):
            if (channel is not None and j != channel) or ch.time_unix_s is None or ch.power_w is None:
                continue
            r, _info = channel_series(ch, "", meter_delay_s, align, Said())
            parts.append((i, host, j, r.t, r.p))
    width = max((len(h) for _, h, _, _, _ in parts), default=1)
    dtype = [("node", np.int64), ("host", f"U{width}"), ("channel", np.int64)]
    out = np.zeros(
        sum(len(t) for *_, t, _ in parts), dtype=[*dtype, ("time_unix_s", float), ("power_w", float)]
    )
    k = 0
    for i, host, j, t, w in parts:
        chunk = out[k : k + len(t)]
        chunk["node"], chunk["host"], chunk["channel"] = i, host, j
        chunk["time_unix_s"], chunk["power_w"] = t, w
        k += len(t)
    return out
