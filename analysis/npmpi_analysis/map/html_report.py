"""A cluster map's HTML report: one self-contained page of each map's summary, its outliers (named,
not measured again, not confirmed), the comparisons, the heatmaps and, for maps small enough, the
matrices (the text it shares: map/report.py)."""

from __future__ import annotations

import numpy as np

from npmpi_analysis.html_parts import figures_html, html_text
from npmpi_analysis.map.outliers import THRESHOLD_TEXT
from npmpi_analysis.map.report import (
    HTML_MATRIX_MAX,
    change_text,
    matrices,
    matrix_cells,
    meanwhile,
    summary_text,
)

CSS = """
body{font-family:system-ui,sans-serif;margin:2em;max-width:80em;color:#222}
h1{font-size:1.5em}h2{font-size:1.2em;margin-top:2em}
table{border-collapse:collapse;font-size:.8em;margin:.5em 0}
td,th{border:1px solid #ccc;padding:.15em .4em;text-align:right}th{background:#f3f3f3}
.caveat{color:#b22222;font-weight:bold}.problem{color:#b22222}
figure{margin:1.5em 0}figcaption{font-size:.9em;color:#444}img{max-width:100%}
pre{white-space:pre-wrap;overflow-wrap:anywhere}
"""


_e = html_text


def _html_matrix(names: list[str], x: np.ndarray, digits: int) -> str:
    headers, rows = matrix_cells(names, x, digits)
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{_e(c)}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _outlier_items(a) -> list[str]:
    """The report's outliers: named (confirmed, or without a second measurement), then those not
    measured again (the budget), then those not confirmed."""
    from npmpi_analysis.map.confirmed import (
        confirm_summary,
        not_measured,
        not_measured_words,
        unconfirmed_words,
    )

    facts = confirm_summary(a)
    left_out = [f for f in a.outliers if not_measured(f)]
    parts = [f"<li>{_e(f.sentence + meanwhile(f))}</li>" for f in a.outliers if f.confirmed is not False] or [
        "<li>none confirmed</li>" if left_out else "<li>none named</li>"
    ]
    parts += [
        f"<li>not measured again: {_e(f.sentence)}; {_e(not_measured_words(facts))}</li>" for f in left_out
    ]
    return parts + [
        f"<li>not confirmed: {_e(f.sentence)}; {_e(unconfirmed_words(f, facts) + meanwhile(f))}</li>"
        for f in a.outliers
        if f.confirmed is False and not not_measured(f)
    ]


def html_report(
    analyses: list, changes: list, figures: list[tuple[str, str, bytes, str]], problems: list[str]
) -> bytes:
    """One self-contained page: summaries, outlier sentences, comparisons, heatmaps, matrices."""
    title = "npmpi cluster map: " + ", ".join(a.label for a in analyses)
    parts = [
        "<!DOCTYPE html><html lang=en><head><meta charset=utf-8>",
        f"<title>{_e(title)}</title><style>{CSS}</style></head><body>",
        f"<h1>{_e(title)}</h1>",
    ]
    parts += [f"<p class=problem>problem: {_e(p)}</p>" for p in problems]
    for a in analyses:
        parts.append(f"<h2>{_e(a.label)}</h2>")
        if a.caveat:
            parts.append(f"<p class=caveat>Power is {_e(a.caveat)}.</p>")
        parts.append(f"<pre>{_e(summary_text(a, show_matrices=False))}</pre>")
        parts.append(f"<h3>Outliers</h3><p>Rule: {_e(THRESHOLD_TEXT)}.</p><ul id=outliers-{_e(a.label)}>")
        parts += _outlier_items(a)
        parts.append("</ul>")
    for c in changes:
        parts.append(f"<h2>Comparison {_e(c.after)} / {_e(c.before)}</h2><pre>{_e(change_text(c))}</pre>")
    if figures:
        parts.append("<h2>Heatmaps</h2>")
    parts += figures_html(figures)
    for a in analyses:
        if a.nodes > HTML_MATRIX_MAX:
            continue
        parts.append(f"<h2>Matrices: {_e(a.label)}</h2>")
        for t, x, digits in matrices(a):
            parts.append(f"<h4>{_e(t)}</h4>{_html_matrix(a.names, x, digits)}")
    parts.append("</body></html>\n")
    return "".join(parts).encode()
