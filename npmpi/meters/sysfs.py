"""Reading a sysfs file, in one place for the meters that read sysfs (hwmon, rapl) and for the
tests, which replace `read_text` to deny access to a file even to root."""

from __future__ import annotations

from pathlib import Path


def read_text(path: Path, max_chars: int = -1) -> str:
    """The content of a sysfs file; at most `max_chars` characters when given (a device that
    never ends is then read no further)."""
    with open(path) as f:
        return f.read(max_chars)
