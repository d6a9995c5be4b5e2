"""The job's end: every rank but 0 reports its end and waits for rank 0's leave; rank 0 waits for
each report, asleep and bounded by --stall-timeout, and names a rank that stopped answering (the
stall line, also a baseline's); the fault injection that stops a rank at a point of its end."""

from __future__ import annotations

import os
import signal

END_POLL_S = 0.01
END_FLOOR_S = 2.0  # the least a rank is given to report its end, whatever --stall-timeout


def stalled_message(rank: int, hosts, waited_s: float, bound_s: float, during: str) -> str:
    """The one line of a rank that stopped answering where rank 0 waits for it outside the sweep's
    steps (the stall watchdog's words, npmpi/persize/watchdog.py)."""
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
