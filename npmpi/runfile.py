"""The run file: one HDF5 file per run, written by rank 0, read without MPI.

Schema version 1 is documented in docs/file-format.md. The writer appends one row per
message size and flushes, so a run stopped at any moment leaves a valid file holding every
completed size; `sizes_completed` (a root attribute written after each row) says how many rows
are whole. The reader refuses other formats and newer major versions with a clear message.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from npmpi import faultlog
from npmpi.errors import RunFileError, RunFileWriteError

FORMAT_NAME = "npmpi-run"
# 1.1 added the /power group; 1.2 the mode attributes and pair_trial_s; 1.3 the buffer and thread
# level attributes, /layout/thread_level and /pingpong/buffer_huge_page_bytes; 1.4 the baseline after
# the sweep (/power baseline_after_* attributes), /layout/baseline_cpu_s, the nodes' baseline CPU
# utilisation, the channels' reading attributes (averaging, resolutions, energy_from_counter), the
# faults' last_time_unix_s, count and kind, and a Watts Up?'s time_spaced_unix_s
FORMAT_VERSION = (1, 4)
# /layout datasets holding one row per rank and one column per baseline (before, after)
LAYOUT_BASELINE_CPU = "baseline_cpu_s"
BASELINE_COLUMNS = ("before", "after")

STATUS_RUNNING = "running"
STATUS_COMPLETE = "complete"
STATUS_INTERRUPTED = "interrupted"
STATUS_FAILED = "failed"
STATUSES = (STATUS_RUNNING, STATUS_COMPLETE, STATUS_INTERRUPTED, STATUS_FAILED)

# (name, dtype, per-trial?) of the pingpong group's row-appended datasets
PINGPONG_DATASETS = (
    ("size_bytes", np.int64, False),
    ("iterations", np.int64, False),
    ("warmup_iterations", np.int64, False),
    ("trial_s", np.float64, True),
    ("trial_start_unix_s", np.float64, True),
    ("trial_end_unix_s", np.float64, True),
    ("data_verified", np.bool_, False),
)

# per-sample datasets of a power channel (NaN where the meter does not give the quantity)
SAMPLE_FIELDS = ("time_unix_s", "power_w", "energy_j", "volts", "amps")
# in load_run's sample_fields: read energy_j only of channels whose counter gives a window's energy
# (attribute energy_from_counter; before format 1.4, the rapl and nvml kinds)
ENERGY_OF_COUNTERS = "energy_j_of_counters"
COUNTER_KINDS = ("rapl", "nvml")
# per-sample datasets only channels that name them in their `extra_sample_fields` attribute have
EXTRA_SAMPLE_FIELDS = ("time_spaced_unix_s",)

# A file claiming more rows or trials than this is refused before anything is allocated.
MAX_ROWS = 10_000_000
MAX_TRIALS = 100_000
MAX_SAMPLES = 2_000_000_000
MAX_TRIAL_S = 1e9  # 30 years: a longer trial time is damage, and would overflow the figures
# Uncompressed data must be stored in the file; compressed data (after h5repack) at most this much larger.
MAX_COMPRESSION_RATIO = 1000


@dataclass
class SizeResult:
    """The measurements of one message size, as the transmitter recorded them."""

    size_bytes: int
    iterations: int
    warmup_iterations: int
    trial_s: list[float]
    trial_start_unix_s: list[float]
    trial_end_unix_s: list[float]
    data_verified: bool = True
    pair_trial_s: list[list[float]] | None = None  # [pairs][trials] with --pairs > 1
    buffer_huge_page_bytes: int = -1  # the transmitter's buffers on transparent huge pages; -1 unknown


def _to_attr(value: Any) -> Any:
    if isinstance(value, (dict, list, tuple)) and not (
        isinstance(value, (list, tuple)) and value and all(isinstance(v, str) for v in value)
    ):
        return json.dumps(value)
    if value is None:
        return ""
    return value


class RunWriter:
    """Creates the run file and appends one row per completed message size (rank 0 only)."""

    def __init__(
        self,
        path: str | os.PathLike,
        attrs: dict[str, Any],
        layout_rows: dict[str, list],
        trials: int,
        overwrite: bool = False,
        pairs: int = 1,
        reservation=None,
    ) -> None:
        import h5py

        from npmpi.outpath import check_temporary, publish, release, reserve_output

        self.path = Path(path)
        self.trials = trials
        self.pairs = pairs
        self._fault_rows: dict[tuple[int, int], dict[int, int]] = {}  # (node, channel): fault id -> row
        self._error: RunFileWriteError | None = None  # the first write error: every later write raises it
        self._handles: dict[str, Any] = {}  # open groups and datasets, closed with the file
        self._unflushed: dict[str, tuple] = {}  # datasets grown since the last flush: their shape then
        self._pending_bytes = 0  # what the next flush may write (data and new chunks), for the space check
        # Built in a temporary file reserved (created and locked) at start-up, named once its structure
        # is on disk: a writer killed while HDF5 creates the file (a few ms) leaves no run file that
        # cannot be opened (npmpi/outpath.py)
        self._res = reservation if reservation is not None else reserve_output(self.path, overwrite)
        try:
            check_temporary(self._res)
            self._file = h5py.File(self._res.fd_path, "w", locking=False)
        except BaseException:
            release(self._res)
            raise
        try:
            with self._checked("creating it"):
                self._create(attrs, layout_rows, trials)
            publish(self._res)
        except BaseException:
            self._close_quietly()
            release(self._res)
            raise

    def _create(self, attrs: dict[str, Any], layout_rows: dict[str, list], trials: int) -> None:
        import h5py

        f = self._file
        f.attrs["format"] = FORMAT_NAME
        f.attrs["format_version"] = f"{FORMAT_VERSION[0]}.{FORMAT_VERSION[1]}"
        for key, value in attrs.items():
            f.attrs[key] = _to_attr(value)
        f.attrs["status"] = STATUS_RUNNING
        f.attrs["status_message"] = ""
        f.attrs["sizes_completed"] = 0
        lay = f.create_group("layout")
        str_dt = h5py.string_dtype()
        for key, values in layout_rows.items():
            if values and isinstance(values[0], str):
                lay.create_dataset(key, data=np.array(values, dtype=object), dtype=str_dt)
            else:
                lay.create_dataset(key, data=np.asarray(values))
        pp = f.create_group("pingpong")
        pp.attrs["trials"] = trials
        for name, dtype, per_trial in PINGPONG_DATASETS:
            shape = (0, trials) if per_trial else (0,)
            maxshape = (None, trials) if per_trial else (None,)
            chunks = (64, trials) if per_trial else (256,)
            pp.create_dataset(name, shape=shape, maxshape=maxshape, dtype=dtype, chunks=chunks)
        pp.create_dataset(
            "buffer_huge_page_bytes", shape=(0,), maxshape=(None,), dtype=np.int64, chunks=(256,)
        )
        pairs = self.pairs
        if pairs > 1:
            pp.create_dataset(
                "pair_trial_s",
                shape=(0, pairs, trials),
                maxshape=(None, pairs, trials),
                dtype=np.float64,
                chunks=(16, pairs, trials),
            )
        self._rows = 0
        self._flush()

    @property
    def rows(self) -> int:
        return self._rows

    # -- every write goes through _checked, every group or dataset through _h: an HDF5 error
    # (disk full, I/O error) raises RunFileWriteError where it happens, never later when h5py frees
    # an object (where it would be ignored), and every later write raises it again
    @contextlib.contextmanager
    def _checked(self, what: str):
        if self._error is not None:
            raise self._error
        try:
            yield
        except RunFileWriteError as exc:  # the space check
            self._error = exc
            raise
        except (OSError, RuntimeError) as exc:  # what h5py raises for HDF5's errors
            from npmpi.writecheck import write_error

            self._error = write_error(self.path, what, exc)
            raise self._error from None

    def _h(self, name: str):
        """The open group or dataset `name`, kept open until the file closes."""
        obj = self._handles.get(name)
        if obj is None:
            obj = self._handles[name] = self._file[name]
        return obj

    def _grow(self, name: str, count: int):
        """(dataset, its old length) after adding `count` rows to dataset `name` (see _checked)."""
        ds = self._h(name)
        n = ds.shape[0]
        self._unflushed.setdefault(name, ds.shape)
        ds.resize(n + count, axis=0)
        item = ds.dtype.itemsize if ds.dtype.kind != "O" else 1024  # a string's text is stored apart
        self._pending_bytes += item * (count * math.prod(ds.shape[1:]) + math.prod(ds.chunks or (0,)))
        return ds, n

    def _flush(self) -> None:
        """Flush, after checking that the file system has room for it (npmpi/writecheck.py)."""
        from npmpi.writecheck import check_space

        check_space(self._res.target, self._pending_bytes, len(self._unflushed))
        self._file.flush()
        self._unflushed.clear()
        self._pending_bytes = 0

    def set_attrs(self, **attrs: Any) -> None:
        with self._checked("writing root attributes"):
            for key, value in attrs.items():
                self._file.attrs[key] = _to_attr(value)
            self._flush()

    def append(self, result: SizeResult) -> None:
        """Append one size's row to every dataset, then flush."""
        with self._checked(f"appending the row of {result.size_bytes} B"):
            self._append(result)
            self._flush()
        self._rows += 1

    def _append(self, result: SizeResult) -> None:
        n = self._rows
        for name, _dtype, per_trial in PINGPONG_DATASETS:
            ds, _ = self._grow(f"pingpong/{name}", 1)
            value = getattr(result, name)
            if per_trial:
                row = np.full(self.trials, np.nan)
                row[: len(value)] = value
                ds[n, :] = row
            else:
                ds[n] = value
        ds, _ = self._grow("pingpong/buffer_huge_page_bytes", 1)
        ds[n] = result.buffer_huge_page_bytes
        if self.pairs > 1:
            ds, _ = self._grow("pingpong/pair_trial_s", 1)
            block = np.full((self.pairs, self.trials), np.nan)
            for i, times in enumerate(result.pair_trial_s or []):
                block[i, : len(times)] = times
            ds[n] = block
        self._file.attrs["sizes_completed"] = n + 1

    # -- power (schema 1.1): /power/node{i}/channel{j}
    def create_power(
        self, attrs: dict[str, Any], nodes: list[dict[str, Any]], channels: list[list[dict[str, Any]]]
    ) -> None:
        """Create the power groups: one per node (attrs), one per channel of that node (attrs)."""
        with self._checked("creating the power groups"):
            self._create_power(attrs, nodes, channels)
            self._flush()

    def _create_power(self, attrs, nodes, channels) -> None:
        g = self._file.require_group("power")
        for key, value in attrs.items():
            g.attrs[key] = _to_attr(value)
        for i, (node_attrs, node_channels) in enumerate(zip(nodes, channels, strict=True)):
            ng = g.create_group(f"node{i}")
            for key, value in node_attrs.items():
                ng.attrs[key] = _to_attr(value)
            for j, ch_attrs in enumerate(node_channels):
                cg = ng.create_group(f"channel{j}")
                for key, value in ch_attrs.items():
                    cg.attrs[key] = _to_attr(value)
                extra = [n for n in EXTRA_SAMPLE_FIELDS if n in (ch_attrs.get("extra_sample_fields") or ())]
                for name in (*SAMPLE_FIELDS, *extra):
                    cg.create_dataset(name, shape=(0,), maxshape=(None,), dtype=np.float64, chunks=(4096,))
                faultlog.create_datasets(cg.create_group("faults"))

    def append_samples(
        self,
        node: int,
        channel: int,
        samples: dict[str, np.ndarray],
        faults: list | None = None,
    ) -> None:
        """Append a batch of samples (arrays named as SAMPLE_FIELDS) and faults (FaultRecords: repeats
        update their row); no flush.

        A write error is kept, not raised: the flush that follows every batch raises it (so that
        the caller first receives every node's batch)."""
        with contextlib.suppress(RunFileWriteError), self._checked(f"appending samples of node {node}"):
            self._append_samples(node, channel, samples, faults)

    def _append_samples(self, node: int, channel: int, samples: dict[str, np.ndarray], faults) -> None:
        where = f"power/node{node}/channel{channel}"
        cg = self._h(where)
        count = len(samples["time_unix_s"])
        if count:
            for name in (*SAMPLE_FIELDS, *EXTRA_SAMPLE_FIELDS):
                if name in samples and (name in SAMPLE_FIELDS or name in cg):
                    ds, n = self._grow(f"{where}/{name}", count)
                    ds[n:] = samples[name]
            cg.attrs["samples_completed"] = n + count
        if faults:
            fg = self._h(f"{where}/faults")
            for name in fg:  # held open here: faultlog's own handles then never write on closing
                key = f"{where}/faults/{name}"
                self._unflushed.setdefault(key, self._h(key).shape)
            self._pending_bytes += 4096 * len(faults)
            rows = self._fault_rows.setdefault((node, channel), {})
            faultlog.write_records(fg, faultlog.as_records(faults), rows)

    def set_baseline_cpu(self, column: int, cpu_s: list[float] | np.ndarray) -> None:
        """Store each rank's CPU seconds during baseline `column` (0 before, 1 after the sweep)."""
        name = f"layout/{LAYOUT_BASELINE_CPU}"
        with self._checked(f"writing /{name}"):
            lay = self._h("layout")
            if LAYOUT_BASELINE_CPU not in lay:
                ds = lay.create_dataset(
                    LAYOUT_BASELINE_CPU, data=np.full((len(cpu_s), len(BASELINE_COLUMNS)), np.nan)
                )
                ds.attrs["columns"] = list(BASELINE_COLUMNS)
                self._pending_bytes += ds.size * ds.dtype.itemsize
            self._h(name)[:, column] = np.asarray(cpu_s, dtype=np.float64)

    def set_group_attrs(self, group: str, **attrs: Any) -> None:
        with self._checked(f"writing attributes of /{group}"):
            g = self._h(group) if group in self._file else self._file.require_group(group)
            for key, value in attrs.items():
                g.attrs[key] = _to_attr(value)

    def flush(self) -> None:
        with self._checked("flushing"):
            self._flush()

    def finish(self, status: str, message: str = "", **attrs: Any) -> None:
        """Record the final status (and any last attributes), then close the file.

        After a write error (raised then or now) the file is closed as `failed` with that error as
        its message, as far as the file system lets it; the error is raised again."""
        if status not in STATUSES:
            raise ValueError(f"unknown status {status!r}")
        if self._res.fd < 0:
            return
        if self._error is None:
            with contextlib.suppress(RunFileWriteError):
                self.set_attrs(status=status, status_message=message, **attrs)
                with self._checked("closing it"):
                    self._file.close()  # closes every open group and dataset first
                self._handles.clear()
        if self._error is not None:
            from npmpi.writecheck import salvage

            shrink = [(self._handles[name], shape) for name, shape in self._unflushed.items()]
            self._rows = salvage(self._file, self._res, self._error, self._rows, shrink)
        self._close_quietly()
        from npmpi.outpath import release

        release(self._res)
        if self._error is not None:
            raise self._error

    def _close_quietly(self) -> None:
        with contextlib.suppress(Exception):
            self._file.close()
        self._handles.clear()

    def close(self) -> None:
        from npmpi.outpath import release

        self._close_quietly()
        release(self._res)


# ---------------------------------------------------------------- reading


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
    # per fault: last occurrence (a gap's end), how many times, kind (npmpi.faultlog); see load_run
    fault_extra: dict[str, np.ndarray] = field(default_factory=dict)

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

    @property
    def status(self) -> str:
        return str(self.attrs.get("status", ""))

    def option(self, name: str, default: Any = None) -> Any:
        return json.loads(self.attrs.get("options_json", "{}")).get(name, default)


def _attr(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, np.ndarray):
        return [_attr(v) for v in value.tolist()]
    if isinstance(value, np.generic):
        return value.item()
    return value


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
    import h5py

    p = Path(path)
    try:
        st = os.stat(p)
    except FileNotFoundError:
        raise RunFileError(f"{p}: no such file") from None
    except (OSError, ValueError) as exc:  # a link loop, a name too long, a NUL byte
        raise RunFileError(f"{p}: cannot be opened ({getattr(exc, 'strerror', None) or exc})") from None
    if stat.S_ISDIR(st.st_mode):
        raise RunFileError(f"{p}: is a directory, not a run file")
    if not stat.S_ISREG(st.st_mode):  # a pipe would block the open, a device never ends
        raise RunFileError(f"{p}: is not a regular file (a pipe or a device?), not a run file")
    try:
        if not h5py.is_hdf5(p):
            raise RunFileError(f"{p}: not an HDF5 file (is it an npmpi run file?)")
        f = h5py.File(p, "r", locking=False)  # a run may still be writing it: read a snapshot
    except RunFileError:
        raise
    except (OSError, ValueError) as exc:
        raise RunFileError(
            f"{p}: cannot be opened as HDF5 ({exc}); the file may be truncated or corrupt"
        ) from None
    with f:
        try:
            return _read_run(f, p, sample_fields)
        except RunFileError:
            raise
        except MemoryError:
            raise RunFileError(
                f"{p}: holds more data than this machine can read; the file may be corrupt"
            ) from None
        except (OSError, KeyError, RuntimeError, ValueError, TypeError) as exc:  # what h5py raises
            raise RunFileError(f"{p}: cannot be read ({exc}); the file may be truncated or corrupt") from None


def _read_run(f, p: Path, sample_fields: tuple[str, ...] = SAMPLE_FIELDS) -> Run:
    attrs = {k: _attr(f.attrs[k]) for k in f.attrs}
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
    from npmpi.runfile_checks import check_root_attrs

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
    power_attrs, power = _read_power(f, p, notices, sample_fields)
    return Run(
        path=p,
        attrs=attrs,
        layout=layout,
        pingpong=pingpong,
        notices=notices,
        power_attrs=power_attrs,
        power=power,
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
    return ds[:n]


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
    return _attr(attrs.get("kind", "")) in COUNTER_KINDS


def _numbered(group, prefix: str) -> list[str]:
    names = [k for k in group if k.startswith(prefix) and k[len(prefix) :].isdigit()]
    return sorted(names, key=lambda k: int(k[len(prefix) :]))


def _read_power(
    f, p: Path, notices: list[str], sample_fields: tuple[str, ...] = SAMPLE_FIELDS
) -> tuple[dict[str, Any], list[PowerNode]]:
    g = _member(f, "power", p, "/power", dataset=False, required=False)
    if g is None:
        return {}, []
    power_attrs = {k: _attr(g.attrs[k]) for k in g.attrs}
    nodes = []
    for node_name in _numbered(g, "node"):
        ng = _member(g, node_name, p, f"/power/{node_name}", dataset=False)
        channels = []
        for ch_name in _numbered(ng, "channel"):
            where = f"/power/{node_name}/{ch_name}"
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
                notices.append(f"{where}: {max(lengths) - n} partially written sample(s) ignored")
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
                    data[name] = np.asarray(ds[:n], dtype=np.float64) if wanted else None
                if fg is not None:
                    nf = min(ft_ds.shape[0], fm_ds.shape[0])
                    ft = np.asarray(_read_rows(ft_ds, nf, p, f"{where}/faults/time_unix_s"), dtype=np.float64)
                    fm = [str(_attr(m)) for m in _read_rows(fm_ds, nf, p, f"{where}/faults/message")]
                else:
                    ft, fm = np.zeros(0), []
            except (OSError, ValueError, TypeError, KeyError) as exc:
                raise RunFileError(f"{p}: {where} cannot be read ({exc}); the file may be corrupt") from None
            channels.append(
                PowerChannel(
                    {k: _attr(cg.attrs[k]) for k in cg.attrs},
                    fault_time_unix_s=ft,
                    fault_message=fm[: len(ft)],
                    fault_extra=faultlog.read_extras(fg, len(ft)),
                    **data,
                )
            )
        nodes.append(PowerNode({k: _attr(ng.attrs[k]) for k in ng.attrs}, channels))
    return power_attrs, nodes


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
            data = np.array([_attr(v) for v in data], dtype=object)
        out[key] = data
    return out


def _baseline_cpu_shape_ok(ds) -> bool:
    return (
        len(ds.shape) == 2
        and ds.shape[0] <= MAX_ROWS
        and ds.shape[1] == len(BASELINE_COLUMNS)
        and ds.dtype.kind == "f"
    )


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
    ds = _member(g, "pair_trial_s", p, "/pingpong/pair_trial_s", dataset=True, required=False)
    if ds is not None:
        if (
            len(ds.shape) != 3
            or ds.dtype.kind != "f"
            or ds.shape[0] < n
            or ds.shape[2] != pp.trial_s.shape[1]
        ):
            raise RunFileError(f"{p}: /pingpong/pair_trial_s has an unexpected shape {ds.shape} or type")
        pp.pair_trial_s = np.asarray(_read_rows(ds, n, p, "/pingpong/pair_trial_s"), dtype=np.float64)
    ds = _member(
        g, "buffer_huge_page_bytes", p, "/pingpong/buffer_huge_page_bytes", dataset=True, required=False
    )
    if ds is not None:
        if len(ds.shape) != 1 or ds.dtype.kind not in "iu" or ds.shape[0] < n:
            raise RunFileError(
                f"{p}: /pingpong/buffer_huge_page_bytes has an unexpected shape {ds.shape} or type"
            )
        pp.buffer_huge_page_bytes = np.asarray(
            _read_rows(ds, n, p, "/pingpong/buffer_huge_page_bytes"), dtype=np.int64
        )
    _check_values(p, pp)
    return pp


def _check_values(p: Path, pp: PingPong) -> None:
    if len(pp) == 0:
        return
    if np.any(pp.size_bytes < 1):
        raise RunFileError(f"{p}: /pingpong/size_bytes holds sizes below 1 byte (a run measures 1 B and up)")
    if np.any(pp.iterations < 1):
        raise RunFileError(f"{p}: /pingpong/iterations holds values below 1")
    t = pp.trial_s
    bad = np.isfinite(t) & ((t <= 0) | (t > MAX_TRIAL_S)) | np.isinf(t)
    if np.any(bad):
        row = int(np.argwhere(bad)[0][0])
        raise RunFileError(
            f"{p}: /pingpong/trial_s has a non-positive, infinite or impossible (over {MAX_TRIAL_S:.0e} s) "
            f"time at row {row} "
            f"(size {int(pp.size_bytes[row])} B)"
        )
    if np.any(np.all(np.isnan(t), axis=1)):
        row = int(np.argwhere(np.all(np.isnan(t), axis=1))[0][0])
        raise RunFileError(f"{p}: /pingpong/trial_s row {row} has no finite trial time")


def describe_run(run: Run) -> str:
    """A short one-line description used in headers and notices."""
    a = run.attrs
    n = len(run.pingpong)
    last = f", last {int(run.pingpong.size_bytes[-1])} B" if n else ""
    return f"{run.path.name}: {a.get('kernel', '?')} kernel, {n} sizes{last}, status {run.status}"


def finite_or_none(x: float) -> float | None:
    return x if math.isfinite(x) else None
