"""What a benchmark kind supplies: its options, its measuring groups, its members' work, its recording.

A kind is a value (an instance of a `Kind` subclass) registered by name (npmpi/kinds/__init__.py).
The command sequence around it is the same for every kind (npmpi/kinds/command.py): parse, MPI,
roles (nodes and one power rank per node, npmpi/core/layout.py), the kind's measuring groups, the
checks every rank agrees on, then rank 0 records while the members serve the kind's steps, the
power ranks sample and the other ranks wait. docs/architecture.md, "Adding a benchmark kind".
"""

from __future__ import annotations

from typing import Any

from npmpi.core.layout import PING_PONG, Layout, Words


class Kind:
    """A benchmark kind; subclasses override what differs from these defaults."""

    name = ""  # the command word (`python -m npmpi NAME`; "" for the default, the run)
    file_kind = ""  # the run file's root attribute `kind` (format 1.8)
    member_role = "member"  # /layout/role of a measuring rank
    stem_prefix = ""  # the default output file's name: runs/npmpi-PREFIXSTAMP.h5
    words: Words = PING_PONG  # how the layout's errors name this kind's measurement
    stop_signals = True  # a stop signal ends the current size (False: it ends the process)

    def parse(self, argv: list[str]) -> Any:
        """argv -> this kind's options; UsageError, or HelpRequested for --help/--version."""
        raise NotImplementedError

    def common(self, opts: Any) -> Any:
        """The options every kind shares (meters, output, baselines, …: npmpi.core.config.Options'
        fields of those names) out of this kind's options."""
        return opts

    def thread_level(self, opts: Any) -> str:
        """The MPI thread level this rank asks for (npmpi/commands/threadlevel.py): enough for meter
        threads on the power ranks."""
        from npmpi.commands.sequence import meters_thread_level

        return meters_thread_level(self.common(opts))

    def who(self, rank: int, host: str) -> str:
        """How the one line names a rank that failed."""
        return f"rank {rank} ({host})"

    def before_mpi(self, opts: Any) -> None:
        """Environment to set before MPI starts (nothing by default)."""

    def groups(self, layout: Layout, opts: Any) -> Layout:
        """The layout with this kind's measuring groups and roles chosen among the ranks that are not
        power ranks (`layout.capable`); UsageError in the kind's words when it cannot."""
        raise NotImplementedError

    def member_problem(self, MPI, opts: Any, agreed: Any) -> str | None:
        """On a measuring rank: its first problem (kernel, memory, …), None when it can measure."""
        return None

    def prepare(self, MPI, comm, opts: Any, agreed: Any) -> str | None:
        """On every rank, before the collective check (collective calls allowed): set-up that needs
        every rank, such as a protocol's links; the problem, if any."""
        return None

    def prepare_output(self, opts: Any, agreed: Any) -> str | None:
        """Rank 0 names and reserves its output (agreed.output, agreed.reservation): the problem, if any."""
        from npmpi.commands.agreement import prepare_output

        return prepare_output(self.common(opts), agreed, self.stem_prefix)

    def settled(self, MPI, comm, opts: Any, agreed: Any) -> None:
        """On every rank, once every rank agreed (collective calls allowed)."""

    def record(self, MPI, comm, opts: Any, argv: list[str], agreed: Any, stop) -> int | None:
        """Rank 0: the whole recording into the file (agreed.output); the exit status. Outside the
        guard that aborts the job on a surprise: a recording closes its file whatever ends it
        (npmpi/commands/filerecording.py). None: rank 0 serves as the other members do."""
        raise NotImplementedError

    def serve(self, MPI, comm, opts: Any, agreed: Any, stop) -> int:
        """A measuring rank (rank 0 too when `record` gave None): answer rank 0's steps until it
        says stop; the exit status."""
        raise NotImplementedError
