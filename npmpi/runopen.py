"""Opening an npmpi HDF5 file (a run or a cluster map) for reading: checked to be a regular HDF5
file first (a pipe would block, a device never ends), read-only without locking (a run may still be
writing it), and whatever h5py or numpy raise on a damaged file turned into one RunFileError line.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from npmpi.errors import RunFileError

T = TypeVar("T")


def read_npmpi_file(path: str | os.PathLike, read: Callable[[Any, Path], T]) -> T:
    """`read(open h5py file, path)` on an npmpi file (a run or a map), whatever h5py or numpy raise
    on a damaged file turned into one RunFileError line."""
    p = Path(path)
    f = open_npmpi_file(p)
    with f:
        try:
            return read(f, p)
        except RunFileError:
            raise
        except MemoryError:
            raise RunFileError(
                f"{p}: holds more data than this machine can read; the file may be corrupt"
            ) from None
        except (OSError, KeyError, RuntimeError, ValueError, TypeError) as exc:  # what h5py raises
            raise RunFileError(f"{p}: cannot be read ({exc}); the file may be truncated or corrupt") from None


def open_npmpi_file(p: Path):
    """An npmpi HDF5 file (a run or a map) opened read-only after checking it is a regular HDF5
    file; RunFileError says why not."""
    import h5py

    try:
        st = os.stat(p)
    except FileNotFoundError:
        raise RunFileError(f"{p}: no such file") from None
    except (OSError, ValueError) as exc:  # a link loop, a name too long, a NUL byte
        raise RunFileError(f"{p}: cannot be opened ({getattr(exc, 'strerror', None) or exc})") from None
    if stat.S_ISDIR(st.st_mode):
        raise RunFileError(f"{p}: is a directory, not a run file")
    if not stat.S_ISREG(st.st_mode):  # a pipe would block the open, a device never ends
        raise RunFileError(f"{p}: is not a regular file (a pipe or a device?), not a run file")
    try:
        if not h5py.is_hdf5(p):
            raise RunFileError(f"{p}: not an HDF5 file (is it an npmpi run file?)")
        f = h5py.File(p, "r", locking=False)  # a run may still be writing it: read a snapshot
    except RunFileError:
        raise
    except (OSError, ValueError) as exc:
        raise RunFileError(
            f"{p}: cannot be opened as HDF5 ({exc}); the file may be truncated or corrupt"
        ) from None
    return f
