"""A cluster map's analysis: every pair's latency, bandwidth and, with power, energy per bit.

Timing (docs/analysis.md, "Cluster map"): `/map/trial_s` holds each trial's one-way time per
iteration; a pair's latency is the best trial's at the smallest size, its bandwidth at a size
8·size / best one-way time, its mean bandwidth 8·size / mean one-way time with
σ_b = b·σ_t/t̄ (σ_t the standard deviation of the mean of its trials), as the sweep's.

Power and energy per pair: npmpi_analysis.map.energy.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from npmpi_analysis.map.conditions import MapConditions, analyse_map_conditions, confirm_conditions
from npmpi_analysis.map.energy import PairEnergy, gap_notice, pair_energy, pair_slots
from npmpi_analysis.map.load import MapFile, entry_hosts, is_directed
from npmpi_analysis.map.model import link_models
from npmpi_analysis.map.pairmatrix import PairMatrix, rows_of
from npmpi_analysis.map.trials import STALL_MIN_S, STALL_RATIO
from npmpi_analysis.numbers import compute
from npmpi_analysis.numbers.node_power import PowerResult, analyse_power, no_power_notice

STORED_TOLERANCE = 1e-6  # relative difference between the file's derived matrices and ours


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
    as_rows = isinstance(st["mean_s"], PairMatrix)  # a rows map's: figured and kept as its rows
    mean_s, sigma_s = rows_of(st["mean_s"]), rows_of(st["sigma_s"])
    with np.errstate(all="ignore"):
        bits = (compute.BITS_PER_BYTE * m.size_bytes.astype(float))[:, None, None]
        mean_b = (bits[..., 0] if as_rows else bits) / mean_s
        sigma_b = mean_b * sigma_s / mean_s
        if as_rows:
            mean_b, sigma_b = st["mean_s"].like(mean_b, np.nan), st["mean_s"].like(sigma_b, np.nan)
        return {
            "trials_run": st["trials_run"],
            "trials_stalled": st["trials_stalled"],
            "best_s": st["best_s"],
            "bandwidth_bit_s": bits / st["best_s"],
            "mean_bit_s": mean_b,
            "sigma_bit_s": sigma_b,
        }


def pair_bytes(m: MapFile):
    """[S, N, N] the bytes each pair moved: each direction's own (a map measuring them apart), else
    the larger of (i, j) and (j, i) (a writer of format 1.x stored both); a rows map's kept as its
    rows (PairMatrix)."""
    if is_directed(m.map_attrs):
        return m.bytes_moved
    if m.rows is None:
        return np.maximum(m.bytes_moved, np.swapaxes(m.bytes_moved, 1, 2))
    i, j = m.rows.pair[:, 0], m.rows.pair[:, 1]
    rows = np.maximum(m.bytes_moved[:, i, j], m.bytes_moved[:, j, i])
    return PairMatrix(rows, m.rows.cells(), m.bytes_moved.dtype.type(0))


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


def analyse_map(
    m: MapFile, label: str, meter_delay_s: float | None = None, release: bool = False
) -> MapAnalysis:
    """Analyse a loaded map (timing, power per pair, outliers); problems are listed, not raised.
    With `release` (the caller drops `m` after), `m`'s matrices are dropped as soon as they are used
    (`_release`: a 4,096-node map's are gigabytes); `m` is then not analysed again."""
    from npmpi_analysis.map.confirmed import confirm_findings
    from npmpi_analysis.map.outliers import find_outliers

    timing = pair_timing(m)
    _release(m, release, "mean_s", "sigma_s")
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
        bytes_moved=pair_bytes(m),
        notices=list(m.notices),
        problems=list(m.problems),
    )
    _release(m, release, "bytes_moved")
    a.notices += _stored_notice(m, latency, timing["bandwidth_bit_s"])
    a.notices += stalled_notice(a)
    a.notices += shared_host_notice(entry_hosts(m))
    if not np.isfinite(a.best_s).any():
        a.problems.append(f"{m.path.name}: /map/trial_s holds no measured pair: nothing to analyse")
    skipped = no_power_notice(m)
    if skipped:
        a.notices.append(skipped)
    pairs = pair_slots(m, a.nodes) if m.power and not skipped else None
    _release(m, release, "pair_window_s")
    # the conditions before the models and outliers: what only they read (the NIC bytes, the
    # counts) is dropped before those are made (nothing of theirs is needed by the conditions)
    a.conditions = analyse_map_conditions(m, a, entry_hosts(m), is_directed(m.map_attrs))
    _release(m, release, "iterations", "cond")
    own = pairs.own if pairs is not None and pairs.windows is not None else None
    power = analyse_power(m, m.window_start_unix_s.ravel(), m.window_end_unix_s.ravel(), meter_delay_s, own)
    if power is not None:
        a.power = power
        a.notices += power.notices
        a.problems += power.problems
        a.energy = pair_energy(m, a, power, pairs)
        a.notices += gap_notice(a.energy)
        if a.energy.shared_nodes:
            a.notices.append(
                "several mapped ranks share a node: each node's power in a round is split equally "
                "among its ranks measured in that round (a pair's energy is an even share, not a "
                "measurement of that pair alone)"
            )
    a.model = link_models(a)
    a.outliers = find_outliers(a)
    confirm_findings(a, m.confirm)
    confirm_conditions(a, m)
    return a


def _release(m: MapFile, release: bool, *names: str) -> None:
    """Drop m's matrices `names` (a MapFile field, or a trial summary's name) when `release`: the
    analysis has used them, and holds what it keeps of them itself."""
    if not release:
        return
    for name in names:
        if m.trial_stats is not None and name in m.trial_stats:
            del m.trial_stats[name]
        elif name == "cond":
            m.cond = None
        else:
            setattr(m, name, None)


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
