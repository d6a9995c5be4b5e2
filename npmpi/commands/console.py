"""What rank 0 prints: a header, one NetPIPE-style line per size, a summary."""

from __future__ import annotations

import sys

from npmpi.core.safetext import printable
from npmpi.core.units import format_size_iec, mbps_netpipe
from npmpi.runfile.format import SizeResult

MAX_SHORT_SHOWN = 12  # sizes named in the summary's line on sizes shorter than a meter's interval


class Console:
    def __init__(self, quiet: bool = False, stream=None) -> None:
        self.quiet = quiet
        self.stream = stream or sys.stdout
        self.best: tuple[float, int] | None = None  # (bytes per second, size)
        self.first: tuple[float, int] | None = None  # (one-way seconds, size)
        self.factor, self.one_way_factor = 2, 2  # ping-pong until the header says otherwise
        self.bandwidth_label = "bandwidth"
        self.latency_label = "latency (one-way)"
        self.short_sizes: list[int] = []  # sizes the analysis will flag 'short' (npmpi.run.recording)

    def _print(self, text: str) -> None:
        if not self.quiet:
            print(printable(text), file=self.stream, flush=True)  # names, paths: never raw

    def header(self, attrs: dict, layout, opts, points, output: str) -> None:
        from npmpi.protocols import protocol_named

        lib = str(attrs["mpi_library_version"]).splitlines()[0].split(",")[0]
        mode = opts.mode_value
        pairs = int(attrs.get("pairs", 1))
        self.factor = int(attrs.get("bytes_per_iteration_factor", 2))
        self.one_way_factor = int(attrs.get("one_way_divisor", 2))
        window = int(attrs.get("window", 1))
        self.bandwidth_label = mode.labelled(mode.bandwidth_label, window) + (
            f", aggregate of {pairs} pairs" if pairs > 1 else ""
        )
        self.latency_label = mode.labelled(mode.latency_label, window)
        if mode.window_optional and window > 1:  # bidir's window in flight each way: no latency
            self.latency_label = f"time per message (window {window} each way, 1 / the message rate)"
        mode_text = mode.describe(
            window,
            pairs,
            bool(attrs.get("async")),
            bool(attrs.get("cache_cold")),
        )
        if protocol_named(opts.protocol).in_header:  # the layer the timed loop goes through
            mode_text = f"{mode_text} over {opts.protocol}"
        self._print(
            f"npmpi {attrs['npmpi_version']}: {mode_text}, {opts.kernel} kernel, {lib} "
            f"(MPI {attrs['mpi_standard_version']}), Python {attrs['python_version']}"
        )
        if pairs > 1:
            crossing = layout.pairs_crossing_nodes
            self._print(
                f"ranks: {layout.world_size} on {layout.node_count} node(s); pairs "
                + ", ".join(f"{a} <-> {b}" for a, b in layout.pairs)
                + f" ({crossing} of {pairs} across nodes)"
            )
        else:
            where = "across nodes" if layout.pair_crosses_nodes else "within one node"
            self._print(
                f"ranks: {layout.world_size} on {layout.node_count} node(s); pair {layout.pair[0]} <-> "
                f"{layout.pair[1]} {where}"
            )
        for line in layout.describe():
            self._print(f"  {line}")
        unit = mode.repeats_unit
        reps = (
            f"{opts.repeats} {unit} per trial"
            if opts.repeats
            else f"iterations by NetPIPE's rule, run time {opts.target_time_s:g} s per trial"
        )
        self._print(
            f"sizes: {len(points)} from {format_size_iec(points[0].size_bytes)} to "
            f"{format_size_iec(points[-1].size_bytes)} (perturbation {opts.perturbation_bytes} B), "
            f"{opts.trials} trials each, {reps}"
            + ("; --integrity: every message verified, timings not comparable" if opts.integrity else "")
        )
        note = str(attrs.get("buffers_note", ""))
        if note:
            self._print(f"buffers: {opts.buffers}: {note}")
        self._print(
            f"clock: {attrs['clock_name']}, resolution {attrs['clock_resolution_s']:.3g} s, "
            f"read cost {attrs['clock_read_cost_s'] * 1e9:.0f} ns"
        )
        self._print(f"output: {output}")
        self._print(
            f"Mbps = {self.bandwidth_label} in NetPIPE's 2^20 bit/s, as NPopenmpi prints it; usec = "
            f"{self.latency_label} in the best trial (summary and files: decimal SI, Gbit/s = 10^9 bit/s)"
        )

    def note(self, text: str) -> None:
        self._print(text)

    def power_header(self, nodes: list[dict], channels: list[list[dict]]) -> None:
        for node, chans in zip(nodes, channels, strict=True):
            parts = [f"{c['kind']} ({c['label']}, every {c['sample_interval_s']:g} s)" for c in chans]
            self._print(
                f"power: node {node['node_index']} ({node['host']}), rank {node['power_rank']}: "
                + (", ".join(parts) or "no meter")
            )
            for reason in node.get("meters_skipped") or []:
                self._print(f"  skipped (--meter-optional): {reason}")
            if node.get("meter_auto_summary"):
                self._print(f"  {node['meter_auto_summary']}")
            for c in chans:
                if not c.get("in_node_total", True):
                    self._print(f"  not in the node's total: {c['spec']}: {c['node_total_note']}")
            if any(c["label"] != "measured" for c in chans):
                self._print("  note: estimated or simulated power is not a measurement; it is labelled so")

    def fabric_header(self, fabric: dict) -> None:
        """The fabric meters (--fabric-meter) and the power rank that samples them."""
        chans = fabric["channels"]
        parts = [f"{c['kind']} ({c['label']}, every {c['sample_interval_s']:g} s)" for c in chans]
        self._print(f"power: fabric, sampled by rank {fabric['rank']}: " + (", ".join(parts) or "no meter"))
        for reason in fabric.get("skipped") or []:
            self._print(f"  skipped (--meter-optional): {reason}")

    def short_trials(self, size: int, window_s: float, interval_s: float) -> None:
        """A size whose trials together last less than a meter's interval: the analysis flags it
        'short'. The first is noted at once, all of them in the summary."""
        self.short_sizes.append(size)
        if len(self.short_sizes) > 1 or self.quiet:  # -q: nothing but errors (the analysis flags them)
            return
        print(
            f"npmpi: note: the trials of {size} B last {window_s:.3g} s in all, less than the "
            f"{interval_s:g} s sample interval: their power comes from the nearest samples (the "
            "analysis flags such sizes 'short'; the summary lists them)",
            file=sys.stderr,
            flush=True,
        )

    def row(self, index: int, row: SizeResult) -> None:
        best = min(row.trial_s)
        one_way = best / (self.one_way_factor * row.iterations)
        rate = self.factor * row.size_bytes * row.iterations / best  # bytes per second, as the mode counts
        if self.best is None or rate > self.best[0]:
            self.best = (rate, row.size_bytes)
        if self.first is None:
            self.first = (one_way, row.size_bytes)
        self._print(
            f"{index:3d}: {row.size_bytes:9d} bytes {row.iterations:8d} times --> "
            f"{mbps_netpipe(self.factor * row.size_bytes * row.iterations, best):10.2f} Mbps in "
            f"{one_way * 1e6:10.2f} usec"
        )

    def summary(self, outcome, output: str, elapsed_s: float, collector=None) -> None:
        if self.best is not None and self.first is not None:
            rate, size = self.best
            self._print(
                f"peak {self.bandwidth_label} {rate * 8 / 1e9:.3f} Gbit/s ({rate / 1e6:.1f} MB/s) "
                f"at {size} B; "
                f"{self.latency_label} {self.first[0] * 1e6:.3f} us at {self.first[1]} B"
            )
        if collector is not None:
            self._print(
                f"power: {collector.samples_total} samples from {len(collector.power_ranks)} node(s), "
                f"{collector.faults_total} distinct meter fault(s), "
                f"{collector.fault_events_total} occurrence(s) "
                "(each printed once; counts in the file)"
            )
        short = self.short_sizes
        if short:
            shown = ", ".join(str(n) for n in short[:MAX_SHORT_SHOWN]) + (
                ", …" if len(short) > MAX_SHORT_SHOWN else ""
            )
            self._print(
                f"power: {len(short)} size(s) measured in less than a meter's interval, flagged 'short' by "
                f"the analysis (power from the nearest samples): {shown} B"
            )
        if outcome.stopped_early:
            self._print(f"stopped early: {outcome.stopped_early}")
        self._print(f"{len(outcome.rows)} sizes in {elapsed_s:.1f} s, status {outcome.status}: {output}")
        if outcome.status != "complete" and not (collector is not None and collector.lost):  # abort's line
            print(
                printable(f"npmpi: {outcome.message}; the {len(outcome.rows)} completed sizes are in ")
                + printable(output),
                file=sys.stderr,
                flush=True,
            )
