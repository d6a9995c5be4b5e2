"""A group kind (npmpi/kinds/group.py) as a benchmark kind, and rank 0's recording of it.

`GroupKind` gives everything but the step: every measuring rank in one group (every rank but the
power ranks), the shared options block (npmpi/kinds/options.py), rank 0's recording into a run file
whose rows the analysis reads as it reads a run's (format 1.8: root attribute `kind`, the bytes per
iteration and one-way divisor of the step, /pingpong rows, each member's own times), the power ranks
and baselines as in a run, the stall watchdog around every wait, and the end whatever ends it.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from npmpi.commands.filerecording import job_attrs, layout_rows, power_collector
from npmpi.commands.recordingsequence import RecordingSequence
from npmpi.core import sampling
from npmpi.core.errors import NpmpiError, UsageError
from npmpi.core.layout import Layout, Words
from npmpi.kinds.group import GroupCoordinator, GroupStep, serve_group
from npmpi.kinds.kind import Kind
from npmpi.kinds.options import GroupOptions, group_options, group_parser


class GroupKind(Kind):
    """A kind whose one measuring group is every rank but the power ranks; a subclass gives `name`,
    `description`, `step()` and its bytes per iteration (and `add_options` for its own)."""

    description = ""  # the --help text's first paragraph
    bytes_per_iteration_factor = 1  # bytes one iteration moves, in message sizes (the analysis's F)
    one_way_divisor = 1  # one_way_s = trial / (divisor x iterations): 1 = the time of one step
    least_members = 2

    @property
    def words(self) -> Words:  # type: ignore[override]
        return Words(
            needs=f"{self.name} needs {self.least_members} measuring ranks",
            takes_part=f"take part in the {self.name}",
            command=f"python -m npmpi {self.name} …",
            least=self.least_members,
        )

    @property
    def member_role(self) -> str:  # type: ignore[override]
        return self.name

    @property
    def file_kind(self) -> str:  # type: ignore[override]
        return self.name

    @property
    def stem_prefix(self) -> str:  # type: ignore[override]
        return f"{self.name}-"

    def add_options(self, parser) -> None:
        """The kind's own options (none by default)."""

    def extra_options(self, ns) -> Any:
        """The kind's own option values, checked (UsageError: one line), for GroupOptions.extra: a
        dataclass of the kind's own (coll's npmpi/coll/options.py), or a dict (the default, empty)."""
        return {}

    def parse(self, argv: list[str]) -> GroupOptions:
        from npmpi.commands.parser import parse_command_line

        parser = group_parser(self.name, self.description)
        self.add_options(parser)
        ns = parse_command_line(parser, argv)
        return group_options(ns, self.extra_options(ns))

    def groups(self, layout: Layout, opts: GroupOptions) -> Layout:
        members = tuple(layout.capable)
        if len(members) < self.least_members:  # node_layout checked the count: never here
            raise UsageError(f"{self.words.needs}: {len(members)} given")
        roles = tuple(self.member_role if r in members else role for r, role in enumerate(layout.roles))
        return replace(layout, roles=roles, groups=(members,))

    def step(self, opts: GroupOptions, agreed) -> GroupStep:
        """This member's step, on agreed.group_comm."""
        raise NotImplementedError

    def bytes_factor(self, members: int) -> int:
        """Bytes one iteration moves, in message sizes, with this many members (the analysis's F)."""
        return self.bytes_per_iteration_factor

    def attrs(self, opts: GroupOptions, layout: Layout) -> dict[str, Any]:
        """The kind's root attributes besides the shared ones (none by default)."""
        return {}

    def prepare_output(self, opts: GroupOptions, agreed) -> str | None:
        """Rank 0, before the file: the kind's factors and attributes checked (a factor the analysis
        would refuse, an attrs() that fails: the problem, so that no file is written), then the
        output reserved."""
        from npmpi.runfile.checks import MAX_MODE_FACTOR

        members = len(agreed.roles.layout.groups[0])
        factors = (("bytes_factor", self.bytes_factor(members)), ("one_way_divisor", self.one_way_divisor))
        for what, value in factors:
            whole = isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))
            if not (whole and 1 <= value <= MAX_MODE_FACTOR):
                return (
                    f"kind {self.name!r}: its {what} with {members} members is {value!r:.40}, not a whole "
                    f"number from 1 to {MAX_MODE_FACTOR} (bytes one iteration moves, in message sizes; "
                    'docs/architecture.md, "Adding a benchmark kind"): nothing measured'
                )
        try:
            attrs = self.attrs(opts, agreed.roles.layout)
        except NpmpiError:
            raise
        except Exception as exc:
            return f"kind {self.name!r}: its attrs() failed: {type(exc).__name__}: {exc}"
        if not isinstance(attrs, dict):
            return f"kind {self.name!r}: its attrs() gave {type(attrs).__name__}, not a dict of attributes"
        return super().prepare_output(opts, agreed)

    def coordinator(self, recording: GroupRecording, step: GroupStep) -> GroupCoordinator:
        """Rank 0's side of the sizes (a kind with series of its own gives its own)."""
        r = recording
        return GroupCoordinator(r.comm, list(r.layout.groups[0]), step, r.opts, r.stop, r.on_row)

    def record(self, MPI, comm, opts: GroupOptions, argv: list[str], agreed, stop) -> int:
        return GroupRecording(self, MPI, comm, opts, argv, agreed, stop).run()

    def serve(self, MPI, comm, opts: GroupOptions, agreed, stop) -> int:
        return serve_group(comm, self.step(opts, agreed), stop)


class GroupRecording(RecordingSequence):
    """Rank 0's group-kind run from the file's creation to its close; `run()` returns the exit status."""

    def __init__(self, kind: GroupKind, MPI, comm, opts: GroupOptions, argv, agreed, stop) -> None:
        from npmpi.commands.console import Console

        self.kind, self.MPI, self.opts, self.argv, self.agreed, self.stop = (
            kind,
            MPI,
            opts,
            argv,
            agreed,
            stop,
        )
        self.layout = agreed.roles.layout
        self.comm, self.output, self.reservation = comm, agreed.output, agreed.reservation
        self.power_nodes = [agreed.gathered_power[r] for r in self.layout.power_ranks]
        self.calibration = agreed.calibration
        self.stall_timeout_s = opts.stall_timeout_s
        self.collector = power_collector(comm, self.layout, self.power_nodes, opts.stall_timeout_s)
        self.console = Console(quiet=opts.quiet)
        self.coordinator: GroupCoordinator | None = None
        self.attrs: dict[str, Any] = {}
        super().__init__()

    def file_attrs(self) -> dict[str, Any]:
        """The root attributes: every kind's (job_attrs), the step's factors, the members."""
        from npmpi.persize.clock import measure_python_clock

        kind, layout = self.kind, self.layout
        members = list(layout.groups[0])
        return {
            **job_attrs(self.MPI, [kind.name, *self.argv], layout, measure_python_clock(), kind.file_kind),
            "options_json": self.opts.to_dict(),
            "mode": kind.name,
            "window": 1,
            "pairs": 1,
            "bytes_per_iteration_factor": kind.bytes_factor(len(members)),
            "one_way_divisor": kind.one_way_divisor,
            "kernel": "python",
            "timing_comparable": True,
            "member_ranks": np.array(members, dtype=np.int64),
            "thread_level_requested": self.opts.thread_level,
            **kind.attrs(self.opts, layout),
            **sampling.file_attrs(self.opts),
        }

    def on_row(self, index, row) -> None:
        """One size measured: into the file, the samples since collected, a line on the console."""
        self.coordinator.progress.quiet()  # the file is written now: the stall watchdog must not act
        self.writer.append(row)
        if self.collector is not None:
            self.collector.collect(self.opts.trials * self.opts.target_time_s)
        self.console.row(index, row)

    def _open(self) -> None:
        from npmpi.runfile.writer import RunWriter

        opts, layout = self.opts, self.layout
        self.attrs = self.file_attrs()
        self.coordinator = self.kind.coordinator(self, self.kind.step(opts, self.agreed))
        self.coordinator.hosts = list(layout.hosts)
        self.writer = RunWriter(
            self.output,
            self.attrs,
            layout_rows(layout, self.agreed.thread_levels),
            sampling.trials_bound(opts),
            overwrite=opts.force,
            reservation=self.reservation,
            members=len(layout.groups[0]),
            sort_rows=opts.size_order == sampling.ORDER_RANDOM,
        )

    def _abandons(self) -> bool:
        # a step in one C call (coll --kernel c) never returns to Python before its end, whatever
        # the shared options' --kernel: every group kind's signal thread may abandon its trial
        return True

    def _announce(self) -> None:
        attrs, console, layout = self.attrs, self.console, self.layout
        console.factor = int(attrs["bytes_per_iteration_factor"])
        console.one_way_factor = self.kind.one_way_divisor
        console.bandwidth_label, console.latency_label = "bandwidth", "time per operation"
        console.note(
            f"npmpi {attrs['npmpi_version']}: {self.kind.name}, {len(layout.groups[0])} measuring ranks on "
            f"{layout.node_count} node(s), {len(self.opts.sizes_bytes)} sizes; output: {self.output}"
        )

    def _watchdog(self):
        from npmpi.persize.watchdog import STALL_FACTOR, StallWatchdog

        opts, layout = self.opts, self.layout
        self.writer.set_attrs(stall_timeout_s=opts.stall_timeout_s, stall_bound_factor=STALL_FACTOR)
        watchdog = StallWatchdog(
            self.coordinator.progress,
            opts.stall_timeout_s,
            list(layout.hosts),
            {},
            self.stalled,
            tuple(layout.groups[0]),
        )
        self.coordinator.watchdog = watchdog  # a kind's series may narrow the group it names
        return watchdog

    def _measure(self):
        return self.coordinator.run()

    def _measurer(self):
        return self.coordinator
