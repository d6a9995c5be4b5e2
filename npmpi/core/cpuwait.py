"""How long this thread waited on a run queue for a CPU: the second field of Linux's
/proc/thread-self/schedstat (ns, `run_delay`), read before and after each of a map pair's trials
and around each size's trials of a sweep (npmpi/sweep/cputime.py).

Why: Open MPI's ranks spin in blocking receives, so on a busy host a pair whose ranks share a core
with each other or another job waits for a CPU, not for the link, and looks slow (a 1-byte round trip
20-120x the others, docs/clusters.md). The wait read here is the ranks' own evidence of that, stored
with the trials (/map/runq_wait_s, /map/confirm_runq_wait_s) for the analysis to judge a suspect by.
Elsewhere (no such file: not Linux, or a kernel without it) there is no value: NaN, never a guess.
"""

from __future__ import annotations

import math

SCHEDSTAT = ("/proc/thread-self/schedstat", "/proc/self/schedstat")


def _readable() -> str | None:
    for path in SCHEDSTAT:
        try:
            with open(path, "rb") as f:
                fields = f.read().split()
            if len(fields) >= 2:
                int(fields[1])
                return path
        except (OSError, ValueError):
            continue
    return None


_PATH = _readable()


def runq_wait_ns() -> int:
    """This thread's run-queue wait so far (ns); -1 when the system does not say."""
    if _PATH is None:
        return -1
    try:
        with open(_PATH, "rb") as f:
            return int(f.read().split()[1])
    except (OSError, ValueError, IndexError):
        return -1


def waited_s(before_ns: int, after_ns: int) -> float:
    """Seconds waited between two readings; NaN when either is unknown (or the counter went back)."""
    if before_ns < 0 or after_ns < before_ns:
        return math.nan
    return (after_ns - before_ns) / 1e9
