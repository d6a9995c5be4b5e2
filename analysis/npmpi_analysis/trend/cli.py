"""`npmpi-analyze --trend RUN.h5 ...`: one system's runs in time order (npmpi_analysis.trend.numbers):
a table, --csv, --json, --plots and --report of the series. Same exit statuses as the other paths."""

from __future__ import annotations

import json
import math
from typing import Any

from npmpi.core.errors import RunFileError, UsageError
from npmpi_analysis.numbers.kinds import can_be_series, measurement, several_words
from npmpi_analysis.outfiles import rows_csv_bytes
from npmpi_analysis.trend import numbers as tr


def check_usage(args) -> None:
    """UsageError for what a trend cannot give."""
    if args.compare_csv is not None:
        raise UsageError("--compare-csv compares runs size by size; --trend follows their key figures")
    if args.np_out is not None:
        raise UsageError("--np-out is one run's NetPIPE output: leave it out with --trend")
    if len(args.runs) < 2:
        raise UsageError("--trend follows a series of runs: give two run files or more")


def run(args, labels: list[str], say, error) -> int:
    """Open the files with the API, print and write the trend; `say` and `error` print a line."""
    from npmpi_analysis.api import open_run
    from npmpi_analysis.report import summarise_alike

    failed, runs, notes = 0, [], []
    for path, label, first in _once(args.runs, labels):
        if first is not None:
            notes.append(f"{path} is the file {first} again: counted once")
            continue
        try:
            r = open_run(path, args.meter_delay, label)
        except RunFileError as exc:
            error(str(exc))
            failed += 1
            continue
        if not can_be_series(r.kind):
            raise UsageError(f"{path} is {_measurement(r)}: --trend follows sweep runs")
        if r.series:
            names = ", ".join(one.label for one in r.series)
            several, instead = several_words(r.kind)
            raise UsageError(
                f"{path} holds {len(r.series)} {several} ({names}): --trend follows one measurement "
                f"from run to run; give {instead}"
            )
        for problem in summarise_alike(r.problems):
            error(problem)
        failed += bool(r.problems) or not len(r.sizes)
        if len(r.sizes):
            runs.append(r)
    if not runs:
        return 1
    _one_measurement(runs)
    t = tr.trend(runs)
    t.notes += notes
    if not args.quiet:
        say(text(t))
    _write(args, t, say)
    return 1 if failed else 0


def _identity(path) -> tuple:
    """What tells one file from another: its device and inode (a link, another spelling of the
    path), else its resolved path."""
    import os

    try:
        st = os.stat(path)
        return (st.st_dev, st.st_ino)
    except OSError:
        return (os.path.realpath(path),)


def _once(paths, labels):
    """(path, label, None) of each file, (path, label, its first path) where a file is given again."""
    seen: dict[tuple, Any] = {}
    for path, label in zip(paths, labels, strict=True):
        key = _identity(path)
        yield path, label, seen.get(key)
        seen.setdefault(key, path)


def _measurement(r) -> str:
    """What a file measures, in words: its kind (with what the kind says of it: a coll file's op
    and rank count)."""
    return measurement(r.attrs, r.kind)


def _one_measurement(runs) -> None:
    """UsageError when the files measure different things (a ping-pong latency and an allreduce's
    time per operation are no series)."""
    first = _measurement(runs[0])
    for r in runs[1:]:
        if _measurement(r) != first:
            raise UsageError(
                f"{runs[0].path} is {first}, {r.path} {_measurement(r)}: --trend follows one "
                "measurement from run to run; give files of one kind (a coll file's op at one rank count)"
            )


def _g(x: float, digits: int = 4) -> str:
    return f"{x:.{digits}g}" if x is not None and math.isfinite(x) else "-"


def cells(t: tr.Trend) -> tuple[list[str], list[list[str]]]:
    """The table: one row per run, its figures (a flagged one marked ▲ or ▼) and what changed."""
    headers = ["start (UTC)", "run"] + [f"{head} ({unit})" for _, head, unit, _ in tr.FIGURES]
    headers.append("conditions changed")
    rows = []
    for p in t.points:
        row = [p.start or "?", p.label]
        for key, _, _, scale in tr.FIGURES:
            mark = {"up": " ▲", "down": " ▼"}.get(p.changes.get(key, ""), "")
            row.append(_g(p.values[key] * scale) + mark)
        row.append(_changed(p))
        rows.append(row)
    return headers, rows


def _changed(p: tr.TrendPoint) -> str:
    return "; ".join(f"{k}: {a} -> {b}" for k, (a, b) in p.changed_conditions.items())


def text(t: tr.Trend) -> str:
    from npmpi_analysis.report import render_table

    out = [f"trend of {len(t.points)} runs (time order):", render_table(*cells(t), left=2)]
    return "\n".join(out + spread_lines(t))


def spread_lines(t: tr.Trend) -> list[str]:
    """The run-to-run spread of each figure, the changes and the rule, notices."""
    out = []
    for key, head, unit, scale in tr.FIGURES:
        s = t.spread[key]
        if not s["runs"]:
            continue
        first, last, med, mad = t.stretches[key][-1]
        since = "since the last change" if first > 0 else "all"
        counted = sum(math.isfinite(p.values[key]) for p in t.points[first : last + 1])  # with the figure
        out.append(
            f"  {head}: median {_g(med * scale)} {unit}, MAD {_g(mad * scale, 2)} {unit} over the "
            f"{counted} runs {since}; range of all {s['runs']}: {_g(s['min'] * scale)} to "
            f"{_g(s['max'] * scale)} {unit}"
        )
    flagged = [(p.label, key, d) for p in t.points for key, d in p.changes.items()]
    out.append(f"  changes (▲ up, ▼ down): {len(flagged) or 'none'}; rule: {tr.CHANGE_RULE}")
    heads = {key: head for key, head, *_ in tr.FIGURES}
    for p in t.points:
        for key, (ratio, lo, hi) in p.steps.items():
            out.append(
                f"  step at {p.label}: {heads[key]} x {_g(ratio, 3)} [{_g(lo, 3)}, {_g(hi, 3)}] of the "
                "median "
                "before it (95 %, the median resampled from the runs before)"
            )
    out += [f"  notice: {n}" for n in t.notes]
    return out


def rows(t: tr.Trend) -> list[dict[str, Any]]:
    """One dict per run: start, figures in SI units, their change flags, conditions."""
    out = []
    for p in t.points:
        row: dict[str, Any] = {"run": p.label, "path": p.path, "start_utc": p.start}
        row["start_unix_s"] = p.start_unix_s
        for key, *_ in tr.FIGURES:
            row[key] = p.values[key]
            row[f"{key}_change"] = p.changes.get(key, "")
            ratio, lo, hi = p.steps.get(key, (math.nan, math.nan, math.nan))
            row[f"{key}_step"], row[f"{key}_step_lo"], row[f"{key}_step_hi"] = ratio, lo, hi
        row["hosts"] = " ".join(p.hosts)
        row["power_caveat"] = p.caveat
        row["conditions_changed"] = "; ".join(
            f"{k}: {a} -> {b}" for k, (a, b) in p.changed_conditions.items()
        )
        row.update({f"condition_{k}": v for k, v in p.conditions.items()})
        out.append(row)
    return out


def csv_bytes(t: tr.Trend) -> bytes:

    table = rows(t)
    return rows_csv_bytes(table)


def _clean(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    return None if isinstance(x, float) and not math.isfinite(x) else x


def json_bytes(t: tr.Trend) -> bytes:
    doc = {
        "format": "npmpi-trend",
        "format_version": "1.0",
        "rule": tr.CHANGE_RULE,
        "k_mad": tr.K_MAD,
        "mad_scale": tr.MAD_SCALE,
        "min_relative": tr.MIN_RELATIVE,
        "min_history": tr.MIN_HISTORY,
        "small_sizes_max_bytes": tr.SMALL_MAX_BYTES,
        "runs": [{**r, "conditions": p.conditions} for r, p in zip(rows(t), t.points, strict=True)],
        "spread": t.spread,
        "stretches": {
            key: [{"first_run": a, "last_run": b, "median": m, "mad": d} for a, b, m, d in parts]
            for key, parts in t.stretches.items()
        },
        "notes": t.notes,
    }
    return (json.dumps(_clean(doc), indent=1, allow_nan=False) + "\n").encode()


def html_report(t: tr.Trend, figures: list[tuple], problems: list[str]) -> bytes:
    from npmpi_analysis.html_parts import CSS, figures_html, html_table, html_text

    title = f"npmpi trend: {len(t.points)} runs"
    parts = [
        f"<!DOCTYPE html><html lang=en><head><meta charset=utf-8><title>{html_text(title)}</title>",
        f"<style>{CSS}</style></head><body><h1>{html_text(title)}</h1>",
    ]
    parts += [f"<p class=problem>problem: {html_text(p)}</p>" for p in problems]
    parts.append(html_table(*cells(t), left=2))
    parts += [f"<p>{html_text(line.strip())}</p>" for line in spread_lines(t)]
    parts += figures_html(figures)
    parts.append("</body></html>\n")
    return "".join(parts).encode()


def _write(args, t: tr.Trend, say) -> None:
    import sys

    from npmpi_analysis.figures.render import write_figures
    from npmpi_analysis.outfiles import check_free, make_plots_dir, write_atomic
    from npmpi_analysis.trend.figures import trend_plot

    plots = [trend_plot(t)] if args.plots is not None or args.report is not None else []
    files = {p.name: args.plots / f"{p.name}.{args.format}" for p in plots} if args.plots else None
    if files is not None:
        if args.plots.is_dir():
            for f in files.values():
                check_free(f, args.force)
        make_plots_dir(args.plots)
    written = []
    for path, data in ((args.csv, csv_bytes), (args.json, json_bytes)):
        if path is not None:
            write_atomic(path, data(t), args.force)
            written.append(str(path))
    count, figures, skipped = write_figures(
        plots, args.format, files, args.force, args.report is not None, write_atomic
    )
    if count:
        written.append(f"{count} figure(s) in {args.plots}/")
    if args.report is not None:
        write_atomic(args.report, html_report(t, figures, skipped), args.force)
        written.append(str(args.report))
    for note in skipped:
        say(f"npmpi-analyze: note: {note}", sys.stderr)
    if written and not args.quiet:
        say("wrote " + ", ".join(written))
