"""The run file's reader: load_run checks and loads a run file without MPI (format: npmpi/runfile/format.py).

The reader refuses other formats and newer major versions with a clear message, and damaged or
hostile files with one line, before allocating what they claim.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from npmpi.core.errors import RunFileError
from npmpi.runfile.conditions import Conditions, read_conditions
from npmpi.runfile.cputimes import CpuTimes, read_cpu
from npmpi.runfile.datasets import member, read_rows
from npmpi.runfile.format import (
    BASELINE_COLUMNS,
    EXTRA_SAMPLE_FIELDS,
    FORMAT_NAME,
    FORMAT_VERSION,
    LAYOUT_BASELINE_CPU,
    MAX_ROWS,
    MAX_TRIAL_S,
    MAX_TRIALS,
    PINGPONG_DATASETS,
    SAMPLE_FIELDS,
    STATUS_FAILED,
    STATUS_INTERRUPTED,
    STATUS_RUNNING,
)
from npmpi.runfile.opening import attr_value, check_text, read_npmpi_file
from npmpi.runfile.powerreader import PowerNode, read_power


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
    power_attrs, power, fabric = read_power(f, p, notices, sample_fields)
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


def read_layout_part(f, p: Path) -> dict[str, np.ndarray]:
    """The /layout group of an open npmpi file, {} without one; RunFileError when it is damaged."""
    if member(f, "layout", p, "/layout", dataset=False, required=False) is None:
        return {}
    return _read_layout(f, p)


def _read_layout(f, p: Path) -> dict[str, np.ndarray]:
    g = member(f, "layout", p, "/layout", dataset=False)
    out = {}
    for key in g:
        ds = member(g, key, p, f"/layout/{key}", dataset=True)
        if key == LAYOUT_BASELINE_CPU and _baseline_cpu_shape_ok(ds):
            # (ranks, baselines) since format 1.4
            out[key] = np.asarray(read_rows(ds, ds.shape[0], p, f"/layout/{key}"), dtype=np.float64)
            continue
        if len(ds.shape) != 1 or ds.shape[0] > MAX_ROWS:
            raise RunFileError(f"{p}: /layout/{key} has an unexpected shape")
        data = read_rows(ds, ds.shape[0], p, f"/layout/{key}")
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
    ds = member(g, name, p, f"/pingpong/{name}", dataset=True, required=False)
    if ds is None:
        return None
    if len(ds.shape) != 3 or ds.dtype.kind != "f" or ds.shape[0] < n or ds.shape[2] != trials:
        raise RunFileError(f"{p}: /pingpong/{name} has an unexpected shape {ds.shape} or type")
    return np.asarray(read_rows(ds, n, p, f"/pingpong/{name}"), dtype=np.float64)


def _read_pingpong(f, p: Path, attrs: dict, notices: list[str]) -> PingPong:
    g = member(f, "pingpong", p, "/pingpong", dataset=False)
    lengths, arrays = [], {}
    trials = None
    for name, _dtype, per_trial in PINGPONG_DATASETS:
        ds = member(g, name, p, f"/pingpong/{name}", dataset=True)
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
            name: np.asarray(read_rows(ds, n, p, f"/pingpong/{name}")).astype(dtype, copy=False)
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
    pp.cpu = read_cpu(g, p, n, notices, read_rows)
    pp.conditions = read_conditions(g, p, n, notices, read_rows)
    return pp


def _row_ints(g, name: str, p: Path, n: int) -> np.ndarray | None:
    """An optional per-row integer dataset of /pingpong, its first n rows (None: absent)."""
    where = f"/pingpong/{name}"
    ds = member(g, name, p, where, dataset=True, required=False)
    if ds is None:
        return None
    if len(ds.shape) != 1 or ds.dtype.kind not in "iu" or ds.shape[0] < n:
        raise RunFileError(f"{p}: {where} has an unexpected shape {ds.shape} or type")
    return np.asarray(read_rows(ds, n, p, where), dtype=np.int64)


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
