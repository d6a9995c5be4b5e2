"""Which of a map's findings its second measurement confirms (/map/confirm_*, written by
npmpi/map/confirm.py: each suspect measured again, one pair at a time, several times).

A link or direction is confirmed when its best re-measured value, divided by the median of the
reference links measured again with it (the map's median when there are none), is beyond the rule
(npmpi.map.stats.beyond with the map's spread) and beyond it against the slowest window any
reference had; a node when every one of its re-measured links is, NODE_LINKS of them at least; a
latency whose every re-measured trial waited CPU_BUSY of its time for a CPU is not (maps without
run-queue waits: the STEADY rule instead). A finding not measured again (the budget) is listed as
such, never as confirmed nor as healthy; a map without /map/confirm_* confirms nothing. Why each
rule, with the measurements behind it: docs/analysis.md, "Cluster map".
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from npmpi.map.stats import HIGH, LOW, NODE_LINKS, beyond

STEADY = 0.5  # a latency's best re-measured trial at least this x its median trial (maps without waits)
CPU_BUSY = 0.1  # a suspect whose every re-measured trial waited this share of its time for a CPU
REASON_NOT_MEASURED, REASON_NOT_BEYOND, REASON_SLOWEST, REASON_LATENCY_WAITED, REASON_SCATTER = (
    "not measured again",
    "not beyond the rule when measured again",
    "not beyond the slowest reference window",
    "a latency that waited for a CPU in every trial",
    "trials scattered",
)


@dataclass
class Trial:
    """One re-measured trial: its pair (transmitter first for a direction), its one-way time and the
    share of its loop time the more waiting of its ranks waited for a CPU (NaN: not known)."""

    role: int
    size_bytes: int
    i: int
    j: int
    one_way_s: float
    wait: float
    window: int = 0  # the re-measurement (row of /map/confirm_trial_s) it belongs to


def wait_fractions(confirm: dict[str, np.ndarray]) -> np.ndarray:
    """[K, T] each re-measured trial's larger rank's run-queue wait over the trial's loop time; a
    rank's reading above the loop time (it was preempted after its last message, before reading) is
    left out as not the trial's; NaN where neither rank's is known."""
    k, t = confirm["confirm_trial_s"].shape
    if "confirm_runq_wait_s" not in confirm:
        return np.full((k, t), np.nan)
    with np.errstate(invalid="ignore", divide="ignore"):
        frac = confirm["confirm_runq_wait_s"] / confirm["confirm_trial_elapsed_s"][:, :, None]
    frac = np.where(np.isfinite(frac) & (frac <= 1.0), frac, -1.0)
    larger = frac.max(axis=2)
    return np.where(larger >= 0.0, larger, np.nan)


def trials_of(confirm: dict[str, np.ndarray]) -> list[Trial]:
    """Every finite re-measured trial."""
    waits = wait_fractions(confirm)
    out = []
    rows = zip(confirm["confirm_pair"], confirm["confirm_size_bytes"], confirm["confirm_trial_s"],
               confirm["confirm_role"], waits, strict=True)  # fmt: skip
    for row, ((i, j), size, t, r, w) in enumerate(rows):
        for one_way, wait in zip(t, w, strict=True):
            if np.isfinite(one_way):
                out.append(Trial(int(r), int(size), int(i), int(j), float(one_way), float(wait), row))
    return out


def _best(trials: list[Trial]) -> dict[tuple[int, int, int], float]:
    """{(size bytes, i, j): best one-way time} of the trials given."""
    out: dict[tuple[int, int, int], float] = {}
    for t in trials:
        key = (t.size_bytes, t.i, t.j)
        out[key] = min(out.get(key, math.inf), t.one_way_s)
    return out


def belongs(f, ends: list[int], size_bytes: int, i: int, j: int) -> bool:
    """Whether pair i, j (transmitter first) at a size measured the finding's direction, link (either
    way round) or node's links (`ends`: the finding's entries' indices)."""
    if size_bytes != int(f.size_bytes):
        return False
    if f.kind == "direction":
        return (i, j) == (ends[0], ends[1])
    if f.kind == "node":
        return ends[0] in (i, j)
    return {i, j} == set(ends)


def unsteady(f, trials: list[Trial]) -> tuple[float, float] | None:
    """A latency finding's re-measured trials (lowest, highest, s) when some pair's best trial is
    below STEADY x its median; else None."""
    if f.metric != "latency":
        return None
    by_pair: dict[tuple[int, int], list[float]] = {}
    for t in trials:
        by_pair.setdefault((t.i, t.j), []).append(t.one_way_s)
    for times in by_pair.values():
        x = np.asarray(times)
        if x.min() < STEADY * float(np.median(x)):
            return float(x.min()), float(x.max())
    return None


def _value(f, best_s: float) -> float:
    return best_s if f.metric == "latency" else 8.0 * f.size_bytes / best_s


def _link_times(f, mine: list[Trial]) -> np.ndarray:
    """The best re-measured one-way time (s) of each of the finding's links (a link's worse
    direction; a direction alone)."""
    links: dict[frozenset | tuple, float] = {}
    for (_, i, j), v in _best(mine).items():
        key = (i, j) if f.kind == "direction" else frozenset((i, j))
        links[key] = max(links.get(key, 0.0), v)
    return np.array(list(links.values()))


def _ratios(f, mine: list[Trial], refs: list[Trial]) -> np.ndarray:
    """The re-measured value of each of the finding's links over the median of the references' best
    values (the map's median when none)."""
    values = [_value(f, v) for v in _best(refs).values()]
    reference = float(np.median(values)) if values else f.reference
    if not reference > 0:
        return np.array([])
    return np.array([_value(f, t) / reference for t in _link_times(f, mine)])


def slowest_window_ratios(f, mine: list[Trial], refs: list[Trial]) -> np.ndarray:
    """The re-measured value of each of the finding's links over the slowest reference window's (each
    window's best trial; empty without references): whatever made a healthy link slow in one of
    its windows could have made the suspect slow in all of its."""
    windows: dict[int, float] = {}
    for t in refs:
        windows[t.window] = min(windows.get(t.window, math.inf), t.one_way_s)
    if not windows:
        return np.array([])
    slowest = _value(f, max(windows.values()))
    return np.array([_value(f, t) / slowest for t in _link_times(f, mine)])


def judge(f, trials: list[Trial], index: dict[str, int], slow_nodes: frozenset[int] = frozenset()) -> None:
    """Set `confirmed`, `confirm_ratio`, `confirm_slowest_ratio`, `confirm_wait_fraction`,
    `confirm_scatter` and `confirm_reason` of one finding from the re-measured trials (`slow_nodes`:
    the nodes found for the same metric and size, whose links are no reference)."""
    ends = [index[n] for n in f.names]
    mine = [t for t in trials if t.role == 0 and belongs(f, ends, t.size_bytes, t.i, t.j)]
    refs = [t for t in trials if t.role == 1 and t.size_bytes == int(f.size_bytes)]
    # never a suspect node's link (a map before the fix of reference_pairs could take one)
    refs = [t for t in refs if not {t.i, t.j} & slow_nodes] or refs
    if f.kind == "node" and len({frozenset((t.i, t.j)) for t in mine}) < min(NODE_LINKS, f.links):
        mine = []  # only another suspect's link of the node was measured (the node not, for the budget)
    if not mine:
        f.confirmed, f.confirm_reason = False, REASON_NOT_MEASURED
        return
    way, mad = (HIGH if f.metric == "latency" else LOW), (f.mad if math.isfinite(f.mad) else 0.0)
    waits = np.array([t.wait for t in mine])
    waits = waits[np.isfinite(waits)]  # none off Linux; a trial both of whose readings ran past it
    known = bool(waits.size)
    f.confirm_wait_fraction = float(np.median(waits)) if known else math.nan
    ratios = _ratios(f, mine, refs)
    f.confirm_ratio = float(np.median(ratios)) if ratios.size else math.nan
    if not ratios.size or not np.all(beyond(ratios, mad, way)):
        f.confirmed, f.confirm_reason = False, REASON_NOT_BEYOND
        return
    if known and float(waits.min()) >= CPU_BUSY and f.metric == "latency":
        # at 1 B a trial whose ranks waited reads the scheduler, not the link (10 us free, 77-3020 us
        # in trials that waited 52-95 %, references and suspects alike): nothing tells a slow link
        # from an unlucky pair, however the references fared
        f.confirmed, f.confirm_reason = False, REASON_LATENCY_WAITED
        return
    slowest = slowest_window_ratios(f, mine, refs)
    f.confirm_slowest_ratio = float(np.median(slowest)) if slowest.size else math.nan
    if slowest.size and not np.all(beyond(slowest, mad, way)):
        f.confirmed, f.confirm_reason = False, REASON_SLOWEST
        return
    if not known:  # a map without the waits: the scatter is the only sign of waiting
        f.confirm_scatter = unsteady(f, mine)
        if f.confirm_scatter is not None:
            f.confirmed, f.confirm_reason = False, REASON_SCATTER
            return
    f.confirmed = True


def confirm_findings(a, confirm: dict[str, np.ndarray] | None) -> None:
    """Set each finding's confirmation from the map's second measurement."""
    if confirm is None:
        return
    trials = trials_of(confirm)
    index = {name: k for k, name in enumerate(a.names)}
    for f in a.outliers:
        nodes = {
            index[g.names[0]]
            for g in a.outliers
            if g.kind == "node" and (g.metric, g.size_bytes) == (f.metric, f.size_bytes)
        }
        judge(f, trials, index, frozenset(nodes))


def confirm_summary(a) -> dict | None:
    """The re-measurement's facts for the summary: repeats (windows) and trials each, suspects,
    skipped, the budget (fraction; seconds) and the budget that would have measured the most severe
    suspect left out (NaN: none left out, or an older map that did not say; None without a
    re-measurement)."""
    attrs = a.map_attrs
    if "confirm_repeats" not in attrs:
        return None
    return {
        "repeats": int(attrs.get("confirm_repeats", 0)),
        "repeats_asked": int(attrs.get("confirm_repeats_asked", attrs.get("confirm_repeats", 0))),
        "trials": int(attrs.get("confirm_trials", attrs.get("trials", 0))),
        "map_trials": int(attrs.get("trials", 0)),
        "suspects": int(attrs.get("confirm_suspects", 0)),
        "skipped": int(attrs.get("confirm_skipped", 0)),
        "budget": float(attrs.get("confirm_budget", math.nan)),
        "budget_s": float(attrs.get("confirm_budget_s", math.nan)),
        "needed_budget": float(attrs.get("confirm_needed_budget", math.nan)),
    }


def confirm_words(facts: dict) -> str:
    """'one pair at a time, 4 times', with what the budget made smaller ('2 times of 1 trial (the
    budget: --confirm 4, the map's 7 trials)')."""
    words = f"one pair at a time, {facts['repeats']} times"
    fewer = []
    if facts["repeats"] < facts["repeats_asked"]:
        fewer.append(f"--confirm {facts['repeats_asked']}")
    if 0 < facts["trials"] < facts["map_trials"]:
        words += f" of {facts['trials']} trial(s)"
        fewer.append(f"the map's {facts['map_trials']} trials")
    return words + (f" (made smaller for the budget: {', '.join(fewer)})" if fewer else "")


def not_measured(f) -> bool:
    """A finding the map could not measure again within its budget: neither healthy nor confirmed."""
    return f.confirmed is False and f.confirm_reason == REASON_NOT_MEASURED


def not_measured_words(facts: dict | None) -> str:
    """Why a finding was not measured again, and the budget that would have measured it."""
    budget = (facts or {}).get("budget", math.nan)
    needed = (facts or {}).get("needed_budget", math.nan)
    words = "the map's --confirm-budget"
    if math.isfinite(budget):
        words += f" {budget:g}"
    if math.isfinite(needed):
        return (
            f"named by the map alone, not confirmed nor refuted: {words} did not pay for it "
            f"(--confirm-budget {needed:g} would have measured the most severe)"
        )
    return f"named by the map alone, not confirmed nor refuted: {words} did not pay for it"


def unconfirmed_words(f, facts: dict | None = None) -> str:
    """Why a finding measured again (or not) is not named."""
    if not_measured(f):
        return not_measured_words(facts)
    if f.confirm_reason == REASON_LATENCY_WAITED:
        return (
            f"waited {100 * f.confirm_wait_fraction:.0f} % of its trials for a CPU when measured again "
            "(never measured free of it: a 1-byte round trip whose ranks wait measures the scheduler, not "
            "the link)"
        )
    if f.confirm_reason == REASON_SLOWEST:
        return (
            f"measured again: {f.confirm_ratio:.2f}x the reference links measured with it, but "
            f"{f.confirm_slowest_ratio:.2f}x their slowest window (a healthy link read as slowly there)"
        )
    if f.confirm_reason == REASON_SCATTER and f.confirm_scatter is not None:
        low, high = f.confirm_scatter
        return (
            f"measured again its trials scattered {low * 1e6:.0f}-{high * 1e6:.0f} us, as when the ranks "
            "wait for a CPU (a slow link's delay is steady)"
        )
    if math.isfinite(f.confirm_ratio):
        return f"measured again: {f.confirm_ratio:.2f}x the reference links measured with it"
    return not_measured_words(facts)
