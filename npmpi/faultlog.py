"""Meter faults as records: repeats counted once, sampling gaps found from the samplers' heartbeat.

A power rank's sampler keeps one `FaultLog` per channel. A fault whose message differs from an
earlier one only in its numbers (values, times) is a repeat: it is printed once, and stored once
with its count and the times of its first and last occurrence. Records travel to rank 0 at every
message-size boundary; a record already sent comes again only when its count grew, and the writer
updates its row in place.

Each sampler also hands over its heartbeat: the wall-clock time of every pass of its sampling loop.
Rank 0 (`Heartbeat`) finds the spans where a loop did not run for several sample intervals (the
power rank stopped with SIGSTOP, starved, or its thread hung) and records each as a fault of kind
`gap` whose first and last times are the span's start and end; the analysis flags the message
sizes measured inside such a span.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

KIND_METER = "meter"  # the meter misbehaved (the message says how)
KIND_GAP = "gap"  # nothing was sampled from first_unix_s to last_unix_s
KINDS = (KIND_METER, KIND_GAP)

# A sampling loop that did not run for this many sample intervals (and at least GAP_MIN_S) left a gap.
GAP_INTERVALS = 5
GAP_MIN_S = 1.0
MAX_MESSAGE_CHARS = 2000

# a value or a time: a number standing alone, not part of a name (intel-rapl:1, /dev/ipmi0, GPU 1)
_NUMBER = re.compile(r"(?<![\w:/.\-])(?<!GPU )[-+]?\d+(?:[.,]\d+)*(?:[eE][-+]?\d+)?(?![\w:/])")


def fault_key(message: str) -> str:
    """What makes two faults the same: the message with its numbers blanked."""
    return _NUMBER.sub("#", message)


@dataclass
class FaultRecord:
    """One distinct fault: when it first and last happened, how often, what it was."""

    first_unix_s: float
    last_unix_s: float
    count: int
    message: str
    kind: str = KIND_METER
    fault_id: int = -1  # the sampler's number for it (-1: a fault found on rank 0, always a new row)


@dataclass
class FaultLog:
    """One channel's faults on its power rank, with what changed since rank 0 last asked."""

    records: list[FaultRecord] = field(default_factory=list)
    _by_key: dict[str, int] = field(default_factory=dict)
    _changed: set[int] = field(default_factory=set)

    def record(self, message: str, now_unix_s: float, kind: str = KIND_METER) -> bool:
        """Count a fault; True when it is new (the caller prints it), False for a repeat."""
        key = f"{kind}:{fault_key(message)}"
        index = self._by_key.get(key)
        if index is None:
            index = len(self.records)
            self._by_key[key] = index
            self.records.append(FaultRecord(now_unix_s, now_unix_s, 1, message, kind, index))
            self._changed.add(index)
            return True
        rec = self.records[index]
        rec.count += 1
        rec.last_unix_s = now_unix_s
        self._changed.add(index)
        return False

    def drain(self) -> list[FaultRecord]:
        """Copies of the records that are new or counted again since the last drain, in id order."""
        out = [
            FaultRecord(r.first_unix_s, r.last_unix_s, r.count, r.message, r.kind, r.fault_id)
            for r in (self.records[i] for i in sorted(self._changed))
        ]
        self._changed.clear()
        return out


def as_records(faults) -> list[FaultRecord]:
    """FaultRecords from records or legacy (time, message) pairs."""
    out = []
    for f in faults or []:
        if isinstance(f, FaultRecord):
            out.append(f)
        else:
            t, message = f
            out.append(FaultRecord(float(t), float(t), 1, str(message)))
    return out


class Heartbeat:
    """Rank 0's watch over one sampler: the spans its loop did not run, from the ticks it hands over."""

    def __init__(self, interval_s: float, where: str, longest_call_s: float = 0.0) -> None:
        # a loop blocked in a slow device call (an ipmitool timeout) is not a stopped power rank
        self.threshold_s = max(GAP_INTERVALS * interval_s, GAP_MIN_S) + max(longest_call_s, 0.0)
        self.where = where
        self.last_tick: float | None = None

    def observe(self, ticks) -> list[FaultRecord]:
        """Gap faults for every pause between consecutive ticks longer than the threshold."""
        t = np.asarray(ticks, dtype=float)
        t = t[np.isfinite(t)]
        if not len(t):
            return []
        if self.last_tick is not None:
            t = np.concatenate(([self.last_tick], t))
        self.last_tick = float(t[-1])
        gaps = np.flatnonzero(np.diff(t) > self.threshold_s)
        return [gap_record(float(t[k]), float(t[k + 1]), self.where) for k in gaps]


def gap_record(start_unix_s: float, end_unix_s: float, where: str) -> FaultRecord:
    """A gap fault: nothing was sampled from start to end."""
    return FaultRecord(
        start_unix_s,
        end_unix_s,
        1,
        f"the power rank's sampling of {where} did not run for {end_unix_s - start_unix_s:.1f} s "
        "(the process was stopped, starved of CPU or hung): no samples in that span",
        KIND_GAP,
    )


# ---------------------------------------------------------------- the run file's faults group


def create_datasets(fg) -> None:
    """The datasets of a channel's `faults` group (format 1.1's two, and the counts of repeats)."""
    import h5py

    from npmpi.runformat import CHECKSUM

    text = h5py.string_dtype()
    for name, dtype in (
        ("time_unix_s", np.float64),
        ("message", text),
        ("last_time_unix_s", np.float64),
        ("count", np.int64),
        ("kind", text),
    ):
        numeric = {} if dtype is text else CHECKSUM  # text cannot take a filter
        fg.create_dataset(name, shape=(0,), maxshape=(None,), dtype=dtype, chunks=(64,), **numeric)


def write_records(fg, records: list[FaultRecord], rows: dict[int, int]) -> None:
    """Append new faults and update the rows of repeats; `rows` maps a sampler's fault id to its row."""
    has_counts = "count" in fg
    for rec in records:
        row = rows.get(rec.fault_id) if rec.fault_id >= 0 else None
        if row is None:
            row = fg["time_unix_s"].shape[0]
            for name in (
                "time_unix_s",
                "message",
                *(("last_time_unix_s", "count", "kind") if has_counts else ()),
            ):
                fg[name].resize(row + 1, axis=0)
            fg["time_unix_s"][row] = rec.first_unix_s
            fg["message"][row] = rec.message[:MAX_MESSAGE_CHARS]
            if has_counts:
                fg["kind"][row] = rec.kind
            if rec.fault_id >= 0:
                rows[rec.fault_id] = row
        if has_counts:
            fg["last_time_unix_s"][row] = rec.last_unix_s
            fg["count"][row] = rec.count


def read_extras(fg, n: int) -> dict[str, np.ndarray]:
    """last_time_unix_s, count and kind of n fault rows; files without them give n single faults."""
    last = np.full(n, np.nan)
    count = np.ones(n, dtype=np.int64)
    kind = np.array([KIND_METER] * n, dtype=object)
    names = ("last_time_unix_s", "count", "kind")
    try:
        if fg is not None and all(k in fg and len(fg[k].shape) == 1 and fg[k].shape[0] >= n for k in names):
            last = np.asarray(fg["last_time_unix_s"][:n], dtype=np.float64)
            count = np.asarray(fg["count"][:n], dtype=np.int64)
            kind = np.array(
                [k.decode() if isinstance(k, bytes) else str(k) for k in fg["kind"][:n]], dtype=object
            )
    except (OSError, ValueError, TypeError, KeyError):  # damaged: the messages and first times still stand
        pass
    return {"last_time_unix_s": last, "count": count, "kind": kind}
