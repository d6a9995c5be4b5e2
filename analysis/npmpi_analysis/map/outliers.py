"""Slow links and slow nodes of a cluster map, by a robust statistic, and what changed between maps.

The statistic (docs/analysis.md, "Cluster map"): per size, each link's value divided by the median
of the reference links, r = x / median; the spread is the median absolute deviation of those
ratios' logarithms scaled to a normal σ, MAD = 1.4826 · median(|ln r|) (bandwidths spread by
factors: in logarithms a link 100x slow stands out of links spread ±50 %, where the linear ratio
cannot go below 0). A link is slow when its bandwidth ratio is below both exp(−3.5·MAD)
(Iglewicz and Hoaglin's modified z-score of 3.5) and 0.8 (the least effect worth naming, so that
a uniform map, whose MAD is 0, names nothing); its latency when above both exp(3.5·MAD) and
1/0.8 = 1.25.

Node or link: a node is judged first, its links against the median of the links that do not touch
it (so that its own slow links do not pull the median down: with 3 or 4 nodes they are half or more
of the map). When nearly all its links are slow (all of them with up to 3 links, all but ⌊deg/4⌋
of deg links otherwise) the node is named, and its links are not, unless a link stands out by the
same rule from the node's own links (at least 3 of them: a node at 0.7x with one link at 0.02x names
both). The remaining links are then judged against the median of the links touching no named node.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from npmpi.core.units import format_size_iec as format_size
from npmpi.map.stats import (
    HIGH,
    K_MAD,
    LOW,
    MAD_SCALE,
    MIN_EFFECT,
    Flagged,
    detect,
    detect_directions,
    stats,
)
from npmpi.runfile.maprows import warnings_off
from npmpi_analysis.map.model import link_verdicts

DASH = "–"  # en dash between a link's two ends
ARROW = "→"  # between the two ends of one direction of a link (a map with --directions both)

THRESHOLD_TEXT = (
    f"a link is named when its bandwidth is below {MIN_EFFECT:g}x the median link's and below the median "
    f"by more than {K_MAD:g} MAD (median absolute deviation of the ratios' logarithms, x{MAD_SCALE}); its "
    f"latency when above {1 / MIN_EFFECT:g}x and {K_MAD:g} MAD above; a node when all its links are (all but "
    "a quarter with 4 or more links), judged against the links not touching it: then its links are named "
    "only when they stand out the same way from the node's own links"
)

CHANGE_TEXT = (
    "a link is named when its ratio after / before, divided by the median link's, is below "
    f"{MIN_EFFECT:g} or above {1 / MIN_EFFECT:g} and beyond {K_MAD:g} MAD of the ratios' logarithms "
    f"(x{MAD_SCALE}); a node when all its links are (all but a quarter with 4 or more links), judged "
    "against the links not touching it: then its links are not named"
)


@dataclass
class Finding:
    """One named outlier or change, with its sentence."""

    kind: str  # "node" or "link"
    names: tuple[str, ...]
    metric: str  # "latency" or "bandwidth"
    size_bytes: int
    ratio: float  # to the reference median (for a node: the median of its links' ratios)
    value: float  # the link's value (for a node: the median of its links'), in the matrix's unit
    reference: float
    sentence: str
    slow_links: int = 1
    links: int = 1
    mad: float = math.nan  # the spread the rule judged it with (npmpi.map.stats)
    confirmed: bool | None = None  # measured again and still beyond the rule; None: not measured again
    confirm_ratio: float = math.nan  # the new measurement's ratio to `reference`
    confirm_slowest_ratio: float = math.nan  # its ratio to the slowest reference window measured with it
    confirm_scatter: tuple[float, float] | None = None  # a latency's re-measured trials (s) too unsteady
    confirm_wait_fraction: float = math.nan  # median share of its re-measured trials its ranks waited
    # for a CPU (the larger rank's run-queue wait; npmpi_analysis/map/confirmed.py); NaN: not known
    confirm_reason: str | None = None  # why not confirmed (map_confirmed.REASON_*)
    # what moved while it was measured again ("" when nothing did or nothing was recorded):
    # npmpi_analysis/map/conditions.confirm_conditions
    confirm_conditions: str = ""


def node_sentence(name: str, metric: str, ratio: float, slow: int, links: int, at: str, possible: int) -> str:
    """'node h4: every link 0.50x the median bandwidth at 4 MiB — the node, not a link' (latency:
    'every link's latency 2.00x the median at 1 B'; 'every measured link' in a partial map)."""
    link = "link" if links == possible else "measured link"
    every = f"every {link}" if slow == links else f"{slow} of {links} {link}s"
    if metric == "latency":
        every += "'s latency" if slow == links else "' latency"
        return f"node {name}: {every} {ratio:.2f}x the median {at} — the node, not a link"
    return f"node {name}: {every} {ratio:.2f}x the median {metric} {at} — the node, not a link"


def _node_findings(a, metric: str, size: int, found: Flagged, at: str) -> list[Finding]:
    out = []
    for k, ratio, value, slow, links in found.nodes:
        sentence = node_sentence(a.names[k], metric, ratio, slow, links, at, a.nodes - 1)
        out.append(
            Finding("node", (a.names[k],), metric, size, ratio, value, found.reference, sentence, slow, links)
        )
    return out


def find_outliers(a) -> list[Finding]:
    """The named nodes and links of an analysed map (npmpi_analysis.map.analyse.MapAnalysis): latency at
    the smallest size, bandwidth at every other size (at the smallest, bandwidth is latency again).
    A map whose directions were measured apart names slow directions ('h4 → h1'), not links."""
    directed = str(a.map_attrs.get("directions", "one")) == "both"
    jobs = [("latency", a.latency_s, int(a.size_bytes[0]), HIGH)]
    jobs += [("bandwidth", a.bandwidth_bit_s[k], int(s), LOW) for k, s in enumerate(a.size_bytes) if k > 0]
    out = []
    for metric, x, size, direction in jobs:
        first = len(out)
        at = f"at {format_size(size)}"
        if directed:
            found, ways = detect_directions(x, direction)
            out += _node_findings(a, metric, size, found, at)
            for i, j, ratio, value in ways:
                names = (a.names[i], a.names[j])
                sentence = f"{names[0]} {ARROW} {names[1]}: {metric} {ratio:.2f}x the median direction {at}"
                out.append(Finding("direction", names, metric, size, ratio, value, found.reference, sentence))
            for f in out[first:]:
                f.mad = found.mad
            continue
        found = detect(x, direction)
        out += _node_findings(a, metric, size, found, at)
        for i, j, ratio, value in found.links:
            names = (a.names[i], a.names[j])
            sentence = f"link {names[0]}{DASH}{names[1]}: {metric} {ratio:.2f}x the median {at}"
            out.append(Finding("link", names, metric, size, ratio, value, found.reference, sentence))
        for f in out[first:]:
            f.mad = found.mad
    return out


# ---------------------------------------------------------------- two maps


@dataclass
class MapChange:
    """After / before of every common link and size, and the links and nodes that changed."""

    before: str
    after: str
    names: list[str]
    size_bytes: np.ndarray
    latency_ratio: np.ndarray  # [N, N] after / before
    bandwidth_ratio: np.ndarray  # [S, N, N]
    findings: list[Finding]
    medians: list[tuple[str, int, float]] = field(default_factory=list)  # (metric, size, median ratio)
    notes: list[str] = field(default_factory=list)
    model_verdicts: dict = field(default_factory=dict)  # map/model.link_verdicts


def _common(before, after) -> tuple[list[str], list[int], list[int], list[int], list[int]]:
    """Names in both maps (after's order), their indices in each, and the common sizes' indices."""
    idx_b = {n: k for k, n in enumerate(before.names)}
    names = [n for n in after.names if n in idx_b]
    ia = [after.names.index(n) for n in names]
    ib = [idx_b[n] for n in names]
    sizes_b = [int(s) for s in before.size_bytes]
    sa = [k for k, s in enumerate(after.size_bytes) if int(s) in sizes_b]
    sb = [sizes_b.index(int(after.size_bytes[k])) for k in sa]
    return names, ia, ib, sa, sb


def compare_maps(before, after) -> MapChange:
    """Per-link ratios after / before, and the links and nodes whose change stands out from the
    map's median change by the outlier rule (either way: a repair, or a new fault)."""
    names, ia, ib, sa, sb = _common(before, after)
    lat = after.latency_s[np.ix_(ia, ia)] / before.latency_s[np.ix_(ib, ib)]
    bw = after.bandwidth_bit_s[np.ix_(sa, ia, ia)] / before.bandwidth_bit_s[np.ix_(sb, ib, ib)]
    sizes = after.size_bytes[sa]
    change = MapChange(before.label, after.label, names, sizes, lat, bw, [])
    change.notes = _coverage_notes(before, after, names, sizes)
    change.model_verdicts = link_verdicts(before, after, ia, ib)
    if len(names) < 2:
        return change
    jobs = [("latency", lat, int(after.size_bytes[0]))] if sa and sa[0] == 0 and sb[0] == 0 else []
    jobs += [("bandwidth", bw[k], int(s)) for k, s in enumerate(sizes) if not (k == 0 and jobs)]
    for metric, x, size in jobs:
        med, _ = stats(x[np.triu(np.ones(x.shape, dtype=bool), 1)])
        change.medians.append((metric, size, med))
        for direction in (LOW, HIGH):
            change.findings += _change_findings(
                names, metric, x, size, detect(x, direction), format_size(size)
            )
    return change


def _change_findings(names, metric: str, x: np.ndarray, size: int, found: Flagged, at: str) -> list[Finding]:
    out = []
    med = found.reference
    for k, ratio, value, slow, links in found.nodes:
        every = f"every link's {metric}" if slow == links else f"{slow} of {links} links' {metric}"
        sentence = (
            f"node {names[k]}: {every} {value:.2f}x its value before at {at} (the median link "
            f"{med:.2f}x) — the node, not a link"
        )
        out.append(Finding("node", (names[k],), metric, size, ratio, value, med, sentence, slow, links))
    for i, j, ratio, value in found.links:
        sentence = (
            f"link {names[i]}{DASH}{names[j]}: {metric} {value:.2f}x its value before at {at} "
            f"(the median link {med:.2f}x)"
        )
        out.append(Finding("link", (names[i], names[j]), metric, size, ratio, value, med, sentence))
    return out


def _coverage_notes(before, after, names: list[str], sizes: np.ndarray) -> list[str]:
    """What the comparison leaves out: hosts or sizes only one map has."""
    out = []
    only = sorted(set(before.names) ^ set(after.names))
    if only:
        out.append(f"hosts in only one of the maps, left out of the comparison: {', '.join(only)}")
    extra = sorted({int(s) for s in before.size_bytes} ^ {int(s) for s in after.size_bytes})
    if extra:
        out.append(f"sizes in only one of the maps, left out: {', '.join(f'{s} B' for s in extra)}")
    if len(names) < 2:
        out.append("fewer than two hosts in common: nothing to compare")
    return out


LOWEST_NODES = 5  # a map too large for its matrices in the text names its nodes of lowest median link


def lowest_nodes(a) -> list[str]:
    """The nodes whose links' median bandwidth at the largest size is lowest, each as a ratio to the
    median link (a node the statistic does not name may still be the one to look at first)."""
    bw = np.asarray(a.bandwidth_bit_s[-1], dtype=float)
    with np.errstate(invalid="ignore"), warnings_off():  # a node with no measured link: NaN
        per_node = np.nanmedian(np.fmin(bw, bw.T), axis=1)
        median = np.nanmedian(bw[np.isfinite(bw) & (bw > 0)]) if np.isfinite(bw).any() else math.nan
    known = np.flatnonzero(np.isfinite(per_node))
    if not known.size or not math.isfinite(median) or median <= 0:
        return []
    worst = known[np.argsort(per_node[known], kind="stable")[:LOWEST_NODES]]
    named = ", ".join(f"{a.names[k]} {per_node[k] / median:.2f}x" for k in worst)
    return [
        f"  lowest median link bandwidth at {format_size(int(a.size_bytes[-1]))} (each node's links, to "
        f"the median link): {named}"
    ]
