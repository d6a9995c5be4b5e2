"""A coll file's table (the text output and the HTML report): OSU's latency columns, nccl-tests' algbw
and busbw with the factor used, and the energy of one operation (coll/numbers.py;
docs/collectives.md). Cells only: report.py and cli.py lay them out."""

from __future__ import annotations

import math

import numpy as np

from npmpi_analysis.coll.numbers import of
from npmpi_analysis.numbers.analyse import RunAnalysis


def _g(x, digits: int = 4) -> str:
    return f"{x:.{digits}g}" if x is not None and math.isfinite(x) else "-"


def _pm(x, s, pm: str) -> str:
    return f"{_g(x)} {pm} {_g(s, 2)}" if x is not None and math.isfinite(x) else "-"


def _reduces(op: str) -> bool:
    """Whether the op reduces (its reduction is said beside its type); an unknown op is said to."""
    from npmpi.coll.ops import OPS

    known = OPS.get(op)
    return known is None or bool(known.reduction)


def coll_heading(a: RunAnalysis) -> str:
    """What ran and the factors, in one line."""
    attrs = a.attrs
    op = str(attrs.get("coll_op", "?"))
    reduce_op = str(attrs.get("coll_reduce_op", "") or "") if _reduces(op) else ""
    what = f"{attrs.get('coll_dtype', '?')}" + (f" {reduce_op}" if reduce_op else "")
    return (
        f"collective: {op} on {attrs.get('coll_ranks', '?')} ranks, {what}; size = "
        f"{attrs.get('coll_size_meaning', '?')}; "
        f"algbw = {attrs.get('coll_algbw_bytes_factor', '?')} x size / t; "
        f"busbw = algbw x {attrs.get('coll_bus_factor_formula', '?')} = {_g(of(a).bus_factor, 4)}"
    )


def coll_cells(a: RunAnalysis, pm: str = "±", micro: str = "us") -> tuple[list[str], list[list[str]]]:
    """Headers and cells of a coll file's per-size table: latency across ranks, bandwidths, energy
    per operation."""
    c = of(a)
    headers = [
        "bytes",
        "iters",
        f"avg {micro}",
        f"min {micro}",
        f"max {micro}",
        "algbw Gbit/s",
        "busbw Gbit/s",
    ]
    energy = c.energy_per_op_j is not None
    if energy:
        headers += [f"power W {pm} σ", f"uJ/op {pm} σ", f"dyn uJ/op {pm} σ", f"pJ/bus bit {pm} σ", "flag"]
    flags = a.flag_names()
    rows = []
    for k in range(a.sizes):
        row = [
            str(int(a.bw.size_bytes[k])),
            str(int(a.bw.iterations[k])),
            _g(c.latency_avg_s[k] * 1e6),
            _g(c.latency_min_s[k] * 1e6),
            _g(c.latency_max_s[k] * 1e6),
            _g(c.algbw_bit_s[k] / 1e9),
            _g(c.busbw_bit_s[k] / 1e9),
        ]
        if energy:
            row += [
                _pm(a.power.job_w[k], a.power.job_sigma_w[k], pm),
                _pm(c.energy_per_op_j[k] * 1e6, c.energy_per_op_sigma_j[k] * 1e6, pm),
                _dynamic(c, k, pm),
                _pm(c.energy_pj_bus_bit[k], c.energy_sigma_pj_bus_bit[k], pm),
                flags[k],
            ]
        rows.append(row)
    return headers, rows


def _dynamic(c, k: int, pm: str) -> str:
    """The energy above idle of one operation, or its 2-sigma bound where the power above idle is
    not above its own sigma (noise is never shown as a number, as the rows' dynamic pJ/bit)."""
    if c.dynamic_energy_per_op_j is None:
        return "-"
    if c.dynamic_not_above_idle[k]:
        return f"< {_g(c.dynamic_energy_per_op_bound_j[k] * 1e6, 2)} (2σ)"
    return _pm(c.dynamic_energy_per_op_j[k] * 1e6, c.dynamic_energy_per_op_sigma_j[k] * 1e6, pm)


# ---------------------------------------------------------------- a coll file's report


def _at(x: np.ndarray, pick, sigma: np.ndarray | None = None, scale: float = 1.0, sizes=None) -> str:
    """'value (± sigma) at SIZE B' of the element `pick` chooses (argmin or argmax over the finite
    values), '-' when none is finite."""
    x = np.asarray(x, dtype=float)
    if x.size == 0 or not np.isfinite(x).any():
        return "-"
    k = int(pick(np.where(np.isfinite(x), x, np.nan)))
    value = _pm(x[k] * scale, sigma[k] * scale, "±") if sigma is not None else _g(x[k] * scale)
    return f"{value} at {int(sizes[k])} B"


def series_cells(series: list[RunAnalysis]) -> tuple[list[str], list[list[str]]]:
    """One row per series: op, ranks, the time of one operation at the smallest size, the peak busbw,
    the least energy of one operation and per bus bit (with σ), each at its size."""
    headers = [
        "series",
        "op",
        "ranks",
        "us/op at smallest",
        "peak busbw Gbit/s",
        "least uJ/op",
        "least pJ/bus bit",
    ]
    rows = []
    for a in series:
        c, sizes = of(a), a.bw.size_bytes
        row = [a.label, str(a.attrs.get("coll_op", "?")), str(a.attrs.get("coll_ranks", "?"))]
        row.append(f"{_g(c.op_s[0] * 1e6)} at {int(sizes[0])} B" if len(sizes) else "-")
        row.append(_at(c.busbw_bit_s, np.nanargmax, None, 1e-9, sizes))
        if c.energy_per_op_j is None:
            row += ["-", "-"]
        else:
            row.append(_at(c.energy_per_op_j, np.nanargmin, c.energy_per_op_sigma_j, 1e6, sizes))
            row.append(_at(c.energy_pj_bus_bit, np.nanargmin, c.energy_sigma_pj_bus_bit, 1.0, sizes))
        rows.append(row)
    return headers, rows


def _file_heading(series: list[RunAnalysis]) -> list[str]:
    """The file's header, once: what it holds, then its status, kernel, platform, hosts and command
    (the first series' lines: every series of a file shares them)."""
    from npmpi_analysis.report import header_lines

    first = series[0]
    ops = list(dict.fromkeys(str(a.attrs.get("coll_op", "?")) for a in series))
    ranks = list(dict.fromkeys(str(a.attrs.get("coll_ranks", "?")) for a in series))
    what = f"a coll file of {len(series)} series ({', '.join(ops)} on {', '.join(ranks)} ranks)"
    lines = header_lines(first, first.summary())
    status = lines[1].replace(f"; {first.summary()['sizes_analysed']} sizes analysed", "")
    rest = [x for x in lines[2:] if not x.startswith(("  mode:", "  protocol:"))]
    return [f"{first.path}: {what}", status, *rest]


def _lines(a: RunAnalysis, render_table) -> list[str]:
    """A series' lines below its table: the CPU's, the conditions', the power's, the notices, the model."""
    from npmpi_analysis.model_report import model_lines
    from npmpi_analysis.report import detail_lines

    return detail_lines(a, a.summary()) + model_lines(a, render_table)


def _shared(every: list[list[str]]) -> list[str]:
    """The lines every series has, word for word (the node's settings, the idle baselines, the
    meters'), in the first one's order: said once, under the file's header."""
    rest = [set(lines) for lines in every[1:]]
    return [line for line in every[0] if all(line in lines for lines in rest)]


def file_text(series: list[RunAnalysis], render_table) -> str:
    """A coll file in the console: its header once (with the lines every series shares), the table of
    its series, each series' detail: what ran, the collective's table, its own lines."""
    every = [_lines(a, render_table) for a in series]
    shared = _shared(every) if len(series) > 1 else []
    out = [*_file_heading(series), *shared, "", *render_table(*series_cells(series)).splitlines()]
    for a, lines in zip(series, every, strict=True):
        what = coll_heading(a).removeprefix("collective: ")
        out += ["", f"{a.label}: {what}", render_table(*coll_cells(a))]
        out += [line for line in lines if line not in shared]
    return "\n".join(out)


def file_html(series: list[RunAnalysis], html_table, escape) -> str:
    """A coll file in the HTML report: its header once, the table of its series, each series' detail
    (its table, its lines, its meter faults, its model)."""
    from npmpi_analysis.html_parts import summary_table_html
    from npmpi_analysis.html_report import fault_table
    from npmpi_analysis.model_report import model_html
    from npmpi_analysis.report import detail_lines

    head, *rest = _file_heading(series)
    path, _, what = head.partition(": ")
    lines = [f"{series[0].label}: {path}", f"  holds: {what}", *rest]
    parts = [summary_table_html("\n".join(lines)), html_table(*series_cells(series), left=3)]
    for a in series:
        parts.append(f"<h3>{escape(a.label)}</h3><p>{escape(coll_heading(a))}</p>")
        parts.append(html_table(*coll_cells(a, "±", "µs"), left=0))
        lines = [f"{a.label}: {a.path}", *detail_lines(a, a.summary())]
        parts += [summary_table_html("\n".join(lines)), fault_table(a), model_html(a, html_table)]
    return "".join(parts)
