"""Suspects measured again before they are named: after the map, rank 0 finds every link, direction
or node the map's statistic (npmpi/map/stats.py) would name and measures it again, one pair at a time
(nothing else running), `repeats` times with the map's trials, each in its own window.

With them, REFERENCES links near the median are measured again the same way, interleaved, so the
suspects are judged against links measured under the same conditions (a busy host slows a pair
measured alone as much as one measured in a round). The file keeps both measurements
(/map/confirm_*, docs/file-format.md "1.6"); the analysis names a finding only when the new
measurement, against the references', is also beyond the rule (npmpi_analysis/numbers/map_confirmed.py). The
re-measurements may add `budget` x the map's time or MIN_BUDGET_S, whichever is more (a 64-node map
at the defaults lasts about 150 s: 10 %); the most severe suspects (in MADs of their matrix) go
first, and the first MIN_CONFIRMED is measured whatever the budget: at most (NODE_LINKS +
REFERENCES) x repeats = 16 pairs measured alone, 8.5 % of a 64-node map's 189 rounds of 3 sizes
(each round at least as long as any of its pairs).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from npmpi.map.stats import HIGH, LOW, NODE_LINKS, detect, detect_directions

DEFAULT_REPEATS = 4  # a healthy link on a busy host was slow in every one of 3 windows (1 of 114)
DEFAULT_BUDGET = 0.1  # of the map's own time: a 64-node map's cost stays within +10 %
MIN_CONFIRMED = 1
MIN_BUDGET_S = 10.0  # the budget is never less: a small map's 10 % cannot pay for one slow link
REFERENCES = 2  # links near the median measured again with the suspects of each size
ROLE_SUSPECT, ROLE_REFERENCE = 0, 1  # /map/confirm_role
MIN_SPREAD = 0.05  # a matrix's MAD taken as at least this when ranking suspects


@dataclass
class Suspect:
    """What the statistic would name, and the pairs (member indices) to measure again."""

    kind: str  # "node", "link" or "direction"
    metric: str  # "latency" or "bandwidth"
    size_index: int
    pairs: list[tuple[int, int]]  # for a direction (from, to); for a link or a node's links (i, j), i < j
    severity: float  # |ln ratio to the median| in MADs of its matrix: the most severe are measured first
    node: int = -1  # a suspect node's index


def _node_pairs(k: int, x: np.ndarray) -> list[tuple[int, int]]:
    """Up to NODE_LINKS measured links of node k, spread over its peers."""
    peers = [j for j in range(x.shape[0]) if j != k and np.isfinite(x[k, j])]
    picked = [peers[round(q * (len(peers) - 1) / max(NODE_LINKS - 1, 1))] for q in range(NODE_LINKS)]
    return [(min(k, j), max(k, j)) for j in dict.fromkeys(picked)] if peers else []


def _severity(ratio: float, mad: float) -> float:
    """How far out a suspect is, in MADs of its matrix (a 0.08x link among links spread 10 % before a
    100x latency among latencies spread 3x: scheduling noise on a busy host is mostly in latency)."""
    spread = mad if math.isfinite(mad) and mad > MIN_SPREAD else MIN_SPREAD
    return abs(math.log(ratio)) / spread


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
            out.append(Suspect("node", metric, k, _node_pairs(node, x), _severity(ratio, found.mad), node))
        out += [Suspect(kind, metric, k, pairs, _severity(ratio, found.mad)) for kind, pairs, ratio in links]
    return sorted(out, key=lambda s: -s.severity)


def reference_pairs(
    best: np.ndarray, suspects: list[Suspect], count: int = REFERENCES
) -> list[tuple[int, int]]:
    """Up to `count` links (i < j) of one size nearest the median, never a suspect node's link, those
    touching no suspect link's ends first, then any link that is not a suspect: measured again
    alongside the suspects, under the same conditions, they give the median and the slowest window
    the suspects are judged against. (On 4 hosts with node h4 and link h1-h2 suspect, every link
    touched a suspect's end, and h4's own 0.04x link was taken as a reference.)"""
    n = best.shape[0]
    nodes = {s.node for s in suspects if s.kind == "node"}
    ends = nodes | {k for s in suspects if s.kind != "node" for p in s.pairs for k in p}
    suspect_pairs = {tuple(sorted(p)) for s in suspects for p in s.pairs}
    links = [(i, j) for i in range(n) for j in range(i + 1, n) if np.isfinite(best[i, j]) and best[i, j] > 0]
    links = [p for p in links if not set(p) & nodes]
    if not links:
        return []
    med = float(np.median([best[i, j] for i, j in links]))
    nearest = sorted(links, key=lambda p: abs(math.log(best[p] / med)))
    clear = [p for p in nearest if not set(p) & ends]
    # too few clear links (4 hosts: a node and a link suspect leave one): the nearest non-suspect
    # links make up the count, as one reference's three windows are too few to show what a busy host
    # does to a healthy link
    return (clear + [p for p in nearest if p not in suspect_pairs and p not in clear])[:count]


def chosen_within_budget(suspects, writer, repeats: int, allowed_s: float) -> tuple[list[Suspect], int]:
    """The suspects that fit the budget, the most severe first (the first MIN_CONFIRMED always); a
    suspect costs the own windows in the map of its pairs not already chosen at its size (a node
    whose slow link is a suspect too costs only its other link) and its size's references (the
    median window) the first time that size comes up, `repeats` times."""
    chosen, cost, sizes, taken = [], 0.0, set(), set()
    for n, suspect in enumerate(suspects):
        k = suspect.size_index
        pairs = {(k, *sorted(p)) for p in suspect.pairs} - taken
        more = sum(writer.pair_seconds(k, i, j) for _, i, j in pairs)
        more += 0.0 if k in sizes else REFERENCES * writer.median_pair_seconds(k)
        if n >= MIN_CONFIRMED and cost + repeats * more > allowed_s:
            continue
        chosen.append(suspect)
        sizes.add(k)
        taken |= pairs
        cost += repeats * more
    return chosen, len(suspects) - len(chosen)


def confirm_suspects(coordinator, writer, repeats: int, budget: float, map_s: float, console) -> None:
    """Measure the suspects again (within the budget) with reference links of each size, one pair at
    a time, `repeats` rounds interleaved; store them. A stop ends it early."""
    directed = coordinator.mopts.directions == "both"
    best = writer.best_all()
    suspects = find_suspects(best, writer.map_sizes, directed)
    chosen, skipped = chosen_within_budget(
        suspects, writer, repeats, max(budget * map_s, MIN_BUDGET_S if budget > 0 else 0.0)
    )
    started = time.monotonic()
    rows = []
    for k in sorted({s.size_index for s in chosen}):
        here = [s for s in chosen if s.size_index == k]
        pairs = list(dict.fromkeys(tuple(sorted(p)) for s in here for p in s.pairs))
        plan = [(p, ROLE_SUSPECT) for p in pairs] + [
            (p, ROLE_REFERENCE) for p in reference_pairs(best[k], here)
        ]
        for _ in range(repeats):
            for pair, role in plan:
                measured = (
                    None if coordinator.stop else coordinator.measure_round(int(writer.map_sizes[k]), [pair])
                )
                if measured is None:
                    break
                rows.append((k, measured[0], measured[1], role))
    spent = time.monotonic() - started
    writer.store_confirmations(rows, repeats, budget, len(suspects), skipped)
    if suspects:
        console.note(
            f"suspects measured again: {len(chosen)} of {len(suspects)} in {spent:.1f} s ({repeats} repeats "
            f"each with reference links, one pair at a time; budget {budget:g} x the map's {map_s:.1f} s)"
        )
