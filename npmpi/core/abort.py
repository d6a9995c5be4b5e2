"""The job's one line: what is printed, an error as `npmpi: error: MESSAGE`, an exception as the
message the job ends with, and the abort that prints it and ends every rank (MPI_Abort)."""

from __future__ import annotations

import sys

from npmpi.core.errors import NpmpiError
from npmpi.core.safetext import printable

PROG = "npmpi"


def say(message: str, stream=None) -> None:
    """Print one line at once (to stdout unless `stream` is given)."""
    print(message, file=stream or sys.stdout, flush=True)


def error_line(message: str) -> str:
    """The one line an error is reported as: `npmpi: error: MESSAGE`."""
    return f"{PROG}: error: {printable(message)}"


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
