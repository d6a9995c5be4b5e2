"""Synthetic cluster-map files (the layout `python -m npmpi map` writes) with injected truths, for
tests and demos: slow links, slow nodes, jitter, partial maps, and power channels written by the
run file's own writer (npmpi_analysis.synthetic), labelled simulated.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from npmpi_analysis.synthetic import SynthNode, write_run

T0 = 1.7e9


def circle_rounds(n: int) -> tuple[np.ndarray, int]:
    """([N, N] round of each pair, -1 on the diagonal; rounds) by the circle method: N − 1 rounds
    of disjoint pairs for even N, N rounds with one bye each for odd N."""
    m = n if n % 2 == 0 else n + 1
    rounds = np.full((n, n), -1, dtype=np.int32)
    for r in range(m - 1):
        pairs = [(r, m - 1)] + [((r + k) % (m - 1), (r - k) % (m - 1)) for k in range(1, m // 2)]
        for i, j in pairs:
            if i < n and j < n:
                rounds[i, j] = rounds[j, i] = r
    return rounds, m - 1


def serial_rounds(n: int) -> tuple[np.ndarray, int]:
    """One pair per round, in (0, 1), (0, 2), … order."""
    rounds = np.full((n, n), -1, dtype=np.int32)
    r = 0
    for i in range(n):
        for j in range(i + 1, n):
            rounds[i, j] = rounds[j, i] = r
            r += 1
    return rounds, r


@dataclass
class MapTruth:
    """What a synthetic map's pairs really do: one-way time = latency + 8·size/bandwidth, divided by
    the pair's factor (a slow link or node: factor < 1 makes both its latency and bandwidth worse
    by exactly that factor), then each trial jittered by ±jitter (uniform)."""

    hosts: list[str]
    size_bytes: list[int] = field(default_factory=lambda: [1, 65536, 4 << 20])
    latency_s: float = 2e-6
    bandwidth_bit_s: float = 10e9
    slow_links: dict[tuple[int, int], float] = field(default_factory=dict)
    slow_nodes: dict[int, float] = field(default_factory=dict)
    jitter: float = 0.0
    trials: int = 3
    seed: int = 0

    def factors(self) -> np.ndarray:
        """[N, N] factor of every pair (1 where normal)."""
        n = len(self.hosts)
        f = np.ones((n, n))
        for k, x in self.slow_nodes.items():
            f[k, :] *= x
            f[:, k] *= x
            f[k, k] /= x  # the diagonal is never a pair
        for (i, j), x in self.slow_links.items():
            f[i, j] *= x
            f[j, i] *= x
        return f

    def one_way_s(self) -> np.ndarray:
        """[S, N, N] the true one-way time of every pair (NaN on the diagonal)."""
        sizes = np.asarray(self.size_bytes, dtype=float)
        base = self.latency_s + 8.0 * sizes / self.bandwidth_bit_s
        t = base[:, None, None] / self.factors()[None]
        n = len(self.hosts)
        t[:, np.arange(n), np.arange(n)] = np.nan
        return t


def _trials(truth: MapTruth) -> np.ndarray:
    """[S, N, N, T] symmetric jittered trial times."""
    rng = np.random.default_rng(truth.seed)
    t = truth.one_way_s()
    s, n = t.shape[0], t.shape[1]
    jit = 1.0 + truth.jitter * rng.uniform(-1.0, 1.0, size=(s, n, n, truth.trials))
    jit = np.triu(np.moveaxis(jit, 3, 1), 1)  # [S, T, N, N], upper triangle
    jit = np.moveaxis(jit + np.swapaxes(jit, 2, 3), 1, 3)
    return t[..., None] * np.where(jit > 0, jit, np.nan)


def write_map(
    path: str | os.PathLike,
    truth: MapTruth,
    *,
    schedule: str = "rounds",
    per_rank: bool = False,
    status: str = "complete",
    measured: np.ndarray | None = None,
    iterations: int = 100,
    window_s: float = 1.0,
    gap_s: float = 0.5,
    nodes: list[SynthNode] | None = None,
    baseline: tuple[float, float] | None = None,
    baseline_after: tuple[float, float] | None = None,
    t0: float = T0,
) -> Path:
    """Write a map file: root attributes and (with `nodes`) /power by the run file's writer, then
    /map. Round r of size s runs in [t0 + (s R + r)(window_s + gap_s), … + window_s]; `measured`
    [S, R] (default all) says which rounds ran: the others are NaN, as in an interrupted map."""
    n = len(truth.hosts)
    rounds, nr = circle_rounds(n) if schedule == "rounds" else serial_rounds(n)
    s_count = len(truth.size_bytes)
    measured = np.ones((s_count, nr), dtype=bool) if measured is None else np.asarray(measured, dtype=bool)
    k = np.arange(s_count * nr, dtype=float).reshape(s_count, nr)
    start = np.where(measured, t0 + k * (window_s + gap_s), np.nan)
    end = start + window_s
    trial_s = _trials(truth)
    ran = np.zeros((s_count, n, n), dtype=bool)
    for i in range(n):
        for j in range(n):
            if i != j:
                ran[:, i, j] = measured[:, rounds[i, j]]
    trial_s[~ran] = np.nan
    sizes = np.asarray(truth.size_bytes, dtype=np.int64)
    iters = np.where(ran, iterations, 0).astype(np.int64)
    moved = np.where(ran, 2 * sizes[:, None, None] * iterations * truth.trials, 0).astype(np.int64)
    power_hosts = sorted(set(truth.hosts), key=truth.hosts.index)
    names = [f"{h}:{k}" for k, h in enumerate(truth.hosts)] if per_rank else list(truth.hosts)
    extra = [nd.host for nd in nodes] if nodes else []
    attrs = {
        "command_line": "python -m npmpi map (synthetic)",
        "world_size": n + len(extra),
        "node_count": len(power_hosts),
    }
    write_run(
        path,
        [],
        [],
        [],
        [],
        nodes=nodes,
        baseline=baseline,
        baseline_after=baseline_after,
        status=status,
        attrs=attrs,
    )
    _write_map_group(
        Path(path),
        {
            "schedule": schedule,
            "per_rank": per_rank,
            "kernel": "python",
            "mode": "pingpong",
            "window": 1,
            "n_rounds": nr,
            "trials": truth.trials,
            "rounds_completed": int(measured.sum()),
            "status": status,
        },
        names,
        sizes,
        rounds,
        trial_s,
        iters,
        moved,
        start,
        end,
    )
    _write_layout(Path(path), list(truth.hosts) + extra, ["map"] * n + ["power"] * len(extra))
    return Path(path)


def _write_layout(path: Path, hosts: list[str], roles: list[str]) -> None:
    """/layout as a map run writes it: one row per rank, the measuring ranks first, then the power
    ranks (the synthetic run writer's layout is a sweep's)."""
    import h5py

    index = {h: k for k, h in enumerate(dict.fromkeys(hosts))}
    with h5py.File(path, "a") as f:
        del f["layout"]
        g = f.create_group("layout")
        g.create_dataset("host", data=np.array(hosts, dtype=object), dtype=h5py.string_dtype())
        g.create_dataset("node_index", data=np.array([index[h] for h in hosts], dtype=np.int64))
        g.create_dataset("role", data=np.array(roles, dtype=object), dtype=h5py.string_dtype())


def _write_map_group(path: Path, attrs, hosts, sizes, rounds, trial_s, iters, moved, start, end) -> None:
    """The /map group, datasets and dtypes as the map writer makes them."""
    import h5py

    n = len(hosts)
    with np.errstate(all="ignore"):
        best = np.nanmin(np.where(np.isfinite(trial_s), trial_s, np.inf), axis=3)
        best = np.where(np.isfinite(best), best, np.nan)
        bandwidth = 8.0 * sizes[:, None, None] / best
    with h5py.File(path, "a") as f:
        g = f.create_group("map")
        for key, value in attrs.items():
            g.attrs[key] = value
        g.create_dataset("hosts", data=np.array(hosts, dtype=object), dtype=h5py.string_dtype())
        g.create_dataset("ranks", data=np.arange(n, dtype=np.int32))
        g.create_dataset("size_bytes", data=sizes.astype(np.int64))
        g.create_dataset("round", data=rounds.astype(np.int32))
        g.create_dataset("trial_s", data=trial_s.astype(np.float64))
        g.create_dataset("iterations", data=iters)
        g.create_dataset("bytes_moved", data=moved)
        g.create_dataset("window_start_unix_s", data=start)
        g.create_dataset("window_end_unix_s", data=end)
        g.create_dataset("latency_s", data=best[0])
        g.create_dataset("bandwidth_bit_s", data=bandwidth)
