"""The run file's reader: load_run checks and loads a run file without MPI (format: npmpi/runfile/format.py).

The reader refuses other formats and newer major versions with a clear message, and damaged or
hostile files with one line, before allocating what they claim.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from npmpi.core.errors import RunFileError
from npmpi.runfile import faults as faultlog
from npmpi.runfile.conditions import Conditions, read_conditions
from npmpi.runfile.cputimes import CpuTimes, read_cpu
from npmpi.runfile.format import (
    BASELINE_COLUMNS,
    COUNTER_KINDS,
    ENERGY_OF_COUNTERS,
    EXTRA_SAMPLE_FIELDS,
    FABRIC_GROUP,
    FORMAT_NAME,
    FORMAT_VERSION,
    LAYOUT_BASELINE_CPU,
    MAX_COMPRESSION_RATIO,
    MAX_ROWS,
    MAX_SAMPLES,
    MAX_TRIAL_S,
    MAX_TRIALS,
    OPTIONAL_SAMPLE_FIELDS,
    PINGPONG_DATASETS,
    SAMPLE_FIELDS,
    STATUS_FAILED,
    STATUS_INTERRUPTED,
    STATUS_RUNNING,
)
from npmpi.runfile.opening import attr_value, check_text, read_checked, read_npmpi_file


@dataclass
class PingPong:
    """The ping-pong results: one row per completed message size."""

    size_bytes: np.ndarray
    iterations: np.ndarray
    warmup_iterations: np.ndarray
    trial_s: np.ndarray  # [n, trials], total seconds of each trial (NaN where a trial did not run)
    trial_start_unix_s: np.ndarray
    trial_end_unix_s: np.ndarray
    data_verified: np.ndarray
    pair_trial_s: np.ndarray | None = None  # [n, pairs, trials] with --pairs > 1 (format 1.2), else None
    buffer_huge_page_bytes: np.ndarray | None = None  # [n] (format 1.3; -1 unknown), else None
    cpu: CpuTimes | None = None  # each measuring rank's CPU time per size (1.7's cpu_*_s), else None
    member_trial_s: np.ndarray | None = None  # [n, members, trials]: a group kind's (format 1.8), else None
    coll_series: np.ndarray | None = None  # [n]: a coll file's series (root coll_series_json)
    conditions: Conditions | None = None  # each measuring rank's frequency, throttling, NIC bytes per size

    def __len__(self) -> int:
        return len(self.size_bytes)

    @property
    def best_trial_s(self) -> np.ndarray:
        return np.nanmin(self.trial_s, axis=1) if len(self) else np.zeros(0)

    @property
    def one_way_s(self) -> np.ndarray:
        """NetPIPE's time: the best trial's time per round trip, halved."""
        return self.best_trial_s / (2.0 * self.iterations) if len(self) else np.zeros(0)


@dataclass
class PowerChannel:
    """One meter channel of one node: its attributes, samples (node-local wall clock) and faults."""

    attrs: dict[str, Any]
    time_unix_s: np.ndarray | None  # None: not read (load_run's sample_fields)
    power_w: np.ndarray | None
    energy_j: np.ndarray | None
    volts: np.ndarray | None
    amps: np.ndarray | None
    fault_time_unix_s: np.ndarray
    fault_message: list[str]
    # per fault: last occurrence (a gap's end), how many times, kind (npmpi.runfile.faults); see load_run
    fault_extra: dict[str, np.ndarray] = field(default_factory=dict)
    # format 1.6's per-sample datasets (runformat.OPTIONAL_SAMPLE_FIELDS) asked for and present, as long
    # as the samples
    extra: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return str(self.attrs.get("label", ""))


@dataclass
class PowerNode:
    """One node's power: host, clock offsets against rank 0 and its channels."""

    attrs: dict[str, Any]
    channels: list[PowerChannel]

    @property
    def host(self) -> str:
        return str(self.attrs.get("host", ""))


@dataclass
class Run:
    """A run file's contents in plain Python and numpy."""

    path: Path
    attrs: dict[str, Any]
    layout: dict[str, np.ndarray]
    pingpong: PingPong
    notices: list[str] = field(default_factory=list)
    power_attrs: dict[str, Any] = field(default_factory=dict)
    power: list[PowerNode] = field(default_factory=list)
    fabric: PowerNode | None = None  # /power/fabric (--fabric-meter): devices of no node, else None

    @property
    def status(self) -> str:
        return str(self.attrs.get("status", ""))

    def option(self, name: str, default: Any = None) -> Any:
        return json.loads(self.attrs.get("options_json", "{}")).get(name, default)


def _parse_version(text: str, p: Path) -> tuple[int, int]:
    try:
        major, minor = str(text).split(".")
        return int(major), int(minor)
    except ValueError:
        raise RunFileError(f"{p}: format_version attribute {text!r} is not of the form MAJOR.MINOR") from None


def load_run(path: str | os.PathLike, sample_fields: tuple[str, ...] = SAMPLE_FIELDS) -> Run:
    """Read a run file into plain arrays; RunFileError says what is wrong and where.

    `sample_fields`: the per-sample datasets of the power channels to read (every one's shape is
    still checked); the others are None. The analysis reads ("time_unix_s", "power_w") only."""
    # the sample fields not asked for are never read (energy_j only of counters: counted)
    unread = tuple(n for n in (*SAMPLE_FIELDS, *EXTRA_SAMPLE_FIELDS) if n not in (*sample_fields, "energy_j"))
    return read_npmpi_file(path, lambda f, p: _read_run(f, p, sample_fields), unread)


def _read_run(f, p: Path, sample_fields: tuple[str, ...] = SAMPLE_FIELDS) -> Run:
    attrs = {k: attr_value(f.attrs[k]) for k in f.attrs}
    if attrs.get("format") != FORMAT_NAME:
        raise RunFileError(
            f"{p}: not an npmpi run file (format attribute is {attrs.get('format')!r}, "
            f"expected {FORMAT_NAME!r})"
        )
    major, minor = _parse_version(attrs.get("format_version", ""), p)
    if major > FORMAT_VERSION[0]:
        raise RunFileError(
            f"{p}: written by a newer npmpi (format {major}.{minor}; this reader knows "
            f"{FORMAT_VERSION[0]}.x): upgrade npmpi to read it"
        )
    from npmpi.runfile.attrseal import check_seals
    from npmpi.runfile.checks import check_root_attrs

    check_root_attrs(attrs, p)
    notices: list[str] = []
    status = attrs.get("status")
    if status == STATUS_RUNNING:
        notices.append(
            "the run did not finish (status 'running': the writer was killed or a rank aborted); "
            "every size completed before that is analysed"
        )
    elif status in (STATUS_INTERRUPTED, STATUS_FAILED):
        msg = attrs.get("status_message") or ""
        notices.append(f"the run is {status}{': ' + msg if msg else ''}; completed sizes are analysed")
    layout = _read_layout(f, p)
    pingpong = _read_pingpong(f, p, attrs, notices)
    power_attrs, power, fabric = _read_power(f, p, notices, sample_fields)
    # a changed attribute (npmpi/runfile/attrseal.py), once the structure has been read whole: its
    # damage is named first, in its own words
    check_seals(f, p, notices)
    return Run(
        path=p,
        attrs=attrs,
        layout=layout,
        pingpong=pingpong,
        notices=notices,
        power_attrs=power_attrs,
        power=power,
        fabric=fabric,
    )


def _member(group, name: str, p: Path, where: str, dataset: bool, required: bool = True):
    """group[name] if it is a dataset (or group) stored in this file; RunFileError otherwise.

    Links are not followed: a soft link leads elsewhere in the file, an external one to another file.
    """
    import h5py

    what = "dataset" if dataset else "group"
    link = group.get(name, getlink=True)
    if link is None:
        if required:
            raise RunFileError(f"{p}: {what} {where} is missing")
        return None
    if not isinstance(link, h5py.HardLink):
        raise RunFileError(f"{p}: {where} is a {type(link).__name__}, not a {what} stored in this file")
    obj = group[name]
    if not isinstance(obj, h5py.Dataset if dataset else h5py.Group):
        raise RunFileError(f"{p}: {where} is not a {what}")
    return obj


def _read_rows(ds, n: int, p: Path, where: str) -> np.ndarray:
    """The first n rows of a dataset, after checking that the file holds them."""
    _check_stored(ds, n, p, where)
    return read_checked(ds, np.s_[:n], p, where)


def read_whole(ds, p: Path, where: str) -> np.ndarray:
    """All of a dataset of one or more dimensions, after checking that the file holds it (a damaged
    or forged file may claim any shape): RunFileError if not."""
    return _read_rows(ds, ds.shape[0], p, where)


def _check_stored(ds, n: int, p: Path, where: str) -> None:
    """Refuse a dataset whose file does not hold its first n rows (a file may claim any shape:
    reading unallocated data would fill memory with nothing). Costs no read of the data."""
    plist = ds.id.get_create_plist()
    if ds.is_virtual or plist.get_external_count() > 0:
        raise RunFileError(f"{p}: {where} keeps its data in another file; a run file keeps its own")
    need = n * ds.dtype.itemsize * math.prod(ds.shape[1:])
    stored = ds.id.get_storage_size()
    allowed = stored * (MAX_COMPRESSION_RATIO if plist.get_nfilters() else 1)
    if need > allowed:
        raise RunFileError(
            f"{p}: {where} claims shape {ds.shape} but the file holds {stored} bytes of it, "
            f"not the {need} bytes of its first {n} rows; the file is damaged or forged"
        )


def _is_counter(attrs) -> bool:
    """Whether a channel's energy_j is a counter to take a window's energy from."""
    if "energy_from_counter" in attrs:
        return bool(attrs["energy_from_counter"])
    return attr_value(attrs.get("kind", "")) in COUNTER_KINDS


def _numbered(group, prefix: str) -> list[str]:
    names = [k for k in group if k.startswith(prefix) and k[len(prefix) :].isdigit()]
    return sorted(names, key=lambda k: int(k[len(prefix) :]))


def _read_power(
    f, p: Path, notices: list[str], sample_fields: tuple[str, ...] = SAMPLE_FIELDS
) -> tuple[dict[str, Any], list[PowerNode], PowerNode | None]:
    """(/power attributes, the nodes' groups, /power/fabric or None); nothing without /power."""
    g = _member(f, "power", p, "/power", dataset=False, required=False)
    if g is None:
        return {}, [], None
    power_attrs = {k: attr_value(g.attrs[k]) for k in g.attrs}
    nodes = [
        _read_group(_member(g, name, p, f"/power/{name}", dataset=False), name, p, notices, sample_fields)
        for name in _numbered(g, "node")
    ]
    fg = _member(g, FABRIC_GROUP, p, f"/power/{FABRIC_GROUP}", dataset=False, required=False)
    fabric = _read_group(fg, FABRIC_GROUP, p, notices, sample_fields) if fg is not None else None
    return power_attrs, nodes, fabric


def _read_group(ng, group_name: str, p: Path, notices: list[str], sample_fields) -> PowerNode:
    """One power group (a node's, or the fabric's): its attributes and channels."""
    channels = [
        _read_channel(ng, f"/power/{group_name}/{ch_name}", ch_name, p, notices, sample_fields)
        for ch_name in _numbered(ng, "channel")
    ]
    return PowerNode({k: attr_value(ng.attrs[k]) for k in ng.attrs}, channels)


def _read_channel(ng, where: str, ch_name: str, p: Path, notices: list[str], sample_fields) -> PowerChannel:
    """One channel group: attributes, the per-sample datasets asked for (all checked) and faults."""
    import h5py

    cg = _member(ng, ch_name, p, where, dataset=False)
    lengths, arrays = [], {}
    for name in SAMPLE_FIELDS:
        ds = _member(cg, name, p, f"{where}/{name}", dataset=True)
        if len(ds.shape) != 1 or ds.dtype.kind not in "iuf" or ds.shape[0] > MAX_SAMPLES:
            raise RunFileError(f"{p}: {where}/{name} has an unexpected shape or type")
        lengths.append(ds.shape[0])
        arrays[name] = ds
    n = min(lengths)
    if n < max(lengths):
        held = ", ".join(f"{name} {k}" for name, k in zip(SAMPLE_FIELDS, lengths, strict=True) if k != n)
        short = ", ".join(name for name, k in zip(SAMPLE_FIELDS, lengths, strict=True) if k == n)
        notices.append(
            f"{where}: {short} {'holds' if ',' not in short else 'hold'} {n} sample(s), {held}: "
            f"the {max(lengths) - n} sample(s) past {n} (partly written, or lost) are ignored"
        )
    fg = _member(cg, "faults", p, f"{where}/faults", dataset=False, required=False)
    ft_ds = fm_ds = None
    if fg is not None:
        ft_ds = _member(fg, "time_unix_s", p, f"{where}/faults/time_unix_s", dataset=True)
        fm_ds = _member(fg, "message", p, f"{where}/faults/message", dataset=True)
        if (
            len(ft_ds.shape) != 1
            or len(fm_ds.shape) != 1
            or ft_ds.dtype.kind not in "iuf"
            or fm_ds.dtype.kind not in "OSU"
        ):
            raise RunFileError(f"{p}: {where}/faults has an unexpected shape or type")
    try:
        data = {}
        for name, ds in arrays.items():
            # every field is checked, so a damaged file is refused whatever a reader uses
            _check_stored(ds, n, p, f"{where}/{name}")
            wanted = name in sample_fields or (
                name == "energy_j" and ENERGY_OF_COUNTERS in sample_fields and _is_counter(cg.attrs)
            )
            data[name] = (
                np.asarray(read_checked(ds, np.s_[:n], p, f"{where}/{name}"), dtype=np.float64)
                if wanted
                else None
            )
        if fg is not None:
            nf = min(ft_ds.shape[0], fm_ds.shape[0])
            ft = np.asarray(_read_rows(ft_ds, nf, p, f"{where}/faults/time_unix_s"), dtype=np.float64)
            fm = [str(attr_value(m)) for m in _read_rows(fm_ds, nf, p, f"{where}/faults/message")]
            for name in ("last_time_unix_s", "count"):  # read by faultlog.read_extras: checked here
                if isinstance(fg.get(name), h5py.Dataset) and fg[name].shape[0] >= nf:
                    read_checked(fg[name], np.s_[:nf], p, f"{where}/faults/{name}")
        else:
            ft, fm = np.zeros(0), []
        extra = _optional_fields(cg, n, p, where, sample_fields, notices)
    except (OSError, ValueError, TypeError, KeyError) as exc:
        raise RunFileError(f"{p}: {where} cannot be read ({exc}); the file may be corrupt") from None
    return PowerChannel(
        {k: attr_value(cg.attrs[k]) for k in cg.attrs},
        fault_time_unix_s=ft,
        fault_message=fm[: len(ft)],
        fault_extra=faultlog.read_extras(fg, len(ft)),
        extra=extra,
        **data,
    )


def _optional_fields(cg, n: int, p: Path, where: str, sample_fields, notices: list[str]) -> dict:
    """The optional per-sample datasets asked for (format 1.6); one shorter than the samples or of
    another shape is left out with a notice (the samples stand without it)."""
    out = {}
    for name in OPTIONAL_SAMPLE_FIELDS:
        if name not in sample_fields or name not in cg:
            continue
        ds = cg[name]
        if not hasattr(ds, "shape") or len(ds.shape) != 1 or ds.dtype.kind not in "iuf" or ds.shape[0] < n:
            notices.append(f"{where}/{name}: not one value per sample: left out")
            continue
        _check_stored(ds, n, p, f"{where}/{name}")
        out[name] = np.asarray(ds[:n], dtype=np.float64)
    return out


def read_power_part(
    f, p: Path, notices: list[str], sample_fields: tuple[str, ...] = SAMPLE_FIELDS
) -> tuple[dict[str, Any], list[PowerNode]]:
    """The /power group of an open npmpi file (a run or a cluster map): (its attributes, its nodes),
    ({}, []) without one; RunFileError when it is damaged. A fabric group is not read here (maps
    have none; a run's is Run.fabric)."""
    attrs, nodes, _fabric = _read_power(f, p, notices, sample_fields)
    return attrs, nodes


def read_layout_part(f, p: Path) -> dict[str, np.ndarray]:
    """The /layout group of an open npmpi file, {} without one; RunFileError when it is damaged."""
    if _member(f, "layout", p, "/layout", dataset=False, required=False) is None:
        return {}
    return _read_layout(f, p)


def _read_layout(f, p: Path) -> dict[str, np.ndarray]:
    g = _member(f, "layout", p, "/layout", dataset=False)
    out = {}
    for key in g:
        ds = _member(g, key, p, f"/layout/{key}", dataset=True)
        if key == LAYOUT_BASELINE_CPU and _baseline_cpu_shape_ok(ds):
            # (ranks, baselines) since format 1.4
            out[key] = np.asarray(_read_rows(ds, ds.shape[0], p, f"/layout/{key}"), dtype=np.float64)
            continue
        if len(ds.shape) != 1 or ds.shape[0] > MAX_ROWS:
            raise RunFileError(f"{p}: /layout/{key} has an unexpected shape")
        data = _read_rows(ds, ds.shape[0], p, f"/layout/{key}")
        if data.dtype.kind in "OS":
            check_text(ds, data, p, f"/layout/{key}")
            data = np.array([attr_value(v) for v in data], dtype=object)
        out[key] = data
    return out


def _baseline_cpu_shape_ok(ds) -> bool:
    return (
        len(ds.shape) == 2
        and ds.shape[0] <= MAX_ROWS
        and ds.shape[1] == len(BASELINE_COLUMNS)
        and ds.dtype.kind == "f"
    )


def _per_trial_rows(g, name: str, p: Path, n: int, trials: int) -> np.ndarray | None:
    """An optional [n, K, trials] float dataset of /pingpong (pair_trial_s, member_trial_s), its first
    n rows; None when absent, RunFileError when its shape or type is wrong."""
    ds = _member(g, name, p, f"/pingpong/{name}", dataset=True, required=False)
    if ds is None:
        return None
    if len(ds.shape) != 3 or ds.dtype.kind != "f" or ds.shape[0] < n or ds.shape[2] != trials:
        raise RunFileError(f"{p}: /pingpong/{name} has an unexpected shape {ds.shape} or type")
    return np.asarray(_read_rows(ds, n, p, f"/pingpong/{name}"), dtype=np.float64)


def _read_pingpong(f, p: Path, attrs: dict, notices: list[str]) -> PingPong:
    g = _member(f, "pingpong", p, "/pingpong", dataset=False)
    lengths, arrays = [], {}
    trials = None
    for name, _dtype, per_trial in PINGPONG_DATASETS:
        ds = _member(g, name, p, f"/pingpong/{name}", dataset=True)
        if ds.dtype.kind not in "iufb":
            raise RunFileError(f"{p}: /pingpong/{name} is not a numeric dataset")
        want_ndim = 2 if per_trial else 1
        if len(ds.shape) != want_ndim:
            raise RunFileError(f"{p}: /pingpong/{name} has shape {ds.shape}, expected {want_ndim} dimensions")
        if ds.shape[0] > MAX_ROWS or (per_trial and not 0 < ds.shape[1] <= MAX_TRIALS):
            raise RunFileError(f"{p}: /pingpong/{name} has an implausible shape {ds.shape}")
        if per_trial:
            if trials is None:
                trials = ds.shape[1]
            elif ds.shape[1] != trials:
                raise RunFileError(f"{p}: /pingpong/{name} has {ds.shape[1]} trials, others {trials}")
        lengths.append(ds.shape[0])
        arrays[name] = ds
    n = min(lengths)
    completed = attrs.get("sizes_completed")
    if isinstance(completed, (int, np.integer)) and 0 <= completed < n:
        n = int(completed)
    if n < max(lengths):
        notices.append(f"{max(lengths) - n} partially written row(s) at the end were ignored")
    try:
        data = {
            name: np.asarray(_read_rows(ds, n, p, f"/pingpong/{name}")).astype(dtype, copy=False)
            for (name, dtype, _), ds in zip(PINGPONG_DATASETS, arrays.values(), strict=True)
        }
    except (OSError, ValueError, TypeError) as exc:
        raise RunFileError(f"{p}: /pingpong cannot be read ({exc}); the file may be corrupt") from None
    pp = PingPong(**data)
    pp.pair_trial_s = _per_trial_rows(g, "pair_trial_s", p, n, pp.trial_s.shape[1])
    pp.member_trial_s = _per_trial_rows(g, "member_trial_s", p, n, pp.trial_s.shape[1])
    pp.buffer_huge_page_bytes = _row_ints(g, "buffer_huge_page_bytes", p, n)
    pp.coll_series = _row_ints(g, "coll_series", p, n)
    _check_values(p, pp)
    pp.cpu = read_cpu(g, p, n, notices, _read_rows)
    pp.conditions = read_conditions(g, p, n, notices, _read_rows)
    return pp


def _row_ints(g, name: str, p: Path, n: int) -> np.ndarray | None:
    """An optional per-row integer dataset of /pingpong, its first n rows (None: absent)."""
    where = f"/pingpong/{name}"
    ds = _member(g, name, p, where, dataset=True, required=False)
    if ds is None:
        return None
    if len(ds.shape) != 1 or ds.dtype.kind not in "iu" or ds.shape[0] < n:
        raise RunFileError(f"{p}: {where} has an unexpected shape {ds.shape} or type")
    return np.asarray(_read_rows(ds, n, p, where), dtype=np.int64)


def _check_values(p: Path, pp: PingPong) -> None:
    if len(pp) == 0:
        return
    # 0 B: a run's first size with -l 0, or a group kind's step that moves no data (a barrier: in a
    # coll file of several series, any series' only size)
    lone_zero = len(pp) == 1 and pp.member_trial_s is None
    if pp.coll_series is not None:
        if np.any(pp.size_bytes < 0):
            raise RunFileError(f"{p}: /pingpong/size_bytes holds negative sizes")
    elif np.any(pp.size_bytes[1:] < 1) or pp.size_bytes[0] < (1 if lone_zero else 0):
        raise RunFileError(f"{p}: /pingpong/size_bytes holds sizes below 1 byte (0 B only first, with -l 0)")
    if np.any(pp.iterations < 1):
        raise RunFileError(f"{p}: /pingpong/iterations holds values below 1")
    t = pp.trial_s
    bad = np.isfinite(t) & ((t <= 0) | (t > MAX_TRIAL_S)) | np.isinf(t)
    if np.any(bad):
        row = int(np.argwhere(bad)[0][0])
        raise RunFileError(
            f"{p}: /pingpong/trial_s has a non-positive, infinite or impossible (over {MAX_TRIAL_S:.0e} s) "
            f"time at row {row} (size {int(pp.size_bytes[row])} B)"
        )
    if np.any(np.all(np.isnan(t), axis=1)):
        row = int(np.argwhere(np.all(np.isnan(t), axis=1))[0][0])
        raise RunFileError(f"{p}: /pingpong/trial_s row {row} has no finite trial time")
