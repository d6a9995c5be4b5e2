"""What npmpi's ReFrame checks (npmpi_checks.py) read from `npmpi-analyze --json`: the figures they
report as performance variables, and what is wrong with a run, in npmpi's own words.

Plain Python (json only), without ReFrame, so a site's other tools and npmpi's tests use it too.
The figures (units in FIGURE_UNITS):
  latency_small   µs      median one-way latency of the sizes up to 64 B (a map: its median link's
                          latency; a coll file: the time of one operation at its smallest size)
  bandwidth_peak  Gbit/s  the best trial's bandwidth at the best size (a map: the median link's at the
                          best size; a coll file: the bus bandwidth, nccl-tests' busbw)
  energy_least    pJ/bit  the least energy per bit over the unflagged sizes (with a meter)
  power_idle, power_active  W  all nodes' power in the idle baseline and while measuring (with a meter)
  energy_per_op   J/op    a coll file: the energy of one operation at its largest size (with a meter)
  model_alpha     µs      the model's alpha of its first regime (the smallest sizes' latency)
  model_beta      Gbit/s  the model's beta of its last regime (the bandwidth the largest sizes reach)
  model_energy_per_bit  pJ/bit  the model's energy per bit of its last regime (with a meter)
  (the model: docs/analysis.md, "Models"; a coll file: its first series'; a map: the median link's)
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

SMALL_MAX_BYTES = 64  # as npmpi_analysis.trend.numbers.SMALL_MAX_BYTES
FIGURE_UNITS = {
    "latency_small": "us",
    "bandwidth_peak": "Gbit/s",
    "energy_least": "pJ/bit",
    "power_idle": "W",
    "power_active": "W",
    "energy_per_op": "J/op",
    "model_alpha": "us",
    "model_beta": "Gbit/s",
    "model_energy_per_bit": "pJ/bit",
}


def read(path: str | Path) -> dict:
    """The JSON document, or {} when npmpi-analyze wrote none (the problems say why)."""
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return {}


def _num(x) -> float:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else math.nan


def _run(doc: dict) -> dict:
    runs = doc.get("runs") or doc.get("maps") or [{}]
    return runs[0]


def _small_latency_s(rows: list[dict], key: str) -> float:
    rows = [r for r in rows if math.isfinite(_num(r.get(key)))]
    small = [r for r in rows if r["size_bytes"] <= SMALL_MAX_BYTES] or rows[:1]
    return statistics.median(_num(r[key]) for r in small) if small else math.nan


def figures(doc: dict) -> dict[str, float]:
    """The performance figures in FIGURE_UNITS (NaN where the run has none)."""
    run = _run(doc)
    s = run.get("summary", {})
    rows = run.get("sizes", [])
    if doc.get("format") == "npmpi-map-analysis":
        bandwidths = [_num(b) for b in s.get("median_bandwidth_bit_s") or []]
        energies = [_num(e) for e in s.get("median_energy_pj_bit") or []]
        idle = [_num(w) for w in (s.get("idle_power_w") or {}).values()]
        out = {
            "latency_small": _num(s.get("median_latency_s")) * 1e6,
            "bandwidth_peak": max((b for b in bandwidths if math.isfinite(b)), default=math.nan) * 1e-9,
            "energy_least": min((e for e in energies if math.isfinite(e)), default=math.nan),
            "power_idle": sum(idle) if idle else math.nan,
            "model_alpha": _num(s.get("median_model_alpha_s")) * 1e6,
            "model_beta": _num(s.get("median_model_beta_bit_s")) * 1e-9,
        }
        if s.get("median_model_energy_per_bit_j") is not None:
            out["model_energy_per_bit"] = _num(s["median_model_energy_per_bit_j"]) * 1e12
    elif "collective" in s:
        busbw = [_num(r.get("busbw_bit_s")) for r in rows]
        out = {
            "latency_small": _small_latency_s(rows, "time_per_op_s") * 1e6,
            "bandwidth_peak": max((b for b in busbw if math.isfinite(b)), default=math.nan) * 1e-9,
            "energy_per_op": _num(rows[-1].get("energy_per_op_j")) if rows else math.nan,
        }
    else:
        out = {
            "latency_small": _small_latency_s(rows, "latency_min_s") * 1e6,
            "bandwidth_peak": _num(s.get("peak_bandwidth_bit_s")) * 1e-9,
        }
    if s.get("has_power") and "collective" not in s and doc.get("format") != "npmpi-map-analysis":
        out["energy_least"] = _num(s.get("min_energy_pj_bit"))
    if s.get("has_power") and doc.get("format") != "npmpi-map-analysis":
        out["power_idle"] = _num(s.get("idle_power_w"))
        out["power_active"] = _num(s.get("active_power_w"))
    out.update(_model_figures(s.get("model") or {}))
    return out


def _model_figures(model: dict) -> dict[str, float]:
    """alpha of the first regime, beta and energy per bit of the last (none without a model)."""
    regimes = model.get("regimes") or []
    if not regimes:
        return {}
    out = {
        "model_alpha": _num(regimes[0].get("alpha_s")) * 1e6,
        "model_beta": _num(regimes[-1].get("beta_bit_s")) * 1e-9,
    }
    if regimes[-1].get("energy_per_bit_j") is not None:
        out["model_energy_per_bit"] = _num(regimes[-1]["energy_per_bit_j"]) * 1e12
    return out


def problems(doc: dict, analyze_status: int | None, expect: dict) -> list[str]:
    """What is wrong with the run, one line each (empty: the run is sound).

    expect: `meter` (a meter was asked for: the file must have power), `measured` (the power must be
    measured, not estimated: a node without a meter of its own fails), `pair_crosses_nodes` (True,
    False or None), `allow_flagged` (a headline figure from a flagged size is not a failure)."""
    if not doc:
        return ["npmpi-analyze wrote no JSON: npmpi wrote no readable run file (see the job's output)"]
    run = _run(doc)
    s = run.get("summary", {})
    out = []
    status = s.get("status", "")
    if status != "complete":
        out.append(f"the run file's status is {status!r}: {s.get('status_message') or 'see the job output'}")
    if analyze_status not in (0, None):
        out.append(f"npmpi-analyze's integrity check failed (exit {analyze_status})")
    out += [f"npmpi-analyze: {p}" for p in run.get("problems", [])]
    crosses = expect.get("pair_crosses_nodes")
    if crosses is not None and s.get("pair_crosses_nodes") is not None and s["pair_crosses_nodes"] != crosses:
        where = "across nodes" if crosses else "within one node"
        out.append(f"the pair was to be {where} and was not: check the placement (tasks per node)")
    if expect.get("meter") and not s.get("has_power"):
        out.append("no power in the file: no meter could be read on the node(s) (python -m npmpi meters)")
    caveat = s.get("power_caveat", "")
    if expect.get("measured") and s.get("has_power") and caveat:
        out.append(f"no meter on this node: its power is {caveat}; give a meter (docs/meters.md)")
    if s.get("headline_sizes") == "only flagged sizes" and not expect.get("allow_flagged"):
        flags = ", ".join(f"{n} '{k}'" for k, n in (s.get("flagged_sizes") or {}).items())
        out.append(f"every size is flagged ({flags}): the energy figures are not trustworthy")
    flagged = (s.get("flagged_pairs") or {}) if doc.get("format") == "npmpi-map-analysis" else {}
    measured = sum(s.get("pairs_measured") or [])
    if flagged and sum(flagged.values()) >= measured and not expect.get("allow_flagged"):
        flags = ", ".join(f"{n} '{k}'" for k, n in flagged.items())
        out.append(f"every pair and size is flagged ({flags}): the energy figures are not trustworthy")
    return out
