"""Where the condition readers look: every path under one root prefix, so tests read fake trees.

The prefix is "" (the machine's own /sys and /proc) unless NPMPI_CONDITIONS_ROOT names a directory
holding `sys/...` and `proc/...` as the kernel lays them out (the tests' fake trees; every rank of a
run reads the same variable). A file that is missing, unreadable or not a regular file reads as None:
a condition the system does not give is recorded as unknown, never guessed.
"""

from __future__ import annotations

import os
from pathlib import Path

from npmpi.meters import sysfs

ROOT_ENV = "NPMPI_CONDITIONS_ROOT"


class Root:
    """The root prefix of every path the readers open."""

    def __init__(self, prefix: str | os.PathLike | None = None) -> None:
        if prefix is None:
            prefix = os.environ.get(ROOT_ENV, "")
        self.prefix = Path(prefix) if str(prefix) else Path("/")

    def path(self, rel: str) -> Path:
        return self.prefix / rel.lstrip("/")

    def text(self, rel: str | Path, limit: int = 256) -> str | None:
        """The stripped text of a file, None when it cannot be read."""
        p = rel if isinstance(rel, Path) else self.path(rel)
        try:
            return sysfs.read_text(p, limit).strip()
        except (OSError, ValueError):
            return None

    def integer(self, rel: str | Path) -> int | None:
        """A file's integer, None when it cannot be read or is not one."""
        text = self.text(rel, 64)
        try:
            return int(text) if text is not None else None
        except ValueError:
            return None

    def listdir(self, rel: str | Path) -> list[str]:
        p = rel if isinstance(rel, Path) else self.path(rel)
        try:
            return sorted(os.listdir(p))
        except OSError:
            return []
