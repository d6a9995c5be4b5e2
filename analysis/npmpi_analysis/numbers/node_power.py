"""Power samples on rank 0's time line: alignment, per-size windows, the multi-node sum.

Each channel's sample times are moved onto rank 0's clock (the node's clock offset, interpolated
between its start and end measurements) and earlier by the meter's reporting delay. Each channel
gives every window (a message size, the baselines before and after the sweep, the whole sweep) its
mean power and sigma_p from an energy counter, its averaging spans or its instantaneous samples
(npmpi_analysis.numbers.energy_windows); a node's power is the sum of its channels', the job's the sum of
the nodes', sigmas added in quadrature. The nodes' series are also summed on one time line for
the plots.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from npmpi_analysis.numbers import baselines, compute, energy_windows
from npmpi_analysis.numbers.channel_power import ChannelInfo, align_node, channel_series
from npmpi_analysis.numbers.channel_power import offset_sigma as node_offset_sigma
from npmpi_analysis.numbers.compute import FLAG_NONE
from npmpi_analysis.numbers.energy_windows import (
    METHOD_INSTANT,
    ChannelReadings,
    empty_stats,
    merged_instant,
    sum_channels,
    take,
    window_power,
)
from npmpi_analysis.numbers.faults import KIND_GAP, flag_recorded_gaps
from npmpi_analysis.numbers.machines import shared_machines
from npmpi_analysis.numbers.said import Said
from npmpi_analysis.numbers.timeline import WindowStats

LABEL_MEASURED = "measured"
PLOT_POINTS = 4000  # per node series kept for the plots (bin means)


@dataclass
class NodePower:
    """One node: its figures per size, idle and active, and a thinned series for the plots."""

    index: int
    host: str
    channels: list[ChannelInfo]
    interval_s: float
    samples: int
    offset_note: str
    sizes: WindowStats  # one element per message size
    idle: WindowStats  # one element: both baselines combined (NaN without one)
    active: WindowStats  # one element: first trial start to last trial end
    plot_t: np.ndarray  # rank 0's time line, thinned to PLOT_POINTS bins
    plot_w: np.ndarray
    idle_before: WindowStats | None = None  # one element each: the baselines before and after
    idle_after: WindowStats | None = None
    readings: np.ndarray | None = None  # per size: the channels' readings stamped inside its window
    own: WindowStats | None = None  # over windows of its own (a map's node: its pairs'), when asked


@dataclass
class PowerResult:
    """The job's power per size and every node's part in it."""

    nodes: list[NodePower]
    job_w: np.ndarray
    job_sigma_w: np.ndarray
    job_flag: np.ndarray
    idle_w: float
    idle_sigma_w: float
    active_w: float
    active_sigma_w: float
    baseline: tuple[float, float] | None
    labels: list[str]
    caveat: str  # "" when every channel is measured, else e.g. "ESTIMATED, not measured"
    series_t: np.ndarray  # the job's summed power over time (thinned)
    series_w: np.ndarray
    series_min_w: np.ndarray
    series_max_w: np.ndarray
    notices: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    baseline_after: tuple[float, float] | None = None
    idle_before_w: float = math.nan  # the job's idle power in each baseline
    idle_before_sigma_w: float = math.nan
    idle_after_w: float = math.nan
    idle_after_sigma_w: float = math.nan
    idle_drift: bool = False  # after minus before exceeds their combined sigma
    gap_reasons: list[str] = field(default_factory=list)  # per size: why it is flagged 'recorded gap'


def caveat_for(labels: list[str]) -> str:
    """'' when all channels are measured; else what the power is, e.g. 'ESTIMATED, not measured'."""
    other = sorted({(lab or "unlabelled").upper() for lab in labels if lab != LABEL_MEASURED})
    if not other:
        return ""
    what = "/".join(other)
    if LABEL_MEASURED in labels:
        return f"partly {what}, not all measured"
    return f"{what}, not measured"


def _all_windows(readings: list[ChannelReadings], delays: list[float], starts, ends, sweep, baseline, after):
    """A node's (sizes, whole sweep, baseline before, baseline after), one pass per channel. After
    the sweep the window ends `delay` seconds early for each channel: the samples describing its
    last seconds were never taken."""
    n = len(starts)
    parts = []
    for r, delay in zip(readings, delays, strict=True):
        extra_s = [sweep[0], baseline[0] if baseline else np.nan, after[0] if after else np.nan]
        extra_e = [
            sweep[1],
            baseline[1] if baseline else np.nan,
            after[1] - max(delay, 0.0) if after else np.nan,
        ]
        parts.append(window_power(r, np.concatenate([starts, extra_s]), np.concatenate([ends, extra_e])))
    total = sum_channels(parts)
    return tuple(
        take(total, k) for k in (slice(0, n), slice(n, n + 1), slice(n + 1, n + 2), slice(n + 2, n + 3))
    )


def group_host(node, i: int) -> str:
    """A power group's host: its attribute `host`, else `node{i}`."""
    return str(node.attrs.get("host", "")) or f"node{i}"


def node_group_power(
    i: int, node, run, starts, ends, windows, delay_override, said: Said, group="", own=None
) -> tuple:
    """One node's NodePower and its summed series (t, p) for the job's plot (None when empty);
    `group` names another power group read the same way (the fabric's); `own`: (starts, ends, the
    sweep's window) of windows of the node's own, figured from the same readings into NodePower.own
    with that sweep and the baselines beside them, as the node's sizes are (a window's σ is made
    from prefix sums over the span all the windows of one pass reach: the same windows in one pass
    give the same bits)."""
    baseline, after, sweep = windows
    where = f"{run.path.name}: /power/{group or f'node{i}'}"
    host = group_host(node, i)
    attrs = compute.checked_timing_attrs(node.attrs, where, said.problems)
    align, offset_note = align_node(attrs, f"{where} ({host})", said)
    offset_sigma = node_offset_sigma(attrs)
    readings, infos, counted = [], [], []
    for j, ch in enumerate(node.channels):
        r, info = channel_series(ch, f"{where}/channel{j}", delay_override, align, said, offset_sigma)
        info.index = j
        infos.append(info)
        if len(r.t) and info.in_total:  # a channel left out of the node's total: never summed
            readings.append(r)
            counted.append(info)
    if not node.channels:
        said.problem(f"{where} ({host}): no meter channel: the node is left out of the job's power")
    elif not readings:
        said.problem(f"{where} ({host}): no power samples: the node is left out of the job's power")
    series = None
    if len(readings) > 1:
        t, p = energy_windows.resample_sum([(r.t, r.p) for r in readings])
        if not len(t):
            said.problem(f"{where} ({host}): its channels' sample times do not overlap: the node is left out")
            readings, counted = [], []
        series = (t, p)
    elif readings:
        series = (readings[0].t, readings[0].p)
    delays = [c.delay_s for c in counted]
    in_window = _readings_inside(readings, starts, ends)
    if len(readings) > 1 and all(r.method == METHOD_INSTANT for r in readings):
        readings, delays = [merged_instant(readings, *series)], [max(delays)]
    interval = max((c.sample_interval_s for c in infos), default=1.0)
    if after and readings and after[1] - max(delays) <= after[0]:
        said.notice(
            f"{where} ({host}): the baseline after the sweep ({after[1] - after[0]:.3g} s) is not longer "
            f"than the meter delay ({max(delays):.3g} s): its samples all describe the last sizes, "
            "so the idle power comes from the baseline before the sweep"
        )
        after = None
    own_stats = _own_stats(readings, delays, own, baseline, after)
    if readings:
        sizes, active, before, later = _all_windows(readings, delays, starts, ends, sweep, baseline, after)
        plot_t, plot_w, _, _ = energy_windows.decimate(series[0], series[1], PLOT_POINTS)
    else:
        sizes = empty_stats(len(starts))
        active, before, later = empty_stats(1), empty_stats(1), empty_stats(1)
        plot_t, plot_w, series = np.zeros(0), np.zeros(0), None
    if readings:  # a baseline without samples: a problem, unless a recorded gap says why (a notice)
        gaps = [f for c in infos for f in c.fault_records if f.kind == KIND_GAP]
        baselines.empty_baselines(f"{where} ({host})", ((baseline, before), (after, later)), gaps, said)
    node_power = NodePower(
        index=i,
        host=host,
        channels=infos,
        interval_s=interval,
        samples=sum(len(r.t) for r in readings),
        offset_note=offset_note,
        sizes=sizes,
        idle=baselines.combine_stats(before, later),
        active=active,
        plot_t=np.asarray(plot_t, dtype=float),
        plot_w=np.asarray(plot_w, dtype=float),
        idle_before=before,
        idle_after=later,
        readings=in_window,
        own=own_stats,
    )
    return node_power, series


def _own_stats(readings, delays, own, baseline, after) -> WindowStats | None:
    """A node's figures over its own windows (`own`: starts, ends, the sweep's window), in one pass
    with the sweep and the baselines as its sizes' (None without)."""
    if own is None:
        return None
    starts, ends, sweep = own
    return (
        _all_windows(readings, delays, starts, ends, sweep, baseline, after)[0]
        if readings
        else empty_stats(len(starts))
    )


def _readings_inside(readings: list[ChannelReadings], starts, ends) -> np.ndarray:
    """Per window: the readings of all channels stamped inside it (repeats included)."""
    s = np.where(np.isfinite(starts), starts, 0.0)
    e = np.where(np.isfinite(ends), ends, 0.0)
    total = np.zeros(len(s), dtype=np.int64)
    for r in readings:
        total += np.searchsorted(r.t, e, side="right") - np.searchsorted(r.t, s, side="left")
    return np.maximum(total, 0)


def _job_one(counted: list[NodePower], which: str) -> tuple[float, float]:
    """The job's (power, sigma) in one window: the nodes' sum, sigmas in quadrature."""
    stats = [getattr(n, which) for n in counted]
    return float(np.sum([s.mean[0] for s in stats])), float(np.sqrt(np.sum([s.sigma[0] ** 2 for s in stats])))


def _job_figures(nodes: list[NodePower], nsizes: int, left_out: set[int] = frozenset()) -> tuple:
    """(power, sigma and flag per size, idle before, idle after, active) of the job, from the nodes
    with samples (but those `left_out`: another node of theirs is the same machine); NaN without any."""
    counted = [n for n in nodes if n.samples and n.index not in left_out]
    if not counted:
        nan = (math.nan, math.nan)
        return (
            np.full(nsizes, np.nan),
            np.full(nsizes, np.nan),
            np.full(nsizes, FLAG_NONE, np.int8),
            nan,
            nan,
            nan,
        )
    return (
        np.sum([n.sizes.mean for n in counted], axis=0),
        np.sqrt(np.sum([n.sizes.sigma**2 for n in counted], axis=0)),
        np.max([n.sizes.flag for n in counted], axis=0).astype(np.int8),
        _job_one(counted, "idle_before"),
        _job_one(counted, "idle_after"),
        _job_one(counted, "active"),
    )


def sweep_window(starts: np.ndarray, ends: np.ndarray) -> tuple[float, float]:
    """The whole sweep's window: the first trial's start to the last one's end (NaN without any)."""
    finite_starts = starts[np.isfinite(starts)]
    finite_ends = ends[np.isfinite(ends)]
    if finite_starts.size and finite_ends.size:
        return float(finite_starts.min()), float(finite_ends.max())
    return math.nan, math.nan


def _summed_series(full_series: list, left_out: set, said: Said):
    """The job's power over time for the plots: the nodes' series (those not left out as one
    machine counted twice) summed on one time line and thinned; (t, w, min, max)."""
    summed = [series for i, series in full_series if i not in left_out]
    st, sw = energy_windows.resample_sum(summed)
    if len(summed) > 1 and not len(st):
        said.notice("the nodes' sample times do not overlap: no summed power over time")
    return energy_windows.decimate(st, sw, PLOT_POINTS)


def analyse_power(
    run, starts: np.ndarray, ends: np.ndarray, delay_override: float | None = None, own=None
) -> PowerResult | None:
    """Per-size power of every node and of the job; None when the run has no power groups. `own`:
    a function of a power group's index giving (starts, ends, the sweep's window) of windows of that
    node's own (a map's node: its pairs'), or None; their figures in NodePower.own, from the
    readings read once."""
    if not run.power or no_power_notice(run):
        return None
    said = Said()
    notices = said.notices
    nsizes = len(starts)
    baseline, after = baselines.baseline_windows(run.power_attrs)
    sweep = sweep_window(starts, ends)
    nodes: list[NodePower] = []
    full_series: list[tuple[int, tuple[np.ndarray, np.ndarray]]] = []
    labels: list[str] = []
    for i, node in enumerate(run.power):
        node_power, series = node_group_power(
            i, node, run, starts, ends, (baseline, after, sweep), delay_override, said,
            own=own(i) if own is not None else None,
        )  # fmt: skip
        nodes.append(node_power)
        labels.extend(c.label for c in node_power.channels)
        if series is not None:
            full_series.append((i, series))
    notices.extend(
        baselines.disturbed_notices(
            run.layout, [n.attrs for n in run.power], (baseline, after), run.path.name
        )
    )
    left_out, machine_notices = shared_machines(
        [n.attrs for n in run.power], [[c.label for c in n.channels] for n in nodes]
    )
    notices.extend(machine_notices)
    job_w, job_sigma, job_flag, idle_before, idle_after, active = _job_figures(nodes, nsizes, left_out)
    idle_w, idle_sigma = baselines.combine_idle(idle_before, idle_after)
    drift = baselines.drift_notice(idle_before, idle_after, run.path.name)
    if drift:
        notices.append(drift)
    series_t, series_w, series_min, series_max = _summed_series(full_series, left_out, said)
    del full_series
    gap_reasons = flag_recorded_gaps(
        [
            (f"node {n.index} ({n.host}) {c.kind}", f)
            for n in nodes
            for c in n.channels
            for f in c.fault_records
        ],
        starts,
        ends,
        job_flag,
    )
    return PowerResult(
        nodes=nodes,
        job_w=job_w,
        job_sigma_w=job_sigma,
        job_flag=job_flag,
        idle_w=idle_w,
        idle_sigma_w=idle_sigma,
        active_w=active[0],
        active_sigma_w=active[1],
        baseline=baseline,
        labels=labels,
        caveat=caveat_for(labels),
        series_t=np.asarray(series_t, dtype=float),
        series_w=np.asarray(series_w, dtype=float),
        series_min_w=np.asarray(series_min, dtype=float),
        series_max_w=np.asarray(series_max, dtype=float),
        notices=said.notices,
        problems=said.problems,
        baseline_after=after,
        idle_before_w=idle_before[0],
        idle_before_sigma_w=idle_before[1],
        idle_after_w=idle_after[0],
        idle_after_sigma_w=idle_after[1],
        idle_drift=drift is not None,
        gap_reasons=gap_reasons,
    )


def no_power_notice(run) -> str | None:
    """Why a run with power groups has no power at all (every meter skipped), or None."""
    if not run.power or any(node.channels for node in run.power):
        return None
    reasons = []
    for node in run.power:
        skipped = node.attrs.get("meters_skipped")
        if isinstance(skipped, str):
            skipped = [skipped] if skipped else []
        reasons += [str(r) for r in skipped or []]
    if not reasons:  # no channel and no reason: a damaged power part, reported as such
        return None
    return (
        f"no power: every meter was skipped (--meter-optional): {'; '.join(reasons)}. "
        "Bandwidth and latency only"
    )
