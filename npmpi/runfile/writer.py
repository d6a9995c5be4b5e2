"""The run file's writer: one HDF5 file per run, written by rank 0 (format: npmpi/runfile/format.py).

The writer appends one row per message size and flushes, so a run stopped at any moment leaves a
valid file holding every completed size; `sizes_completed` (a root attribute written after each
row) says how many rows are whole.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
from pathlib import Path
from typing import Any

import numpy as np

from npmpi.core.errors import RunFileGone, RunFileWriteError
from npmpi.runfile import faults as faultlog
from npmpi.runfile.appends import write_rows
from npmpi.runfile.attrseal import seal, seal_all
from npmpi.runfile.format import (
    BASELINE_COLUMNS,
    CHECKSUM,
    COND_ATTR,
    COND_DATASETS,
    CPU_DATASETS,
    CPU_RANKS_ATTR,
    EXTRA_SAMPLE_FIELDS,
    FABRIC_GROUP,
    FORMAT_NAME,
    FORMAT_VERSION,
    LAYOUT_BASELINE_CPU,
    PINGPONG_DATASETS,
    SAMPLE_FIELDS,
    STATUS_RUNNING,
    STATUSES,
    TEXT_CHECKSUM,
    SizeResult,
    checksum,
    power_group,
    text_crc32,
)


def _to_attr(value: Any) -> Any:
    if isinstance(value, (dict, list, tuple)) and not (
        isinstance(value, (list, tuple)) and value and all(isinstance(v, str) for v in value)
    ):
        return json.dumps(value)
    if value is None:
        return ""
    return value


def _create_channels(group, channels: list[dict[str, Any]]) -> None:
    """One group `channel{j}` per channel in `group`: its attributes, empty sample and fault datasets."""
    for j, ch_attrs in enumerate(channels):
        cg = group.create_group(f"channel{j}")
        for key, value in ch_attrs.items():
            cg.attrs[key] = _to_attr(value)
        extra = [n for n in EXTRA_SAMPLE_FIELDS if n in (ch_attrs.get("extra_sample_fields") or ())]
        for name in (*SAMPLE_FIELDS, *extra):
            cg.create_dataset(
                name, shape=(0,), maxshape=(None,), dtype=np.float64, chunks=(4096,), **CHECKSUM
            )
        faultlog.create_datasets(cg.create_group("faults"))


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
        members: int = 0,
        sort_rows: bool = False,
    ) -> None:
        import h5py

        from npmpi.core.outpath import check_temporary, publish, release, reserve_output

        self.path = Path(path)
        self.trials = trials
        self.pairs = pairs
        self.members = members  # a group kind's measuring ranks: /pingpong/member_trial_s (format 1.8)
        # --order random (format 1.11): each row goes in its place by (series, size), and
        # /pingpong/measure_index says when it was measured
        self.sort_rows = sort_rows
        self._keys: list[tuple[int, int]] = []  # the rows' (series, size), in the file's order
        # (node or FABRIC_GROUP, channel): fault id -> row
        self._fault_rows: dict[tuple[int | str, int], dict[int, int]] = {}
        self._conditions: dict[str, Any] = {}  # the root attribute COND_ATTR, grown row by row
        self._error: RunFileWriteError | None = None  # the first write error: every later write raises it
        self._writing = 0  # how deep in _checked: a write in progress (mark_soon waits for its end)
        self._marks: dict[str | None, dict[str, Any]] | None = None  # mark_soon's, deferred
        self._final = False  # finish began: the status it writes is the file's last
        self._handles: dict[str, Any] = {}  # open groups and datasets, closed with the file
        self._unflushed: dict[str, tuple] = {}  # datasets grown since the last flush: their shape then
        self._pending_bytes = 0  # what the next flush may write (data and new chunks), for the space check
        # Built in a temporary file reserved (created and locked) at start-up, named once its structure
        # is on disk: a writer killed while HDF5 creates the file (a few ms) leaves no run file that
        # cannot be opened (npmpi/core/outpath.py)
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
                ds = lay.create_dataset(key, data=np.array(values, dtype=object), dtype=str_dt)
                ds.attrs[TEXT_CHECKSUM] = text_crc32(values)
            else:
                lay.create_dataset(key, data=np.asarray(values), **checksum(values))
        pp = f.create_group("pingpong")
        pp.attrs["trials"] = trials
        for name, dtype, per_trial in PINGPONG_DATASETS:
            shape = (0, trials) if per_trial else (0,)
            maxshape = (None, trials) if per_trial else (None,)
            chunks = (64, trials) if per_trial else (256,)
            pp.create_dataset(name, shape=shape, maxshape=maxshape, dtype=dtype, chunks=chunks, **CHECKSUM)
        pp.create_dataset(
            "buffer_huge_page_bytes", shape=(0,), maxshape=(None,), dtype=np.int64, chunks=(256,), **CHECKSUM
        )
        pairs = self.pairs
        if pairs > 1:
            pp.create_dataset(
                "pair_trial_s",
                shape=(0, pairs, trials),
                maxshape=(None, pairs, trials),
                dtype=np.float64,
                chunks=(16, pairs, trials),
                **CHECKSUM,
            )
        if self.members > 0:
            pp.create_dataset(
                "member_trial_s",
                shape=(0, self.members, trials),
                maxshape=(None, self.members, trials),
                dtype=np.float64,
                chunks=(16, self.members, trials),
                **CHECKSUM,
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
        self._writing += 1
        try:
            yield
        except RunFileWriteError as exc:  # the space check
            self._error = exc
            raise
        except (OSError, RuntimeError) as exc:  # what h5py raises for HDF5's errors
            from npmpi.runfile.writecheck import write_error

            self._error = write_error(self.path, what, exc)
            raise self._error from None
        finally:
            self._writing -= 1
            if not self._writing and self._marks is not None:
                self._write_marks()

    def mark_soon(self, attrs: dict[str, Any], groups: dict[str, dict[str, Any]] | None = None) -> None:
        """Set root attributes `attrs` (and each group's of `groups`) now, or, when called while a
        write is in progress (a stop signal's handler runs in the main thread, between any two of a
        write's HDF5 calls: entering the file there broke the write, the run then `failed`), as soon
        as that write ends. Nothing once finish has begun; never raises."""
        if self._final:
            return
        marks = self._marks if self._marks is not None else {}
        for group, values in {None: attrs, **(groups or {})}.items():
            marks.setdefault(group, {}).update(values)
        self._marks = marks
        if not self._writing:
            self._write_marks()

    def _write_marks(self) -> None:
        marks, self._marks = self._marks or {}, None
        with contextlib.suppress(RunFileWriteError, OSError, RuntimeError):  # never fail a stop
            for group, values in sorted(marks.items(), key=lambda kv: kv[0] is None):
                if group is None:
                    self.set_attrs(**values)
                else:
                    self.set_group_attrs(group, **values)

    def _h(self, name: str):
        """The open group or dataset `name`, kept open until the file closes."""
        obj = self._handles.get(name)
        if obj is None:
            obj = self._handles[name] = self._file[name]
        return obj

    def _grow(self, name: str, count: int):
        """(dataset, its old length) after adding `count` rows to dataset `name` (see _checked)."""
        ds = self._h(name)
        n, shape = int(ds.shape[0]), ds.shape
        self._unflushed.setdefault(name, shape)
        ds.id.set_extent((n + count, *shape[1:]))  # h5py's resize(axis=0), without its checks' cost
        item = ds.dtype.itemsize if ds.dtype.kind != "O" else 1024  # a string's text is stored apart
        self._pending_bytes += item * (count * math.prod(ds.shape[1:]) + math.prod(ds.chunks or (0,)))
        return ds, n

    def _flush(self) -> None:
        """Flush, after checking that the file system has room for it (npmpi/runfile/writecheck.py)."""
        from npmpi.runfile.writecheck import check_space

        check_space(self._res.target, self._pending_bytes, len(self._unflushed))
        seal(self._file)  # the root's attributes change at every size (npmpi/runfile/attrseal.py)
        self._file.flush()
        self._unflushed.clear()
        self._pending_bytes = 0

    def set_attrs(self, **attrs: Any) -> None:
        with self._checked("writing root attributes"):
            for key, value in attrs.items():
                self._file.attrs[key] = _to_attr(value)
            self._flush()

    def append(self, result: SizeResult) -> None:
        """Append one size's row to every dataset (with sort_rows: then move it to its place), then flush."""
        with self._checked(f"appending the row of {result.size_bytes} B"):
            self._append(result)
            if self.sort_rows:
                self._place_last_row(result)
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
            self._append_per_trial(n, "pair_trial_s", self.pairs, result.pair_trial_s)
        if self.members > 0:
            self._append_per_trial(n, "member_trial_s", self.members, result.member_trial_s)
        if result.cpu_ranks is not None:
            self._append_ranked(n, CPU_DATASETS, result.cpu_ranks, lambda name: getattr(result, name))
        if result.cpu_ranks is not None and result.conditions is not None:
            got = result.conditions
            self._append_ranked(n, COND_DATASETS, result.cpu_ranks, lambda name: got.get(name))
            self._note_conditions(result.condition_info or [])
        columns = dict(result.row_columns or {})
        if self.sort_rows:
            columns["measure_index"] = n
        for name, value in columns.items():
            self._append_row_column(n, name, value)
        for name, value in (result.row_floats or {}).items():
            self._append_row_column(n, name, value, np.float64)
        self._file.attrs["sizes_completed"] = n + 1

    def _append_row_column(self, n: int, name: str, value, dtype=np.int64) -> None:
        """Row n of a per-row dataset /pingpong/NAME (int64, or float64), created at its first row
        (earlier rows -1, or NaN)."""
        pp = self._h("pingpong")
        if name not in pp:
            fill = np.full(n, -1 if dtype == np.int64 else np.nan, dtype=dtype)
            pp.create_dataset(name, data=fill, maxshape=(None,), chunks=(256,), **CHECKSUM)
        ds, _ = self._grow(f"pingpong/{name}", 1)
        ds[n] = value

    def _place_last_row(self, result: SizeResult) -> None:
        """Move the row just appended (the last) to its place by (series, size) in every row dataset
        of /pingpong: the rows stay in ascending size within each series (format 1.11)."""
        import bisect

        n = self._rows
        key = ((result.row_columns or {}).get("coll_series", 0), result.size_bytes)
        k = bisect.bisect_right(self._keys, key)
        self._keys.insert(k, key)
        if k == n:
            return
        pp = self._h("pingpong")
        for name in pp:
            ds = self._h(f"pingpong/{name}")
            if getattr(ds, "shape", None) and ds.shape[0] == n + 1:
                block = ds[k : n + 1]
                ds[k] = block[-1]
                ds[k + 1 : n + 1] = block[:-1]

    def _note_conditions(self, infos: list[dict]) -> None:
        """The root attribute COND_ATTR: per rank its core, frequency source (or why unknown), NIC
        counters, and its settings at the first size's start and the last size's end."""
        self._merge_conditions(infos)
        self._file.attrs[COND_ATTR] = json.dumps(self._conditions, default=str)

    def _merge_conditions(self, infos: list[dict]) -> None:
        """Each rank's latest text into self._conditions["ranks"], its first settings kept."""
        ranks = self._conditions.setdefault("ranks", {})
        for info in infos:
            key = str(info.get("rank", "?"))
            kept = ranks.setdefault(key, {"settings_before": info.get("settings_before")})
            kept.update({k: v for k, v in info.items() if k not in ("rank", "settings_before")})

    def _append_per_trial(self, n: int, name: str, count: int, rows: list[list[float]] | None) -> None:
        """Row n of a [size, K, trial] dataset of /pingpong (NaN where a trial did not run)."""
        ds, _ = self._grow(f"pingpong/{name}", 1)
        block = np.full((count, self.trials), np.nan)
        for i, times in enumerate(rows or []):
            block[i, : len(times)] = times
        ds[n] = block

    def _append_ranked(self, n: int, names: tuple[str, ...], ranks, values_of) -> None:
        """Row n of [size, rank] datasets (CPU, conditions), created at the first row that has them
        (earlier rows NaN); `values_of(name)` gives one value per rank."""
        ranks = list(ranks or ())
        pp = self._h("pingpong")
        for name in names:
            if name not in pp:
                ds = pp.create_dataset(
                    name,
                    data=np.full((n, len(ranks)), np.nan),
                    maxshape=(None, len(ranks)),
                    chunks=(64, len(ranks)),
                    **CHECKSUM,
                )
                ds.attrs[CPU_RANKS_ATTR] = np.asarray(ranks, dtype=np.int64)
                self._pending_bytes += ds.size * ds.dtype.itemsize
            ds, _ = self._grow(f"pingpong/{name}", 1)
            row = np.full(ds.shape[1], np.nan)
            values = values_of(name) or []
            row[: min(len(values), len(row))] = values[: len(row)]
            ds[n] = row

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
            _create_channels(ng, node_channels)

    def create_fabric(self, attrs: dict[str, Any], channels: list[dict[str, Any]]) -> None:
        """Create /power/fabric (its attributes) and one group per fabric channel (--fabric-meter)."""
        with self._checked("creating the fabric power group"):
            g = self._file.require_group("power").create_group(FABRIC_GROUP)
            for key, value in attrs.items():
                g.attrs[key] = _to_attr(value)
            _create_channels(g, channels)
            self._flush()

    def append_samples(
        self,
        node: int | str,
        channel: int,
        samples: dict[str, np.ndarray],
        faults: list | None = None,
    ) -> None:
        """Append a batch of samples (arrays named as SAMPLE_FIELDS) and faults (FaultRecords: repeats
        update their row); no flush. `node` is a node's index, or FABRIC_GROUP for a fabric channel.

        A write error is kept, not raised: the flush that follows every batch raises it (so that
        the caller first receives every node's batch)."""
        with contextlib.suppress(RunFileWriteError), self._checked(f"appending samples of node {node}"):
            self._append_samples(node, channel, samples, faults)

    def _append_samples(self, node: int | str, channel: int, samples: dict[str, np.ndarray], faults) -> None:
        where = f"{power_group(node)}/channel{channel}"
        cg = self._h(where)
        count = len(samples["time_unix_s"])
        if count:
            for name in (*SAMPLE_FIELDS, *EXTRA_SAMPLE_FIELDS):
                if name in samples and (name in SAMPLE_FIELDS or name in cg):
                    ds, n = self._grow(f"{where}/{name}", count)
                    write_rows(ds, n, samples[name])
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
                cpu = np.full((len(cpu_s), len(BASELINE_COLUMNS)), np.nan)
                ds = lay.create_dataset(LAYOUT_BASELINE_CPU, data=cpu, **checksum(cpu))
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
        self._final, self._marks = True, None
        if self._error is None:
            with contextlib.suppress(RunFileWriteError):
                self.set_attrs(status=status, status_message=message, **attrs)
                with self._checked("closing it"):
                    seal_all(self._file)
                    self._file.close()  # closes every open group and dataset first
                self._handles.clear()
        if self._error is not None:
            from npmpi.runfile.writecheck import salvage

            shrink = [(self._handles[name], shape) for name, shape in self._unflushed.items()]
            self._rows = salvage(self._file, self._res, self._error, self._rows, shrink)
        self._close_quietly()
        from npmpi.core.outpath import published_problem, release

        gone = published_problem(self._res) if self._res.published else None  # after the last write
        release(self._res)
        if self._error is not None:
            raise self._error
        if gone is not None:
            raise RunFileGone(gone)

    def _close_quietly(self) -> None:
        with contextlib.suppress(Exception):
            self._file.close()
        self._handles.clear()

    def close(self) -> None:
        from npmpi.core.outpath import release

        self._close_quietly()
        release(self._res)
