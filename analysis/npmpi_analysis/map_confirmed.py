"""Which of a map's findings its second measurement confirms (/map/confirm_*, written by
npmpi/map/confirm.py: each suspect measured again, one pair at a time, several times).

A link or direction is confirmed when its best re-measured value, divided by the median of the
reference links measured again with it (the same way, interleaved; the map's median when there are
none), is still beyond the rule (npmpi.map.stats.beyond with the map's spread); a node when every one
of its re-measured links is. A latency is confirmed only when, besides, its re-measured trials are
steady: on a busy host a pair whose two ranks wait for one CPU (each rank busy-polls in its receive,
so a round trip waits for the other's time slice) stays slow when measured again, but its trials
scatter by several times (111-1495 us, best/median 0.19-0.25, where the references measured with it
read 38-58 us; docs/clusters.md), while a link's own delay is the same in every trial. A finding not
measured again (the time budget ran out) is not confirmed. A map without /map/confirm_* (older, or
--confirm 0) confirms nothing and names its findings without a confirmation.
"""

from __future__ import annotations

import math

import numpy as np

from npmpi.map.stats import HIGH, LOW, beyond

STEADY = 0.5  # a confirmed latency's best re-measured trial is at least this x its median trial


def _best_values(confirm: dict[str, np.ndarray], role: int) -> dict[tuple[int, int, int], float]:
    """{(size bytes, i, j): best one-way time over every re-measurement of direction or pair i, j}
    of the suspects (role 0) or of the references (role 1)."""
    out: dict[tuple[int, int, int], float] = {}
    for (i, j), size, t, r in zip(
        confirm["confirm_pair"],
        confirm["confirm_size_bytes"],
        confirm["confirm_trial_s"],
        confirm["confirm_role"],
        strict=True,
    ):
        finite = t[np.isfinite(t)]
        if int(r) != role:
            continue
        if finite.size:
            key = (int(size), int(i), int(j))
            out[key] = min(out.get(key, math.inf), float(finite.min()))
    return out


def _trials(confirm: dict[str, np.ndarray]) -> dict[tuple[int, int, int], np.ndarray]:
    """{(size bytes, i, j): every finite re-measured trial (s) of suspect pair i, j}."""
    out: dict[tuple[int, int, int], list[float]] = {}
    for (i, j), size, t, r in zip(
        confirm["confirm_pair"], confirm["confirm_size_bytes"], confirm["confirm_trial_s"],
        confirm["confirm_role"], strict=True,
    ):  # fmt: skip
        if int(r) == 0:
            out.setdefault((int(size), int(i), int(j)), []).extend(t[np.isfinite(t)].tolist())
    return {k: np.asarray(v) for k, v in out.items()}


def unsteady(f, index: dict[str, int], trials: dict) -> tuple[float, float] | None:
    """A latency finding's re-measured trials (lowest, highest, s) when some pair's best trial is
    below STEADY x its median (the ranks waited for a CPU, not for the link); else None."""
    if f.metric != "latency":
        return None
    ends = {index[n] for n in f.names}
    for (s, i, j), t in trials.items():
        mine = ends <= {i, j} if f.kind != "node" else bool(ends & {i, j})
        if s == int(f.size_bytes) and mine and t.size and t.min() < STEADY * float(np.median(t)):
            return float(t.min()), float(t.max())
    return None


def _value(f, best_s: float) -> float:
    return best_s if f.metric == "latency" else 8.0 * f.size_bytes / best_s


def _reference(f, refs: dict) -> float:
    """The median of the references' re-measured values at the finding's size (each link's worse
    direction counts once), else the map's median."""
    values = [_value(f, v) for (s, _, _), v in refs.items() if s == int(f.size_bytes)]
    return float(np.median(values)) if values else f.reference


def _pairs_of(f, index: dict[str, int], best: dict) -> list[float]:
    """The best re-measured one-way times of the finding's direction, link (either way round) or
    node's links (each link's worse direction)."""
    size = int(f.size_bytes)
    ends = [index[n] for n in f.names]
    if f.kind == "direction":
        key = (size, ends[0], ends[1])
        return [best[key]] if key in best else []
    links: dict[frozenset, float] = {}
    for (s, i, j), v in best.items():
        if s == size and ((f.kind == "node" and ends[0] in (i, j)) or {i, j} == set(ends)):
            links[frozenset((i, j))] = max(links.get(frozenset((i, j)), 0.0), v)
    return list(links.values())


def confirm_findings(a, confirm: dict[str, np.ndarray] | None) -> None:
    """Set each finding's `confirmed` and `confirm_ratio` from the map's second measurement."""
    if confirm is None:
        return
    best, refs, trials = _best_values(confirm, 0), _best_values(confirm, 1), _trials(confirm)
    index = {name: k for k, name in enumerate(a.names)}
    for f in a.outliers:
        times = _pairs_of(f, index, best)
        reference = _reference(f, refs)
        if not times or not reference > 0:
            f.confirmed = False
            continue
        ratios = np.array([_value(f, t) / reference for t in times])
        way = HIGH if f.metric == "latency" else LOW
        mad = f.mad if math.isfinite(f.mad) else 0.0
        f.confirm_scatter = unsteady(f, index, trials)
        f.confirmed = bool(np.all(beyond(ratios, mad, way))) and f.confirm_scatter is None
        f.confirm_ratio = float(np.median(ratios))


def confirm_summary(a) -> dict | None:
    """The re-measurement's facts for the summary: repeats, suspects, skipped (None without one)."""
    attrs = a.map_attrs
    if "confirm_repeats" not in attrs:
        return None
    return {
        "repeats": int(attrs.get("confirm_repeats", 0)),
        "suspects": int(attrs.get("confirm_suspects", 0)),
        "skipped": int(attrs.get("confirm_skipped", 0)),
        "budget": float(attrs.get("confirm_budget", math.nan)),
    }
