"""The run's HTML report: one self-contained page of the summaries, faults, models, comparisons,
figures inline and the per-size tables (`npmpi-analyze --report`); a kind that reports its files
itself (a coll file) gives its part through the seam of kinds (numbers/kinds.py)."""

from __future__ import annotations

import math

from npmpi_analysis.html_parts import CSS, figures_html, html_table, html_text, summary_table_html
from npmpi_analysis.model_report import model_html
from npmpi_analysis.numbers import kinds
from npmpi_analysis.numbers.analyse import RunAnalysis
from npmpi_analysis.numbers.fabric import part_cells
from npmpi_analysis.numbers.run_comparison import compare
from npmpi_analysis.report import by_file, short_number, since_text, summary_text, table_cells

_e = html_text


def fault_table(a: RunAnalysis) -> str:
    """The run's meter faults and sampling gaps as an HTML table ('' without power): the rows of the
    Python API's RunData.faults (npmpi_analysis.api), the fabric's devices' among them."""
    from npmpi_analysis.numbers.faults import fault_rows

    if a.power is None:
        return ""
    rows = []
    for f in fault_rows(a.power, a.fabric, a.summary().get("first_trial_unix_s")):
        keys = ("since_first_trial_s", "last_since_first_trial_s")
        since, last = (f[k] if math.isfinite(f[k]) else None for k in keys)
        until = since_text(last) if f["count"] > 1 or f["kind"] == "gap" else ""
        where = f"{f['node']} {f['host']}" if f["node"] >= 0 else f"fabric {f['host']}"
        rows.append([where, f"{f['channel']} {f['channel_kind']}", since_text(since), str(f["count"])])
        rows[-1] += [until, f["kind"], f["message"]]
    headers = ["node", "channel", "since first trial", "count", "until", "kind", "message"]
    if not rows:
        return "<p id=faults>Meter faults: none recorded.</p>"
    return "<h4>Meter faults</h4><div id=faults>" + html_table(headers, rows, left=7) + "</div>"


def _run_summary_html(a: RunAnalysis, titled: bool) -> list[str]:
    """A run's part of the report's summary: its lines as a table, faults, model, energy parts."""
    parts = [f"<h3>{_e(a.label)}</h3>"] if titled else []  # one run: the page's title is its label
    if a.caveat:
        parts.append(f"<p class=caveat>Power is {_e(a.caveat)}.</p>")
    parts += [summary_table_html(summary_text(a)), fault_table(a), model_html(a, html_table)]
    if a.summary().get("energy_parts"):
        parts.append(
            "<h4>Energy per bit: nodes, fabric, total</h4>"
            + html_table(*part_cells(a.summary()["energy_parts"]))
        )
    return parts


def html_report(
    analyses: list[RunAnalysis], figures: list[tuple[str, str, bytes, str]], problems: list[str]
) -> bytes:
    """One self-contained page: summaries, tables, figures inline as base64 PNG.

    `figures` holds (name, caption, png bytes, caveat) tuples.
    """
    title = "npmpi analysis: " + ", ".join(a.label for a in analyses)
    parts = [
        "<!DOCTYPE html><html lang=en><head><meta charset=utf-8>",
        f"<title>{_e(title)}</title><style>{CSS}</style></head><body>",
        f"<h1>{_e(title)}</h1>",
    ]
    for p in problems:
        parts.append(f"<p class=problem>problem: {_e(p)}</p>")
    parts.append("<h2>Summary</h2>")
    files = by_file(analyses)
    whole = ""
    for series in files:
        whole = kinds.file_html(series, html_table, _e)  # a kind's own summary of a file (coll)
        if whole:
            caveat = series[0].caveat
            parts += [f"<p class=caveat>Power is {_e(caveat)}.</p>" if caveat else "", whole]
            continue
        for a in series:
            parts += _run_summary_html(a, len(analyses) > 1)
    if len(analyses) > 1 and not (len(files) == 1 and whole):  # one file's series: its table compares them
        parts.append("<h2>Comparison</h2>")
        rows = compare([a.summary() for a in analyses])
        labels = [a.label for a in analyses]
        parts.append(
            html_table(
                ["figure", *labels, *(f"{lab} / {labels[0]}" for lab in labels[1:])],
                [
                    [r["figure"] + (f" ({r['unit']})" if r["unit"] else "")]
                    + [short_number(v, 5) if v is not None else "-" for v in r["values"]]
                    + [f"{x:.3f}" if x is not None else "-" for x in r["ratio_to_first"][1:]]
                    for r in rows
                ],
            )
        )
        from npmpi_analysis.numbers.size_comparison import common_sizes, comparison_blocks
        from npmpi_analysis.numbers.verdicts import summary_lines

        parts.append("<h3>Per message size (sizes every run measured)</h3>")
        for title, headers, rows in comparison_blocks(analyses):
            parts.append(f"<h4>{_e(title)}</h4>" + html_table(headers, rows, left=0))
        if common_sizes(analyses):
            items = "".join(
                f"<li>{_e(x.strip())}</li>" for x in summary_lines(analyses, common_sizes(analyses))
            )
            parts.append(f"<h3>Differences beyond noise</h3><ul id=verdicts>{items}</ul>")
    if figures:
        parts.append("<h2>Figures</h2>")
    parts += figures_html(figures)
    for a in analyses:
        parts.append(f"<h2>Per message size: {_e(a.label)}</h2>")
        if a.caveat:
            parts.append(f"<p class=caveat>Power is {_e(a.caveat)}.</p>")
        headers, rows = table_cells(a, "±", "µs")
        parts.append(html_table(headers, rows, left=0))
        parts.append(kinds.html(a, html_table, _e))  # the kind's own table (a coll file's), or nothing
    parts.append("</body></html>\n")
    return "".join(parts).encode()
