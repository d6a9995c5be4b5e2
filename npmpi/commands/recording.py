"""Rank 0's recording of a run: the file's attributes, the power groups and baselines, the sweep
written row by row, and the file closed with its status whatever ends the run.

`Recording(setup).run()` is what rank 0 does as the first pair's transmitter once every rank has
agreed on the options (npmpi/cli.py); a failure still leaves every completed size in the file.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import os
import platform
import time
from dataclasses import dataclass
from typing import Any

from npmpi.commands.filerecording import FileRecording, now_utc, power_collector
from npmpi.core.config import DEFAULT_BASELINE_S, Options
from npmpi.core.slurmcontext import consumed_energy_attrs, context_attrs
from npmpi.power.fabric import fabric_group_attrs, fabric_info
from npmpi.runfile.format import FABRIC_GROUP
from npmpi.sweep.kernels import Kernel
from npmpi.sweep.links import protocol_attrs


@dataclass
class RunSetup:
    """What rank 0 records a run with, agreed on by every rank before anything is written."""

    MPI: Any
    comm: Any
    opts: Options
    argv: list[str]
    layout: Any
    kernel: Kernel
    output: str
    stop: Any  # npmpi.core.protocol.StopFlag
    power_nodes: list[dict]  # each power rank's meters (npmpi.power.ranks), in node order
    calibration: dict | None
    thread_levels: list[tuple[int, bool]]  # (provided level, runs threads) of every rank
    reservation: Any  # the run file's temporary (npmpi.core.outpath.reserve_output)
    link: Any = None  # rank 0's npmpi.sweep.links.Link to its peer (the run's protocol)
    link_settings: list | None = None  # every rank's Link.settings() (None: no link)


def provenance(MPI, opts: Options, argv: list[str], layout, kernel_note: str, clock) -> dict[str, Any]:
    """The run file's root attributes on how and where it was run (docs/file-format.md)."""
    import h5py
    import mpi4py
    import numpy

    from npmpi import __version__

    version = MPI.Get_version()
    return {
        "npmpi_version": __version__,
        "created_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "command_line": " ".join(["python", "-m", "npmpi", *argv]),
        "argv": list(argv) if argv else "",
        "options_json": opts.to_dict(),
        **mode_attrs(opts, layout),
        "kernel": opts.kernel,
        "kernel_note": kernel_note,
        "timing_comparable": not opts.integrity,
        "world_size": layout.world_size,
        "node_count": layout.node_count,
        "pair_ranks": numpy.array(layout.pair, dtype=numpy.int64),
        "pair_crosses_nodes": bool(layout.pair_crosses_nodes),
        "all_pair_ranks": numpy.array([r for pair in layout.pairs for r in pair], dtype=numpy.int64),
        "mpi_library_version": MPI.Get_library_version().replace("\x00", "").strip(),
        "mpi_standard_version": f"{version[0]}.{version[1]}",
        "mpi4py_version": mpi4py.__version__,
        "numpy_version": numpy.__version__,
        "h5py_version": h5py.__version__,
        "hdf5_version": h5py.version.hdf5_version,
        "python_version": platform.python_version(),
        "platform": platform.platform(),
        **context_attrs(os.environ),
        "clock_name": clock.name,
        "clock_resolution_s": clock.resolution_s,
        "clock_smallest_step_s": clock.smallest_step_s,
        "clock_read_cost_s": clock.read_cost_s,
    }


def thread_attrs(opts: Options, layout, thread_levels: list[tuple[int, bool]]) -> dict[str, Any]:
    """Root attributes on the MPI thread levels: what was asked, what the pair got, and a note when
    a rank that samples meters got MPI_THREAD_SINGLE (its launcher did not say which rank it was)."""
    from npmpi.commands.threadlevel import level_name

    a, b = layout.pair
    note = ""
    short = [r for r, (provided, threads) in enumerate(thread_levels) if threads and provided < 1]
    if short:
        note = (
            f"rank {short[0]} samples meters in threads but got MPI_THREAD_SINGLE (the launcher did not "
            "tell it was a power rank); its threads never call MPI. Add --thread-level funneled to be strict"
        )
    return {
        "thread_level_requested": opts.thread_level,
        "thread_level_pair": f"{level_name(thread_levels[a][0])},{level_name(thread_levels[b][0])}",
        "thread_level_note": note,
    }


def mode_attrs(opts: Options, layout) -> dict[str, Any]:
    """The mode's root attributes (docs/file-format.md), with the number of pairs actually run."""
    from npmpi.core.buffers import thp_policy

    pairs = len(layout.pairs)
    factors = opts.mode_value.factors(opts.window, pairs)
    return {
        "mode": opts.mode,
        "window": opts.window,
        "pairs": pairs,
        "async": bool(opts.async_),
        "cache_cold": bool(opts.cache_cold),
        "cache_pool_bytes": opts.pool_bytes if opts.cache_cold else 0,
        "buffers": opts.buffers,
        "huge_pages": opts.huge_pages,
        "thp_policy": thp_policy(),
        "bytes_per_iteration_factor": factors.bytes_per_iteration_factor,
        "one_way_divisor": factors.one_way_factor,
    }


def layout_rows(layout, thread_levels: list[tuple[int, bool]]) -> dict[str, list]:
    """The per-rank rows of the file's layout table."""
    from npmpi.commands.threadlevel import level_name

    return {
        "host": list(layout.hosts),
        "node_index": list(layout.node_of_rank),
        "role": list(layout.roles),
        "thread_level": [level_name(provided) for provided, _ in thread_levels],
    }


def power_setup(writer, collector, layout, power_nodes, opts, console, stop=None) -> float:
    """Create the power groups, measure clock offsets, record the idle baseline; returns baseline s."""
    from npmpi.power.baseline import store_baseline

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
        window = collector.baseline(baseline_s, stop, "the idle baseline before the measurements")
        store_baseline(writer, layout, window, after=False)
    return baseline_s


def auto_attrs(info: dict) -> dict[str, str]:
    """A node's `--meter auto` choice (format 1.6): every kind's outcome as JSON, and its one line."""
    if not info.get("auto"):
        return {}
    import json

    return {"meter_auto": json.dumps(info["auto"]), "meter_auto_summary": info.get("auto_summary", "")}


def final_power(writer, collector, layout, power_nodes, opts, calibration, outcome, console, stop) -> None:
    """After the sweep: the baseline after it (not when interrupted: mpirun may kill the job at
    any moment), the last samples, the clock offsets at the end."""
    from npmpi.power.baseline import after_baseline_s, store_baseline
    from npmpi.power.calibration import largest_delay_s

    collector.collect()
    if outcome.status == "complete" and not stop:
        baseline_s = opts.baseline_s if opts.baseline_s is not None else DEFAULT_BASELINE_S
        seconds = after_baseline_s(baseline_s, power_nodes, largest_delay_s(calibration, layout, power_nodes))
        if seconds > 0:
            console.note(f"recording {seconds:g} s of idle power after the sweep")
            window = collector.baseline(seconds, stop, "the idle baseline after the measurements")
            store_baseline(writer, layout, window, after=True)
        if collector.lost and outcome.status == "complete":  # a frozen power rank, gone on without
            outcome.message = collector.lost_message()
        if stop:  # a stop signal during that baseline: the file says so, though every size was measured
            outcome.status = "interrupted"
            outcome.message = f"{stop.name} received during the idle baseline after the sweep"
            outcome.exit_code = 128 + int(stop.signum or 0)
    fabric = fabric_info(power_nodes)
    store_offsets(writer, collector.clock_offsets(), "end", fabric[0] if fabric else None)


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


class Recording(FileRecording):
    """Rank 0's run from the file's creation to its close; `run()` returns the exit status."""

    def __init__(self, setup: RunSetup) -> None:
        from npmpi.commands.console import Console
        from npmpi.sweep import transmitter as sweep

        s = self.setup = setup
        opts = s.opts
        self.attrs = provenance(s.MPI, opts, s.argv, s.layout, s.kernel.note, s.kernel.measure_clock())
        self.attrs.update(thread_attrs(opts, s.layout, s.thread_levels))
        self.attrs.update(protocol_attrs(opts, s.link_settings, s.layout.pairs))
        self.points = sweep.schedule_for(opts)
        self.console = Console(quiet=opts.quiet)
        self.writer = None
        self.np_out = None  # --np-out: npmpi.core.npout.NpOutWriter
        self.transmitter = None
        self.comm, self.output, self.reservation = s.comm, s.output, s.reservation
        self.layout, self.stall_timeout_s = s.layout, opts.stall_timeout_s
        self.collector = power_collector(s.comm, s.layout, s.power_nodes, opts.stall_timeout_s)
        # the analysis flags a size 'short' when its window (first trial start to last trial end) is
        # shorter than a channel's interval (its sample interval, or the span its readings average)
        self.longest_interval = max(
            (
                max(float(c["sample_interval_s"]), float(c.get("averaging_s") or 0.0))
                for p in s.power_nodes
                for c in p["channels"]
            ),
            default=None,
        )
        super().__init__()  # the clock of the run's elapsed time starts here

    def on_row(self, index, row) -> None:
        """One size measured: into the file, the samples since collected, a line on the console."""
        opts = self.setup.opts
        self.transmitter.progress.quiet()  # the file is written now: the stall watchdog must not act
        self.writer.append(row)
        if self.collector is not None:
            self.collector.collect(opts.trials * opts.target_time_s if opts.repeats is None else 0.0)
            window_s = max(row.trial_end_unix_s) - min(row.trial_start_unix_s)
            if self.longest_interval is not None and window_s < self.longest_interval:
                self.console.short_trials(row.size_bytes, window_s, self.longest_interval)
        self.console.row(index, row)
        if self.np_out is not None:
            problem = self.np_out.write(row.size_bytes, row.iterations, list(row.trial_s))
            if problem:
                self.console.note(f"npmpi: note: {problem}")

    def mark_file(self, message: str) -> None:
        """Mark the file interrupted at once (a stop signal; mpirun may kill the job any moment)."""
        with contextlib.suppress(Exception), self.transmitter.progress.lock:  # never fail the stop
            self.writer.set_attrs(status="interrupted", status_message=message)

    def _open(self) -> None:
        from npmpi.runfile.writer import RunWriter
        from npmpi.sweep import transmitter as sweep

        s, opts = self.setup, self.setup.opts
        self.transmitter = sweep.Transmitter(s.comm, s.layout, opts, s.kernel, s.stop, self.on_row, s.link)
        self.writer = RunWriter(
            s.output,
            self.attrs,
            layout_rows(s.layout, s.thread_levels),
            opts.trials,
            overwrite=opts.force,
            pairs=len(s.layout.pairs),
            reservation=s.reservation,
        )
        s.stop.mark_file = self.mark_file
        if opts.kernel == "c":  # a trial in one call: the handlers wait for its end (job.py's thread)
            s.stop.abandon = self.abandon
        if opts.np_out is not None:
            from npmpi.core.npout import NpOutWriter

            a = self.attrs
            self.np_out = NpOutWriter(
                opts.np_out,
                int(a["bytes_per_iteration_factor"]),
                int(a["one_way_divisor"]),
                opts.mode_value.np_out_bytes_factor == 2,
            )
            if self.np_out.problem:
                self.console.note(f"npmpi: note: {self.np_out.problem}")

    def _record(self) -> int:
        s, opts, console = self.setup, self.setup.opts, self.console
        self._open()
        writer, collector = self.writer, self.collector
        console.header(self.attrs, s.layout, opts, self.points, s.output)
        if self.attrs["thread_level_note"]:
            console.note(self.attrs["thread_level_note"])
        if collector is not None:
            power_setup(writer, collector, s.layout, s.power_nodes, opts, console, s.stop)
            if s.calibration is not None:
                from npmpi.power.calibration import apply_calibration

                notes = apply_calibration(writer, s.calibration, s.layout, s.power_nodes, opts.calibration)
                for line in notes:
                    console.note(line)
        with self._watchdog():
            outcome = self.transmitter.sweep(self.points)
        if collector is not None:
            final_power(
                writer, collector, s.layout, s.power_nodes, opts, s.calibration, outcome, console, s.stop
            )
        if not s.stop:  # Slurm's own count of the step's energy, beside npmpi's (absent: said why)
            writer.set_attrs(**consumed_energy_attrs(os.environ))
        if self.np_out is not None:
            self.np_out.close()
        # every rank released and its end reported before the file says how the run ended: a rank
        # stopped now is named, the file failed (RankStalled), not a job hung in MPI_Finalize
        self._release_all(outcome.exit_code)
        elapsed = time.monotonic() - self.started
        writer.finish(
            outcome.status,
            outcome.message,
            stopped_early=outcome.stopped_early,
            elapsed_s=elapsed,
            finished_utc=now_utc(),
        )
        console.summary(outcome, s.output, elapsed, collector)
        if collector is not None:
            collector.end_job_if_lost(outcome.exit_code)
        return outcome.exit_code

    def _watchdog(self):
        """Rank 0's stall watchdog around the sweep (npmpi/sweep/watchdog.py), its bound's rule stored."""
        from npmpi.sweep.watchdog import INTEGRITY_CHECK_S, STALL_FACTOR, StallWatchdog

        s = self.setup
        self.transmitter.progress.check_s = INTEGRITY_CHECK_S if s.opts.integrity else 0.0
        self.writer.set_attrs(stall_timeout_s=s.opts.stall_timeout_s, stall_bound_factor=STALL_FACTOR)
        partner_of = {a: b for pair in s.layout.pairs[1:] for a, b in (pair, pair[::-1])}
        progress = self.transmitter.progress
        return StallWatchdog(progress, s.opts.stall_timeout_s, list(s.layout.hosts), partner_of, self.stalled)

    def _watched(self):
        return self.transmitter.progress if self.transmitter is not None else None

    def _quiet(self) -> bool:
        return self.transmitter is not None and not self.transmitter.stop.timing

    def _release(self, code: int) -> bool:
        return self.transmitter is not None and self.transmitter.release(code)

    def _kept(self) -> str:
        return f"; {self.writer.rows} completed sizes are in {self.output}"
