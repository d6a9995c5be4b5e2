"""Power samples on rank 0's time line: alignment, per-size windows, the multi-node sum.

Each channel's sample times are moved onto rank 0's clock (the node's clock offset, interpolated
between its start and end measurements) and earlier by the meter's reporting delay. A node's
channels are summed on common times; each node's samples inside a message size's window give its
mean power and sigma_p; the job's power is the sum of the nodes' means with their sigmas added in
quadrature. The nodes' series are also summed on one time line for the plots.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from npmpi_analysis import compute
from npmpi_analysis.compute import FLAG_NONE, WindowStats
from npmpi_analysis.faults import FaultInfo, channel_faults, flag_recorded_gaps

LABEL_MEASURED = "measured"
PLOT_POINTS = 4000  # per node series kept for the plots (bin means)

# No meter channel of one node (a wall meter, a PDU outlet, a BMC, RAPL, a GPU) reads a megawatt: such a
# value is a corrupt sample or a unit mix-up (mW or µW stored as W), not power.
MAX_PLAUSIBLE_CHANNEL_W = 1e6


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
    fault_records: list[FaultInfo] = field(default_factory=list)  # on rank 0's time line, with counts


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
    idle: WindowStats  # one element: the baseline window (NaN without one)
    active: WindowStats  # one element: first trial start to last trial end
    plot_t: np.ndarray  # rank 0's time line, thinned to PLOT_POINTS bins
    plot_w: np.ndarray


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


def _float_attr(attrs: dict, key: str) -> float | None:
    value = attrs.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def _align_node(node_attrs: dict, where: str, notices: list[str]):
    """A function putting this node's clock readings on rank 0's time line, and a note saying how."""
    a = _float_attr(node_attrs, "clock_offset_start_s")
    m = _float_attr(node_attrs, "clock_offset_start_measured_unix_s")
    b = _float_attr(node_attrs, "clock_offset_end_s")
    n = _float_attr(node_attrs, "clock_offset_end_measured_unix_s")
    if a is None or m is None:
        if b is not None and n is not None:
            a, m, b, n = b, n, None, None
        else:
            notices.append(f"{where}: no clock offset recorded: its samples are taken as on rank 0's clock")
            return (lambda t: t), "none recorded (taken as 0)"
    if b is None or n is None:
        note = f"{a * 1e3:+.3f} ms (start only: no drift correction)"
    else:
        note = f"{a * 1e3:+.3f} ms at start, {b * 1e3:+.3f} ms at end (linear between)"
    return (lambda t: compute.node_to_rank0(t, a, m, b, n)), note


def _channel_series(ch, where: str, delay_override: float | None, align, problems: list[str]):
    """(t on rank 0's time line, power, info) of one channel, invalid samples dropped and reported."""
    attrs = ch.attrs
    t = np.asarray(ch.time_unix_s, dtype=float)
    p = np.asarray(ch.power_w, dtype=float)
    n = min(len(t), len(p))
    t, p = t[:n], p[:n]
    bad_t = ~np.isfinite(t) | (t < 0)
    if bad_t.any():
        k = int(np.argmax(bad_t))
        problems.append(
            f"{where}/time_unix_s: {int(bad_t.sum())} NaN or negative time(s) (first at sample {k}): "
            "those samples are ignored"
        )
    bad_p = ~bad_t & (~np.isfinite(p) | (p < 0) | (p > MAX_PLAUSIBLE_CHANNEL_W))
    if bad_p.any():
        k = int(np.argmax(bad_p))
        problems.append(
            f"{where}/power_w: {int(bad_p.sum())} NaN, negative or implausible (above "
            f"{MAX_PLAUSIBLE_CHANNEL_W:.0e} W) power value(s) (first at sample {k}: {p[k]:g} W): "
            "those samples are ignored"
        )
    if bad_t.any() or bad_p.any():
        keep = ~(bad_t | bad_p)
        t, p = t[keep], p[keep]
    interval = _float_attr(attrs, "sample_interval_s")
    if interval is None or interval <= 0:
        interval = _float_attr(attrs, "natural_interval_s")
    if (interval is None or interval <= 0) and len(t) > 1:
        interval = float(np.median(np.diff(np.sort(t))))
    if interval is None or interval <= 0:
        interval = 1.0
    stored = _float_attr(attrs, "meter_delay_s")
    if delay_override is not None:
        delay, source = delay_override, "--meter-delay"
    elif stored is not None:
        delay, source = stored, "calibrated"
    else:
        delay, source = 0.0, "none"
    t = align(t) - delay
    if len(t) > 1 and np.any(np.diff(t) < 0):
        order = np.argsort(t, kind="stable")
        t, p = t[order], p[order]
    faults = list(zip(np.asarray(ch.fault_time_unix_s, dtype=float).tolist(), ch.fault_message, strict=False))
    info = ChannelInfo(
        index=0,
        kind=str(attrs.get("kind", "")),
        spec=str(attrs.get("spec", "")),
        label=str(attrs.get("label", "")),
        description=str(attrs.get("description", "")),
        sample_interval_s=float(interval),
        delay_s=float(delay),
        delay_source=source,
        delay_uncertainty_s=_float_attr(attrs, "meter_delay_uncertainty_s")
        if source == "calibrated"
        else None,
        samples=len(t),
        faults=faults,
        fault_records=channel_faults(ch, align, float(delay)),
    )
    return t, p, info


def _empty_stats(n: int) -> WindowStats:
    return WindowStats(
        np.full(n, np.nan), np.full(n, np.nan), np.zeros(n, dtype=np.int64), np.full(n, FLAG_NONE, np.int8)
    )


def _take(stats: WindowStats, k: slice) -> WindowStats:
    return WindowStats(stats.mean[k], stats.sigma[k], stats.count[k], stats.flag[k])


def analyse_power(
    run, starts: np.ndarray, ends: np.ndarray, delay_override: float | None = None
) -> PowerResult | None:
    """Per-size power of every node and of the job; None when the run has no power groups."""
    if not run.power or no_power_notice(run):
        return None
    notices: list[str] = []
    problems: list[str] = []
    nsizes = len(starts)
    pa = run.power_attrs
    bs, be = _float_attr(pa, "baseline_start_unix_s"), _float_attr(pa, "baseline_end_unix_s")
    baseline = (bs, be) if bs is not None and be is not None and be > bs else None
    finite_starts = starts[np.isfinite(starts)]
    finite_ends = ends[np.isfinite(ends)]
    sweep = (
        (float(finite_starts.min()), float(finite_ends.max()))
        if finite_starts.size and finite_ends.size
        else (math.nan, math.nan)
    )
    nodes: list[NodePower] = []
    full_series: list[tuple[np.ndarray, np.ndarray]] = []
    labels: list[str] = []
    for i, node in enumerate(run.power):
        where = f"{run.path.name}: /power/node{i}"
        host = str(node.attrs.get("host", "")) or f"node{i}"
        align, offset_note = _align_node(node.attrs, f"{where} ({host})", notices)
        series, infos = [], []
        for j, ch in enumerate(node.channels):
            t, p, info = _channel_series(ch, f"{where}/channel{j}", delay_override, align, problems)
            info.index = j
            infos.append(info)
            labels.append(info.label)
            if len(t):
                series.append((t, p))
        if not node.channels:
            problems.append(f"{where} ({host}): no meter channel: the node is left out of the job's power")
        elif not series:
            problems.append(f"{where} ({host}): no power samples: the node is left out of the job's power")
        if len(series) > 1:
            t, p = compute.resample_sum(series)
            if not len(t):
                problems.append(
                    f"{where} ({host}): its channels' sample times do not overlap: the node is left out"
                )
        elif series:
            t, p = series[0]
        else:
            t, p = np.zeros(0), np.zeros(0)
        interval = max((c.sample_interval_s for c in infos), default=1.0)
        if len(t):
            # one pass over the samples for every window: the sizes', the baseline, the whole sweep
            all_starts = np.concatenate([starts, [baseline[0] if baseline else np.nan, sweep[0]]])
            all_ends = np.concatenate([ends, [baseline[1] if baseline else np.nan, sweep[1]]])
            stats = compute.window_stats(t, p, all_starts, all_ends, interval)
            sizes, idle, active = (
                _take(stats, k) for k in (slice(0, nsizes), slice(nsizes, nsizes + 1), slice(-1, None))
            )
            full_series.append((t, p))
            plot_t, plot_w, _, _ = compute.decimate(t, p, PLOT_POINTS)
        else:
            sizes, idle, active = _empty_stats(nsizes), _empty_stats(1), _empty_stats(1)
            plot_t, plot_w = np.zeros(0), np.zeros(0)
        if baseline and len(t) and idle.flag[0] == FLAG_NONE:
            problems.append(f"{where} ({host}): no sample in or near the baseline window: no idle power")
        nodes.append(
            NodePower(
                index=i,
                host=host,
                channels=infos,
                interval_s=interval,
                samples=len(t),
                offset_note=offset_note,
                sizes=sizes,
                idle=idle,
                active=active,
                plot_t=np.asarray(plot_t, dtype=float),
                plot_w=np.asarray(plot_w, dtype=float),
            )
        )
    counted = [n for n in nodes if n.samples]
    if counted:
        job_w = np.sum([n.sizes.mean for n in counted], axis=0)
        job_sigma = np.sqrt(np.sum([n.sizes.sigma**2 for n in counted], axis=0))
        job_flag = np.max([n.sizes.flag for n in counted], axis=0).astype(np.int8)
        idle_w = float(np.sum([n.idle.mean[0] for n in counted]))
        idle_sigma = float(np.sqrt(np.sum([n.idle.sigma[0] ** 2 for n in counted])))
        active_w = float(np.sum([n.active.mean[0] for n in counted]))
        active_sigma = float(np.sqrt(np.sum([n.active.sigma[0] ** 2 for n in counted])))
    else:
        job_w, job_sigma = np.full(nsizes, np.nan), np.full(nsizes, np.nan)
        job_flag = np.full(nsizes, FLAG_NONE, np.int8)
        idle_w = idle_sigma = active_w = active_sigma = math.nan
    st, sw = compute.resample_sum(full_series)
    if len(full_series) > 1 and not len(st):
        notices.append("the nodes' sample times do not overlap: no summed power over time")
    series_t, series_w, series_min, series_max = compute.decimate(st, sw, PLOT_POINTS)
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
        active_w=active_w,
        active_sigma_w=active_sigma,
        baseline=baseline,
        labels=labels,
        caveat=caveat_for(labels),
        series_t=np.asarray(series_t, dtype=float),
        series_w=np.asarray(series_w, dtype=float),
        series_min_w=np.asarray(series_min, dtype=float),
        series_max_w=np.asarray(series_max, dtype=float),
        notices=notices,
        problems=problems,
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
