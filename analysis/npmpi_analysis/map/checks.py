"""What a cluster map file's values must be, and what the analysis keeps of them (map/load.py reads
the file): the datasets' shapes against each other, times and counts within bounds (RunFileError,
one line, for a damaged or forged file), the rounds a stopped map counted, the sizes in ascending
order, its status said."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from npmpi.core.errors import RunFileError
from npmpi.core.safetext import shown
from npmpi_analysis.map.trials import leave_out

SCHEDULES = ("rounds", "serial")
MAX_NODES = 100_000
MAX_SIZES = 10_000
MAX_MAP_TRIALS = 100_000
MAX_MAP_VALUES = 2_000_000_000  # elements of trial_s a file may claim
MAX_TRIAL_S = 1e9  # as a run file's: a longer time is damage
STATUS_COMPLETE = "complete"


def check_shapes(shapes: dict[str, tuple], p: Path) -> None:
    """Every dataset's shape agrees with N = len(hosts), S = len(size_bytes), R rounds, T trials."""
    n, s = shapes["hosts"][0], shapes["size_bytes"][0]
    t = shapes["trial_s"][3]
    r = shapes["window_start_unix_s"][1]
    if not 2 <= n <= MAX_NODES:
        raise RunFileError(f"{p}: /map/hosts holds {n} host(s): a map needs 2 to {MAX_NODES}")
    if not 1 <= s <= MAX_SIZES:
        raise RunFileError(f"{p}: /map/size_bytes holds {s} size(s): a map needs 1 to {MAX_SIZES}")
    if not 1 <= t <= MAX_MAP_TRIALS:
        raise RunFileError(f"{p}: /map/trial_s has {t} trials per pair: expected 1 to {MAX_MAP_TRIALS}")
    if r < 1:
        raise RunFileError(f"{p}: /map/window_start_unix_s has no round")
    expected = {
        "ranks": (n,),
        "round": (n, n),
        "trial_s": (s, n, n, t),
        "iterations": (s, n, n),
        "bytes_moved": (s, n, n),
        "window_start_unix_s": (s, r),
        "window_end_unix_s": (s, r),
        "latency_s": (n, n),
        "bandwidth_bit_s": (s, n, n),
        "pair_window_s": (s, n, n),
        "runq_wait_s": (s, n, n, t, 2),
    }
    for name, want in expected.items():
        if name in shapes and tuple(shapes[name]) != want:
            raise RunFileError(
                f"{p}: /map/{name} has shape {tuple(shapes[name])}, expected {want} for {n} hosts, "
                f"{s} size(s), {r} round(s) and {t} trial(s): the map's datasets disagree"
            )


def check_values(m, p: Path) -> None:
    if np.any(m.size_bytes < 1):
        raise RunFileError(f"{p}: /map/size_bytes holds sizes below 1 byte")
    if len(np.unique(m.size_bytes)) < len(m.size_bytes):
        raise RunFileError(f"{p}: /map/size_bytes holds a size twice: {m.size_bytes.tolist()}")
    rounds = m.window_start_unix_s.shape[1]
    rd = m.round
    off = ~np.eye(m.nodes, dtype=bool)
    if np.any(rd < -1) or np.any(rd >= rounds) or np.any(np.diag(rd) != -1):
        raise RunFileError(
            f"{p}: /map/round holds a round outside -1 to {rounds - 1} or a diagonal that is not -1"
        )
    if np.any((rd != rd.T) & off):
        raise RunFileError(f"{p}: /map/round is not symmetric (pair i, j and j, i in different rounds)")
    if m.trial_s is not None:  # a rows map's are checked as they are read (map/rows.read_trial_rows)
        _check_trials(m, p)
    if np.any(m.bytes_moved < 0):
        raise RunFileError(f"{p}: /map/bytes_moved holds negative byte counts")
    schedule = str(m.map_attrs.get("schedule", ""))
    if schedule and schedule not in SCHEDULES:
        m.notices.append(f"/map: unknown schedule {schedule!r} (known: {', '.join(SCHEDULES)})")


def impossible_times(t: np.ndarray) -> np.ndarray:
    """Where trial times are non-positive, infinite or beyond MAX_TRIAL_S (NaN: not run)."""
    return np.isinf(t) | (np.isfinite(t) & ((t <= 0) | (t > MAX_TRIAL_S)))


def impossible_time_error(p: Path, value: float, i: int, j: int, size: int) -> RunFileError:
    return RunFileError(
        f"{p}: /map/trial_s holds a non-positive, infinite or impossible time ({value!r} s) "
        f"for hosts {i}, {j} at {size} B"
    )


def _check_trials(m, p: Path) -> None:
    t = m.trial_s
    bad = impossible_times(t)
    if np.any(bad):
        k, i, j, _ = (int(x) for x in np.argwhere(bad)[0])
        raise impossible_time_error(p, t[k, i, j][bad[k, i, j]][0], i, j, int(m.size_bytes[k]))
    measured = np.isfinite(t).any(axis=3)
    if np.any(measured & (m.iterations < 1)):
        raise RunFileError(f"{p}: /map/iterations holds values below 1 for a measured pair")


def keep_counted_rounds(m) -> None:
    """A map not complete holds what was flushed: the rounds `rounds_completed` counts (size 0's
    rounds first). A round after them (written, not yet counted when the writer stopped) is left
    out, with a notice; a count that is not a whole number of rounds of this map is said and unused."""
    if m.status == STATUS_COMPLETE:
        return
    s_count, rounds = m.window_start_unix_s.shape
    done = m.map_attrs.get("rounds_completed")
    if isinstance(done, bool) or not isinstance(done, int) or not 0 <= done <= s_count * rounds:
        if done is not None:
            m.notices.append(
                f"/map: rounds_completed is {str(done)[:40]!r}, not a count from 0 to {s_count * rounds}; "
                "every round holding data is analysed"
            )
        return
    late = np.arange(s_count * rounds).reshape(s_count, rounds) >= done  # [S, R]
    pair_late = np.zeros(m.iterations.shape, dtype=bool)  # [S, N, N]
    off = m.round >= 0
    pair_late[:, off] = late[:, m.round[off]]
    had = (m.trial_stats["trials_run"][pair_late] > 0).any() or np.isfinite(m.window_start_unix_s[late]).any()
    if not had:
        return
    if m.trial_s is not None:
        m.trial_s[pair_late] = np.nan
    leave_out(m.trial_stats, pair_late)
    m.iterations[pair_late] = 0
    m.bytes_moved[pair_late] = 0
    m.window_start_unix_s[late] = np.nan
    m.window_end_unix_s[late] = np.nan
    if m.stored_bandwidth_bit_s is not None:
        m.stored_bandwidth_bit_s = np.where(pair_late, np.nan, m.stored_bandwidth_bit_s)
    if m.pair_window_s is not None:
        m.pair_window_s = np.where(pair_late, np.nan, m.pair_window_s)
    if m.runq_wait_s is not None:
        m.runq_wait_s = np.where(pair_late[..., None, None], np.nan, m.runq_wait_s)
    if m.cond is not None:
        m.cond = {k: v.blank(pair_late) if hasattr(v, "blank") else
                  np.where(pair_late[..., None], v.dtype.type(0) if v.dtype == bool else np.nan, v)
                  for k, v in m.cond.items()}  # fmt: skip
    m.notices.append(
        f"/map: data of rounds after the {done} counted in rounds_completed (written as the map "
        "stopped, never confirmed) are left out"
    )


def sort_sizes(m) -> None:
    """Sizes in increasing order (the smallest gives the latency), every per-size array with them."""
    order = np.argsort(m.size_bytes, kind="stable")
    if np.all(order == np.arange(len(order))):
        return
    m.trial_stats = {k: v[order] for k, v in m.trial_stats.items()}
    if m.trial_s is not None:
        m.trial_s = m.trial_s[order]
    for name in (
        "size_bytes",
        "iterations",
        "bytes_moved",
        "window_start_unix_s",
        "window_end_unix_s",
    ):
        setattr(m, name, getattr(m, name)[order])
    if m.stored_bandwidth_bit_s is not None:
        m.stored_bandwidth_bit_s = m.stored_bandwidth_bit_s[order]
    if m.pair_window_s is not None:
        m.pair_window_s = m.pair_window_s[order]
    if m.runq_wait_s is not None:
        m.runq_wait_s = m.runq_wait_s[order]
    if m.cond is not None:
        m.cond = {k: v[order] for k, v in m.cond.items()}


def status_notices(m) -> None:
    resumed = m.map_attrs.get("resumed_rounds")
    if isinstance(resumed, int) and not isinstance(resumed, bool) and resumed > 0:
        where = shown(m.map_attrs.get("resumed_from", "?"), 200)
        m.notices.append(
            f"the map was resumed (--resume): its first {resumed} round(s) were copied from {where}, "
            "whose power samples stay there: their pairs have no power in this file (flagged 'none')"
        )
    status = m.status
    n = m.nodes
    upper = np.triu(np.ones((n, n), dtype=bool), 1)
    # a sample (--pairs sample:K, /map pairs_plan) is whole when its scheduled pairs were measured
    sampled = str(m.map_attrs.get("pairs_plan", "all")).startswith("sample:")
    pairs = int(((m.round >= 0) & upper).sum()) if sampled else n * (n - 1) // 2
    measured = m.trial_stats["trials_run"] > 0  # (i, j) or (j, i) measured
    done = [int((measured[k] & upper).sum()) for k in range(len(m.size_bytes))]
    if status != STATUS_COMPLETE or min(done) < pairs:
        per_size = ", ".join(f"{d} at {int(s)} B" for d, s in zip(done, m.size_bytes, strict=True))
        why = {
            "running": "the map did not finish (status 'running': the writer was killed or a rank aborted)",
            "interrupted": "the map was interrupted",
            "failed": "the map failed",
        }.get(status, f"the map's status is {status!r}")
        msg = str(m.map_attrs.get("status_message", m.attrs.get("status_message", "")) or "")
        if status == STATUS_COMPLETE:
            why = f"the map is complete but not every {'scheduled ' if sampled else ''}pair was measured"
        m.notices.append(
            f"{why}{': ' + msg if msg else ''}; pairs measured of {pairs}{' scheduled' if sampled else ''}: "
            f"{per_size}. "
            "Unmeasured pairs are blank in the matrices and left out of the statistics"
        )
