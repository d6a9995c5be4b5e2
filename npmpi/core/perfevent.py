"""The perf_event_open system call through the C library, for every layer that opens a counter (the
`perf` RAPL meter, npmpi/meters/perf.py; the rank's own cycles, npmpi/conditions/cycles.py).

Python has no binding for it: the call goes through libc's `syscall` with the architecture's number
and the first published `struct perf_event_attr` (PERF_ATTR_SIZE_VER0, 64 bytes: type, size, config,
sample period, sample type, read format, the flag bits, wakeup, bp type, config1), which every kernel
since 2.6.31 accepts. A refusal is an OSError with the kernel's errno; the callers word it.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import struct

SYSCALL_NUMBERS = {"x86_64": 298, "amd64": 298, "i386": 336, "i686": 336, "aarch64": 241, "arm64": 241}
ATTR_SIZE_VER0 = 64
FD_CLOEXEC = 8  # PERF_FLAG_FD_CLOEXEC


def open_event(
    pmu_type: int, config: int, *, pid: int, cpu: int, read_format: int = 0, flags: int = 0
) -> int:
    """perf_event_open(attr, pid, cpu, group_fd=-1, FD_CLOEXEC): the counter's file descriptor.
    `flags` are the attr's bit field (disabled, inherit, …, exclude_kernel = 1 << 5, …)."""
    number = SYSCALL_NUMBERS.get(platform.machine().lower())
    if number is None:
        raise OSError(errno.ENOSYS, f"no known perf_event_open system call number on {platform.machine()}")
    attr = ctypes.create_string_buffer(
        struct.pack("<IIQQQQQIIQ", pmu_type, ATTR_SIZE_VER0, config, 0, 0, read_format, flags, 0, 0, 0),
        ATTR_SIZE_VER0,
    )
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    fd = libc.syscall(
        ctypes.c_long(number), attr, ctypes.c_int(pid), ctypes.c_int(cpu), ctypes.c_int(-1),
        ctypes.c_ulong(FD_CLOEXEC),
    )  # fmt: skip
    if fd < 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))
    return int(fd)
