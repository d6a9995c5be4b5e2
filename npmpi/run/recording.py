"""Rank 0's recording of a run: the file's attributes, the power groups and baselines, the sweep
written row by row, and the file closed with its status whatever ends the run.

`Recording(setup).run()` is what rank 0 does as the first pair's transmitter once every rank has
agreed on the options (npmpi/cli.py); a failure still leaves every completed size in the file.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from npmpi.commands.filerecording import job_attrs, layout_rows, power_collector
from npmpi.commands.recordingsequence import RecordingSequence
from npmpi.core import sampling
from npmpi.core.config import Options
from npmpi.core.slurmcontext import consumed_energy_attrs
from npmpi.persize.kernels import Kernel
from npmpi.persize.links import protocol_attrs
from npmpi.runfile.format import KIND_RUN


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
    stop: Any  # npmpi.core.messages.StopFlag
    power_nodes: list[dict]  # each power rank's meters (npmpi.power.nodemeters), in node order
    calibration: dict | None
    thread_levels: list[tuple[int, bool]]  # (provided level, runs threads) of every rank
    reservation: Any  # the run file's temporary (npmpi.core.outpath.reserve_output)
    link: Any = None  # rank 0's npmpi.core.protocol.Link to its peer (the run's protocol)
    link_settings: list | None = None  # every rank's Link.settings() (None: no link)


def provenance(
    MPI, opts, argv: list[str], layout, kernel_note: str, clock, kind: str = KIND_RUN
) -> dict[str, Any]:
    """The run file's root attributes on how and where it was run (docs/file-format.md): what every
    kind records (job_attrs), the options, the mode and the kernel."""
    return {
        **job_attrs(MPI, argv, layout, clock, kind),
        "options_json": opts.to_dict(),
        **mode_attrs(opts, layout),
        "kernel": opts.kernel,
        "kernel_note": kernel_note,
        "timing_comparable": not opts.integrity,
        "pair_ranks": np.array(layout.pair, dtype=np.int64),
        "pair_crosses_nodes": bool(layout.pair_crosses_nodes),
        "all_pair_ranks": np.array([r for pair in layout.pairs for r in pair], dtype=np.int64),
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


def buffers_note(opts: Options) -> str:
    """What the file and the console say of pending receives sharing a buffer: --buffers osu's
    arrangement, or the sizes from which a window's messages share the pool's regions; "" when every
    message in flight has its own."""
    from npmpi.core.buffers import OSU_NOTE
    from npmpi.core.modes import shared_from_bytes

    if opts.messages_per_iteration <= 1:
        return ""
    if opts.one_region:
        return OSU_NOTE
    shared = shared_from_bytes(
        opts.mode, opts.window, opts.cache_cold, opts.pool_bytes, opts.largest_message_bytes
    )
    if not shared:
        return ""
    return (
        f"from {shared} B the {opts.messages_per_iteration} messages of a window share fewer regions of the "
        f"{opts.pool_bytes >> 20} MiB pool than there are messages: receives pending into one region are "
        "outside MPI's rules there (as --buffers osu's); OSU's -b multiple gives each its own buffer"
    )


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
        "buffers_note": buffers_note(opts),
        "huge_pages": opts.huge_pages,
        "thp_policy": thp_policy(),
        "bytes_per_iteration_factor": factors.bytes_per_iteration_factor,
        "one_way_divisor": factors.one_way_factor,
    }


class Recording(RecordingSequence):
    """Rank 0's run from the file's creation to its close; `run()` returns the exit status."""

    def __init__(self, setup: RunSetup) -> None:
        from npmpi.commands.console import Console
        from npmpi.persize import transmitter as sweep

        s = self.setup = setup
        opts = self.opts = s.opts
        self.attrs = provenance(s.MPI, opts, s.argv, s.layout, s.kernel.note, s.kernel.measure_clock())
        self.attrs.update(thread_attrs(opts, s.layout, s.thread_levels))
        self.attrs.update(protocol_attrs(opts, s.link_settings, s.layout.pairs))
        self.attrs.update(sampling.file_attrs(opts))
        self.points = sweep.schedule_for(opts)
        self.console = Console(quiet=opts.quiet)
        self.writer = None
        self.np_out = None  # --np-out: npmpi.core.npout.NpOutWriter
        self.transmitter = None
        self.comm, self.output, self.reservation = s.comm, s.output, s.reservation
        self.layout, self.stall_timeout_s = s.layout, opts.stall_timeout_s
        self.stop, self.power_nodes, self.calibration = s.stop, s.power_nodes, s.calibration
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
        opts = self.opts
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

    def _open(self) -> None:
        from npmpi.persize import transmitter as sweep
        from npmpi.runfile.writer import RunWriter

        s, opts = self.setup, self.opts
        self.transmitter = sweep.Transmitter(s.comm, s.layout, opts, s.kernel, s.stop, self.on_row, s.link)
        self.writer = RunWriter(
            s.output,
            self.attrs,
            layout_rows(s.layout, s.thread_levels),
            sampling.trials_bound(opts),
            overwrite=opts.force,
            pairs=len(s.layout.pairs),
            reservation=s.reservation,
            sort_rows=opts.size_order == sampling.ORDER_RANDOM,
        )
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

    def _announce(self) -> None:
        self.console.header(self.attrs, self.layout, self.opts, self.points, self.output)
        if self.attrs["thread_level_note"]:
            self.console.note(self.attrs["thread_level_note"])

    def _watchdog(self):
        """Rank 0's stall watchdog around the sweep (npmpi/persize/watchdog.py), its bound's rule stored."""
        from npmpi.persize.watchdog import INTEGRITY_CHECK_S, STALL_FACTOR, StallWatchdog

        s = self.setup
        self.transmitter.progress.check_s = INTEGRITY_CHECK_S if s.opts.integrity else 0.0
        self.writer.set_attrs(stall_timeout_s=s.opts.stall_timeout_s, stall_bound_factor=STALL_FACTOR)
        partner_of = {a: b for pair in s.layout.pairs[1:] for a, b in (pair, pair[::-1])}
        progress = self.transmitter.progress
        return StallWatchdog(progress, s.opts.stall_timeout_s, list(s.layout.hosts), partner_of, self.stalled)

    def _measure(self):
        return self.transmitter.sweep(self.points)

    def _measurer(self):
        return self.transmitter

    def _closing(self, outcome) -> None:
        if not self.stop:  # Slurm's own count of the step's energy, beside npmpi's (absent: said why)
            self.writer.set_attrs(**consumed_energy_attrs(os.environ))
        if self.np_out is not None:
            self.np_out.close()

    def _finish_attrs(self, outcome) -> dict[str, Any]:
        return {"stopped_early": outcome.stopped_early}

    def _after_release(self) -> None:
        if self.setup.link is not None:
            self.setup.link.close()
