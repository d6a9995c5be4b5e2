"""A run's model where the user looks: the console's model lines, the model CSV (--model-csv) and the
HTML report's table (numbers/model.py; docs/analysis.md, "Models")."""

from __future__ import annotations

import math

from npmpi_analysis.numbers.model_drift import drift
from npmpi_analysis.numbers.model_drift import lines as drift_lines
from npmpi_analysis.numbers.model_summary import WINDOW_TARGETS_W, regime_rows, summary
from npmpi_analysis.numbers.precision import lines as precision_lines
from npmpi_analysis.numbers.precision import summary as precision_summary

HEADERS = ["sizes B", "alpha us", "beta Gbit/s", "E/msg nJ", "E/bit pJ", "R2 t", "worst t", "R2 E"]
DYN_HEADERS = ["sizes B", "dyn E/msg nJ", "dyn E/bit pJ"]


def _num(x: float | None) -> str:
    if x is None or not math.isfinite(x):
        return "inf" if x is not None and x > 0 else "-"
    return f"{x:.4g}"


def with_interval(value, lo, hi, scale: float) -> str:
    """'0.814 [0.812, 0.816]' in the unit `scale` gives; '-' without a value."""
    if value is None:
        return "-"
    s = [None if v is None else v * scale for v in (value, lo, hi)]
    return f"{_num(s[0])} [{_num(s[1])}, {_num(s[2])}]"


def dynamic_cell(row: dict, key: str, scale: float, below: bool) -> str:
    """A dynamic figure with its interval, or 'below resolution (< hi)' when its interval reaches 0."""
    value, hi = row.get(key), row.get(key + "_hi")
    if value is None:
        return "-"
    if below:
        bound = hi * scale if hi is not None and hi > 0 else 0.0
        return f"below resolution (< {_num(bound)})"
    return with_interval(value, row.get(key + "_lo"), hi, scale)


def _beta(row: dict) -> str:
    """beta with its interval; 'flat' where the time does not grow with the size (no finite beta)."""
    value, lo, hi = row["beta_bit_s"], row["beta_bit_s_lo"], row["beta_bit_s_hi"]
    if value is None or lo is None:
        return "flat (time does not grow)"
    return with_interval(value, lo, hi if hi is not None else math.inf, 1e-9)


def _per_bit(row: dict) -> str:
    """The energy per bit with its interval; one whose whole interval is below 0 (the energy of one
    message falls with its size: a regime whose time does not grow, or a power that fell) is said so,
    not shown as a negative energy."""
    hi = row["energy_per_bit_j_hi"]
    if hi is not None and hi < 0:
        return "< 0 (falls with size)"
    return with_interval(row["energy_per_bit_j"], row["energy_per_bit_j_lo"], hi, 1e12)


def table(rows: list[dict]) -> tuple[list[str], list[list[str]]]:
    """The regimes' cells: sizes, alpha, beta, energy per message and per bit, fits' quality."""
    cells = []
    for r in rows:
        cells.append(
            [
                f"{r['size_lo_bytes']}-{r['size_hi_bytes']}",
                with_interval(r["alpha_s"], r["alpha_s_lo"], r["alpha_s_hi"], 1e6),
                _beta(r),
                with_interval(
                    r["energy_per_message_j"], r["energy_per_message_j_lo"], r["energy_per_message_j_hi"], 1e9
                ),
                _per_bit(r),
                _num(r["r2"]),
                f"{r['max_residual'] * 100:.3g} %" if r["max_residual"] is not None else "-",
                _num(r["energy_r2"]),
            ]
        )
    return HEADERS, cells


def dynamic_table(rows: list[dict]) -> tuple[list[str], list[list[str]]]:
    cells = [
        [
            f"{r['size_lo_bytes']}-{r['size_hi_bytes']}",
            dynamic_cell(r, "dynamic_energy_per_message_j", 1e9, r["dynamic_per_message_below_resolution"]),
            dynamic_cell(r, "dynamic_energy_per_bit_j", 1e12, r["dynamic_per_bit_below_resolution"]),
        ]
        for r in rows
    ]
    return DYN_HEADERS, cells


def heading(s: dict) -> str:
    breaks = ", ".join(f"{b} B" for b in s["breaks_bytes"]) or "none"
    source = "given" if s["breaks_source"] == "given" else "found in the data"
    return (
        "  model: t = alpha + bits/beta and E = E/msg + E/bit x bits per regime "
        f"(breaks {source}: {breaks}); "
        f"95 % intervals from {s['bootstrap_resamples']} resamples, seed {s['bootstrap_seed']}"
    )


def resolution_lines(res: dict | None, trials: int) -> list[str]:
    """What the meter resolves and the windows a given dynamic power needs."""
    if not res or res.get("dynamic_power_resolution_w_median") is None:
        return []
    out = [
        "  resolution: this run tells dynamic power from zero above "
        f"{_num(res['dynamic_power_resolution_w_median'])} W "
        f"per size (median; readings' spread {_num(res['reading_sigma_w'])} W, idle mean's "
        f"{_num(res['idle_mean_sigma_w'])} W, meter period {_num(res['meter_period_s'])} s)"
    ]
    needs = []
    for watts in WINDOW_TARGETS_W:
        d = res.get(f"window_s_to_resolve_{watts:g}_w")
        if d is None:
            needs.append(f"{watts:g} W: never at this idle baseline (a longer --baseline first)")
        else:
            per = f" (--target-time {_num(d / trials)} s at {trials} trials)" if trials else ""
            needs.append(f"{watts:g} W: windows of {_num(d)} s per size{per}")
    out.append("  to resolve " + "; ".join(needs))
    return out


def model_lines(a, render_table) -> list[str]:
    """The console summary's model section (render_table: report.render_table)."""
    s = summary(a.model, a.model_note)
    if a.model is None:
        return [f"  model: none ({s['note']})"] if s["note"] else []
    rows = s["regimes"]
    out = [heading(s)]
    out += ["    " + line for line in render_table(*table(rows)).splitlines()]
    if any(r["dynamic_energy_per_message_j"] is not None for r in rows):
        out.append("  dynamic model (power above idle):")
        out += ["    " + line for line in render_table(*dynamic_table(rows)).splitlines()]
    if s["energy_left_out_sizes_bytes"]:
        left = s["energy_left_out_sizes_bytes"]
        out.append(f"  energy model: {len(left)} size(s) with flagged power left out (first {left[0]} B)")
    out += resolution_lines(s.get("resolution"), int(a.model.resolution.trials) if a.model.resolution else 0)
    out += drift_lines(drift(a), str(a.attrs.get("size_order", "ascending")))
    return out + precision_lines(precision_summary(a))


CSV_COLUMNS = ("run", "regime")


def model_csv_bytes(analyses) -> bytes:
    """--model-csv: one row per run and regime, every figure of the JSON's regimes."""
    from npmpi_analysis.outfiles import rows_csv_bytes

    rows = []
    for a in analyses:
        if a.model is None:
            continue
        for k, r in enumerate(regime_rows(a.model)):
            rows.append(
                {
                    "run": a.label,
                    "regime": k + 1,
                    **r,
                    "bootstrap_resamples": a.model.resamples,
                    "bootstrap_seed": a.model.seed,
                    "breaks_source": a.model.breaks_source,
                }
            )
    return rows_csv_bytes(rows)


def model_html(a, html_table) -> str:
    """The HTML report's model section of one run ('' without a model)."""
    if a.model is None:
        return ""
    s = summary(a.model, a.model_note)
    rows = s["regimes"]
    parts = [f"<h3>Model</h3><p>{heading(s).strip()}</p>", html_table(*table(rows))]
    if any(r["dynamic_energy_per_message_j"] is not None for r in rows):
        parts.append(html_table(*dynamic_table(rows)))
    trials = int(a.model.resolution.trials) if a.model.resolution else 0
    parts += [f"<p>{line.strip()}</p>" for line in resolution_lines(s.get("resolution"), trials)]
    return "".join(parts)
