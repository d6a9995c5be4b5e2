"""The statistic that names slow links, directions and nodes of a cluster map (pure numpy, no MPI).

Used by the map itself (npmpi/map/confirm.py: which suspects to measure again before they are named)
and by its analysis (npmpi_analysis/map/outliers.py, docs/analysis.md "Cluster map"). Per size, each
link's value divided by the median of the reference links, r = x / median; the spread is the median
absolute deviation of those ratios' logarithms scaled to a normal σ, MAD = 1.4826 · median(|ln r|).
A link is slow when its bandwidth ratio is below both exp(−3.5·MAD) and 0.8; its latency when above
both exp(3.5·MAD) and 1.25. A node is judged first, against the links that do not touch it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

MAD_SCALE = 1.4826  # MAD of a normal distribution times this is its sigma
K_MAD = 3.5  # Iglewicz and Hoaglin: |modified z| > 3.5 is an outlier
MIN_EFFECT = 0.8  # a link is named only below 0.8x the median bandwidth, or above 1/0.8 x its latency
LOW, HIGH = "low", "high"
EXACT_NODES = 256  # up to this many nodes each node's reference is a partition of the others' links
NODE_LINKS = 2  # a suspect node is measured again on this many of its links (npmpi/map/confirm.py),
# and confirmed by the analysis only when that many of its own links were
# (npmpi_analysis/map/confirmed.py)


@dataclass
class Flagged:
    """What `detect` finds in one matrix."""

    nodes: list[tuple[int, float, float, int, int]] = field(default_factory=list)
    # (node, median ratio of its links, median value of its links, slow links, links)
    links: list[tuple[int, int, float, float]] = field(default_factory=list)  # (i, j, ratio, value)
    reference: float = math.nan  # median of the links the link stage judged against
    mad: float = math.nan


def stats(values: np.ndarray) -> tuple[float, float]:
    """(median, MAD of the logarithms of the ratios to it, scaled) of the finite positive values;
    NaN when none."""
    v = values[np.isfinite(values) & (values > 0)]
    if not v.size:
        return math.nan, math.nan
    med = float(np.median(v))
    return med, MAD_SCALE * float(np.median(np.abs(np.log(v / med))))


def beyond(ratio: np.ndarray, mad: float, direction: str) -> np.ndarray:
    """True where a ratio to the median is an outlier in `direction` (LOW: slow bandwidth, HIGH:
    slow latency): beyond K_MAD MADs and beyond the least effect."""
    ratio = np.asarray(ratio, dtype=float)
    with np.errstate(invalid="ignore"):
        if direction == LOW:
            return np.isfinite(ratio) & (ratio < math.exp(-K_MAD * mad)) & (ratio < MIN_EFFECT)
        return np.isfinite(ratio) & (ratio > math.exp(K_MAD * mad)) & (ratio > 1.0 / MIN_EFFECT)


def tolerance(links: int) -> int:
    """How many of a node's links may be normal with the node still named: none up to 3 links,
    a quarter of them from 4 (all but one for 4 to 7 links)."""
    return 0 if links < 4 else links // 4


def detect(x: np.ndarray, direction: str) -> Flagged:
    """Slow nodes, then slow links among the others, of one symmetric [N, N] matrix (NaN where not
    measured; the diagonal is ignored)."""
    n = x.shape[0]
    upper = np.triu(np.ones((n, n), dtype=bool), 1)
    ok = upper & np.isfinite(x) & (x > 0)
    out = Flagged()
    named = np.zeros(n, dtype=bool)
    without = _without_each(x, ok) if n > EXACT_NODES else None
    for k in range(n):
        mine = np.concatenate((x[k, :k], x[k, k + 1 :]))
        mine = mine[np.isfinite(mine) & (mine > 0)]
        if without is not None:
            med, mad = without(k)
        else:
            others = ok.copy()
            others[k, :] = others[:, k] = False
            med, mad = stats(x[others])
        if len(mine) < 2 or not math.isfinite(med):
            continue
        ratios = mine / med
        slow = int(beyond(ratios, mad, direction).sum())
        if slow >= len(mine) - tolerance(len(mine)) and slow > 0:
            named[k] = True
            out.nodes.append((k, float(np.median(ratios)), float(np.median(mine)), slow, len(mine)))
    rest = ok & ~named[:, None] & ~named[None, :]
    med, mad = stats(x[rest])
    out.reference, out.mad = med, mad
    if math.isfinite(med):
        ratio = x / med
        hit = (rest & beyond(ratio, mad, direction)) | _beyond_their_nodes(x, ok, named, direction)
        out.links = [(int(i), int(j), float(ratio[i, j]), float(x[i, j])) for i, j in np.argwhere(hit)]
    return out


def _without_each(x: np.ndarray, ok: np.ndarray):
    """`stats` of the links not touching node k, for every k, by order statistics of the links
    sorted once (O(log) per node instead of a partition of all links per node: N^3 at 1,024 nodes
    took 10 s a matrix). The same values as `stats` (the medians are the same elements; the logarithms
    computed one at a time may differ from the vector's in the last bit)."""
    values = x[ok]
    order = np.argsort(values, kind="stable")
    s = values[order]
    del values
    # each link's place in s, in int32 when it fits (a 4,096-node matrix's: 67 MB less at the peak)
    where = np.full(x.shape, -1, dtype=np.int32 if len(s) < 2**31 else np.int64)
    where[ok] = np.argsort(order, kind="stable")
    del order

    def stats_without(k: int) -> tuple[float, float]:
        mine = np.concatenate((where[:k, k], where[k, k + 1 :]))
        gone = np.sort(mine[mine >= 0])
        m = len(s) - len(gone)
        if m <= 0:
            return math.nan, math.nan

        def at(r: int) -> float:  # the r-th smallest of the links left
            t = r
            while True:
                u = r + int(np.searchsorted(gone, t, side="right"))
                if u == t:
                    return float(s[t])
                t = u

        med = at(m // 2) if m % 2 else (at(m // 2 - 1) + at(m // 2)) / 2
        dist = lambda r: abs(float(np.log(np.array([at(r) / med]))[0]))  # noqa: E731

        def kth(w: int) -> float:  # the w-th smallest distance: the w closest form a window
            lo, hi = 0, m - w
            while lo < hi:
                mid = (lo + hi) // 2
                if dist(mid) > dist(mid + w):
                    lo = mid + 1
                else:
                    hi = mid
            return max(dist(lo), dist(lo + w - 1))

        mad = kth(m // 2 + 1) if m % 2 else (kth(m // 2) + kth(m // 2 + 1)) / 2
        return med, MAD_SCALE * mad

    return stats_without


def _beyond_their_nodes(x: np.ndarray, ok: np.ndarray, named: np.ndarray, direction: str) -> np.ndarray:
    """Links of named nodes that stand out from each named end's own links by the same rule (a node
    whose links are all 0.7x, one of them 0.02x: the node is named, and that link too)."""
    hit = ok & (named[:, None] | named[None, :])
    for k in np.flatnonzero(named):
        mine = np.concatenate((x[k, :k], x[k, k + 1 :]))
        med, mad = stats(mine)
        if np.isfinite(mine).sum() < 3 or not math.isfinite(med):
            hit[k, :] = hit[:, k] = False
            continue
        row = beyond(x[k] / med, mad, direction)
        hit[k, :] &= row
        hit[:, k] &= row
    return hit


def detect_directions(x: np.ndarray, direction: str) -> tuple[Flagged, list[tuple[int, int, float, float]]]:
    """An asymmetric [N, N] matrix (x[i, j]: i -> j): nodes judged on each link's worse direction,
    then every direction not touching a named node against the median of those directions;
    (the nodes as `detect` gives them, [(i, j, ratio, value)] of the slow directions)."""
    n = x.shape[0]
    worse = np.fmin(x, x.T) if direction == LOW else np.fmax(x, x.T)
    nodes = detect(worse, direction)
    named = np.zeros(n, dtype=bool)
    named[[k for k, *_ in nodes.nodes]] = True
    rest = ~np.eye(n, dtype=bool) & np.isfinite(x) & (x > 0) & ~named[:, None] & ~named[None, :]
    med, mad = stats(x[rest])
    nodes.reference, nodes.mad = med, mad
    if not math.isfinite(med):
        return nodes, []
    ratio = x / med
    hit = rest & beyond(ratio, mad, direction)
    return nodes, [(int(i), int(j), float(ratio[i, j]), float(x[i, j])) for i, j in np.argwhere(hit)]
