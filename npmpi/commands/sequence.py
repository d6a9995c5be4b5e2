"""The sequence every MPI command of npmpi follows (a run, a map, `calibrate`), written once.

parse -> (environment) -> [rank 0's start-up guard] thread level -> MPI -> stop-signal handlers ->
agree [guard off] -> dispatch by role -> abort, or the end: every rank but 0 reports its end and
waits for rank 0's leave, rank 0 waits for every report (bounded), then all call MPI_Finalize
(rank 0's bounded by a guard: npmpi.core.guards.KillGuard, as its start-up).

Its guarantees are the commands' promise to the user: bad usage prints one line on rank 0 and every
rank exits 2 without a file (`agree` raises UsageError on every rank at once: npmpi.core.startup's
collective check); a surprise on any rank while starting or serving its role ends the whole job with
one line naming that rank (npmpi.core.abort.abort), never leaving a rank blocked. Rank 0's recording is
called outside that guard: it closes its file with a status whatever ends it, then releases or
aborts the others itself. A rank stopped at any point (SIGSTOP, a debugger) ends the job within a
bound of --stall-timeout: the sweep's watchdog, a baseline's and the end's bounded waits, the
guards of MPI_Init and MPI_Finalize (where mpi4py holds the GIL and no Python code runs).
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from npmpi.core.abort import abort, describe, error_line, say
from npmpi.core.config import THREAD_LEVELS
from npmpi.core.errors import UsageError
from npmpi.core.guards import startup_guard
from npmpi.core.signals import install_signal_handlers
from npmpi.core.startup import parse_or_exit_status, usage_error_status

FINALIZE_FLOOR_S = 10.0  # the least rank 0's MPI_Finalize is given (every rank has reported its end)
POWER_END_S = 30.0  # the least a power rank is given to report its end (its meters' threads stop first)


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
        try:
            if self.before_mpi is not None:
                self.before_mpi(opts)
            level = self.thread_level(opts)
            if level not in THREAD_LEVELS:  # mpi4py would only warn, and start MPI at its default
                raise UsageError(f"the thread level {level!r:.40} is not one of {', '.join(THREAD_LEVELS)}")
        except UsageError as exc:
            return usage_error_status(str(exc))
        guard = startup_guard(opts)  # rank 0: a rank stopped before the checks end cannot hang the job
        try:
            return self._started(argv, opts, level, guard)
        finally:
            guard.cancel()

    def _started(self, argv: list[str], opts, level: str, guard) -> int:
        from npmpi.core.ending import frozen_for_a_test
        from npmpi.core.messages import StopFlag
        from npmpi.core.startup import load_mpi

        MPI = load_mpi(level)
        if MPI is None:
            return 2
        comm = MPI.COMM_WORLD
        rank = comm.Get_rank()
        frozen_for_a_test("startup", rank)  # after MPI_Init, inside the start-up guard's bound
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
        guard.cancel()
        if self.record is not None:
            status = self.record(MPI, comm, opts, argv, agreed, stop)
            if status is not None:  # every other rank reported its end (else the job was aborted)
                return leave(MPI, comm, opts, status)
        try:
            status = self.serve(MPI, comm, opts, agreed, stop)
        except BaseException as exc:
            abort(comm, f"{self.who(rank, MPI.Get_processor_name())}: {describe(exc)}", 1)
            return 1
        return end_of_role(MPI, comm, opts, agreed, status)


def end_of_role(MPI, comm, opts, agreed, status: int) -> int:
    """After a rank's role: a rank other than 0 reports its end to rank 0; rank 0 (when it served
    rather than recorded: calibrate) waits for every rank's report, bounded by --stall-timeout, and
    names one that does not come instead of hanging in MPI_Finalize (npmpi.core.ending.await_ends)."""
    from npmpi.core.ending import await_ends, end_bound_s, report_end, stall_timeout_of
    from npmpi.core.errors import RankStalled
    from npmpi.core.guards import finalize_within

    if comm.Get_rank() != 0:
        report_end(comm)
        finalize_within(MPI, 0.0, guard=False)
        return status
    layout = agreed.roles.layout
    bound = end_bound_s(stall_timeout_of(opts))
    power_bound = max(bound, POWER_END_S) if bound else 0.0  # a power rank stops its meters first
    bounds = {r: power_bound if r in layout.power_ranks else bound for r in range(1, comm.Get_size())}
    try:
        await_ends(comm, bounds, list(layout.hosts), "the end of the job")
    except RankStalled as exc:
        abort(comm, str(exc), 1)
        return 1
    return leave(MPI, comm, opts, status)


def leave(MPI, comm, opts, status: int) -> int:
    """Rank 0, every other rank's end reported: let them go and end MPI, bounded (npmpi/core/guards.py)."""
    from npmpi.core.ending import end_bound_s, say_leave, stall_timeout_of
    from npmpi.core.guards import finalize_within

    say_leave(comm)
    bound = end_bound_s(stall_timeout_of(opts))
    finalize_within(MPI, max(bound, FINALIZE_FLOOR_S) if bound else 0.0, guard=True)
    return status


def meters_thread_level(opts) -> str:
    """The thread level of a command whose power ranks sample meters in threads (a run, a map)."""
    from npmpi.commands.threadlevel import requested_level
    from npmpi.meters import MeterError
    from npmpi.power.sampler import node_meter_specs

    try:
        samples = bool(node_meter_specs(opts.meters))
    except MeterError:  # a bad NPMPI_METERS: the node still gets its power rank, which says why
        samples = True
    return requested_level(opts.thread_level, samples)
