"""Suspects measured again before they are named: after the map, rank 0 finds every link, direction
or node the map's statistic (npmpi/mapstats.py) would name and measures it again, one pair at a time
(nothing else running), `repeats` times with the map's trials, each in its own window.

The file keeps both measurements (/map/confirm_*, docs/file-format.md "1.6"); the analysis names a
finding only when the new measurement is also beyond the rule (npmpi_analysis/map_outliers.py). The
re-measurements may add `budget` x the map's time; the most severe suspects go first, and the first
MIN_CONFIRMED are measured whatever the budget (a small map's 10 % is less than one slow pair).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from npmpi.mapstats import HIGH, LOW, detect, detect_directions

DEFAULT_REPEATS = 3
DEFAULT_BUDGET = 0.1  # of the map's own time: a 64-node map's cost stays within +10 %
MIN_CONFIRMED = 2
NODE_LINKS = 3  # a suspect node is measured again on this many of its links


@dataclass
class Suspect:
    """What the statistic would name, and the pairs (member indices) to measure again."""

    kind: str  # "node", "link" or "direction"
    metric: str  # "latency" or "bandwidth"
    size_index: int
    pairs: list[tuple[int, int]]  # for a direction (from, to); for a link or a node's links (i, j), i < j
    severity: float  # |ln ratio to the median|: the most severe are measured first


def _node_pairs(k: int, x: np.ndarray) -> list[tuple[int, int]]:
    """Up to NODE_LINKS measured links of node k, spread over its peers."""
    peers = [j for j in range(x.shape[0]) if j != k and np.isfinite(x[k, j])]
    picked = [peers[round(q * (len(peers) - 1) / max(NODE_LINKS - 1, 1))] for q in range(NODE_LINKS)]
    return [(min(k, j), max(k, j)) for j in dict.fromkeys(picked)] if peers else []


def find_suspects(best_s: np.ndarray, sizes: np.ndarray, directed: bool) -> list[Suspect]:
    """The suspects of a map from each pair's best one-way time [S, N, N] (as the analysis: latency at
    the smallest size, bandwidth at the others), the most severe first."""
    jobs = [("latency", 0, best_s[0], HIGH)]
    jobs += [("bandwidth", k, 8.0 * float(sizes[k]) / best_s[k], LOW) for k in range(1, len(sizes))]
    out = []
    for metric, k, x, direction in jobs:
        if directed:
            found, ways = detect_directions(x, direction)
            links = [("direction", [(i, j)], ratio) for i, j, ratio, _ in ways]
        else:
            found = detect(x, direction)
            links = [("link", [(i, j)], ratio) for i, j, ratio, _ in found.links]
        for node, ratio, *_ in found.nodes:
            out.append(Suspect("node", metric, k, _node_pairs(node, x), abs(math.log(ratio))))
        out += [Suspect(kind, metric, k, pairs, abs(math.log(ratio))) for kind, pairs, ratio in links]
    return sorted(out, key=lambda s: -s.severity)


def confirm_suspects(coordinator, writer, repeats: int, budget: float, map_s: float, console) -> None:
    """Measure every suspect again (within the budget) and store it; a stop ends it early."""
    directed = coordinator.mopts.directions == "both"
    suspects = find_suspects(writer.best_all(), writer.map_sizes, directed)
    rows, skipped, spent = [], 0, 0.0
    allowed = budget * map_s
    for n, suspect in enumerate(suspects):
        pairs = list(dict.fromkeys(tuple(sorted(p)) for p in suspect.pairs))
        cost = repeats * sum(writer.pair_seconds(suspect.size_index, i, j) for i, j in pairs)
        if n >= MIN_CONFIRMED and spent + cost > allowed:
            skipped += 1
            continue
        started = time.monotonic()
        for i, j in pairs:
            for _ in range(repeats):
                if coordinator.stop:
                    break
                measured = coordinator.measure_round(int(writer.map_sizes[suspect.size_index]), [(i, j)])
                if measured is None:
                    break
                rows.append((suspect.size_index, measured[0], measured[1]))
        spent += time.monotonic() - started
        if coordinator.stop:
            break
    writer.store_confirmations(rows, repeats, budget, len(suspects), skipped)
    if suspects:
        console.note(
            f"suspects measured again: {len(suspects) - skipped} of {len(suspects)} in {spent:.1f} s "
            f"({repeats} repeats each, serially; budget {budget:g} x the map's {map_s:.1f} s)"
        )
