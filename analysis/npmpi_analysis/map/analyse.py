"""A cluster map's analysis: every pair's latency, bandwidth and, with power, energy per bit.

Timing (docs/analysis.md, "Cluster map"): `/map/trial_s` holds each trial's one-way time per
iteration; a pair's latency is the best trial's at the smallest size, its bandwidth at a size
8·size / best one-way time, its mean bandwidth 8·size / mean one-way time with
σ_b = b·σ_t/t̄ (σ_t the standard deviation of the mean of its trials), as the sweep's.

Power: each node's mean power and σ_p in every round's window come from the sweep's machinery
(npmpi_analysis.numbers.node_power, energy_windows, baselines). In a round every measuring node belongs
to exactly one pair, so the pair's power is its two nodes' power; the pair's energy per bit is
that power over the round's window divided by the bits the pair moved in it,
e = (P_a + P_b)·(end − start) / (8·bytes_moved), and the dynamic part uses the power above each
node's idle baseline. When several mapped ranks share one node (`--per-rank`), that node's power
in a round is split equally among its ranks measured in that round, and the summary says so.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from npmpi_analysis.map.conditions import MapConditions, analyse_map_conditions, confirm_conditions
from npmpi_analysis.map.load import MapFile
from npmpi_analysis.map.model import link_models
from npmpi_analysis.map.trials import STALL_MIN_S, STALL_RATIO
from npmpi_analysis.numbers import compute
from npmpi_analysis.numbers.compute import FLAG_NONE
from npmpi_analysis.numbers.machines import machine_of
from npmpi_analysis.numbers.node_power import (
    PowerResult,
    analyse_power,
    group_host,
    no_power_notice,
    sweep_window,
)

STORED_TOLERANCE = 1e-6  # relative difference between the file's derived matrices and ours


@dataclass
class PairEnergy:
    """Per pair and size [S, N, N]: the pair's power, energy per bit and their uncertainties."""

    power_w: np.ndarray
    power_sigma_w: np.ndarray
    flag: np.ndarray  # the more serious of the two nodes' window flags (compute.FLAG_*)
    window_s: np.ndarray
    energy_pj_bit: np.ndarray
    energy_sigma_pj_bit: np.ndarray
    dynamic_pj_bit: np.ndarray | None  # None without an idle baseline
    dynamic_sigma_pj_bit: np.ndarray | None
    shared_nodes: bool = False  # several mapped ranks on one node: its power was split among them
    flag_reason: np.ndarray | None = None  # [S, N, N] why a pair-size is flagged 'recorded gap' ('' if not)
    own_windows: bool = False  # each pair's own window (format 1.6), else its round's


@dataclass
class MapAnalysis:
    """Everything the outputs show about one map file."""

    label: str
    path: str
    attrs: dict[str, Any]  # root attributes
    map_attrs: dict[str, Any]
    hosts: list[str]
    names: list[str]  # unique names of the mapped entries (the host, or host:rank with --per-rank)
    size_bytes: np.ndarray  # [S]
    round: np.ndarray  # [N, N]
    trials_run: np.ndarray  # [S, N, N]
    trials_stalled: np.ndarray  # [S, N, N] trials left out of the mean (maps.STALL_RATIO)
    best_s: np.ndarray  # [S, N, N] best one-way time
    latency_s: np.ndarray  # [N, N] best one-way time at the smallest size
    bandwidth_bit_s: np.ndarray  # [S, N, N] 8 size / best
    mean_bit_s: np.ndarray
    sigma_bit_s: np.ndarray
    bytes_moved: np.ndarray
    power: PowerResult | None = None
    energy: PairEnergy | None = None
    notices: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    outliers: list = field(default_factory=list)  # npmpi_analysis.map.outliers.Finding
    conditions: MapConditions | None = None  # both sides' conditions per pair (format 1.10)
    model: Any = None  # map/model.LinkModels: each link's alpha, beta, energy per bit

    @property
    def nodes(self) -> int:
        return len(self.names)

    @property
    def status(self) -> str:
        return str(self.map_attrs.get("status", self.attrs.get("status", "")))

    @property
    def caveat(self) -> str:
        return self.power.caveat if self.power else ""

    def pairs(self) -> list[tuple[int, int]]:
        """Every unordered pair (i < j)."""
        n = self.nodes
        return [(i, j) for i in range(n) for j in range(i + 1, n)]


def entry_names(hosts: list[str], ranks: np.ndarray) -> list[str]:
    """One unique name per mapped entry: its host, or host:rank when hosts repeat (--per-rank)."""
    if len(set(hosts)) == len(hosts):
        return list(hosts)
    return [f"{h}:{int(r)}" for h, r in zip(hosts, ranks, strict=True)]


def pair_timing(m: MapFile) -> dict[str, np.ndarray]:
    """Best, mean ± σ one-way time and the bandwidths of every pair and size (NaN unmeasured), and
    the stalled trials of each (left out of the mean), from the trials' summaries (map/trials.py)."""
    st = m.trial_stats
    with np.errstate(all="ignore"):
        bits = (compute.BITS_PER_BYTE * m.size_bytes.astype(float))[:, None, None]
        mean_b = bits / st["mean_s"]
        return {
            "trials_run": st["trials_run"],
            "trials_stalled": st["trials_stalled"],
            "best_s": st["best_s"],
            "bandwidth_bit_s": bits / st["best_s"],
            "mean_bit_s": mean_b,
            "sigma_bit_s": mean_b * st["sigma_s"] / st["mean_s"],
        }


def stalled_notice(a: MapAnalysis) -> list[str]:
    """One notice naming the pairs with stalled trials (at most 4, then how many more)."""
    where = [(k, i, j) for k, i, j in zip(*np.nonzero(a.trials_stalled), strict=True) if i < j]
    if not where:
        return []
    named = ", ".join(
        f"{a.names[i]}-{a.names[j]} at {int(a.size_bytes[k])} B ({int(a.trials_stalled[k, i, j])})"
        for k, i, j in where[:4]
    )
    more = f" and {len(where) - 4} more pair-size(s)" if len(where) > 4 else ""
    return [
        f"stalled trial(s), over {STALL_RATIO:g}x the pair's best trial and {STALL_MIN_S:g} s longer "
        f"(a member stopped, swapped out or preempted): {named}{more}; left out of the mean bandwidth "
        "and its sigma (the best trial stands)"
    ]


def _stored_notice(m: MapFile, latency: np.ndarray, bandwidth: np.ndarray) -> list[str]:
    """A notice when the writer's derived matrices disagree with the ones computed from trial_s."""
    out = []
    for name, ours, stored in (
        ("latency_s", latency, m.stored_latency_s),
        ("bandwidth_bit_s", bandwidth, m.stored_bandwidth_bit_s),
    ):
        if stored is None:
            continue
        stored = np.asarray(stored, dtype=float)
        both = np.isfinite(ours) & np.isfinite(stored)
        with np.errstate(all="ignore"):
            diff = np.abs(stored - ours) / np.abs(ours)
        bad = both & (diff > STORED_TOLERANCE)
        if bad.any():
            out.append(
                f"{m.path.name}: /map/{name} differs from the value computed from /map/trial_s in "
                f"{int(bad.sum())} place(s) (up to {100 * float(np.max(diff[bad])):.3g} %): the analysis "
                "uses the trials"
            )
    return out


def analyse_map(m: MapFile, label: str, meter_delay_s: float | None = None) -> MapAnalysis:
    """Analyse a loaded map (timing, power per pair, outliers); problems are listed, not raised."""
    from npmpi_analysis.map.confirmed import confirm_findings
    from npmpi_analysis.map.outliers import find_outliers

    timing = pair_timing(m)
    latency = timing["best_s"][0].copy()
    a = MapAnalysis(
        label=label,
        path=str(m.path),
        attrs=dict(m.attrs),
        map_attrs={**m.map_attrs, "status": m.status},
        hosts=list(m.hosts),
        names=entry_names(m.hosts, m.ranks),
        size_bytes=m.size_bytes,
        round=m.round,
        trials_run=timing["trials_run"],
        trials_stalled=timing["trials_stalled"],
        best_s=timing["best_s"],
        latency_s=latency,
        bandwidth_bit_s=timing["bandwidth_bit_s"],
        mean_bit_s=timing["mean_bit_s"],
        sigma_bit_s=timing["sigma_bit_s"],
        bytes_moved=(
            m.bytes_moved
            if is_directed(m.map_attrs)
            else np.maximum(m.bytes_moved, np.swapaxes(m.bytes_moved, 1, 2))
        ),
        notices=list(m.notices),
        problems=list(m.problems),
    )
    a.notices += _stored_notice(m, latency, timing["bandwidth_bit_s"])
    a.notices += stalled_notice(a)
    a.notices += shared_host_notice(entry_hosts(m))
    if not np.isfinite(a.best_s).any():
        a.problems.append(f"{m.path.name}: /map/trial_s holds no measured pair: nothing to analyse")
    skipped = no_power_notice(m)
    if skipped:
        a.notices.append(skipped)
    pairs = _pair_slots(m, a.nodes) if m.power and not skipped else None
    own = pairs.own if pairs is not None and pairs.windows is not None else None
    power = analyse_power(m, m.window_start_unix_s.ravel(), m.window_end_unix_s.ravel(), meter_delay_s, own)
    if power is not None:
        a.power = power
        a.notices += power.notices
        a.problems += power.problems
        a.energy = pair_energy(m, a, power, pairs)
        a.notices += _gap_notice(a.energy)
        if a.energy.shared_nodes:
            a.notices.append(
                "several mapped ranks share a node: each node's power in a round is split equally "
                "among its ranks measured in that round (a pair's energy is an even share, not a "
                "measurement of that pair alone)"
            )
    a.model = link_models(a)
    a.outliers = find_outliers(a)
    confirm_findings(a, m.confirm)
    a.conditions = analyse_map_conditions(m, a, entry_hosts(m), is_directed(m.map_attrs))
    confirm_conditions(a, m)
    return a


def shared_host_notice(hosts: list[str]) -> list[str]:
    """A notice when several mapped entries run on one host (--per-rank): its pairs of a round
    share cores, memory and the shared-memory transport, so what is named there may be contention."""
    counts = Counter(hosts)
    crowded = sorted(h for h, n in counts.items() if n > 1)
    if not crowded:
        return []
    most = max(counts.values())
    return [
        f"{most} mapped ranks share a host ({', '.join(crowded[:4])}{', ...' if len(crowded) > 4 else ''}): "
        "the pairs of a round there run at once on the same cores, memory and shared-memory transport, "
        "so a slow 'link' or 'node' this map names can be contention between those pairs, not the network; "
        "map one rank per node (without --per-rank) to measure links"
    ]


def entry_hosts(m: MapFile) -> list[str]:
    """The node (host name) of each mapped entry: from /layout's host of its rank, else its name in
    /map/hosts without a `:rank` suffix (--per-rank names entries host:rank)."""
    layout = list(m.layout.get("host", []))
    layout = [h.decode("utf-8", "replace") if isinstance(h, bytes) else str(h) for h in layout]
    if layout and all(0 <= int(r) < len(layout) for r in m.ranks):
        return [layout[int(r)] for r in m.ranks]
    return [h.rsplit(":", 1)[0] if h.rsplit(":", 1)[-1].isdigit() else h for h in m.hosts]


def _power_node_of(m: MapFile, notices: list[str]) -> np.ndarray:
    """For each mapped entry, the index of its node's power group (by host), -1 without one."""
    by_host: dict[str, int] = {}
    for k, node in enumerate(m.power):
        by_host.setdefault(group_host(node, k), k)
    hosts = entry_hosts(m)
    out = np.array([by_host.get(h, -1) for h in hosts], dtype=np.int64)
    missing = sorted({h for h, k in zip(hosts, out, strict=True) if k < 0})
    if missing:
        notices.append(f"no power node for host(s) {', '.join(missing)}: their pairs have no energy figures")
    return out


def _measuring_counts(m: MapFile, a: MapAnalysis, node_of: np.ndarray, nodes: int) -> np.ndarray:
    """[S, R, power nodes]: how many mapped entries of each node were measured in each window."""
    s_count, rounds = m.window_start_unix_s.shape
    width = rounds * max(nodes, 1)
    counts = np.zeros((s_count, width), dtype=np.int64)
    step = max(1, (1 << 22) // max(a.nodes, 1))  # rows of the [N, N] matrices at once
    for i0 in range(0, a.nodes, step):
        r = m.round[i0 : i0 + step].astype(np.int64)
        k = np.broadcast_to(node_of[i0 : i0 + step, None], r.shape)
        ok = (r >= 0) & (k >= 0)
        ok[np.arange(r.shape[0]), np.arange(i0, i0 + r.shape[0])] = False  # a member with itself
        cell = (r * max(nodes, 1) + k)[ok]
        for s in range(s_count):
            measured = np.isfinite(a.best_s[s, i0 : i0 + step])[ok]
            counts[s] += np.bincount(cell, weights=measured, minlength=width).astype(np.int64)
    return counts.reshape(s_count, rounds, max(nodes, 1))


def pair_windows(m: MapFile, i: np.ndarray, j: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """([S, P] start, end) of each pair (i, j)'s own window: its round's start to the end of its
    pair's work (/map/pair_window_s, format 1.6); None for an older map (the round's window is used)."""
    if m.pair_window_s is None:
        return None
    r = m.round[i, j]
    start = np.where(r >= 0, m.window_start_unix_s[:, np.maximum(r, 0)], np.nan)
    own = m.pair_window_s[:, i, j]
    own = np.where(np.isfinite(own), own, m.pair_window_s[:, j, i])  # trials.symmetric, of these pairs
    end = np.where(np.isfinite(own) & (own > 0), start + own, m.window_end_unix_s[:, np.maximum(r, 0)])
    return start, end


@dataclass
class _NodeWindows:
    """Each power node's mean, σ, flag and gap reasons over windows, [S, slots]: the rounds' (node
    k's round r in slot k x R + r) or each pair's own (a node's slots its own pairs')."""

    mean: np.ndarray
    sigma: np.ndarray
    flag: np.ndarray
    reason: np.ndarray  # object: '' or why the window is flagged 'recorded gap'


def _round_windows(m: MapFile, power: PowerResult) -> _NodeWindows:
    """The nodes' figures over the rounds' windows."""
    s_count = m.window_start_unix_s.shape[0]
    parts = [np.array([getattr(nd.sizes, f) for nd in power.nodes]) for f in ("mean", "sigma", "flag")]
    nw, ns, nf = (x.reshape(len(power.nodes), s_count, -1) for x in parts)
    reason = np.empty(nf.shape, dtype=object)
    for k, nd in enumerate(power.nodes):
        reason[k] = _gaps(nd, nf[k], m.window_start_unix_s, m.window_end_unix_s)
    return _NodeWindows(*(np.concatenate(list(x), axis=1) for x in (nw, ns, nf, reason)))


def _own_windows(power: PowerResult, slots: _PairSlots) -> _NodeWindows:
    """The nodes' figures over their own pairs' windows (analyse_power's NodePower.own: each node
    over its N − 1 pairs' windows only, not over the map's N(N − 1)/2, from the readings it read)."""
    starts, ends = slots.windows
    s_count, q = starts.shape[0], slots.slot_pair
    out = _NodeWindows(*(np.empty((s_count, len(q)), dtype=d) for d in (float, float, np.int8, object)))
    for k, nd in enumerate(power.nodes):
        b0, b1 = slots.bounds[k], slots.bounds[k + 1]
        w = b1 - b0
        out.mean[:, b0:b1] = nd.own.mean.reshape(s_count, w)
        out.sigma[:, b0:b1] = nd.own.sigma.reshape(s_count, w)
        flag = nd.own.flag.reshape(s_count, w).copy()
        out.reason[:, b0:b1] = _gaps(nd, flag, starts[:, q[b0:b1]], ends[:, q[b0:b1]])
        out.flag[:, b0:b1] = flag
        nd.own = None  # copied: not held through the outputs (0.8 GB at 4,096 nodes)
    return out


def _gaps(nd, flag: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Flag (in `flag`, shaped as starts) a node's windows that overlap one of its recorded gaps (a
    stopped power rank), as the sweep flags its sizes; the reasons ('' if none), shaped alike."""
    from npmpi_analysis.numbers.faults import flag_recorded_gaps

    faults = [(f"node {nd.index} ({nd.host}) {c.kind}", f) for c in nd.channels for f in c.fault_records]
    flat = flag.ravel().copy()
    reasons = flag_recorded_gaps(faults, np.asarray(starts).ravel(), np.asarray(ends).ravel(), flat)
    flag[...] = flat.reshape(flag.shape)
    return np.array(reasons, dtype=object).reshape(flag.shape)


def _slots(ki: np.ndarray, kj: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Each pair's slot of its node i and of its node j (the same when one node holds both), and
    each slot's node and pair, the slots grouped by node."""
    two = np.flatnonzero(kj != ki)
    node = np.concatenate([ki, kj[two]])
    order = np.argsort(node, kind="stable")
    slot = np.empty(len(node), dtype=np.int64)
    slot[order] = np.arange(len(node))
    slot_i, slot_j = slot[: len(ki)], slot[: len(ki)].copy()
    slot_j[two] = slot[len(ki) :]
    return slot_i, slot_j, node[order], np.concatenate([np.arange(len(ki)), two])[order]


@dataclass
class _PairSlots:
    """The pairs with energy figures (a.pairs() order; both nodes with a power group) and, for a
    map with each pair's own window (format 1.6), each pair's slot of its node i and of its node j
    among the slots grouped by power node (node k's: bounds[k] to bounds[k + 1])."""

    pi: np.ndarray
    pj: np.ndarray
    r: np.ndarray  # each pair's round
    ki: np.ndarray  # the power node of i and of j
    kj: np.ndarray
    node_of: np.ndarray  # each mapped entry's power node, -1 without one
    notices: list[str]  # hosts without a power node
    windows: tuple[np.ndarray, np.ndarray] | None  # [S, P] starts and ends; None: the rounds'
    slot_i: np.ndarray | None = None
    slot_j: np.ndarray | None = None
    slot_pair: np.ndarray | None = None
    bounds: np.ndarray | None = None
    sweep: tuple[float, float] | None = None  # the first own window's start to the last one's end

    def own(self, k: int) -> tuple[np.ndarray, np.ndarray, tuple[float, float]]:
        """Power node k's own windows, [S, its slots] flattened, and the sweep's window
        (analyse_power's `own`)."""
        q = self.slot_pair[self.bounds[k] : self.bounds[k + 1]]
        return self.windows[0][:, q].ravel(), self.windows[1][:, q].ravel(), self.sweep


def _pair_slots(m: MapFile, n: int) -> _PairSlots:
    """The pairs' power nodes, windows and slots, before the nodes' power is figured."""
    notices: list[str] = []
    node_of = _power_node_of(m, notices)
    pi, pj = np.triu_indices(n, 1)  # a.pairs() order
    r = m.round[pi, pj].astype(np.int64)
    keep = np.flatnonzero((r >= 0) & (node_of[pi] >= 0) & (node_of[pj] >= 0))
    pi, pj, r = pi[keep], pj[keep], r[keep]
    ki, kj = node_of[pi], node_of[pj]
    out = _PairSlots(pi, pj, r, ki, kj, node_of, notices, pair_windows(m, pi, pj) if n >= 2 else None)
    if out.windows is not None:
        out.slot_i, out.slot_j, slot_node, out.slot_pair = _slots(ki, kj)
        out.bounds = np.searchsorted(slot_node, np.arange(len(m.power) + 1))
        out.sweep = sweep_window(out.windows[0], out.windows[1])
    return out


def pair_energy(m: MapFile, a: MapAnalysis, power: PowerResult, slots: _PairSlots) -> PairEnergy:
    """Each pair's power (its two nodes', or their shares) over its own window (format 1.6: each
    node's power over its own pairs' windows) or, for an older map, its round's window; and energy
    per bit, total and dynamic, with σ propagated as the sweep's (compute.energy_per_bit_pj). Every
    pair at once (a 4,096-node map has 8.4 million)."""
    s_count, rounds = m.window_start_unix_s.shape
    n = a.nodes
    a.notices += slots.notices
    pi, pj, r, ki, kj, windows = slots.pi, slots.pj, slots.r, slots.ki, slots.kj, slots.windows
    node_of = slots.node_of
    if windows is None:  # the rounds' windows
        nodes_w, slot_i, slot_j = _round_windows(m, power), ki * rounds + r, kj * rounds + r
        starts, ends = m.window_start_unix_s[:, r], m.window_end_unix_s[:, r]
    else:
        starts, ends = windows
        slot_i, slot_j = slots.slot_i, slots.slot_j
        nodes_w = _own_windows(power, slots)
    idle = np.array([nd.idle.mean[0] for nd in power.nodes])
    idle_sigma = np.array([nd.idle.sigma[0] for nd in power.nodes])
    counts = _measuring_counts(m, a, node_of, len(power.nodes))
    machine = machine_of([nd.attrs for nd in m.power], [[c.label for c in nd.channels] for nd in power.nodes])
    machine_id = np.unique(np.asarray(machine, dtype=object).astype(str), return_inverse=True)[1]
    ci, cj = np.maximum(counts[:, r, ki], 1), np.maximum(counts[:, r, kj], 1)  # [S, pairs]
    same = ki == kj
    one = same | (machine_id[ki] == machine_id[kj])  # one node, or two nodes of one machine: once
    xi = np.where(same, 1.0 / ci + 1.0 / cj, 1.0 / ci)
    xj = 1.0 / cj

    def shared(v_i, v_j, squares: bool = False) -> np.ndarray:
        """Each pair's share of node i's value (xi) and of node j's (xj; none when `one`), summed,
        or with `squares` the root of the sum of their squares (a σ)."""
        a_i, a_j = xi * v_i, xj * v_j
        if squares:
            return np.sqrt(np.where(one, a_i**2, a_i**2 + a_j**2))
        return np.where(one, a_i, a_i + a_j)

    shape = (s_count, n, n)
    p, sp, ip, sip, window = (np.full(shape, np.nan) for _ in range(5))
    for x, value in (
        (p, shared(nodes_w.mean[:, slot_i], nodes_w.mean[:, slot_j])),
        (sp, shared(nodes_w.sigma[:, slot_i], nodes_w.sigma[:, slot_j], squares=True)),
        (ip, shared(idle[ki], idle[kj])),
        (sip, shared(idle_sigma[ki], idle_sigma[kj], squares=True)),
        (window, ends - starts),
    ):
        x[:, pi, pj] = x[:, pj, pi] = value  # each pair's in both its cells (trials.symmetric)
    flag = np.full(shape, FLAG_NONE, dtype=np.int8)
    flag[:, pi, pj] = flag[:, pj, pi] = np.maximum(nodes_w.flag[:, slot_i], nodes_w.flag[:, slot_j])
    reason = np.full(shape, "", dtype=object)
    why_i, why_j = nodes_w.reason[:, slot_i], nodes_w.reason[:, slot_j]
    for k, c in zip(*np.nonzero((why_i != "") | (why_j != "")), strict=True):
        why = "; ".join(dict.fromkeys(x for x in (why_i[k, c], why_j[k, c]) if x))
        reason[k, pi[c], pj[c]] = reason[k, pj[c], pi[c]] = why
    energy = _energy_figures(a, p, sp, ip, sip, flag, window, idle, counts)
    energy.own_windows = windows is not None
    energy.flag_reason = reason
    return energy


ENERGY_BLOCK = 1 << 21  # pair-sizes of a block of rows: the energy figures are made a block at a time
# (a dozen [S, N, N] temporaries were 3 GB at 4,096 nodes), the same numbers


def _energy_figures(a: MapAnalysis, p, sp, ip, sip, flag, window, idle, counts) -> PairEnergy:
    """Energy per bit from each pair's power and window: the bits both its directions moved."""
    shape = p.shape
    dynamic = bool(np.isfinite(idle).any())
    e = PairEnergy(
        power_w=np.empty(shape),
        power_sigma_w=np.empty(shape),
        flag=flag,
        window_s=window,
        energy_pj_bit=np.empty(shape),
        energy_sigma_pj_bit=np.empty(shape),
        dynamic_pj_bit=np.empty(shape) if dynamic else None,
        dynamic_sigma_pj_bit=np.empty(shape) if dynamic else None,
        shared_nodes=bool(np.any(counts > 1)),
    )
    directed = is_directed(a.map_attrs)
    step = max(1, ENERGY_BLOCK // max(1, shape[0] * shape[2]))
    for i0 in range(0, shape[1], step):
        r = slice(i0, i0 + step)
        moved = a.bytes_moved[:, r]
        if directed:  # each direction's bytes in its own cell: the pair moved both
            moved = np.nan_to_num(moved) + np.nan_to_num(np.swapaxes(a.bytes_moved, 1, 2)[:, r])
        measured = np.isfinite(a.best_s[:, r]) & (moved > 0) & (window[:, r] > 0)
        with np.errstate(all="ignore"):
            b = np.where(measured, compute.BITS_PER_BYTE * moved / window[:, r], np.nan)
            rel = a.sigma_bit_s[:, r] / a.mean_bit_s[:, r]  # the pair's trials' spread, as the sweep's σ_b/b
            e.energy_pj_bit[:, r], e.energy_sigma_pj_bit[:, r] = compute.energy_per_bit_pj(
                b, b * rel, p[:, r], sp[:, r]
            )
            if dynamic:
                e.dynamic_pj_bit[:, r], e.dynamic_sigma_pj_bit[:, r] = compute.energy_per_bit_pj(
                    b, b * rel, p[:, r] - ip[:, r], np.sqrt(sp[:, r] ** 2 + sip[:, r] ** 2)
                )
        e.power_w[:, r] = np.where(measured, p[:, r], np.nan)
        e.power_sigma_w[:, r] = np.where(measured, sp[:, r], np.nan)
    return e


def _gap_notice(e: PairEnergy) -> list[str]:
    upper = np.triu(np.ones(e.flag.shape[1:], dtype=bool), 1)
    flagged = e.flag_reason[:, upper] if e.flag_reason is not None else np.zeros(0)
    reasons = list(dict.fromkeys(r for r in flagged.ravel() if r))
    if not reasons:
        return []
    return [
        f"{int((flagged != '').sum())} pair-size(s) flagged 'recorded gap': their window "
        "overlaps a recorded sampling gap of one of their nodes, so their power and energy per bit "
        f"come from the samples around it: {'; '.join(reasons[:3])}"
    ]


def is_directed(map_attrs: dict) -> bool:
    """Whether each direction of a pair was measured apart (/map attribute directions = both)."""
    return str(map_attrs.get("directions", "one")) == "both"
