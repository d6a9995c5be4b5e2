"""Reading a cluster-map file (`python -m npmpi map`): the /map group, checked, and its /power part.

A map file holds a group `/map` (docs/file-format.md, "The cluster map") and, when meters were
given, the same `/power` group as a sweep's run file. Every dataset's shape is checked against the
others before anything is computed: a /map group with a missing dataset, inconsistent shapes or
impossible values is refused with one line (RunFileError), as a damaged run file is. A damaged
/power part leaves the map analysed without power, with the problem said.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from npmpi.core.errors import RunFileError
from npmpi.core.safetext import shown
from npmpi.runfile.maprows import is_rows_layout
from npmpi.runfile.opening import attr_value
from npmpi_analysis.map.conditions import read_map_conditions

MAP_GROUP = "map"
SCHEDULES = ("rounds", "serial")
MAX_NODES = 100_000
MAX_SIZES = 10_000
MAX_MAP_TRIALS = 100_000
MAX_MAP_VALUES = 2_000_000_000  # elements of trial_s a file may claim
MAX_TRIAL_S = 1e9  # as a run file's: a longer time is damage
STATUS_COMPLETE = "complete"

# (name, numpy kinds accepted, dimensions): the datasets a map must hold
REQUIRED = (
    ("hosts", "OSU", 1),
    ("ranks", "iu", 1),
    ("size_bytes", "iu", 1),
    ("round", "iu", 2),
    ("trial_s", "f", 4),
    ("iterations", "iu", 3),
    ("bytes_moved", "iu", 3),
    ("window_start_unix_s", "f", 2),
    ("window_end_unix_s", "f", 2),
)
DERIVED = (("latency_s", "f", 2), ("bandwidth_bit_s", "f", 3))
OPTIONAL = (  # older maps lack them
    ("pair_window_s", "f", 3),  # format 1.6: each pair's own window
    ("runq_wait_s", "f", 5),  # 1.7: both ranks' run-queue wait in every trial (read, checked, kept)
)


@dataclass
class MapFile:
    """A map file's contents in plain numpy, checked (N nodes, S sizes, R rounds, T trials)."""

    path: Path
    attrs: dict[str, Any]  # the root attributes
    map_attrs: dict[str, Any]
    hosts: list[str]
    ranks: np.ndarray  # [N]
    size_bytes: np.ndarray  # [S]
    round: np.ndarray  # [N, N], -1 on the diagonal (and for a pair never scheduled)
    trial_s: np.ndarray  # [S, N, N, T] one-way seconds per iteration of each trial, NaN unmeasured
    iterations: np.ndarray  # [S, N, N]
    bytes_moved: np.ndarray  # [S, N, N] both directions within the pair's window
    window_start_unix_s: np.ndarray  # [S, R] rank 0's clock
    window_end_unix_s: np.ndarray
    stored_latency_s: np.ndarray | None = None  # the writer's derived matrices (checked against ours)
    stored_bandwidth_bit_s: np.ndarray | None = None
    pair_window_s: np.ndarray | None = None  # [S, N, N] from the round's start to the pair's end (1.6)
    runq_wait_s: np.ndarray | None = None  # [S, N, N, T, 2] transmitter's, reflector's run-queue wait (1.7)
    confirm: dict[str, np.ndarray] | None = None  # the suspects measured again, /map/confirm_* (1.6)
    cond: dict[str, np.ndarray] | None = None  # COND_DATASETS name -> [S, N, N, 2] /map/cond_* (1.9)
    cond_info: dict[str, dict] = field(default_factory=dict)  # str(rank) -> /map/conditions_json's text
    confirm_cond: dict[str, np.ndarray] | None = None  # name -> [K, 2] /map/confirm_cond_*
    rows: Any = None  # npmpi_analysis.map.rows.MapRows of a map whose pairs are rows (2.0)
    layout: dict[str, Any] = field(default_factory=dict)
    power_attrs: dict[str, Any] = field(default_factory=dict)
    power: list = field(default_factory=list)  # npmpi.runfile.powerreader.PowerNode
    notices: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def status(self) -> str:
        """/map's status, or the root's when /map was left `running` by a writer that then closed
        the file as failed or interrupted (a full disk stops the writer before /map's status)."""
        root = str(self.attrs.get("status", ""))
        own = str(self.map_attrs.get("status", root))
        return root if own == "running" and root in ("failed", "interrupted") else own

    @property
    def nodes(self) -> int:
        return len(self.hosts)


def load_map(path: Path, sample_fields: tuple[str, ...]) -> MapFile:
    """Read and check a map file; RunFileError (one line) when its /map part cannot be analysed."""
    from npmpi.runfile.format import EXTRA_SAMPLE_FIELDS, SAMPLE_FIELDS
    from npmpi.runfile.opening import read_npmpi_file
    from npmpi_analysis.map.rows import unread_of

    unread = tuple(n for n in (*SAMPLE_FIELDS, *EXTRA_SAMPLE_FIELDS) if n not in (*sample_fields, "energy_j"))
    return read_npmpi_file(path, lambda f, p: _read(f, p, sample_fields), lambda f: (*unread, *unread_of(f)))


def _check_root(attrs: dict, p: Path) -> None:
    from npmpi.runfile.format import MAP_FORMAT_VERSION as FORMAT_VERSION

    fmt = attrs.get("format")
    if fmt is not None and not str(fmt).startswith("npmpi"):
        raise RunFileError(f"{p}: not an npmpi file (format attribute is {fmt!r})")
    version = attrs.get("format_version")
    if version is not None:
        try:
            major = int(str(version).split(".")[0])
        except ValueError:
            raise RunFileError(
                f"{p}: format_version attribute {version!r} is not of the form MAJOR.MINOR"
            ) from None
        if major > FORMAT_VERSION[0]:
            raise RunFileError(
                f"{p}: written by a newer npmpi (format {version}; this reader knows "
                f"{FORMAT_VERSION[0]}.x): upgrade npmpi to read it"
            )


def _dataset(g, name: str, kinds: str, ndim: int, p: Path, required: bool = True):
    """g[name], a dataset stored in this file with `ndim` dimensions of one of `kinds`; None when
    absent and not required."""
    from npmpi_analysis.map.rows import stored

    where = f"/map/{name}"
    ds = stored(g, name, p, required)
    if ds is None:
        return None
    if len(ds.shape) != ndim or ds.dtype.kind not in kinds:
        raise RunFileError(
            f"{p}: {where} has shape {ds.shape} and type {ds.dtype}, expected {ndim} dimension(s) of "
            f"{'text' if kinds == 'OSU' else 'numbers'}"
        )
    if math.prod(ds.shape) > MAX_MAP_VALUES:
        raise RunFileError(
            f"{p}: {where} claims an implausible shape {ds.shape}; the file is damaged or forged"
        )
    return ds


def _read(f, p: Path, sample_fields: tuple[str, ...]) -> MapFile:
    from npmpi.runfile.opening import check_text
    from npmpi.runfile.reader import read_layout_part

    attrs = {k: attr_value(f.attrs[k]) for k in f.attrs}
    _check_root(attrs, p)
    import h5py

    g = f[MAP_GROUP]
    if not isinstance(g, h5py.Group):
        raise RunFileError(f"{p}: /map is not a group: the map cannot be analysed")
    map_attrs = {k: attr_value(g.attrs[k]) for k in g.attrs}
    rows, data = (_read_rows if is_rows_layout(map_attrs) else _read_dense)(g, p, map_attrs)
    check_text(g["hosts"], data["hosts"], p, "/map/hosts")
    hosts = [str(attr_value(h)) for h in data["hosts"]]
    m = MapFile(
        path=p,
        attrs=attrs,
        map_attrs=map_attrs,
        hosts=hosts,
        ranks=np.asarray(data["ranks"], dtype=np.int64),
        size_bytes=np.asarray(data["size_bytes"], dtype=np.int64),
        round=np.asarray(data["round"], dtype=np.int64),
        trial_s=np.asarray(data["trial_s"], dtype=np.float64),
        iterations=np.asarray(data["iterations"], dtype=np.int64),
        bytes_moved=np.asarray(data["bytes_moved"], dtype=np.int64),
        window_start_unix_s=np.asarray(data["window_start_unix_s"], dtype=np.float64),
        window_end_unix_s=np.asarray(data["window_end_unix_s"], dtype=np.float64),
        stored_latency_s=data.get("latency_s"),
        stored_bandwidth_bit_s=data.get("bandwidth_bit_s"),
        pair_window_s=data.get("pair_window_s"),
        runq_wait_s=data.get("runq_wait_s"),
        rows=rows,
    )
    _check_values(m, p)
    if rows is not None:
        from npmpi_analysis.map.rows import check_unread

        m.problems += check_unread(g, p, rows, len(m.size_bytes), m.trial_s.shape[3])
    read_map_conditions(g, p, m)
    _keep_counted_rounds(m)
    m.confirm = _read_confirm(g, p, m)
    _sort_sizes(m)
    _status_notices(m)
    try:
        m.layout = read_layout_part(f, p)
    except RunFileError as exc:
        m.problems.append(f"{exc}: the layout is not used")
    _read_power(f, p, m, sample_fields)
    from npmpi.runfile.attrseal import check_seals

    check_seals(f, p, m.notices)  # a changed attribute (npmpi/runfile/attrseal.py), the rest read
    return m


def _read_dense(g, p: Path, map_attrs: dict) -> tuple[None, dict]:
    """A dense map's datasets (format 1.x), checked, as they are stored."""
    from npmpi.runfile.opening import read_declared

    ds = {name: _dataset(g, name, kinds, ndim, p) for name, kinds, ndim in REQUIRED}
    ds.update(
        {name: _dataset(g, name, kinds, ndim, p, required=False) for name, kinds, ndim in DERIVED + OPTIONAL}
    )
    _check_shapes({k: v.shape for k, v in ds.items() if v is not None}, p)
    # a stopped map's rounds not reached were never written: read as their fill value (NaN, 0)
    return None, {k: read_declared(v, p, f"/map/{k}") for k, v in ds.items() if v is not None}


def _read_rows(g, p: Path, map_attrs: dict):
    """A rows map's datasets (format 2.0) expanded to the dense matrices, checked; its index."""
    from npmpi.runfile.opening import read_declared
    from npmpi_analysis.map.rows import COND_NAMES, check_memory, dense_datasets, read_index

    small = {
        name: _dataset(g, name, kinds, ndim, p)
        for name, kinds, ndim in REQUIRED
        if name in ("hosts", "ranks", "size_bytes", "window_start_unix_s", "window_end_unix_s")
    }
    n, s = small["hosts"].shape[0], small["size_bytes"].shape[0]
    trial = g.get("trial_s")
    t = trial.shape[-1] if trial is not None and getattr(trial, "ndim", 0) == 3 else 0
    r = small["window_start_unix_s"].shape[1]
    _check_shapes({k: v.shape for k, v in small.items()} | {"trial_s": (s, n, n, max(t, 1))}, p)
    check_memory(p, n, s, t, all(c in g for c in COND_NAMES))
    rows = read_index(g, p, n, r, map_attrs)
    data = {k: read_declared(v, p, f"/map/{k}") for k, v in small.items()}
    data.update(dense_datasets(g, p, rows, s, t))
    return rows, data


def _read_power(f, p: Path, m: MapFile, sample_fields: tuple[str, ...]) -> None:
    from npmpi.runfile.powerreader import read_power_part

    if "power" in f and "fabric" in f["power"]:
        m.notices.append(
            "/power/fabric (--fabric-meter) is recorded but a map's analysis does not attribute the "
            "fabric's energy to pairs: read it with npmpi.runfile.reader or h5py"
        )
    try:
        m.power_attrs, m.power = read_power_part(f, p, m.notices, sample_fields)
    except RunFileError as exc:
        m.problems.append(f"{exc}; latency and bandwidth are analysed without power")
    except (OSError, KeyError, RuntimeError, ValueError, TypeError) as exc:
        m.problems.append(
            f"{p}: /power cannot be read ({exc}); latency and bandwidth are analysed without power"
        )


def _check_shapes(shapes: dict[str, tuple], p: Path) -> None:
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


def _check_values(m: MapFile, p: Path) -> None:
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
    t = m.trial_s
    bad = np.isinf(t) | (np.isfinite(t) & ((t <= 0) | (t > MAX_TRIAL_S)))
    if np.any(bad):
        k, i, j, _ = (int(x) for x in np.argwhere(bad)[0])
        value = t[k, i, j][bad[k, i, j]][0]
        raise RunFileError(
            f"{p}: /map/trial_s holds a non-positive, infinite or impossible time ({value!r} s) "
            f"for hosts {i}, {j} at {int(m.size_bytes[k])} B"
        )
    measured = np.isfinite(t).any(axis=3)
    if np.any(measured & (m.iterations < 1)):
        raise RunFileError(f"{p}: /map/iterations holds values below 1 for a measured pair")
    if np.any(m.bytes_moved < 0):
        raise RunFileError(f"{p}: /map/bytes_moved holds negative byte counts")
    schedule = str(m.map_attrs.get("schedule", ""))
    if schedule and schedule not in SCHEDULES:
        m.notices.append(f"/map: unknown schedule {schedule!r} (known: {', '.join(SCHEDULES)})")


def _keep_counted_rounds(m: MapFile) -> None:
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
    had = np.isfinite(m.trial_s[pair_late]).any() or np.isfinite(m.window_start_unix_s[late]).any()
    if not had:
        return
    m.trial_s[pair_late] = np.nan
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
        m.cond = {k: np.where(pair_late[..., None], np.nan, v) for k, v in m.cond.items()}
    m.notices.append(
        f"/map: data of rounds after the {done} counted in rounds_completed (written as the map "
        "stopped, never confirmed) are left out"
    )


CONFIRM = (
    ("confirm_pair", "iu", 2),
    ("confirm_size_index", "iu", 1),
    ("confirm_role", "iu", 1),
    ("confirm_trial_s", "f", 2),
    ("confirm_window_start_unix_s", "f", 1),
    ("confirm_window_end_unix_s", "f", 1),
)


def _read_confirm(g, p: Path, m: MapFile) -> dict[str, np.ndarray] | None:
    """/map/confirm_* (format 1.6: the suspects measured again), checked; None when absent. Damaged,
    they are left out with the problem said: the map's findings are then not confirmed."""
    from npmpi.runfile.datasets import read_whole

    if "confirm_pair" not in g:
        return None
    try:
        out = {n: np.asarray(read_whole(_dataset(g, n, k, d, p), p, f"/map/{n}")) for n, k, d in CONFIRM}
        k = out["confirm_pair"].shape[0]
        shapes_ok = out["confirm_pair"].shape == (k, 2) and out["confirm_trial_s"].shape == (
            k,
            m.trial_s.shape[3],
        )
        shapes_ok &= all(out[n].shape == (k,) for n, _, d in CONFIRM if d == 1)
        t = out["confirm_trial_s"]
        if not shapes_ok or np.any(out["confirm_pair"] < 0) or np.any(out["confirm_pair"] >= m.nodes):
            raise RunFileError(f"{p}: /map/confirm_* disagree in shape or name hosts that are not mapped")
        if np.any(out["confirm_size_index"] < 0) or np.any(out["confirm_size_index"] >= len(m.size_bytes)):
            raise RunFileError(f"{p}: /map/confirm_size_index names a size the map does not have")
        if np.any(np.isinf(t) | (np.isfinite(t) & ((t <= 0) | (t > MAX_TRIAL_S)))):
            raise RunFileError(f"{p}: /map/confirm_trial_s holds a non-positive, infinite or impossible time")
    except (RunFileError, OSError, KeyError, ValueError, TypeError) as exc:
        m.problems.append(f"{exc}; the suspects measured again are not used: no finding is confirmed")
        return None
    out["confirm_size_bytes"] = m.size_bytes[out["confirm_size_index"]]  # before the sizes are sorted
    out.update(_read_confirm_waits(g, p, m, out["confirm_trial_s"].shape))
    return out


CONFIRM_WAITS = (("confirm_runq_wait_s", "f", 3), ("confirm_trial_elapsed_s", "f", 2))


def _read_confirm_waits(g, p: Path, m: MapFile, shape: tuple[int, int]) -> dict[str, np.ndarray]:
    """/map/confirm_runq_wait_s and confirm_trial_elapsed_s (the re-measured trials' run-queue waits
    and loop times, npmpi/persize/cputime.py), checked; {} when absent (older maps, or not Linux) or
    damaged (said among the problems: the findings are then judged without them)."""
    from npmpi.runfile.datasets import read_whole

    if not all(n in g for n, _, _ in CONFIRM_WAITS):
        return {}
    try:
        out = {
            n: np.asarray(read_whole(_dataset(g, n, k, d, p), p, f"/map/{n}")) for n, k, d in CONFIRM_WAITS
        }
        if out["confirm_runq_wait_s"].shape != (*shape, 2) or out["confirm_trial_elapsed_s"].shape != shape:
            raise RunFileError(f"{p}: /map/confirm_runq_wait_s or confirm_trial_elapsed_s disagree in shape")
        for name, x in out.items():
            if np.any(np.isinf(x) | (np.isfinite(x) & ((x < 0) | (x > MAX_TRIAL_S)))):
                raise RunFileError(f"{p}: /map/{name} holds a negative, infinite or impossible time")
    except (RunFileError, OSError, KeyError, ValueError, TypeError) as exc:
        m.problems.append(f"{exc}; the run-queue waits are not used")
        return {}
    return out


def _sort_sizes(m: MapFile) -> None:
    """Sizes in increasing order (the smallest gives the latency), every per-size array with them."""
    order = np.argsort(m.size_bytes, kind="stable")
    if np.all(order == np.arange(len(order))):
        return
    for name in (
        "size_bytes",
        "trial_s",
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


def _status_notices(m: MapFile) -> None:
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
    measured = np.isfinite(m.trial_s).any(axis=3) | np.isfinite(m.trial_s).any(axis=3).transpose(0, 2, 1)
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
