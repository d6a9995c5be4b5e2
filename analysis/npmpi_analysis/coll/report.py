"""A coll file's table (the text output and the HTML report): OSU's latency columns, nccl-tests' algbw
and busbw with the factor used, and the energy of one operation (coll/numbers.py;
docs/collectives.md). Cells only: report.py and cli.py lay them out."""

from __future__ import annotations

import math

from npmpi_analysis.coll.numbers import of
from npmpi_analysis.numbers.analyse import RunAnalysis


def _g(x, digits: int = 4) -> str:
    return f"{x:.{digits}g}" if x is not None and math.isfinite(x) else "-"


def _pm(x, s, pm: str) -> str:
    return f"{_g(x)} {pm} {_g(s, 2)}" if x is not None and math.isfinite(x) else "-"


def coll_heading(a: RunAnalysis) -> str:
    """What ran and the factors, in one line."""
    attrs = a.attrs
    op = str(attrs.get("coll_op", "?"))
    reduce_op = str(attrs.get("coll_reduce_op", "") or "")
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
