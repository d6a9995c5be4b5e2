"""Writing outputs safely: never over an existing file unless forced, never half-written."""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from npmpi.core.errors import NpmpiError, UsageError


class OutputError(NpmpiError):
    """An output could not be written (disk full, permissions): exit status 1."""


NAME_MAX_BYTES = 255  # what Linux file systems allow (ext4, xfs, btrfs, tmpfs, NFS)
PATH_MAX_BYTES = 4095


def check_name(path: Path, what: str, directory: bool = False) -> None:
    """UsageError unless `path` names a file (a directory if `directory`) whose every part the file
    system can take: checked before the analysis, so that a bad name never wastes it."""
    if not directory and path.name in ("", ".", ".."):
        raise UsageError(
            f"{what} {str(path)!r}: names no file (an empty name, or a directory); give a file's name"
        )
    for part in path.parts:
        size = len(os.fsencode(part))
        if size > NAME_MAX_BYTES:
            raise UsageError(
                f"{what} {path}: a name of {size} bytes is longer than the file system allows "
                f"({NAME_MAX_BYTES}); choose a shorter name"
            )
    if len(os.fsencode(os.path.abspath(path))) > PATH_MAX_BYTES:
        raise UsageError(f"{what} {path}: the path is longer than the system allows; choose a shorter one")


def check_free(path: Path, force: bool, will_create: Path | None = None) -> None:
    """UsageError if `path` exists (and --force was not given) or cannot be a file.

    `will_create` is a directory that will be made before anything is written (--plots).
    """
    if path.is_dir():
        raise UsageError(f"{path} is a directory: give a file name for this output")
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        mode = None
    if mode is not None and not stat.S_ISREG(mode):  # never replace /dev/null, a pipe or a link, even forced
        kind = "a symbolic link" if stat.S_ISLNK(mode) else "not a regular file (a device, pipe or socket)"
        raise UsageError(f"{path} is {kind}: it is never replaced, even with --force; choose another name")
    if path.exists() and not force:
        raise UsageError(f"{path} exists: choose another name or add --force to overwrite it")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir() and (
        will_create is None or os.path.realpath(parent) != os.path.realpath(will_create)
    ):
        raise UsageError(f"{path}: directory {parent} does not exist")


def write_atomic(path: Path, data: bytes, force: bool) -> None:
    """Write to a temporary name beside `path`, then rename: a crash leaves no partial file.

    Without `force` the rename refuses to replace a file that appeared meanwhile.
    """
    write_with(path, lambda f: f.write(data), force)


def write_with(
    path: Path,
    fill: Callable[[BinaryIO], object],
    force: bool,
    on_temp: Callable[[Path], object] | None = None,
) -> None:
    """As write_atomic, the file's bytes written by `fill(f)` a part at a time (an output of
    gigabytes never held whole); `on_temp` is told the temporary file's name before it is filled."""
    path = Path(path)
    parent = path.parent if str(path.parent) else Path(".")
    try:
        # the name cut: beside a name of 255 bytes, a longer temporary would be refused
        fd, tmp_name = tempfile.mkstemp(dir=parent, prefix=f".{path.name[:40]}.", suffix=".tmp")
    except OSError as exc:
        raise OutputError(f"cannot write {path}: {exc.strerror or exc}") from None
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as f:
            if on_temp is not None:
                on_temp(tmp)
            fill(f)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644 & ~_umask())
        if force:
            os.replace(tmp, path)
        else:
            try:
                os.link(tmp, path)  # fails if the name is taken: no silent overwrite
            except FileExistsError:
                raise UsageError(
                    f"{path} exists: choose another name or add --force to overwrite it"
                ) from None
            except OSError:  # a file system without hard links
                if path.exists():
                    raise UsageError(
                        f"{path} exists: choose another name or add --force to overwrite it"
                    ) from None
                os.replace(tmp, path)
    except OSError as exc:
        raise OutputError(f"cannot write {path}: {exc.strerror or exc}") from None
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def rows_csv_bytes(rows: list[dict]) -> bytes:
    """Rows of named cells as CSV: columns in first-seen order, an undefined figure (NaN, inf) an empty
    cell, every cell made safe for a spreadsheet (npmpi.core.safetext.csv_cell)."""
    import csv
    import io
    import math

    from npmpi.core.safetext import csv_cell

    fields = list(dict.fromkeys(k for r in rows for k in r))  # first-seen order, linear time
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=[csv_cell(f) for f in fields], lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow(
            {k: ("" if isinstance(v, float) and not math.isfinite(v) else csv_cell(v)) for k, v in r.items()}
        )
    return buf.getvalue().encode()


def make_plots_dir(plots: Path) -> None:
    """--plots' directory, made when missing; UsageError when it cannot be."""
    try:
        plots.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"--plots {plots}: cannot create the directory ({exc.strerror})") from None
