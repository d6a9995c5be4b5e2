"""Meter faults on rank 0's time line: each channel's fault records, and the sizes a gap touched.

A channel's faults (npmpi.runfile.faults) are records: a message, its first and last time, how many times
it happened, and its kind. A `gap` record says the power rank sampled nothing from its first to its
last time (a stopped or starved process): every message size whose trial window overlaps such a span
is flagged `recorded gap`, with the record's message as the reason, whatever samples lie near it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from npmpi_analysis.numbers.compute import FLAG_RECORDED_GAP

KIND_GAP = "gap"


@dataclass
class FaultInfo:
    """One fault record of one channel, times on rank 0's time line."""

    first_unix_s: float
    last_unix_s: float
    count: int
    message: str
    kind: str


def channel_faults(ch, align, delay_s: float) -> list[FaultInfo]:
    """The channel's fault records with their times moved as its samples are (clock offset, delay)."""
    t = np.asarray(ch.fault_time_unix_s, dtype=float)
    n = min(len(t), len(ch.fault_message))
    extra = getattr(ch, "fault_extra", None) or {}
    last = np.asarray(extra.get("last_time_unix_s", np.full(n, np.nan)), dtype=float)[:n]
    count = np.asarray(extra.get("count", np.ones(n)), dtype=np.int64)[:n]
    kind = list(extra.get("kind", ["meter"] * n))[:n]
    if len(last) < n or len(count) < n or len(kind) < n:  # a damaged file: each row a single fault
        last, count, kind = np.full(n, np.nan), np.ones(n, dtype=np.int64), ["meter"] * n
    last = np.where(np.isfinite(last), last, t[:n])
    first_r0 = align(t[:n]) - delay_s if n else t[:n]
    last_r0 = align(last) - delay_s if n else last
    return [
        FaultInfo(
            float(first_r0[k]),
            float(last_r0[k]),
            int(max(count[k], 1)),
            str(ch.fault_message[k]),
            str(kind[k]),
        )
        for k in range(n)
    ]


def flag_recorded_gaps(
    faults: list[tuple[str, FaultInfo]], starts: np.ndarray, ends: np.ndarray, flag: np.ndarray
) -> list[str]:
    """Flag (in place) every size whose window overlaps a gap record; each size's reasons ('' if none).

    `faults` holds (where, fault) pairs, `where` naming the node and channel.
    """
    reasons = [""] * len(starts)
    for where, f in faults:
        if f.kind != KIND_GAP or not np.isfinite(f.first_unix_s) or not np.isfinite(f.last_unix_s):
            continue
        with np.errstate(invalid="ignore"):
            hit = (starts <= f.last_unix_s) & (ends >= f.first_unix_s)
        for k in np.flatnonzero(hit):
            flag[k] = FLAG_RECORDED_GAP
            text = f"{where}: {f.message}"
            reasons[k] = f"{reasons[k]}; {text}" if reasons[k] else text
    return reasons


def power_nodes(power, fabric) -> list[tuple[int, Any]]:
    """(node index, NodePower) of every node and, as node -1, the fabric's group."""
    nodes = [(n.index, n) for n in power.nodes] if power is not None else []
    if fabric is not None:
        nodes.append((-1, fabric.group))
    return nodes


def fault_rows(power, fabric, t0: float | None) -> list[dict[str, Any]]:
    """One dict per fault record of every node's channels and the fabric's (node -1), times on rank
    0's clock and since `t0` (the first trial; NaN without it): the rows of RunData.faults."""
    rows = []
    for index, n in power_nodes(power, fabric):
        for c in n.channels:
            for f in c.fault_records:
                rows.append(
                    {
                        "node": index,
                        "host": n.host,
                        "channel": c.index,
                        "channel_kind": c.kind,
                        "time_unix_s": f.first_unix_s,
                        "last_time_unix_s": f.last_unix_s,
                        "since_first_trial_s": f.first_unix_s - t0 if t0 is not None else math.nan,
                        "last_since_first_trial_s": f.last_unix_s - t0 if t0 is not None else math.nan,
                        "count": f.count,
                        "kind": f.kind,
                        "message": f.message,
                    }
                )
    return rows


def channel_rows(power, fabric) -> list[dict[str, Any]]:
    """One dict per meter channel of every node and the fabric's (node -1): the rows of RunData.channels."""
    return [
        {
            "node": index,
            "host": n.host,
            "channel": c.index,
            "kind": c.kind,
            "label": c.label,
            "spec": c.spec,
            "sample_interval_s": c.sample_interval_s,
            "meter_delay_s": c.delay_s,
            "meter_delay_source": c.delay_source,
            "power_method": c.method,
            "samples": c.samples,
            "in_node_total": c.in_total,
        }
        for index, n in power_nodes(power, fabric)
        for c in n.channels
    ]
