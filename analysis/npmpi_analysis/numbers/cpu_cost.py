"""CPU cost per byte (netperf's service demand) and % of a core, per size and measuring rank.

A rank's figures cover its span of the size's timed trials (format 1.7's /pingpong/cpu_*_s):
    bytes moved by the rank   = trials run × iterations × message size × bytes_per_iteration_factor / pairs
                                (what it sent plus what it received: its pair's bytes)
    CPU µs per KiB            = (user + system) × 10^6 / (bytes moved / 1024)
    % of a core               = (user + system) / wall × 100
    % waiting for a CPU       = runqueue wait / wall × 100 (runnable, not running: a shared host)
A rank that busy-polls (Open MPI spins in a blocking receive) shows % of a core + % waiting ≈ 100;
a rank that blocks in the kernel shows less. docs/analysis.md, "CPU cost per byte".
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from npmpi_analysis.numbers.compute import run_mode_factors

KIB = 1024
MAX_RANK_LINES = 4  # ranks the text summary names one by one
# A process cannot use more CPU seconds than wall seconds times its host's cores, nor its main thread
# wait for a CPU longer than the wall time. The file does not record the cores: this bound is above
# any node's, so that what exceeds it is impossible, not merely a large machine.
MAX_CORES = 4096
SLACK_S = 0.01  # clock reads at slightly different moments: a wait may exceed the wall by this


@dataclass
class CpuCost:
    """One run's CPU figures: [size, rank] arrays, the ranks' ids and roles."""

    ranks: list[int]
    roles: list[str]
    cpu_s: np.ndarray  # user + system
    user_s: np.ndarray
    system_s: np.ndarray
    wall_s: np.ndarray
    wait_s: np.ndarray
    bytes_per_rank: np.ndarray  # [size]
    us_per_kib: np.ndarray
    core_percent: np.ndarray
    wait_percent: np.ndarray
    impossible: list[str] = field(default_factory=list)  # what was left out as impossible, one line each

    @property
    def mean_us_per_kib(self) -> np.ndarray:
        """Per size: the mean over the measuring ranks (NaN where none was measured)."""
        return _nanmean_rows(self.us_per_kib)

    @property
    def mean_core_percent(self) -> np.ndarray:
        return _nanmean_rows(self.core_percent)

    @property
    def mean_core_and_wait_percent(self) -> np.ndarray:
        """% of a core plus % waiting for one: 100 for ranks that never sleep (busy-polling)."""
        return _nanmean_rows(self.core_percent + self.wait_percent)


def _nanmean_rows(x: np.ndarray) -> np.ndarray:
    ok = np.isfinite(x)
    count = ok.sum(axis=1)
    total = np.where(ok, x, 0.0).sum(axis=1)
    return np.where(count > 0, total / np.maximum(count, 1), np.nan)


def us_per_kib(cpu_s: np.ndarray, bytes_moved: np.ndarray) -> np.ndarray:
    """CPU microseconds per KiB moved; NaN where nothing was moved (a 0-byte row)."""
    b = np.asarray(bytes_moved, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(b > 0, np.asarray(cpu_s, dtype=float) * 1e6 / (b / KIB), np.nan)


def percent_of(part_s: np.ndarray, wall_s: np.ndarray) -> np.ndarray:
    """part / wall × 100; NaN where the wall time is not positive."""
    w = np.asarray(wall_s, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(w > 0, np.asarray(part_s, dtype=float) * 100.0 / w, np.nan)


def bytes_per_rank(run_attrs: dict, size_bytes, iterations, trials_run) -> np.ndarray:
    """What each measuring rank sent plus received over a size's trials (its pair's bytes)."""
    factor = run_mode_factors(run_attrs)[0]
    try:
        pairs = max(1, int(run_attrs.get("pairs", 1)))
    except (TypeError, ValueError, OverflowError):
        pairs = 1
    n = np.asarray(size_bytes, dtype=float) * np.asarray(iterations, dtype=float)
    return n * np.asarray(trials_run, dtype=float) * factor / pairs


def analyse_cpu(run, trials_run: np.ndarray) -> CpuCost | None:
    """The run's CPU cost per size and rank; None for a file without CPU datasets (before 1.7)."""
    cpu = getattr(run.pingpong, "cpu", None)
    if cpu is None:
        return None
    pp = run.pingpong
    roles = list(run.layout.get("role", []))
    ranks = [int(r) for r in cpu.ranks]
    user, system, wall, wait, impossible = _possible(cpu, ranks)
    total = user + system
    moved = bytes_per_rank(run.attrs, pp.size_bytes, pp.iterations, trials_run)
    return CpuCost(
        ranks=ranks,
        roles=[str(roles[r]) if 0 <= r < len(roles) else "?" for r in ranks],
        cpu_s=total,
        user_s=user,
        system_s=system,
        wall_s=wall,
        wait_s=wait,
        bytes_per_rank=moved,
        us_per_kib=us_per_kib(total, moved[:, None]),
        core_percent=percent_of(total, wall),
        wait_percent=percent_of(wait, wall),
        impossible=impossible,
    )


def _possible(cpu, ranks: list[int]):
    """The CPU times with the impossible ones NaN (a damaged or forged file), and one line per kind
    left out: user or system time negative or not finite where the wall time is known, a wall time
    not positive, CPU time above wall time × MAX_CORES, a run-queue wait below 0 or above the wall."""
    f = functools.partial(np.asarray, dtype=float)
    user, system, wall, wait = (
        f(x).copy() for x in (cpu.cpu_user_s, cpu.cpu_system_s, cpu.cpu_wall_s, cpu.cpu_runqueue_wait_s)
    )
    with np.errstate(invalid="ignore", over="ignore"):
        recorded = ~(np.isnan(user) & np.isnan(system) & np.isnan(wall))  # a size not measured: all NaN
        bad_wall = recorded & ~(np.isfinite(wall) & (wall > 0))
        bad_cpu = (
            recorded
            & ~bad_wall
            & ~(
                np.isfinite(user)
                & np.isfinite(system)
                & (user >= 0)
                & (system >= 0)
                & (user + system <= wall * MAX_CORES + SLACK_S)
            )
        )
        bad_wait = ~bad_wall & ~np.isnan(wait) & ~(np.isfinite(wait) & (wait >= 0) & (wait <= wall + SLACK_S))
    notes = []
    for mask, what in (
        (bad_wall, "a wall time that is not a positive number"),
        (bad_cpu, f"CPU time negative, not finite or above the wall time × {MAX_CORES} cores"),
        (bad_wait, "a wait for a CPU negative, not finite or longer than the wall time"),
    ):
        if mask.any():
            cols = sorted({ranks[j] for j in np.nonzero(mask.any(axis=0))[0] if j < len(ranks)})
            notes.append(
                f"{int(mask.sum())} CPU figure(s) of rank(s) {', '.join(map(str, cols))} left out as "
                f"impossible ({what}): the file is damaged or forged"
            )
    cut = bad_wall | bad_cpu
    user[cut] = system[cut] = wall[cut] = wait[cut] = np.nan
    wait[bad_wait] = np.nan
    return user, system, wall, wait, notes


def size_columns(c: CpuCost, k: int) -> dict[str, Any]:
    """A size's CSV/JSON columns: the mean over ranks, then each rank's figures."""
    row: dict[str, Any] = {
        "cpu_us_per_kib": float(c.mean_us_per_kib[k]),
        "cpu_core_percent": float(c.mean_core_percent[k]),
        "cpu_bytes_per_rank": float(c.bytes_per_rank[k]),
    }
    for j, r in enumerate(c.ranks):
        row[f"rank{r}_cpu_user_s"] = float(c.user_s[k, j])
        row[f"rank{r}_cpu_system_s"] = float(c.system_s[k, j])
        row[f"rank{r}_cpu_wall_s"] = float(c.wall_s[k, j])
        row[f"rank{r}_cpu_runqueue_wait_s"] = float(c.wait_s[k, j])
        row[f"rank{r}_cpu_us_per_kib"] = float(c.us_per_kib[k, j])
        row[f"rank{r}_cpu_core_percent"] = float(c.core_percent[k, j])
    return row


def _f(x) -> float | None:
    x = float(x)
    return x if math.isfinite(x) else None


def _over_sizes(part: np.ndarray, wall: np.ndarray) -> float:
    """part / wall × 100 summed over the sizes where both are known."""
    ok = np.isfinite(part) & np.isfinite(wall)
    w = float(wall[ok].sum())
    return float(part[ok].sum()) * 100.0 / w if w > 0 else math.nan


def summary(c: CpuCost, size_bytes: np.ndarray, peak_k: int | None) -> dict[str, Any]:
    """The summary's CPU figures: at the peak bandwidth's size, the least, and each rank's share."""
    mean = c.mean_us_per_kib
    finite = np.isfinite(mean)
    least = int(np.nanargmin(np.where(finite, mean, np.nan))) if finite.any() else None
    return {
        "cpu_recorded": bool(np.isfinite(c.cpu_s).any() and np.isfinite(c.wall_s).any()),
        "cpu_impossible": list(c.impossible),
        "cpu_us_per_kib_at_peak_bandwidth": _f(mean[peak_k]) if peak_k is not None else None,
        "min_cpu_us_per_kib": _f(mean[least]) if least is not None else None,
        "min_cpu_size_bytes": int(size_bytes[least]) if least is not None else None,
        "cpu_core_percent": _f(_over_sizes(c.cpu_s, c.wall_s)),
        "cpu_ranks": [
            {
                "rank": r,
                "role": c.roles[j],
                "core_percent": _f(_over_sizes(c.cpu_s[:, j], c.wall_s[:, j])),
                "runqueue_wait_percent": _f(_over_sizes(c.wait_s[:, j], c.wall_s[:, j])),
                "user_s": _f(np.nansum(c.user_s[:, j])),
                "system_s": _f(np.nansum(c.system_s[:, j])),
            }
            for j, r in enumerate(c.ranks)
        ],
    }


def summary_lines(s: dict[str, Any]) -> list[str]:
    """The text summary's CPU lines ('' for a run without CPU figures)."""
    if not s.get("cpu_ranks"):
        return []
    if not s.get("cpu_recorded", True):  # what was impossible is among the run's notices
        return ["  CPU time: not recorded (no size has both a CPU and a wall time)"]

    def g(x, unit: str) -> str:
        return f"{x:.3g} {unit}" if x is not None else "-"

    at_peak = g(s.get("cpu_us_per_kib_at_peak_bandwidth"), "us/KiB")
    least = g(s.get("min_cpu_us_per_kib"), "us/KiB")
    shown = s["cpu_ranks"][:MAX_RANK_LINES]
    ranks = "; ".join(
        f"rank {r['rank']} ({r['role']}) {g(r['core_percent'], '%')} "
        f"(user {g(r['user_s'], 's')}, system {g(r['system_s'], 's')}, "
        f"waiting for a CPU {g(r['runqueue_wait_percent'], '%')})"
        for r in shown
    )
    if len(s["cpu_ranks"]) > len(shown):  # many pairs: the rest in the JSON, not one endless line
        ranks += f"; {len(s['cpu_ranks']) - len(shown)} more rank(s): see --json"
    where = f" at {s['min_cpu_size_bytes']} B" if s.get("min_cpu_size_bytes") is not None else ""
    return [
        f"  CPU per KiB moved (mean of the measuring ranks): {at_peak} at the peak bandwidth's size, "
        f"least {least}{where}",
        f"  % of a core over the trials: {ranks}",
    ]
