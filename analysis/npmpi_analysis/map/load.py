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
from npmpi.runfile.maprows import is_rows_layout
from npmpi.runfile.opening import attr_value
from npmpi_analysis.map.checks import (
    MAX_MAP_TRIALS,
    MAX_MAP_VALUES,
    MAX_TRIAL_S,
    check_shapes,
    check_values,
    keep_counted_rounds,
    sort_sizes,
    status_notices,
)
from npmpi_analysis.map.conditions import read_map_conditions
from npmpi_analysis.map.trials import dense_summaries

MAP_GROUP = "map"

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

CONFIRM = (
    ("confirm_pair", "iu", 2),
    ("confirm_size_index", "iu", 1),
    ("confirm_role", "iu", 1),
    ("confirm_trial_s", "f", 2),
    ("confirm_window_start_unix_s", "f", 1),
    ("confirm_window_end_unix_s", "f", 1),
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
    # [S, N, N, T] one-way seconds per iteration of each trial, NaN unmeasured; None for a rows map
    # measured one way per pair, whose trials are summed up as they are read (trial_stats)
    trial_s: np.ndarray | None
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
    trial_stats: dict[str, np.ndarray] | None = None  # map/trials.FILLS' names -> [S, N, N] each pair's
    trials: int = 0  # T, the trials of each pair and size
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
    from npmpi_analysis.map.rows import read_cap, unread_of

    unread = tuple(n for n in (*SAMPLE_FIELDS, *EXTRA_SAMPLE_FIELDS) if n not in (*sample_fields, "energy_j"))
    reader = lambda f, p: _read(f, p, sample_fields)  # noqa: E731
    return read_npmpi_file(path, reader, lambda f: (*unread, *unread_of(f)), read_cap())


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
        trial_s=np.asarray(data["trial_s"], dtype=np.float64) if "trial_s" in data else None,
        trial_stats=data.get("trial_stats"),
        trials=int(data["trials"] if "trials" in data else data["trial_s"].shape[3]),
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
    check_values(m, p)
    if m.trial_stats is None:
        m.trial_stats = dense_summaries(m.trial_s, m.iterations)
    if rows is not None:
        from npmpi_analysis.map.rows import check_unread

        m.problems += check_unread(g, p, rows, len(m.size_bytes), m.trials)
    read_map_conditions(g, p, m)
    del m.trial_stats["sum_s"]  # the trials' total time bounds the conditions only (268 MB at 4,096 nodes)
    keep_counted_rounds(m)
    m.confirm = _read_confirm(g, p, m)
    sort_sizes(m)
    status_notices(m)
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
    check_shapes({k: v.shape for k, v in ds.items() if v is not None}, p)
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
    if trial is not None and getattr(trial, "ndim", 0) == 3 and t < 1:
        raise RunFileError(f"{p}: /map/trial_s has {t} trials per pair: expected 1 to {MAX_MAP_TRIALS}")
    r = small["window_start_unix_s"].shape[1]
    check_shapes({k: v.shape for k, v in small.items()} | {"trial_s": (s, n, n, max(t, 1))}, p)
    directed = str(map_attrs.get("directions", "")) == "both"
    check_memory(p, n, s, t, all(c in g for c in COND_NAMES), directed, "power" in g.file)
    rows = read_index(g, p, n, r, map_attrs)
    data = {k: read_declared(v, p, f"/map/{k}") for k, v in small.items()}
    data.update(dense_datasets(g, p, rows, np.asarray(data["size_bytes"], dtype=np.int64), t))
    data["trials"] = t
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
            m.trials,
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


def is_directed(map_attrs: dict) -> bool:
    """Whether each direction of a pair was measured apart (/map attribute directions = both)."""
    return str(map_attrs.get("directions", "one")) == "both"


def entry_hosts(m: MapFile) -> list[str]:
    """The node (host name) of each mapped entry: from /layout's host of its rank, else its name in
    /map/hosts without a `:rank` suffix (--per-rank names entries host:rank)."""
    layout = list(m.layout.get("host", []))
    layout = [h.decode("utf-8", "replace") if isinstance(h, bytes) else str(h) for h in layout]
    if layout and all(0 <= int(r) < len(layout) for r in m.ranks):
        return [layout[int(r)] for r in m.ranks]
    return [h.rsplit(":", 1)[0] if h.rsplit(":", 1)[-1].isdigit() else h for h in m.hosts]
