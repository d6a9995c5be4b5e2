"""The rank's own core cycles from the kernel's perf_event counter: the effective frequency is the
cycles counted over the time the counter ran (the thread's time on a CPU), with no root needed.

perf_event_open(PERF_TYPE_HARDWARE, PERF_COUNT_HW_CPU_CYCLES, pid 0 (this thread), cpu -1) with
read_format TOTAL_TIME_ENABLED | TOTAL_TIME_RUNNING: a read gives (count, enabled ns, running ns).
At kernel.perf_event_paranoid <= 1 the count includes kernel mode; at 2 (the usual default) only user
mode is allowed, so the counter is opened again with exclude_kernel and exclude_hv and its figure is
the user-mode cycles over the thread's whole running time (a rank that spends much time in the kernel,
TCP's, shows a lower frequency than its core ran at: the source says "user mode"). In a virtual
machine without a virtual PMU the counter does not exist (ENOENT, EOPNOTSUPP): the caller falls
back to cpufreq (npmpi/conditions/cpufreq.py).
"""

from __future__ import annotations

import contextlib
import errno
import os
import struct
from collections.abc import Callable
from dataclasses import dataclass

from npmpi.conditions.paths import Root
from npmpi.core.perfevent import open_event

PARANOID = "proc/sys/kernel/perf_event_paranoid"
PERF_TYPE_HARDWARE, PERF_COUNT_HW_CPU_CYCLES = 0, 0
READ_FORMAT = 1 | 2  # PERF_FORMAT_TOTAL_TIME_ENABLED | PERF_FORMAT_TOTAL_TIME_RUNNING
EXCLUDE_KERNEL_HV = (1 << 5) | (1 << 6)  # attr flags: exclude_kernel, exclude_hv


def perf_event_open(flags: int) -> int:
    """The cycles counter of this thread (pid 0, any CPU); OSError on refusal."""
    return open_event(
        PERF_TYPE_HARDWARE, PERF_COUNT_HW_CPU_CYCLES, pid=0, cpu=-1, read_format=READ_FORMAT, flags=flags
    )


def read_fd(fd: int) -> tuple[int, int]:
    """(cycles, running ns) of an open counter."""
    count, _enabled, running = struct.unpack("<QQQ", os.read(fd, 24))
    return count, running


@dataclass
class Cycles:
    """An open counter: `read()` gives (cycles, running ns); `source` says what it counts."""

    read: Callable[[], tuple[int, int]]
    source: str
    close: Callable[[], None] = lambda: None


def _why(exc: OSError, paranoid: str) -> str:
    if exc.errno in (errno.ENOENT, errno.EOPNOTSUPP, errno.ENODEV):
        return (
            f"the CPU cycles counter does not exist here (perf_event_open: {os.strerror(exc.errno)}; "
            "a virtual machine without a virtual PMU)"
        )
    if exc.errno in (errno.EACCES, errno.EPERM):
        return f"the kernel refuses a per-thread cycles counter (perf_event_paranoid {paranoid}; needs <= 2)"
    return f"perf_event_open failed: {exc.strerror or exc}"


def open_cycles(root: Root, opener: Callable[[int], int] = perf_event_open, reader=read_fd) -> Cycles | str:
    """This thread's cycles counter (all modes, else user mode only), or why there is none."""
    paranoid = root.text(PARANOID, 20) or "?"
    last: OSError | None = None
    for flags, source in ((0, "perf cycles"), (EXCLUDE_KERNEL_HV, "perf cycles (user mode)")):
        try:
            fd = opener(flags)
        except OSError as exc:
            last = exc
            if exc.errno not in (errno.EACCES, errno.EPERM):
                break  # the counter is missing, not refused: user mode would not change it
            continue
        try:
            reader(fd)
        except OSError as exc:
            _close(fd)
            return f"the cycles counter opened but cannot be read ({exc.strerror or exc})"
        return Cycles(read=lambda fd=fd: reader(fd), source=source, close=lambda fd=fd: _close(fd))
    return _why(last or OSError(errno.ENODEV, "no counter"), paranoid)


def _close(fd: int) -> None:
    with contextlib.suppress(OSError):
        os.close(fd)
