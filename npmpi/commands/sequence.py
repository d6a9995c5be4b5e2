"""The sequence every MPI command of npmpi follows (a run, a map, `calibrate`), written once.

parse -> (environment) -> thread level -> MPI -> stop-signal handlers -> agree -> dispatch by role ->
abort.

Its guarantees are the commands' promise to the user: bad usage prints one line on rank 0 and every
rank exits 2 without a file (`agree` raises UsageError on every rank at once: npmpi.core.job's
collective check); a surprise on any rank while starting or serving its role ends the whole job with
one line naming that rank (npmpi.core.job.abort), never leaving a rank blocked. Rank 0's recording is
called outside that guard: it closes its file with a status whatever ends it, then releases or
aborts the others itself.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from npmpi.core.errors import UsageError
from npmpi.core.job import abort, describe, error_line, install_signal_handlers, parse_or_exit_status, say


@dataclass(frozen=True)
class MpiCommand:
    """One command's steps; the sequence (`run`) is the same for all."""

    parse: Callable[[list[str]], Any]  # argv -> options; UsageError or HelpRequested
    thread_level: Callable[[Any], str]  # options -> the MPI thread level this rank asks for
    agree: Callable[..., Any]  # (MPI, comm, options) -> what every rank agreed on; UsageError on all
    serve: Callable[..., int]  # (MPI, comm, options, agreed, stop) -> this rank's role's exit status
    # (MPI, comm, options, argv, agreed, stop) -> rank 0's recording's status, or None when this rank
    # does not record; its own error handling, outside the abort guard
    record: Callable[..., int | None] | None = None
    who: Callable[[int, str], str] = lambda rank, host: f"rank {rank} ({host})"  # names a failing rank
    # stop signals end the current trial or round (a run, a map); without, a signal ends the process
    stop_signals: bool = True
    before_mpi: Callable[[Any], None] | None = None  # options -> environment set before MPI starts

    def run(self, argv: list[str]) -> int:
        """The command's exit status on this rank."""
        if self.stop_signals:
            # Until the stop handlers are installed (once MPI runs), Ctrl-C ends a rank as SIGTERM
            # does, without a KeyboardInterrupt traceback from the middle of an import.
            signal.signal(signal.SIGINT, signal.SIG_DFL)
        opts = parse_or_exit_status(self.parse, argv)
        if isinstance(opts, int):
            return opts

        from npmpi.core.job import load_mpi
        from npmpi.core.messages import StopFlag

        if self.before_mpi is not None:
            self.before_mpi(opts)
        MPI = load_mpi(self.thread_level(opts))
        if MPI is None:
            return 2
        comm = MPI.COMM_WORLD
        rank = comm.Get_rank()
        stop = StopFlag()
        if self.stop_signals:
            install_signal_handlers(stop, writer_rank=rank == 0)
        try:
            agreed = self.agree(MPI, comm, opts)
        except UsageError as exc:
            if rank == 0:
                say(error_line(str(exc)), sys.stderr)
            return 2
        except BaseException as exc:  # any rank's surprise (a meter's open, start-up) ends the whole job
            abort(comm, f"{self.who(rank, MPI.Get_processor_name())} while starting: {describe(exc)}", 1)
            return 1
        if self.record is not None:
            status = self.record(MPI, comm, opts, argv, agreed, stop)
            if status is not None:
                return status
        try:
            return self.serve(MPI, comm, opts, agreed, stop)
        except BaseException as exc:
            abort(comm, f"{self.who(rank, MPI.Get_processor_name())}: {describe(exc)}", 1)
            return 1


def meters_thread_level(opts) -> str:
    """The thread level of a command whose power ranks sample meters in threads (a run, a map)."""
    from npmpi.commands.threadlevel import requested_level
    from npmpi.meters import MeterError
    from npmpi.power.rank import node_meter_specs

    try:
        samples = bool(node_meter_specs(opts.meters))
    except MeterError:  # a bad NPMPI_METERS: the node still gets its power rank, which says why
        samples = True
    return requested_level(opts.thread_level, samples)
