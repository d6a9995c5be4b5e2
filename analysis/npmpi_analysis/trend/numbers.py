"""Trends across runs of one system (`npmpi-analyze --trend`): each run's key figures in time order,
the run-to-run spread, and a change flagged where a run leaves the runs before it.

The rule (CHANGE_RULE): a figure of run k is flagged when it lies further from the median of the
runs since the last change (at least MIN_HISTORY of them) than K_MAD times their median absolute
deviation (x MAD_SCALE, the normal's sigma), and than MIN_RELATIVE of that median. A flagged run
starts a new history, so a lasting step is flagged once, at the run where it starts. The figures are
the API's (npmpi_analysis.api), the same numbers as `npmpi-analyze --json`.
"""

from __future__ import annotations

import itertools
import json
import math
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import numpy as np

K_MAD = 3.0
MAD_SCALE = 1.4826
MIN_RELATIVE = 0.10
MIN_HISTORY = 3
SMALL_MAX_BYTES = 64  # "latency at small sizes": the median of the sizes up to this
CHANGE_RULE = (
    f"a figure is flagged when it lies further from the median of the runs since the last change "
    f"(at least {MIN_HISTORY}) than {K_MAD:g} x their median absolute deviation (x {MAD_SCALE}) and than "
    f"{MIN_RELATIVE:.0%} of that median; a flagged run starts a new history"
)
# (key, heading, unit, scale from SI): the figures followed
FIGURES = (
    ("latency_s", f"latency <= {SMALL_MAX_BYTES} B", "us", 1e6),
    ("peak_bandwidth_bit_s", "peak bandwidth", "Gbit/s", 1e-9),
    ("min_energy_pj_bit", "least energy per bit", "pJ/bit", 1.0),
)
# the conditions of a measurement, read by name where a file carries them (root, then node attributes)
CONDITIONS = (
    "kernel",
    "protocol",
    "timing_comparable",  # False with --integrity: every message checked inside the timed loop
    "mpi_library_version",
    "npmpi_version",
    "buffers",
    "huge_pages",
    "thp_policy",
    "governor",
    "scaling_governor",
    "cpu_freq_hz",
    "cpu_freq_min_hz",
    "cpu_freq_max_hz",
    "turbo",
    "boost",
    "throttle_count",
    "nic",
    "nic_speed_mb_s",
    "nic_driver",
    "nic_firmware",
    "bios_version",
)


@dataclass
class TrendPoint:
    """One run of the series."""

    label: str
    path: str
    start: str  # ISO 8601 UTC: the file's created_utc (else its first trial's time)
    start_unix_s: float
    values: dict[str, float]  # FIGURES' keys, NaN where the run has none
    hosts: list[str]
    conditions: dict[str, str]
    caveat: str = ""  # the power's, e.g. "ESTIMATED, not measured" ("" when measured or without power)
    changes: dict[str, str] = field(default_factory=dict)  # figure -> "up" / "down" where flagged
    changed_conditions: dict[str, tuple[str, str]] = field(default_factory=dict)  # name -> (before, now)
    first_unix_s: float = math.nan  # its first trial's start: the order of runs created in one second
    steps: dict[str, tuple[float, float, float]] = field(default_factory=dict)  # flagged: ratio, lo, hi


@dataclass
class Trend:
    points: list[TrendPoint]
    spread: dict[str, dict[str, float]]  # figure -> median, mad, min, max over all runs
    # figure -> its stretches between changes: (first point, last point, median, MAD) of each
    stretches: dict[str, list[tuple[int, int, float, float]]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def _start(attrs: dict, first: float) -> tuple[str, float]:
    """(ISO text, seconds): the file's created_utc, else its first trial's start (`first`, NaN: none)."""
    text = str(attrs.get("created_utc", "")).strip()
    try:
        t = datetime.fromisoformat(text.replace("Z", "+00:00"))
        if t.tzinfo is None:
            t = t.replace(tzinfo=timezone.utc)
        return text, t.timestamp()
    except ValueError:
        pass
    try:  # a time outside datetime's years 1 to 9999 (a forged or damaged file) is no time
        return datetime.fromtimestamp(first, timezone.utc).isoformat(timespec="seconds"), float(first)
    except (ValueError, OverflowError, OSError):
        return "", math.nan


def small_latency_s(size_bytes: np.ndarray, latency_s: np.ndarray) -> float:
    """The median one-way latency of the sizes up to SMALL_MAX_BYTES (else of the smallest size)."""
    sizes = np.asarray(size_bytes)
    lat = np.asarray(latency_s, dtype=float)
    pick = (sizes <= SMALL_MAX_BYTES) & np.isfinite(lat)
    if not pick.any():
        pick = (sizes == sizes.min()) & np.isfinite(lat) if sizes.size else pick
    return float(np.median(lat[pick])) if pick.any() else math.nan


def _text(v: Any) -> str:
    if isinstance(v, (list, tuple, np.ndarray)):
        return ",".join(str(x) for x in np.asarray(v).ravel().tolist())
    return f"{v:g}" if isinstance(v, (float, np.floating)) else str(v)


# the measuring ranks' core settings at their first size, from the root attribute `conditions` (JSON:
# {"ranks": {RANK: {"settings_before": {...}, "cpu_freq_source": ...}}}, docs/file-format.md)
RANK_SETTINGS = (
    "governor",
    "energy_performance_preference",
    "scaling_max_freq_hz",
    "cpuinfo_max_freq_hz",
    "boost",
    "intel_pstate_no_turbo",
    "slurm_cpu_freq_req",
)


def rank_settings(attrs: dict) -> dict[str, str]:
    """RANK_SETTINGS of the measuring ranks (their distinct values joined by '/'), where the file's
    `conditions` holds them; {} for a file without it or with anything else in it."""
    doc = attrs.get("conditions")
    if isinstance(doc, (str, bytes)):
        try:
            doc = json.loads(doc)
        except (ValueError, RecursionError):
            return {}
    ranks = doc.get("ranks") if isinstance(doc, dict) else None
    if not isinstance(ranks, dict):
        return {}
    settings = [r.get("settings_before") for r in ranks.values() if isinstance(r, dict)]
    settings = [x for x in settings if isinstance(x, dict)]
    out = {}
    for name in RANK_SETTINGS:
        values = list(dict.fromkeys(_text(x[name]) for x in settings if name in x))
        if values:
            out[name] = "/".join(values)
    return out


def measured_frequency(sizes) -> dict[str, str]:
    """The measuring ranks' effective core frequency (median over sizes and ranks of the per-size
    `…cpu_freq_hz` columns, where the analysis gives them), in GHz to 0.1."""
    columns = [
        c for c in sizes.columns if c.endswith("cpu_freq_hz") and "_min_" not in c and "_max_" not in c
    ]
    if not columns:
        return {}
    x = np.concatenate([np.asarray(sizes[c], dtype=float) for c in columns])
    x = x[np.isfinite(x) & (x > 0)]
    return {"cpu_ghz_measured": f"{np.median(x) / 1e9:.1f}"} if x.size else {}


def conditions_of(attrs: dict, node_attrs: list[dict]) -> dict[str, str]:
    """The CONDITIONS a file carries: a root attribute, else its nodes' distinct values joined by '/';
    then the measuring ranks' core settings (rank_settings)."""
    out = {}
    for name in CONDITIONS:
        if name in attrs and _text(attrs[name]) != "":
            out[name] = _text(attrs[name])
            continue
        values = list(dict.fromkeys(_text(n[name]) for n in node_attrs if name in n))
        if values:
            out[name] = "/".join(values)
    for name, value in rank_settings(attrs).items():
        out.setdefault(name, value)
    return out


def point(run) -> TrendPoint:
    """One run (npmpi_analysis.api.RunData) as a point of the series."""
    s, t = run.summary, run.sizes
    first = float(s["first_trial_unix_s"]) if s.get("first_trial_unix_s") is not None else math.nan
    start, start_s = _start(run.attrs, first)
    latency = small_latency_s(t["size_bytes"], t["latency_min_s"]) if len(t) else math.nan
    values = {"latency_s": latency}
    for key, *_ in FIGURES[1:]:
        v = s.get(key)
        values[key] = float(v) if v is not None else math.nan
    return TrendPoint(
        label=run.label,
        path=str(run.path),
        start=start,
        start_unix_s=start_s,
        values=values,
        hosts=list(s.get("hosts", [])),
        conditions={**conditions_of(run.attrs, run.node_attrs), **measured_frequency(run.sizes)},
        caveat=str(s.get("power_caveat", "")) if s.get("has_power") else "",
        first_unix_s=first,
    )


def _mad(x: np.ndarray) -> float:
    return float(np.median(np.abs(x - np.median(x)))) if x.size else math.nan


def flag_changes(points: list[TrendPoint]) -> None:
    """Mark each point's figures that leave the history before it (CHANGE_RULE), and the conditions
    that differ from the run before."""
    for key, *_ in FIGURES:
        history: list[float] = []
        for p in points:
            x = p.values[key]
            if not math.isfinite(x):
                continue
            if len(history) >= MIN_HISTORY:
                h = np.asarray(history)
                med = float(np.median(h))
                bound = max(K_MAD * MAD_SCALE * _mad(h), MIN_RELATIVE * abs(med))
                if abs(x - med) > bound:
                    p.changes[key] = "up" if x > med else "down"
                    p.steps[key] = step_interval(x, h)
                    history = []
            history.append(x)
    for before, p in itertools.pairwise(points):
        for name in sorted(set(before.conditions) | set(p.conditions)):
            old, new = before.conditions.get(name, "?"), p.conditions.get(name, "?")
            if old != new:
                p.changed_conditions[name] = (old, new)


STEP_RESAMPLES = 1000
STEP_SEED = 20093


def step_interval(x: float, history: np.ndarray) -> tuple[float, float, float]:
    """(x / the history's median, and its 95 % interval): the median resampled from the history's
    runs (STEP_RESAMPLES draws, seeded), so the interval says how well the runs before the change
    knew the level it left."""
    med = float(np.median(history))
    rng = np.random.default_rng(STEP_SEED)
    meds = np.median(history[rng.integers(0, len(history), (STEP_RESAMPLES, len(history)))], axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = x / meds
    ratios = ratios[np.isfinite(ratios)]
    if med == 0 or not ratios.size:
        return math.nan, math.nan, math.nan
    lo, hi = np.percentile(ratios, [2.5, 97.5])
    return x / med, float(lo), float(hi)


def _stretches(points: list[TrendPoint], key: str) -> list[tuple[int, int, float, float]]:
    """The runs between changes of one figure: (first, last index, median, MAD) of each stretch."""
    cuts = [0] + [k for k, p in enumerate(points) if key in p.changes and k > 0] + [len(points)]
    out = []
    for a, b in itertools.pairwise(cuts):
        x = np.asarray([p.values[key] for p in points[a:b]], dtype=float)
        x = x[np.isfinite(x)]
        if x.size:
            out.append((a, b - 1, float(np.median(x)), _mad(x)))
    return out


def _natural(label: str) -> tuple:
    """night9 before night10: the digit runs of a label compared as numbers."""
    return tuple((0, int(part), "") if part.isdigit() else (1, 0, part) for part in re.split(r"(\d+)", label))


def _order(p: TrendPoint) -> tuple:
    """Time order: created_utc (to the second), then the first trial's start, then the label's
    natural order; runs with no time at all last."""
    dated = math.isfinite(p.start_unix_s)
    first = p.first_unix_s if math.isfinite(p.first_unix_s) else math.inf
    return (not dated, p.start_unix_s if dated else 0.0, first, _natural(p.label))


def trend(runs: list) -> Trend:
    """The series of `runs` (npmpi_analysis.api.RunData), in time order."""
    points = sorted((point(r) for r in runs), key=_order)
    flag_changes(points)
    spread = {}
    for key, *_ in FIGURES:
        x = np.asarray([p.values[key] for p in points], dtype=float)
        x = x[np.isfinite(x)]
        spread[key] = {
            "runs": int(x.size),
            "median": float(np.median(x)) if x.size else math.nan,
            "mad": _mad(x),
            "min": float(x.min()) if x.size else math.nan,
            "max": float(x.max()) if x.size else math.nan,
        }
    stretches = {key: _stretches(points, key) for key, *_ in FIGURES}
    notes = []
    hosts = {tuple(p.hosts) for p in points}
    if len(hosts) > 1:
        notes.append(f"the runs were made on {len(hosts)} different sets of hosts: a trend is of one system")
    caveats = sorted({p.caveat for p in points if p.caveat})
    for c in caveats:
        who = [p.label for p in points if p.caveat == c]
        more = f", … {who[-1]}" if len(who) > 3 else ""
        notes.append(f"least energy per bit of {', '.join(who[:3])}{more}: power {c}")
    undated = [p.label for p in points if not math.isfinite(p.start_unix_s)]
    if undated:
        notes.append(f"no start time in {', '.join(undated)}: placed last")
    return Trend(points, spread, stretches=stretches, notes=notes)
