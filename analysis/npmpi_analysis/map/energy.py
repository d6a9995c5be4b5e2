"""A cluster map's energy per pair: each pair's power over its own window (or its round's), and its
energy per bit, total and dynamic, with σ (docs/analysis.md, "Cluster map").

Each node's mean power and σ_p in the windows come from the sweep's machinery
(npmpi_analysis.numbers.node_power, energy_windows, baselines): over each pair's own window
(format 1.6: the round's start to the end of its pair's work; each node over its own pairs'
windows, from its readings read once) or, for an older map, over its round's. A pair's power is its
two nodes' power; its energy per bit that power over the window divided by the bits the pair moved
in it, e = (P_a + P_b)·(end − start) / (8·bytes_moved), and the dynamic part uses the power above
each node's idle baseline. When several mapped ranks share one node (`--per-rank`), that node's
power in a round is split equally among its ranks measured in that round; two nodes of one machine
count its power once. Every pair at once: a 4,096-node map has 8.4 million.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from npmpi.runfile.maprows import ROW_BLOCK_CELLS, row_blocks
from npmpi_analysis.map.load import MapFile, entry_hosts, is_directed
from npmpi_analysis.numbers import compute
from npmpi_analysis.numbers.compute import FLAG_NONE
from npmpi_analysis.numbers.machines import machine_of
from npmpi_analysis.numbers.node_power import PowerResult, group_host, sweep_window


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


def _measuring_counts(m: MapFile, a, node_of: np.ndarray, nodes: int) -> np.ndarray:
    """[S, R, power nodes]: how many mapped entries of each node were measured in each window."""
    s_count, rounds = m.window_start_unix_s.shape
    width = rounds * max(nodes, 1)
    counts = np.zeros((s_count, width), dtype=np.int64)
    for rows in row_blocks(a.nodes, a.nodes, 1 << 22):  # rows of the [N, N] matrices at once
        r = m.round[rows].astype(np.int64)
        k = np.broadcast_to(node_of[rows, None], r.shape)
        ok = (r >= 0) & (k >= 0)
        ok[np.arange(r.shape[0]), np.arange(rows.start, rows.start + r.shape[0])] = False  # itself
        cell = (r * max(nodes, 1) + k)[ok]
        for s in range(s_count):
            measured = np.isfinite(a.best_s[s, rows])[ok]
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


def _own_windows(power: PowerResult, slots: PairSlots) -> _NodeWindows:
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
class PairSlots:
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


def pair_slots(m: MapFile, n: int) -> PairSlots:
    """The pairs' power nodes, windows and slots, before the nodes' power is figured."""
    notices: list[str] = []
    node_of = _power_node_of(m, notices)
    pi, pj = np.triu_indices(n, 1)  # a.pairs() order
    r = m.round[pi, pj].astype(np.int64)
    keep = np.flatnonzero((r >= 0) & (node_of[pi] >= 0) & (node_of[pj] >= 0))
    pi, pj, r = pi[keep], pj[keep], r[keep]
    ki, kj = node_of[pi], node_of[pj]
    out = PairSlots(pi, pj, r, ki, kj, node_of, notices, pair_windows(m, pi, pj) if n >= 2 else None)
    if out.windows is not None:
        out.slot_i, out.slot_j, slot_node, out.slot_pair = _slots(ki, kj)
        out.bounds = np.searchsorted(slot_node, np.arange(len(m.power) + 1))
        out.sweep = sweep_window(out.windows[0], out.windows[1])
    return out


def pair_energy(m: MapFile, a, power: PowerResult, slots: PairSlots) -> PairEnergy:
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


ENERGY_BLOCK = ROW_BLOCK_CELLS  # pair-sizes of a block of rows: the energy figures are made a block at a time
# (a dozen [S, N, N] temporaries were 3 GB at 4,096 nodes), the same numbers


def _energy_figures(a, p, sp, ip, sip, flag, window, idle, counts) -> PairEnergy:
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
    for r in row_blocks(shape[1], shape[0] * shape[2], ENERGY_BLOCK):
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


def gap_notice(e: PairEnergy) -> list[str]:
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
