"""A cluster map's plan beside what it took (`npmpi-analyze map.h5`: the summary's `plan:` line and
the JSON's `plan`).

Before its first round the map stores its plan in /map (format 1.10, optional: planned_rounds,
planned_duration_s, planned_file_bytes, time_limit_s; docs/file-format.md); the actual figures are
/map's rounds_completed, the root's elapsed_s and the file's size on disk. A map written before
plans has none: nothing is said.

A sampled map (`--pairs sample:K`, /map pairs_plan "sample:K", optional attributes) says so in the summary's
`sampled map:` line and the JSON's `sample`: K, the pairs measured (at any size) of all N(N-1)/2, the
seed; the others were not measured, so they are neither slow nor healthy (the outlier rule judges
measured links only: NaN is left out of every median and never named).
"""

from __future__ import annotations

import json
import math
import os
from typing import Any

import numpy as np


def plan_and_actual(a) -> dict[str, Any] | None:
    """The map's plan (/map planned_rounds, planned_duration_s, planned_file_bytes, time_limit_s,
    written before its first round) beside what it took (rounds_completed, the root's elapsed_s, the
    file's size on disk); None for a map written before plans."""
    m = a.map_attrs

    def number(value) -> float:
        try:
            return float(value)
        except (TypeError, ValueError):
            return math.nan

    planned = [number(m.get(k)) for k in ("planned_rounds", "planned_duration_s", "planned_file_bytes")]
    if not any(math.isfinite(x) for x in planned):
        return None
    try:
        size = float(os.path.getsize(a.path))
    except OSError:
        size = math.nan
    return {
        "planned_rounds": planned[0],
        "planned_duration_s": planned[1],
        "planned_file_bytes": planned[2],
        "time_limit_s": number(m.get("time_limit_s", 0.0)),
        "rounds": number(m.get("rounds_completed")),
        "duration_s": number(a.attrs.get("elapsed_s")),
        "file_bytes": size,
    }


def sample_facts(a) -> dict[str, Any] | None:
    """A sampled map's K, seed, pairs measured (a finite best trial at any size) and all pairs; None
    for a map of every pair."""
    plan = str(a.map_attrs.get("pairs_plan", "all"))
    if not plan.startswith("sample:"):
        return None
    n = a.nodes
    finite = np.isfinite(np.asarray(a.best_s)).any(axis=0)
    measured = (finite | finite.T) & np.triu(np.ones((n, n), dtype=bool), 1)
    seed = a.map_attrs.get("pairs_seed")
    return {
        "partners": int(plan.split(":")[1]) if plan.split(":")[1].isdigit() else None,
        "seed": int(seed) if seed is not None else None,
        "pairs_measured": int(measured.sum()),
        "pairs": n * (n - 1) // 2,
        **_switch_cover(a, measured),
    }


def _switch_cover(a, measured: np.ndarray) -> dict[str, Any]:
    """With /map topology_json: the pairs of switches to cover (two distinct switches, or a switch
    with itself when it has two members or more) and how many of them a measured pair covers."""
    try:
        switch_of = json.loads(str(a.map_attrs.get("topology_json")))
        switches = [switch_of[str(name).rsplit(":", 1)[0] if a.map_attrs.get("per_rank") else str(name)]
                    for name in a.names]  # fmt: skip
    except (ValueError, KeyError, TypeError):
        return {"switch_pairs": None, "switch_pairs_measured": None}
    count = {w: switches.count(w) for w in switches}
    need = {(u, v) for u in count for v in count if u < v or (u == v and count[u] > 1)}
    got = {tuple(sorted((switches[i], switches[j]))) for i, j in np.argwhere(measured)}
    return {"switch_pairs": len(need), "switch_pairs_measured": len(need & got)}


def sample_text(a) -> list[str]:
    """'  sampled map: 3 partners per node; 12 of 28 pairs measured; the others not measured (not
    healthy, not slow); seed 20261128', then with --topology '; pairs of switches measured: 3 of 3'
    (none for a map of every pair)."""
    got = sample_facts(a)
    if got is None:
        return []
    switches = ""
    if got["switch_pairs"] is not None:
        switches = f"; pairs of switches measured: {got['switch_pairs_measured']} of {got['switch_pairs']}"
    return [
        f"  sampled map: {got['partners']} partners per node; {got['pairs_measured']} of {got['pairs']} "
        f"pairs measured; the others not measured (not healthy, not slow); seed {got['seed']}{switches}"
    ]


def plan_text(a) -> list[str]:
    """'  plan: 9 rounds, about 3.1 s, 113 KiB; actual: 9 rounds in 3.0 s, 103 KiB' (none without a
    plan), then a sampled map's line (`sample_text`)."""
    got = plan_and_actual(a)
    if got is None:
        return sample_text(a)

    def kib(x: float) -> str:
        return f"{x / 1024:.0f} KiB" if x < 10 * 2**20 else f"{x / 2**20:.1f} MiB"

    limit = f" (--max-minutes {got['time_limit_s'] / 60:g})" if got["time_limit_s"] > 0 else ""
    return [
        f"  plan: {got['planned_rounds']:.0f} rounds, about {got['planned_duration_s']:.3g} s, "
        f"{kib(got['planned_file_bytes'])}{limit}; actual: {got['rounds']:.0f} rounds in "
        f"{got['duration_s']:.3g} s, {kib(got['file_bytes'])}",
        *sample_text(a),
    ]


def plan_summary(a) -> dict[str, Any]:
    """The JSON summary's `plan` (null where a figure is not known), or nothing without a plan."""
    got, sample = plan_and_actual(a), sample_facts(a)
    out = {} if sample is None else {"sample": sample}
    if got is None:
        return out
    return {**out, "plan": {k: (v if math.isfinite(v) else None) for k, v in got.items()}}
