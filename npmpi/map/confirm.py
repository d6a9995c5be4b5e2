"""Suspects measured again before they are named: after the map, rank 0 finds every link, direction
or node the map's statistic (npmpi/map/stats.py) would name and measures it again, one pair at a time
(nothing else running), in `repeats` windows of the map's trials (fewer of either when the budget
asks: below).

With them, REFERENCES links near the median are measured again the same way, interleaved, so the
suspects are judged against links measured under the same conditions (a busy host slows a pair
measured alone as much as one measured in a round). The file keeps both measurements
(/map/confirm_*, docs/file-format.md "1.6"); the analysis names a finding only when the new
measurement, against the references', is also beyond the rule (npmpi_analysis/map/confirmed.py).

The budget: the re-measurements may add `budget` x the map's time or MIN_BUDGET_S, whichever is
more (a 64-node map at the defaults lasts about 150 s: 10 %). What a suspect costs is known from
the map: its pairs' own windows, each the part outside the trials (first contact, probe, warm-up)
and the trials' loops, plus its size's references (the median pair), `repeats` times. The most
severe suspects (in MADs of their matrix) go first. When the most severe does not fit, the
re-measurement is made smaller until it does: fewer trials per window (down to 1), then fewer
windows (down to MIN_REPEATS); the other suspects are measured as far as the budget goes at the
same settings. A suspect that does not fit even so is not measured again, and the console says
what budget would measure it (4 hosts, a direction shaped to 300 Mbit/s, a stream map at 4 MiB:
each 64-message window of the slow direction took 7 s, and the one suspect was measured 4 x 7
trials for 830 s beside a budget of 21 s, silently). A line before the first measurement says
what is measured and about how long it takes, one between measurements (at most every
PROGRESS_EVERY_S) how far it is, and no measurement starts past OVERRUN x the budget (or the
estimate, if more).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np

from npmpi.core.units import format_size_bytes
from npmpi.map.stats import HIGH, LOW, NODE_LINKS, detect, detect_directions

DEFAULT_REPEATS = 4  # a healthy link on a busy host was slow in every one of 3 windows (1 of 114)
DEFAULT_BUDGET = 0.1  # of the map's own time: a 64-node map's cost stays within +10 %
MIN_REPEATS = 2  # windows of each suspect at the least (fewer when --confirm asks fewer)
MIN_TRIALS = 1  # trials per window at the least (a slow window reads slow in all its trials alike)
MIN_BUDGET_S = 10.0  # the budget is never less: a small map's 10 % cannot pay for one slow link
PROGRESS_EVERY_S = 5.0  # a line between measurements at most this often while measuring again
OVERRUN = 2.0  # no measurement starts past this x the larger of the budget and the plan's estimate
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


def chosen_within_budget(
    suspects, writer, repeats: int, allowed_s: float, trials: int | None = None
) -> tuple[list[Suspect], int]:
    """The suspects that fit the budget at `repeats` windows of `trials` trials (None: the map's),
    the most severe first; a suspect costs the own windows in the map of its pairs not already
    chosen at its size (a node whose slow link is a suspect too costs only its other link) and its
    size's references (the median window) the first time that size comes up, `repeats` times."""
    chosen, cost, sizes, taken = [], 0.0, set(), set()
    for suspect in suspects:
        more = _more_s(suspect, writer, trials, sizes, taken)
        if cost + repeats * more > allowed_s:
            continue
        chosen.append(suspect)
        sizes.add(suspect.size_index)
        taken |= _keys(suspect)
        cost += repeats * more
    return chosen, len(suspects) - len(chosen)


def _keys(suspect: Suspect) -> set[tuple[int, int, int]]:
    return {(suspect.size_index, *sorted(p)) for p in suspect.pairs}


def _more_s(suspect: Suspect, writer, trials: int | None, sizes=frozenset(), taken=frozenset()) -> float:
    """One window's worth of what a suspect adds: its pairs not yet taken, and its size's references
    when that size is new."""
    k = suspect.size_index
    more = sum(writer.pair_seconds(k, i, j, trials) for _, i, j in _keys(suspect) - taken)
    return more + (0.0 if k in sizes else REFERENCES * writer.median_pair_seconds(k, trials))


@dataclass
class Plan:
    """What is measured again, and how: `repeats` windows of `trials` trials of each chosen suspect
    and its size's references, about `cost_s`; `needed_s`: about what a budget must allow to measure
    the most severe suspect left out too (NaN when none is)."""

    chosen: list[Suspect] = field(default_factory=list)
    left_out: list[Suspect] = field(default_factory=list)
    repeats: int = 0
    trials: int = 0
    cost_s: float = 0.0
    allowed_s: float = 0.0
    needed_s: float = math.nan
    needed_settings: tuple[int, int] = (0, 0)  # (repeats, trials) `needed_s` is for


def settings(repeats: int, trials: int) -> list[tuple[int, int]]:
    """(repeats, trials) from the asked for down to the least, in the order tried: windows are kept
    longest (a whole window can read slow on a busy host, so the rule needs several), trials first
    made fewer."""
    least = min(MIN_REPEATS, repeats)
    return [(r, t) for r in range(repeats, least - 1, -1) for t in range(trials, MIN_TRIALS - 1, -1)]


def plan_confirmation(suspects, writer, repeats: int, trials: int, allowed_s: float) -> Plan:
    """The re-measurement within `allowed_s`: the first settings (`settings`) at which the most
    severe suspect that fits at the least settings fits, and every other suspect that fits with it."""
    ladder = settings(repeats, trials)
    least_r, least_t = ladder[-1]
    plan = Plan(repeats=repeats, trials=trials, allowed_s=allowed_s)
    lead = next((s for s in suspects if least_r * _more_s(s, writer, least_t) <= allowed_s), None)
    if lead is not None:
        plan.repeats, plan.trials = next(
            (r, t) for r, t in ladder if r * _more_s(lead, writer, t) <= allowed_s
        )
        plan.chosen, _ = chosen_within_budget(suspects, writer, plan.repeats, allowed_s, plan.trials)
    chosen = {id(s) for s in plan.chosen}
    plan.left_out = [s for s in suspects if id(s) not in chosen]
    plan.cost_s = _cost_s(plan.chosen, writer, plan.repeats, plan.trials)
    if plan.left_out:  # what would measure the most severe left out too
        first = plan.left_out[0]
        if plan.chosen:  # it and every suspect before it, at the settings asked: a larger budget
            # gives the most severe more trials and windows first, so the plan's own would not do
            before = suspects[: next(k for k, s in enumerate(suspects) if s is first) + 1]
            plan.needed_s = _cost_s(before, writer, repeats, trials)
            plan.needed_settings = (repeats, trials)
        else:
            plan.needed_s = least_r * _more_s(first, writer, least_t)
            plan.needed_settings = (least_r, least_t)
    return plan


def _cost_s(chosen: list[Suspect], writer, repeats: int, trials: int) -> float:
    """About what measuring the chosen suspects again costs (their pairs and references)."""
    cost, sizes, taken = 0.0, set(), set()
    for s in chosen:
        cost += repeats * _more_s(s, writer, trials, sizes, taken)
        sizes.add(s.size_index)
        taken |= _keys(s)
    return cost


def describe(suspect: Suspect, names: list[str], sizes) -> str:
    """'direction h4 → h1 (bandwidth at 4M)', 'node h3 (latency at 1 B)'."""
    size = int(sizes[suspect.size_index])
    at = f"{suspect.metric} at {format_size_bytes(size)}{' B' if size < 1024 else ''}"
    if suspect.kind == "node":
        return f"node {names[suspect.node]} ({at})"
    i, j = suspect.pairs[0]
    return f"{suspect.kind} {names[i]} {'→' if suspect.kind == 'direction' else '–'} {names[j]} ({at})"


def suggested_budget(needed_s: float, map_s: float) -> float:
    """A --confirm-budget that would pay `needed_s` (a quarter more: the map's windows are an
    estimate), rounded up to two significant digits."""
    want = 1.25 * needed_s / max(map_s, 1e-9)
    step = 10.0 ** (math.floor(math.log10(want)) - 1) if want > 0 else 0.01
    return round(math.ceil(want / step - 1e-9) * step, 12)


def left_out_line(plan: Plan, names: list[str], sizes, budget: float, map_s: float) -> str:
    """Which suspects are not measured again for the budget, and the budget that would measure the
    most severe of them."""
    first = plan.left_out[0]
    more = f" and {len(plan.left_out) - 1} more" if len(plan.left_out) > 1 else ""
    how = "{} windows of {} trial(s) each".format(*plan.needed_settings)
    if not math.isfinite(plan.needed_s) or plan.needed_s <= 0:
        return f"not re-measured: budget: {describe(first, names, sizes)}{more}"
    cost = "measuring it and the more severe again" if plan.chosen else "measuring it again"
    return (
        f"not re-measured: budget: {describe(first, names, sizes)}{more}; {cost} would take about "
        f"{plan.needed_s:.0f} s ({how}), the budget is {plan.allowed_s:.0f} s ({budget:g} x the map's "
        f"{map_s:.0f} s): --confirm-budget {suggested_budget(plan.needed_s, map_s):g} would measure it"
    )


def _jobs(plan: Plan, best: np.ndarray) -> list[tuple[int, tuple[int, int], int]]:
    """(size index, pair, role) of every pair measurement, size by size, each size's suspects and
    references interleaved `plan.repeats` times."""
    jobs = []
    for k in sorted({s.size_index for s in plan.chosen}):
        here = [s for s in plan.chosen if s.size_index == k]
        pairs = list(dict.fromkeys(tuple(sorted(p)) for s in here for p in s.pairs))
        once = [(k, p, ROLE_SUSPECT) for p in pairs] + [
            (k, p, ROLE_REFERENCE) for p in reference_pairs(best[k], here)
        ]
        jobs += once * plan.repeats
    return jobs


def _measured_keys(rows) -> set[tuple[int, int, int]]:
    """(size index, i, j), i < j, of every pair measured again as a suspect."""
    return {
        (k, min(r.i, r.j), max(r.i, r.j))
        for k, _, results, role in rows
        if role == ROLE_SUSPECT
        for r in results
    }


def _settings_words(plan: Plan, coordinator, repeats: int) -> str:
    """'4 windows of 7 trials each', with what was made smaller to fit the budget."""
    trials = coordinator.mopts.run.trials
    words = f"{plan.repeats} windows of {plan.trials} trial(s) each"
    if (plan.repeats, plan.trials) == (repeats, trials):
        return words
    return f"{words} (made smaller to fit the budget: --confirm {repeats} and the map's {trials} trials)"


def _measure(coordinator, plan: Plan, jobs, sizes, console) -> tuple[list, float, str]:
    """The pair measurements, one at a time: (rows, seconds spent, '' or why they ended early). A
    line every PROGRESS_EVERY_S; none starts past OVERRUN x the larger of the budget and the plan."""
    rows, started = [], time.monotonic()
    last = started
    limit_s = OVERRUN * max(plan.allowed_s, plan.cost_s)
    for done, (k, pair, role) in enumerate(jobs):
        now = time.monotonic()
        if now - started > limit_s:
            why = f"; ended after {done} of {len(jobs)} pair measurements, past {OVERRUN:g} x the budget"
            return rows, now - started, why
        if done and now - last >= PROGRESS_EVERY_S:
            last = now
            left = (now - started) / done * (len(jobs) - done)
            console.note(
                f"measuring suspects again: {done} of {len(jobs)} pair measurements done, "
                f"{now - started:.0f} s so far, about {left:.0f} s left"
            )
        measured = None if coordinator.stop else coordinator.measure_round(int(sizes[k]), [pair], plan.trials)
        if measured is None:
            break
        rows.append((k, measured[0], measured[1], role))
    return rows, time.monotonic() - started, ""


def confirm_suspects(
    coordinator,
    writer,
    repeats: int,
    budget: float,
    map_s: float,
    console,
    names: list[str],
    left_s: float = math.inf,
) -> None:
    """Measure the suspects again (within the budget, made smaller to fit it) with reference links
    of each size, one pair at a time, windows interleaved; store them. A stop ends it early.
    `left_s`: the time --max-minutes leaves; the budget is at most 1 / OVERRUN of it."""
    directed = coordinator.mopts.directions == "both"
    best, sizes = writer.best_all(), writer.map_sizes
    suspects = find_suspects(best, sizes, directed)
    allowed = min(max(budget * map_s, MIN_BUDGET_S if budget > 0 else 0.0), max(left_s, 0.0) / OVERRUN)
    plan = plan_confirmation(suspects, writer, repeats, coordinator.mopts.run.trials, allowed)
    if plan.chosen:
        console.note(
            f"measuring {len(plan.chosen)} of {len(suspects)} suspects again: "
            f"{_settings_words(plan, coordinator, repeats)}, about {plan.cost_s:.0f} s (budget "
            f"{allowed:.0f} s: {budget:g} x the map's {map_s:.0f} s)"
        )
    if plan.left_out:
        console.note(left_out_line(plan, names, sizes, budget, map_s))
    rows, spent, ended = _measure(coordinator, plan, _jobs(plan, best), sizes, console)
    skipped = len(suspects) - sum(1 for s in plan.chosen if _keys(s) & _measured_keys(rows))
    writer.store_confirmations(
        rows,
        plan.repeats,
        budget,
        len(suspects),
        skipped,
        repeats_asked=repeats,
        trials=plan.trials,
        budget_s=allowed,
        needed_budget=suggested_budget(plan.needed_s, map_s) if math.isfinite(plan.needed_s) else math.nan,
    )
    if not suspects:
        return
    if rows or not plan.left_out:
        console.note(
            f"suspects measured again: {len(suspects) - skipped} of {len(suspects)} in {spent:.1f} s "
            f"({plan.repeats} windows of {plan.trials} trial(s) each with reference links, one pair at "
            f"a time; budget {budget:g} x the map's {map_s:.1f} s){ended}"
        )
    else:
        console.note(f"suspects measured again: none of {len(suspects)} (the budget: see above)")
