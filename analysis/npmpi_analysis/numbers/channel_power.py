"""One meter channel's power on rank 0's time line (numbers/node_power.py sums a node's channels):
its node's clock offset applied, invalid samples dropped and said, how its windows take their
power (a counter's energy, an average, instant readings), and what the summary says of it."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from npmpi.runfile.format import OPEN_EPOCH
from npmpi_analysis.numbers import channel_samples, compute, timeline
from npmpi_analysis.numbers.energy_windows import (
    METHOD_AVERAGE,
    METHOD_COUNTER,
    METHOD_INSTANT,
    ChannelReadings,
    average_spans,
    counter_spans,
    segment_breaks,
)
from npmpi_analysis.numbers.faults import KIND_GAP, FaultInfo, channel_faults
from npmpi_analysis.numbers.said import Said


@dataclass
class ChannelInfo:
    """What the summary says about one meter channel."""

    index: int
    kind: str
    spec: str
    label: str
    description: str
    sample_interval_s: float
    delay_s: float
    delay_source: str  # "--meter-delay", "calibrated" (the channel's meter_delay_s) or "none"
    delay_uncertainty_s: float | None
    samples: int
    faults: list[tuple[float, str]]
    method: str = METHOD_INSTANT  # how a window's power is taken: counter, average or instant
    resolution_w: float = 0.0
    fault_records: list[FaultInfo] = field(default_factory=list)  # on rank 0's time line, with counts
    in_total: bool = True  # summed into the node's power (not a part of a whole-node meter, nor a repeat)
    total_note: str = ""  # why not
    refresh: tuple[float, str] = (0.0, "")  # a BMC's refresh period, whence (channel_samples)


def align_node(node_attrs: dict, where: str, said: Said):
    """A function putting this node's clock readings on rank 0's time line, and a note saying how."""
    a = compute.float_attr(node_attrs, "clock_offset_start_s")
    m = compute.float_attr(node_attrs, "clock_offset_start_measured_unix_s")
    b = compute.float_attr(node_attrs, "clock_offset_end_s")
    n = compute.float_attr(node_attrs, "clock_offset_end_measured_unix_s")
    if a is None or m is None:
        if b is not None and n is not None:
            a, m, b, n = b, n, None, None
        else:
            said.notice(f"{where}: no clock offset recorded: its samples are taken as on rank 0's clock")
            return (lambda t: t), "none recorded (taken as 0)"
    if b is None or n is None:
        note = f"{a * 1e3:+.3f} ms (start only: no drift correction)"
    else:
        note = f"{a * 1e3:+.3f} ms at start, {b * 1e3:+.3f} ms at end (linear between)"
    return (lambda t: timeline.node_to_rank0(t, a, m, b, n)), note


# Files older than format 1.4 do not say how a reading relates to time: what these meters do
KIND_AVERAGING = {"rapl": "previous", "estimate": "previous"}
COUNTER_KINDS = ("rapl", "nvml")


def offset_sigma(node_attrs: dict) -> float:
    """The clock-offset uncertainty of a node: the larger of its start and end measurements'."""
    values = [
        compute.float_attr(node_attrs, f"clock_offset_{which}_uncertainty_s") for which in ("start", "end")
    ]
    return max((abs(v) for v in values if v is not None), default=0.0)


def power_method(attrs: dict, e: np.ndarray) -> tuple[str, str, float]:
    """(method, averaging, averaging_s) of a channel from its attributes (by kind for old files)."""
    kind = str(attrs.get("kind", ""))
    averaging = str(attrs.get("averaging", KIND_AVERAGING.get(kind, "instant")))
    averaging_s = compute.float_attr(attrs, "averaging_s") or 0.0
    counter = attrs.get("energy_from_counter")
    counter = bool(counter) if counter is not None else kind in COUNTER_KINDS
    if counter and np.isfinite(e).sum() >= 2:
        return METHOD_COUNTER, averaging, averaging_s
    if averaging == "previous" or (averaging == "fixed" and averaging_s > 0):
        return METHOD_AVERAGE, averaging, averaging_s
    return METHOD_INSTANT, "instant", 0.0


def channel_series(
    ch, where: str, delay_override: float | None, align, said: Said, offset_sigma_s: float = 0.0
) -> tuple[ChannelReadings, ChannelInfo]:
    """One channel's readings on rank 0's time line (invalid samples dropped and reported), with
    their spans for windows, and what the summary says about the channel."""
    attrs = compute.checked_timing_attrs(ch.attrs, where, said.problems)
    t, p, e, kept = channel_samples.valid_samples(ch, where, said.problems)
    extra = channel_samples.sample_extras(ch, kept)
    interval = channel_samples.sample_interval(attrs, t)
    refresh = channel_samples.refresh_period(attrs, t, p, extra)  # a reading may be this old
    stored = compute.float_attr(attrs, "meter_delay_s")
    if delay_override is not None:
        delay, source = delay_override, "--meter-delay"
    elif stored is not None:
        delay, source = stored, "calibrated"
    else:
        delay, source = 0.0, "none"
    t = align(t) - delay
    if len(t) > 1 and np.any(np.diff(t) < 0):
        order = np.argsort(t, kind="stable")
        t, p, e = t[order], p[order], e[order]
        extra = {k: v[order] for k, v in extra.items()}
    fault_t = np.asarray(ch.fault_time_unix_s, dtype=float)
    faults = list(zip(fault_t.tolist(), ch.fault_message, strict=False))
    method, averaging, averaging_s = power_method(attrs, e)
    records = channel_faults(ch, align, float(delay))
    # a meter fault (the meter is reopened, its counter restarts) ends a stretch; a gap does not
    reopen_t = [x for f in records if f.kind != KIND_GAP for x in (f.first_unix_s, f.last_unix_s)]
    repeated = [(f.first_unix_s, f.last_unix_s) for f in records if f.kind != KIND_GAP and f.count > 1]
    breaks = segment_breaks(t, np.asarray(reopen_t, dtype=float), extra.get(OPEN_EPOCH), repeated)
    if method == METHOD_COUNTER:
        lo, hi, pw = counter_spans(t, e, breaks)
    elif method == METHOD_AVERAGE:
        lo, hi, pw = average_spans(t, p, averaging, averaging_s, interval, breaks)
    else:
        lo = hi = pw = np.zeros(0)
    delay_sigma = compute.float_attr(attrs, "meter_delay_uncertainty_s") if source == "calibrated" else None
    readings = ChannelReadings(
        t=t,
        p=p,
        method=method,
        interval_s=float(max(interval, averaging_s, refresh[0])),
        lo=lo,
        hi=hi,
        pw=pw,
        resolution_w=abs(compute.float_attr(attrs, "power_resolution_w") or 0.0),
        energy_resolution_j=abs(compute.float_attr(attrs, "energy_resolution_j") or 0.0),
        sigma_delay_s=abs(delay_sigma or 0.0),
        sigma_offset_s=offset_sigma_s,
        sigma_stamp_s=channel_samples.stamp_sigma_s(extra),
    )
    info = ChannelInfo(
        index=0,
        kind=str(attrs.get("kind", "")),
        spec=str(attrs.get("spec", "")),
        label=str(attrs.get("label", "")),
        description=str(attrs.get("description", "")),
        sample_interval_s=float(interval),
        delay_s=float(delay),
        delay_source=source,
        delay_uncertainty_s=delay_sigma,
        samples=len(t),
        faults=faults,
        method=method,
        resolution_w=readings.resolution_w,
        fault_records=records,
        in_total=bool(attrs.get("in_node_total", True)),  # files before it: every channel
        total_note=str(attrs.get("node_total_note", "")),
        refresh=refresh,
    )
    return readings, info
