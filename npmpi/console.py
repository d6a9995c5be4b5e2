"""What rank 0 prints: a header, one NetPIPE-style line per size, a summary."""

from __future__ import annotations

import sys

from npmpi.runfile import SizeResult
from npmpi.units import format_size_bytes, mbps_netpipe


class Console:
    def __init__(self, quiet: bool = False, stream=None) -> None:
        self.quiet = quiet
        self.stream = stream or sys.stdout
        self.best: tuple[float, int] | None = None  # (bytes per second, size)
        self.first: tuple[float, int] | None = None  # (one-way seconds, size)

    def _print(self, text: str) -> None:
        if not self.quiet:
            print(text, file=self.stream, flush=True)

    def header(self, attrs: dict, layout, opts, points, output: str) -> None:
        lib = str(attrs["mpi_library_version"]).splitlines()[0].split(",")[0]
        where = "across nodes" if layout.pair_crosses_nodes else "within one node"
        self._print(
            f"npmpi {attrs['npmpi_version']}: ping-pong, {opts.kernel} kernel, {lib} "
            f"(MPI {attrs['mpi_standard_version']}), Python {attrs['python_version']}"
        )
        self._print(
            f"ranks: {layout.world_size} on {layout.node_count} node(s); pair {layout.pair[0]} <-> "
            f"{layout.pair[1]} {where}"
        )
        for line in layout.describe():
            self._print(f"  {line}")
        reps = (
            f"{opts.repeats} round trips per trial"
            if opts.repeats
            else f"target {opts.target_time_s:g} s per trial"
        )
        self._print(
            f"sizes: {len(points)} from {format_size_bytes(points[0].size_bytes)}B to "
            f"{format_size_bytes(points[-1].size_bytes)}B (perturbation {opts.perturbation_bytes}), "
            f"{opts.trials} trials each, {reps}"
            + ("; --integrity: every message verified, timings not comparable" if opts.integrity else "")
        )
        self._print(
            f"clock: {attrs['clock_name']}, resolution {attrs['clock_resolution_s']:.3g} s, "
            f"read cost {attrs['clock_read_cost_s'] * 1e9:.0f} ns"
        )
        self._print(f"output: {output}")
        self._print("Mbps = 2^20 bit/s as NetPIPE prints it; usec = one-way time of the best trial")

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
            if any(c["label"] != "measured" for c in chans):
                self._print("  note: estimated or simulated power is not a measurement; it is labelled so")

    def short_trials(self, size: int, trial_s: float, interval_s: float) -> None:
        if getattr(self, "_warned_short", False):
            return
        self._warned_short = True
        print(
            f"npmpi: note: trials at {size} B last {trial_s:.3g} s, less than the {interval_s:g} s sample "
            "interval: their power comes from several trials (the analysis flags such sizes)",
            file=sys.stderr,
            flush=True,
        )

    def row(self, index: int, row: SizeResult) -> None:
        one_way = min(row.trial_s) / (2 * row.iterations)
        rate = row.size_bytes / one_way
        if self.best is None or rate > self.best[0]:
            self.best = (rate, row.size_bytes)
        if self.first is None:
            self.first = (one_way, row.size_bytes)
        self._print(
            f"{index:3d}: {row.size_bytes:9d} bytes {row.iterations:8d} times --> "
            f"{mbps_netpipe(row.size_bytes, one_way):10.2f} Mbps in {one_way * 1e6:10.2f} usec"
        )

    def summary(self, outcome, output: str, elapsed_s: float, collector=None) -> None:
        if self.best is not None and self.first is not None:
            rate, size = self.best
            self._print(
                f"peak bandwidth {rate * 8 / 1e9:.3f} Gbit/s ({rate / 1e6:.1f} MB/s) at {size} B; "
                f"latency {self.first[0] * 1e6:.3f} us at {self.first[1]} B (one-way)"
            )
        if collector is not None:
            self._print(
                f"power: {collector.samples_total} samples from {len(collector.power_ranks)} node(s), "
                f"{collector.faults_total} meter fault event(s)"
            )
        if outcome.stopped_early:
            self._print(f"stopped early: {outcome.stopped_early}")
        self._print(f"{len(outcome.rows)} sizes in {elapsed_s:.1f} s, status {outcome.status}: {output}")
        if outcome.status != "complete":
            print(
                f"npmpi: {outcome.message}; the {len(outcome.rows)} completed sizes are in {output}",
                file=sys.stderr,
                flush=True,
            )
