"""What every kind's recording does with the power ranks (a run, a map, a group kind): the power
groups created, the clock offsets and the idle baseline before; the baseline after, the last samples
and the offsets at the end (docs/file-format.md, "/power")."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from npmpi.core.config import DEFAULT_BASELINE_S
from npmpi.power.fabric import fabric_group_attrs, fabric_info
from npmpi.runfile.format import FABRIC_GROUP


@dataclass
class PowerSession:
    """What a recording's power is recorded with, from the power groups' creation to the offsets at
    the end: its file's writer, rank 0's collector, the layout, each power rank's meters (in node
    order), the options (`baseline_s`, `sample_interval_s`, `calibration`), the calibration document
    (None: none), the console and the stop flag."""

    writer: Any
    collector: Any  # npmpi.power.rank.PowerCollector
    layout: Any  # npmpi.core.layout.Layout
    power_nodes: list[dict]
    opts: Any
    calibration: dict | None
    console: Any
    stop: Any = None  # npmpi.core.messages.StopFlag


def power_setup(session: PowerSession) -> float:
    """Create the power groups, measure clock offsets, record the idle baseline, apply the meters'
    calibration (its notes on the console); returns the baseline's seconds."""
    from npmpi.power.baseline import store_baseline

    p = session
    writer, collector, layout, power_nodes, opts, console = (
        p.writer,
        p.collector,
        p.layout,
        p.power_nodes,
        p.opts,
        p.console,
    )

    node_attrs, channels = [], []
    for node, (rank, info) in enumerate(zip(layout.power_ranks, power_nodes, strict=True)):
        node_attrs.append(
            {
                "host": layout.hosts[rank],
                "node_index": node,
                "power_rank": rank,
                "meter_specs": list(info["specs"]),
                "meters_skipped": list(info["skipped"]) or "",
                **auto_attrs(info),
                "boot_id": str(info.get("boot_id", "")),  # format 1.6: nodes that are one machine
                "machine_id": str(info.get("machine_id", "")),
            }
        )
        channels.append(info["channels"])
    fabric = fabric_info(power_nodes)
    baseline_s = opts.baseline_s if opts.baseline_s is not None else DEFAULT_BASELINE_S
    writer.create_power(
        {
            "baseline_requested_s": baseline_s,
            "sample_interval_requested_s": opts.sample_interval_s
            if opts.sample_interval_s is not None
            else "natural",
        },
        node_attrs,
        channels,
    )
    if fabric is not None:
        node, info = fabric
        writer.create_fabric(fabric_group_attrs(node, info, layout.hosts[info["rank"]]), info["channels"])
    collector.writer = writer
    store_offsets(writer, collector.clock_offsets(), "start", fabric[0] if fabric else None)
    console.power_header(node_attrs, channels)
    if fabric is not None:
        console.fabric_header(fabric[1])
    if baseline_s > 0:
        console.note(f"recording {baseline_s:g} s of idle baseline power")
        window = collector.baseline(baseline_s, p.stop, "the idle baseline before the measurements")
        store_baseline(writer, layout, window, after=False)
    if p.calibration is not None:
        from npmpi.power.calibration import apply_calibration

        for line in apply_calibration(writer, p.calibration, layout, power_nodes, opts.calibration):
            console.note(line)
    return baseline_s


def auto_attrs(info: dict) -> dict[str, str]:
    """A node's `--meter auto` choice (format 1.6): every kind's outcome as JSON, and its one line."""
    if not info.get("auto"):
        return {}
    import json

    return {"meter_auto": json.dumps(info["auto"]), "meter_auto_summary": info.get("auto_summary", "")}


def final_power(session: PowerSession, outcome) -> None:
    """After the sweep: the baseline after it (not when interrupted: mpirun may kill the job at
    any moment), the last samples, the clock offsets at the end; `outcome`'s status, message and
    exit code say a stop during that baseline or a power rank gone on without."""
    from npmpi.power.baseline import after_baseline_s, store_baseline
    from npmpi.power.calibration import largest_delay_s

    p = session
    writer, collector, layout, power_nodes, stop = p.writer, p.collector, p.layout, p.power_nodes, p.stop
    collector.collect()
    seconds = 0.0
    if outcome.status == "complete" and not stop:
        baseline_s = p.opts.baseline_s if p.opts.baseline_s is not None else DEFAULT_BASELINE_S
        delay_s = largest_delay_s(p.calibration, layout, power_nodes)
        seconds = after_baseline_s(baseline_s, power_nodes, delay_s)
        if seconds > 0:
            p.console.note(f"recording {seconds:g} s of idle power after the sweep")
            window = collector.baseline(seconds, stop, "the idle baseline after the measurements")
            store_baseline(writer, layout, window, after=True)
        if stop:  # a stop signal during that baseline: the file says so, though every size was measured
            stop.mark_interrupted(outcome, " during the idle baseline after the sweep")
    fabric = fabric_info(power_nodes)
    store_offsets(writer, collector.clock_offsets(), "end", fabric[0] if fabric else None)
    if collector.lost:  # a frozen power rank, gone on without: the job ends with MPI_Abort (failed)
        lost = lost_power_message(collector, layout, outcome, seconds)
        if outcome.status == "complete":
            outcome.status, outcome.message, outcome.exit_code = "failed", lost, 1
        else:
            outcome.message = f"{outcome.message}; {lost}" if outcome.message else lost


def lost_power_message(collector, layout, outcome, after_s: float) -> str:
    """The status message of a recording that went on without a power rank (it ends with MPI_Abort:
    a stopped process never reaches MPI_Finalize): who stopped answering, when the samples rank 0 has
    of it end, what of its node's power is missing; every size (or round) is kept (docs/power.md)."""
    import datetime as dt

    rows = getattr(outcome, "rows", None)  # a run's or a group kind's sizes; a map has rounds
    unit = "size" if rows is not None else "round"
    parts = []
    for rank, (since, why) in collector.lost.items():
        node = collector.power_ranks.index(rank)
        beats = [b for (n, _), b in collector.heartbeats.items() if n == node]
        ticks = [b.last_tick for b in beats if b.last_tick is not None]
        last = max(ticks) if ticks else since  # no batch ever came: from when rank 0 gave up
        stamp = dt.datetime.fromtimestamp(last, dt.timezone.utc).strftime("%H:%M:%S UTC")
        missing = "no samples to the end"
        if rows:
            hit = sum(1 for r in rows if max(r.trial_end_unix_s) >= last)
            missing = f"none for the last {hit} of the {len(rows)} sizes (flagged 'recorded gap')"
        if after_s > 0:
            missing += " nor in its idle baseline after the sweep"
        parts.append(
            f"{why}: its samples end at {stamp} (the last it handed over), so node {node} "
            f"({layout.hosts[rank]}) has no power from then on: {missing}, a gap to the end in its channels"
        )
    return f"{'; '.join(parts)}; every {unit} was measured and is kept, with the power up to then"


def store_offsets(writer, offsets, which: str, fabric_node: int | None = None) -> None:
    """Each power node's clock offset from rank 0 (`which`: start or end) as its group's attributes;
    the fabric's (/power/fabric) are those of the node whose power rank samples it."""
    for node, off in enumerate(offsets):
        attrs = {
            f"clock_offset_{which}_s": off.offset_s,
            f"clock_offset_{which}_uncertainty_s": off.uncertainty_s,
            f"clock_offset_{which}_round_trip_s": off.round_trip_s,
            f"clock_offset_{which}_measured_unix_s": off.measured_unix_s,
        }
        writer.set_group_attrs(f"power/node{node}", **attrs)
        if node == fabric_node:
            writer.set_group_attrs(f"power/{FABRIC_GROUP}", **attrs)
    writer.flush()
