"""A map's pair energy computed for every pair at once (map/energy.pair_energy, issue 44) gives, to
the bit, what the pair-by-pair computation gave: each pair's power the shares of its nodes' (ranks
sharing a node split it, two nodes of one machine count it once), over its own window (each node's
power over its own pairs' windows) or its round's, the window's flag and the recorded gaps' reasons.
The pair-by-pair computation is written out here as the reference."""

from __future__ import annotations

import h5py
import numpy as np
import pytest
from npmpi_analysis.map import energy as map_energy
from npmpi_analysis.map.analyse import analyse_map
from npmpi_analysis.map.load import load_map
from npmpi_analysis.map.synthetic import MapTruth, write_map
from npmpi_analysis.map.trials import symmetric
from npmpi_analysis.numbers.compute import FLAG_NONE
from npmpi_analysis.numbers.faults import flag_recorded_gaps
from npmpi_analysis.numbers.machines import machine_of
from npmpi_analysis.numbers.node_power import analyse_power
from npmpi_analysis.synthetic import SynthChannel, SynthNode

from npmpi.runfile.faults import KIND_GAP, FaultRecord
from npmpi.runfile.format import SAMPLE_FIELDS

T0 = 1.7e9


def _map(path, n: int, per_rank: bool, own: bool, one_machine: bool, seed: int, channel_attrs=None):
    rng = np.random.default_rng(seed)
    hosts = [f"h{i // 2 if per_rank else i}" for i in range(n)]
    truth = MapTruth(hosts, size_bytes=[1, 65536, 4 << 20], trials=5, jitter=0.05, seed=seed)
    rounds = n - 1 if n % 2 == 0 else n
    t = np.arange(T0 - 8, T0 + 3 * rounds * 1.5 + 20, 0.25)
    nodes = []
    for k, h in enumerate(sorted(set(hosts), key=hosts.index)):
        gaps = {1: [(3.2, 5.0, "power rank stopped")], 2: [(10.1, 10.3, "a second gap")]}.get(k, [])
        faults = [FaultRecord(T0 + a, T0 + b, 3, why, kind=KIND_GAP, fault_id=0) for a, b, why in gaps]
        attrs = {"boot_id": "one" if k in (0, 3) else f"b{k}"} if one_machine else {}
        label = "measured" if one_machine else "simulated"  # simulated nodes are never one machine
        power = 100 + 10 * k + rng.normal(0, 1, len(t))
        extra = dict(channel_attrs or {})
        nodes.append(
            SynthNode(
                [SynthChannel(t, power, label=label, sample_interval_s=0.25, faults=faults, attrs=extra)],
                host=h,
                attrs=attrs,
            )
        )
    write_map(path, truth, per_rank=per_rank, nodes=nodes, baseline=(T0 - 8, T0 - 1), window_s=1.0, gap_s=0.5)
    if own:  # each pair's own window (format 1.6), one of them known on one side only
        with h5py.File(path, "a") as f:
            pw = np.triu(rng.uniform(0.3, 0.9, (3, n, n)), 1)
            pw = pw + np.swapaxes(pw, 1, 2)
            pw[:, np.arange(n), np.arange(n)] = np.nan
            pw[0, 0, 1] = np.nan
            f["map"].create_dataset("pair_window_s", data=pw)
    return path


def _reference(m, a, power):
    """The pair-by-pair computation: (power [S, N, N], its σ, flag, reasons, window)."""
    s_count, n = m.window_start_unix_s.shape[0], a.nodes
    pairs = a.pairs()
    node_of = map_energy._power_node_of(m, [])
    if m.pair_window_s is not None:
        i, j = np.array(pairs).T
        r = m.round[i, j]
        starts = np.where(r >= 0, m.window_start_unix_s[:, np.maximum(r, 0)], np.nan)
        own = symmetric(m.pair_window_s)[:, i, j]
        ends = np.where(np.isfinite(own) & (own > 0), starts + own, m.window_end_unix_s[:, np.maximum(r, 0)])
        src = analyse_power(m, starts.ravel(), ends.ravel())
    else:
        src, starts, ends = power, m.window_start_unix_s, m.window_end_unix_s
    shape = (len(src.nodes), s_count, -1)
    nw, ns, nf = (
        np.array([getattr(nd.sizes, f) for nd in src.nodes]).reshape(shape) for f in ("mean", "sigma", "flag")
    )
    gap = np.full(nf.shape, "", dtype=object)
    for k, nd in enumerate(power.nodes):
        faults = [(f"node {nd.index} ({nd.host}) {c.kind}", f) for c in nd.channels for f in c.fault_records]
        flag = nf[k].ravel().copy()
        gap[k] = np.array(
            flag_recorded_gaps(faults, starts.ravel(), ends.ravel(), flag), dtype=object
        ).reshape(nf.shape[1:])
        nf[k] = flag.reshape(nf.shape[1:])
    counts = np.zeros((s_count, m.window_start_unix_s.shape[1], len(power.nodes)), dtype=np.int64)
    for i in range(n):
        for j in range(n):
            if i != j and m.round[i, j] >= 0 and node_of[i] >= 0:
                counts[:, m.round[i, j], node_of[i]] += np.isfinite(a.best_s[:, i, j])
    machine = machine_of([nd.attrs for nd in m.power], [[c.label for c in nd.channels] for nd in power.nodes])
    p, sp, window = (np.full((s_count, n, n), np.nan) for _ in range(3))
    flag = np.full((s_count, n, n), FLAG_NONE, dtype=np.int8)
    reason = np.full((s_count, n, n), "", dtype=object)
    for q, (i, j) in enumerate(pairs):
        r, ki, kj = int(m.round[i, j]), int(node_of[i]), int(node_of[j])
        if r < 0 or ki < 0 or kj < 0:
            continue
        w = q if m.pair_window_s is not None else r
        ci, cj = np.maximum(counts[:, r, ki], 1), np.maximum(counts[:, r, kj], 1)
        shares = [(ki, 1.0 / ci), (kj, 1.0 / cj)] if ki != kj else [(ki, 1.0 / ci + 1.0 / cj)]
        if ki != kj and machine[ki] == machine[kj]:
            shares = [(ki, 1.0 / ci)]
        p[:, i, j] = sum(x * nw[k, :, w] for k, x in shares)
        sp[:, i, j] = np.sqrt(sum((x * ns[k, :, w]) ** 2 for k, x in shares))
        flag[:, i, j] = flag[:, j, i] = np.maximum(nf[ki, :, w], nf[kj, :, w])
        for k in range(s_count):
            why = "; ".join(dict.fromkeys(x for x in (gap[ki, k, w], gap[kj, k, w]) if x))
            reason[k, i, j] = reason[k, j, i] = why
        window[:, i, j] = ends[:, w] - starts[:, w]
    return symmetric(p), symmetric(sp), flag, reason, symmetric(window), bool(np.any(counts > 1))


@pytest.mark.parametrize(
    ("n", "per_rank", "own", "one_machine"),
    [(6, False, False, False), (9, False, True, True), (12, True, True, False), (8, True, False, True)],
)
def test_every_pair_at_once_is_the_pair_by_pair_computation(tmp_path, n, per_rank, own, one_machine):
    path = _map(tmp_path / "m.h5", n, per_rank, own, one_machine, seed=n)
    m = load_map(path, SAMPLE_FIELDS)
    a = analyse_map(m, "m")
    e = a.energy
    assert e is not None and e.own_windows == own
    p, sp, flag, reason, window, shared = _reference(m, a, a.power)
    measured = np.isfinite(e.power_w)
    assert measured.sum() > n  # pairs measured with power
    assert (
        np.array_equal(e.power_w[measured], p[measured])
        and np.isnan(p[~measured] * 0 + e.power_w[~measured]).all()
    )
    assert np.array_equal(e.power_sigma_w[measured], sp[measured])
    assert np.array_equal(e.flag, flag) and np.array_equal(e.flag_reason, reason)
    assert np.array_equal(e.window_s, window, equal_nan=True) and e.shared_nodes == shared == per_rank
    assert (reason != "").any()  # the recorded gaps reached some pairs


def test_energy_figures_made_a_block_of_rows_at_a_time_are_the_same_numbers(tmp_path, monkeypatch):
    """The pairs' energy per bit (total and dynamic, with σ) and power are made a block of rows of
    the matrices at a time (a 4,096-node map's temporaries were 3 GB): one row, or four, at a
    time give every number of the whole at once."""
    m = load_map(_map(tmp_path / "m.h5", 9, False, True, False, seed=9), SAMPLE_FIELDS)
    whole = analyse_map(m, "m").energy
    assert whole.dynamic_pj_bit is not None and np.isfinite(whole.energy_pj_bit).sum() > 9
    for rows in (1, 4):
        monkeypatch.setattr(map_energy, "ENERGY_BLOCK", rows * 3 * 9)
        blocks = analyse_map(m, "m").energy
        for name in ("power_w", "power_sigma_w", "energy_pj_bit", "energy_sigma_pj_bit", "dynamic_pj_bit",
                     "dynamic_sigma_pj_bit", "window_s", "flag"):  # fmt: skip
            assert np.array_equal(getattr(blocks, name), getattr(whole, name), equal_nan=True), name


def test_energy_figures_of_a_map_of_both_directions_count_the_bytes_both_ways(monkeypatch):
    """Each direction's bytes in its own cell: a pair's energy per bit is over the bytes both its
    directions moved, block by block as at once (the formula written out here)."""
    from types import SimpleNamespace

    from npmpi_analysis.numbers import compute

    rng = np.random.default_rng(4)
    s, n = 2, 7
    mat = lambda lo, hi: rng.uniform(lo, hi, (s, n, n))  # noqa: E731
    moved = mat(1e6, 2e6)
    moved[0, 1, 2] = np.nan
    a = SimpleNamespace(map_attrs={"directions": "both"}, bytes_moved=moved, best_s=mat(1e-6, 1e-3),
                        sigma_bit_s=mat(1e6, 1e7), mean_bit_s=mat(1e9, 2e9))  # fmt: skip
    p, sp, ip, sip, window = mat(100, 200), mat(1, 2), mat(50, 60), mat(0.5, 1), mat(0.1, 1)
    flag = np.zeros((s, n, n), dtype=np.int8)
    args = (a, p, sp, ip, sip, flag, window, np.array([55.0]), np.ones(1))
    whole = map_energy._energy_figures(*args)
    both = np.nan_to_num(moved) + np.swapaxes(np.nan_to_num(moved), 1, 2)
    b = compute.BITS_PER_BYTE * both / window
    epb, _ = compute.energy_per_bit_pj(b, b * a.sigma_bit_s / a.mean_bit_s, p, sp)
    assert np.array_equal(whole.energy_pj_bit, epb) and np.isfinite(whole.energy_pj_bit[0, 1, 2])
    monkeypatch.setattr(map_energy, "ENERGY_BLOCK", 2 * s * n)
    blocks = map_energy._energy_figures(*args)
    for name in ("energy_pj_bit", "energy_sigma_pj_bit", "dynamic_pj_bit", "dynamic_sigma_pj_bit", "power_w"):
        assert np.array_equal(getattr(blocks, name), getattr(whole, name), equal_nan=True), name


def test_each_nodes_own_windows_are_figured_as_in_a_pass_of_their_own(tmp_path):
    """A node's power over its own pairs' windows is figured from the readings it read once, with
    the same windows beside them as a pass of its own had (the sweep over every pair's window, the
    baselines): an averaging meter's σ comes from prefix sums over the span a pass's windows reach,
    so other windows would change its last bits (206 cells did)."""
    from npmpi_analysis.numbers import baselines
    from npmpi_analysis.numbers.node_power import node_group_power, sweep_window
    from npmpi_analysis.numbers.said import Said

    path = _map(tmp_path / "m.h5", 9, False, True, False, seed=9, channel_attrs={"averaging": "previous"})
    m = load_map(path, SAMPLE_FIELDS)
    a = analyse_map(m, "m")
    i, j = np.array(a.pairs()).T
    starts, ends = map_energy.pair_windows(m, i, j)
    baseline, after = baselines.baseline_windows(m.power_attrs)
    windows = (baseline, after, sweep_window(starts, ends))
    mean, sigma = (np.full((*starts.shape, 2), np.nan) for _ in range(2))
    for k, node in enumerate(m.power):  # one host a node here: power node k is entry k
        mine = np.flatnonzero((i == k) | (j == k))
        got = node_group_power(k, node, m, starts[:, mine].ravel(), ends[:, mine].ravel(), windows, None,
                               Said())[0].sizes  # fmt: skip
        side = (j[mine] == k).astype(int)
        for x, v in ((mean, got.mean), (sigma, got.sigma)):
            x[:, mine, side] = v.reshape(starts.shape[0], len(mine))
    p = mean.sum(axis=2)
    sp = np.sqrt((sigma**2).sum(axis=2))
    e = a.energy
    measured = np.isfinite(e.power_w[:, i, j])
    assert measured.sum() > 9
    assert np.array_equal(e.power_w[:, i, j][measured], p[measured])
    assert np.array_equal(e.power_sigma_w[:, i, j][measured], sp[measured])
