"""Reading a sysfs file, in one place for the meters that read sysfs (cray, hwmon, perf, rapl) and
for the tests, which replace `read_text` to deny access to a file even to root.

A read is bounded whatever the path holds: the file is opened non-blocking, so a FIFO put in a
tree (by a test, a container's bind mount or a mistake) neither blocks the open nor the read, and
anything that is not a regular file (a FIFO, a socket, a device such as /dev/zero, a directory) is
refused with NotRegularFile, an OSError that each meter's handling of unreadable files turns into
its MeterError at open and its MeterFault during a run. Sysfs attributes are regular files."""

from __future__ import annotations

import os
import stat
from pathlib import Path

# a sysfs attribute is at most one page: a regular file longer than that is read no further
MAX_CHARS = 4096
_KINDS = (
    (stat.S_ISFIFO, "a FIFO (named pipe), which a read would wait on for ever"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISDIR, "a directory"),
)


class NotRegularFile(OSError):
    """A path that should be a sysfs attribute is something else; its message names the path."""

    def __str__(self) -> str:
        return str(self.args[0])


def what_it_is(mode: int) -> str:
    """What a file of `mode` is, in words, for the message refusing it."""
    return next((words for test, words in _KINDS if test(mode)), "something else")


def read_text(path: Path, max_chars: int = MAX_CHARS) -> str:
    """The content of a sysfs file, at most `max_chars` characters (at most MAX_CHARS when negative);
    NotRegularFile when the path is not a regular file, other OSErrors as the system gives them."""
    limit = MAX_CHARS if max_chars < 0 else max_chars
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise NotRegularFile(f"{path} is not a regular file but {what_it_is(mode)}")
        chunks, total = [], 0
        while total < limit:  # UTF-8 text: a character is at least one byte
            chunk = os.read(fd, limit - total)
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
    finally:
        os.close(fd)
    return b"".join(chunks).decode("utf-8", errors="replace")[:limit]
