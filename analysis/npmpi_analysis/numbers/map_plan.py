"""A cluster map's plan beside what it took (`npmpi-analyze map.h5`: the summary's `plan:` line and
the JSON's `plan`).

Before its first round the map stores its plan in /map (format 1.10, optional: planned_rounds,
planned_duration_s, planned_file_bytes, time_limit_s; docs/file-format.md); the actual figures are
/map's rounds_completed, the root's elapsed_s and the file's size on disk. A map written before
plans has none: nothing is said.
"""

from __future__ import annotations

import math
import os
from typing import Any


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


def plan_text(a) -> list[str]:
    """'  plan: 9 rounds, about 3.1 s, 113 KiB; actual: 9 rounds in 3.0 s, 103 KiB' (none without a plan)."""
    got = plan_and_actual(a)
    if got is None:
        return []

    def kib(x: float) -> str:
        return f"{x / 1024:.0f} KiB" if x < 10 * 2**20 else f"{x / 2**20:.1f} MiB"

    limit = f" (--max-minutes {got['time_limit_s'] / 60:g})" if got["time_limit_s"] > 0 else ""
    return [
        f"  plan: {got['planned_rounds']:.0f} rounds, about {got['planned_duration_s']:.3g} s, "
        f"{kib(got['planned_file_bytes'])}{limit}; actual: {got['rounds']:.0f} rounds in "
        f"{got['duration_s']:.3g} s, {kib(got['file_bytes'])}"
    ]


def plan_summary(a) -> dict[str, Any]:
    """The JSON summary's `plan` (null where a figure is not known), or nothing without a plan."""
    got = plan_and_actual(a)
    if got is None:
        return {}
    return {"plan": {k: (v if math.isfinite(v) else None) for k, v in got.items()}}
