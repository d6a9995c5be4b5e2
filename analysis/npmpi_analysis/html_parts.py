"""The HTML report's building blocks: its style, escaped text, inline figures, tables, and the text
summary as a table (npmpi_analysis.report and map_report assemble the pages)."""

from __future__ import annotations

import base64
import html
from typing import Any

from npmpi.core.safetext import printable_lines

CSS = """
body{font-family:system-ui,sans-serif;margin:2em;max-width:80em;color:#222}
h1{font-size:1.5em}h2{font-size:1.2em;margin-top:2em}
table{border-collapse:collapse;font-size:.85em;margin:.5em 0}
td,th{border:1px solid #ccc;padding:.2em .5em;text-align:right}
th{background:#f3f3f3}td.l,th.l{text-align:left}
.caveat{color:#b22222;font-weight:bold}.problem{color:#b22222}.notice{color:#8a6d00}
figure{margin:1.5em 0}figcaption{font-size:.9em;color:#444}
img{max-width:100%}
table.summary{max-width:100%}table.summary td{overflow-wrap:anywhere}
table.summary th{white-space:nowrap;vertical-align:top}
"""


def html_text(x: Any) -> str:
    """HTML-escaped text, control characters shown escaped (npmpi.core.safetext) except line breaks."""
    return html.escape(printable_lines(x), quote=True)


_e = html_text


def figures_html(figures: list[tuple[str, str, bytes, str]]) -> list[str]:
    """Each (name, caption, png, caveat) as an HTML figure with its image inline."""
    parts = []
    for name, caption, png, caveat in figures:
        data = base64.b64encode(png).decode("ascii")
        cav = f" <span class=caveat>Power is {_e(caveat)}.</span>" if caveat else ""
        parts.append(
            f'<figure id={_e(name)}><img src="data:image/png;base64,{data}" alt="{_e(name)}">'
            f"<figcaption>{_e(caption)}{cav}</figcaption></figure>"
        )
    return parts


def html_table(headers: list[str], rows: list[list[str]], left: int = 1) -> str:
    """Headers and rows as an HTML table, the first `left` columns aligned left."""
    head = "".join(f"<th{' class=l' if i < left else ''}>{_e(h)}</th>" for i, h in enumerate(headers))
    body = "".join(
        "<tr>"
        + "".join(f"<td{' class=l' if i < left else ''}>{_e(c)}</td>" for i, c in enumerate(r))
        + "</tr>"
        for r in rows
    )
    return f"<table><tr>{head}</tr>{body}</table>"


def summary_table_html(text: str) -> str:
    """The text summary as a two-column table that wraps to the page: each `  figure: value` line a
    row, lines indented under it rows of their own below it; the first line (label: file) as 'file'."""
    lines = text.splitlines()
    rows = [["file", lines[0].split(": ", 1)[-1]]] if lines else []
    for line in lines[1:]:
        nested = line.startswith("    ")
        key, sep, value = line.strip().partition(": ")
        rows.append(["", line.strip()] if nested or not sep else [key, value])
    body = "".join(f"<tr><th class=l>{_e(k)}</th><td class=l>{_e(v)}</td></tr>" for k, v in rows)
    return f"<table class=summary>{body}</table>"
