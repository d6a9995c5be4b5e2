"""Several runs side by side: their key figures and the ratio of each to the first run's."""

from __future__ import annotations

from typing import Any

KEY_FIGURES = (
    ("peak bandwidth", "peak_bandwidth_bit_s", "Gbit/s", 1e-9),
    ("latency (smallest size)", "latency_s", "us", 1e6),
    ("peak energy rate", "peak_energy_rate_bit_j", "Mbit/J", 1e-6),
    ("least energy per bit", "min_energy_pj_bit", "pJ/bit", 1.0),
    ("CPU per KiB at peak bandwidth", "cpu_us_per_kib_at_peak_bandwidth", "us/KiB", 1.0),
    ("least CPU per KiB", "min_cpu_us_per_kib", "us/KiB", 1.0),
    ("% of a core (ranks' mean)", "cpu_core_percent", "%", 1.0),
    ("idle power", "idle_power_w", "W", 1.0),
    ("active power", "active_power_w", "W", 1.0),
    ("correlation b vs r", "correlation_bandwidth_energy_rate", "", 1.0),
)
NO_RATIO = {"correlation_bandwidth_energy_rate"}  # a ratio of correlation coefficients means nothing


def compare(summaries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Key figures of every run and their ratio to the first run's (None where undefined)."""
    rows = []
    for name, key, unit, scale in KEY_FIGURES:
        # a correlation of constant power with the bandwidth is ~1 by construction: not shown
        values = [None if key in NO_RATIO and s.get("power_constant") else s.get(key) for s in summaries]
        if all(v is None for v in values):
            continue
        ref = values[0]
        numeric = isinstance(ref, (int, float)) and ref and key not in NO_RATIO
        ratios = [(v / ref) if numeric and isinstance(v, (int, float)) else None for v in values]
        rows.append(
            {
                "figure": name,
                "key": key,
                "unit": unit,
                "values": [v * scale if isinstance(v, (int, float)) else None for v in values],
                "ratio_to_first": ratios,
            }
        )
    return rows
