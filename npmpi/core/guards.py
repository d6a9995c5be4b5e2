"""Bounds on the waits no Python code can bound: MPI_Init and MPI_Finalize hold the GIL (mpi4py), so
a shell started beforehand kills rank 0 when the start-up or MPI_Finalize outlasts its bound."""

from __future__ import annotations

import contextlib
import os
import signal
import sys

from npmpi.core.abort import error_line
from npmpi.core.ending import stall_timeout_of
from npmpi.core.startup import launcher_rank


class KillGuard:
    """A bound on a wait no Python code can bound: MPI_Init and MPI_Finalize hold the GIL (mpi4py),
    so neither a thread nor a signal handler of this process runs while they wait for a rank that
    was stopped. A shell started beforehand (vfork'ed by subprocess: nothing of MPI's memory is
    copied) prints `line` and kills this process after `bound_s`, so that mpirun ends every rank;
    `cancel()` once the wait is over. Nothing when `bound_s` is 0 or no shell can be started."""

    # The shell holds none of rank 0's descriptors while it waits: its line goes to rank 0's own
    # stderr through /proc when it acts. Holding rank 0's stderr (mpirun's pipe) would keep mpirun
    # waiting for the shell after MPI_Abort from another rank killed rank 0 before its cancel().
    SCRIPT = (
        'sleep "$1"; kill -0 "$2" 2>/dev/null || exit 0; '
        'printf "%s\\n" "$3" >>"/proc/$2/fd/2" 2>/dev/null; kill -KILL "$2"'
    )

    def __init__(self, bound_s: float, line: str) -> None:
        import math
        import subprocess

        self.shell = None
        if bound_s <= 0:
            return
        argv = ["/bin/sh", "-c", self.SCRIPT, "npmpi-guard", str(math.ceil(bound_s)), str(os.getpid()), line]
        sys.stderr.flush()
        try:
            self.shell = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                close_fds=True,
                start_new_session=True,
            )
        except OSError:
            self.shell = None

    def cancel(self) -> None:
        """The shell and its sleep killed (its own session: neither is left holding rank 0's stderr,
        which mpirun would wait for)."""
        if self.shell is not None:
            with contextlib.suppress(OSError):
                os.killpg(self.shell.pid, signal.SIGKILL)
            self.shell.wait()
            self.shell = None


def finalize_within(MPI, bound_s: float, guard: bool) -> None:
    """MPI_Finalize now (not at the interpreter's exit); on rank 0 (`guard`) bounded by a KillGuard:
    a rank stopped between rank 0's leave and its own MPI_Finalize would hold rank 0 there for ever."""
    import math

    if MPI.Is_finalized():
        return
    line = error_line(
        f"the job did not end within {math.ceil(bound_s)} s of its last message (--stall-timeout): a "
        "rank was stopped (SIGSTOP, a debugger attached) or is stuck in MPI_Finalize; everything "
        "measured is in the file — aborting all ranks"
    )
    watcher = KillGuard(bound_s if guard else 0.0, line)
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        MPI.Finalize()
    finally:
        watcher.cancel()


STARTUP_FLOOR_S = 30.0  # the least the start-up is given (MPI_Init, the meters opened, the checks)


def startup_guard(opts) -> KillGuard:
    """Rank 0's bound on the start-up, from before MPI_Init to the last start-up check: a rank
    stopped then would hold rank 0 in MPI_Init (the GIL held) or a collective for ever. At least
    STARTUP_FLOOR_S (a slow meter's opening is no stall), --stall-timeout when longer; none with
    --stall-timeout 0 or on other ranks (rank 0 ending ends the job)."""
    stall = stall_timeout_of(opts)
    bound = max(stall, STARTUP_FLOOR_S) if stall > 0 and launcher_rank() == 0 else 0.0
    line = error_line(
        f"the job's start-up did not end within {bound:g} s (--stall-timeout, at least "
        f"{STARTUP_FLOOR_S:g} s at start-up): a rank was stopped (SIGSTOP, a debugger attached) or "
        "is stuck (its node down, a hung file system) before every rank had joined; nothing was "
        "measured — aborting all ranks"
    )
    return KillGuard(bound, line)
