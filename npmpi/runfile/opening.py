"""Opening an npmpi HDF5 file (a run or a cluster map) for reading: checked to be a regular HDF5
file first (a pipe would block, a device never ends), read-only without locking (a run may still be
writing it), and whatever h5py or numpy raise on a damaged file turned into one RunFileError line.
"""

from __future__ import annotations

import math
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from npmpi.core.errors import RunFileError
from npmpi.core.safetext import valid_text

T = TypeVar("T")

# What the analysis reads of one file, decoded, at most: the declared shapes of the datasets under
# these groups it reads are summed before anything is read (a file may declare any shape, and
# compressed or never-written chunks cost it nothing). A map's analysis needs about 5.5 times what
# it reads (docs/reliability.md, "Memory").
MAX_READ_BYTES = 512 << 20
READ_GROUPS = ("pingpong", "power", "layout", "map")


def read_npmpi_file(
    path: str | os.PathLike,
    read: Callable[[Any, Path], T],
    unread: tuple[str, ...] | Callable[[Any], tuple[str, ...]] = (),
    cap: int = MAX_READ_BYTES,
) -> T:
    """`read(open h5py file, path)` on an npmpi file (a run or a map), whatever h5py or numpy raise
    on a damaged file turned into one RunFileError line; refused before `read` when the datasets it
    will read (all but those whose names are in `unread`, or `unread(open file)`) declare over `cap`
    (MAX_READ_BYTES, or what the reader bounds otherwise)."""
    p = Path(path)
    f = open_npmpi_file(p)
    with f:
        try:
            check_read_size(f, p, cap, unread=unread(f) if callable(unread) else unread)
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


def attr_value(value: Any) -> Any:
    """An HDF5 attribute (or a text dataset's element) as plain Python: text decoded, numpy values and
    arrays as numbers and lists, so that the run's and the map's readers see one form whatever h5py
    returned."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, str):  # h5py gives bytes that are not UTF-8 as lone surrogates
        return valid_text(value)
    if isinstance(value, np.ndarray):
        return [attr_value(v) for v in value.tolist()]
    if isinstance(value, np.generic):
        return value.item()
    return value


def _gib(n: float) -> str:
    return f"{n / (1 << 30):.3g} GiB"


def check_read_size(f, p: Path, cap: int = MAX_READ_BYTES, unread: tuple[str, ...] = ()) -> int:
    """The bytes the datasets of READ_GROUPS declare, decoded (a string by its pointer), but those
    named in `unread`; RunFileError naming the largest when the sum is over `cap`, before any data
    is read."""
    import h5py

    sizes: dict[str, int] = {}

    def visit(name: str, obj) -> None:
        if (
            isinstance(obj, h5py.Dataset)
            and name.split("/", 1)[0] in READ_GROUPS
            and name.rsplit("/", 1)[-1] not in unread
        ):
            sizes[name] = math.prod(obj.shape or ()) * obj.dtype.itemsize

    f.visititems(visit)
    total = sum(sizes.values())
    if total > cap:
        name = max(sizes, key=sizes.__getitem__)
        ds = f[name]
        raise RunFileError(
            f"{p}: /{name} declares {_gib(sizes[name])} of data (shape {ds.shape}, {ds.dtype}), "
            f"{_gib(total)} with the rest: over the {_gib(cap)} npmpi-analyze reads of a file; "
            "the file is damaged or forged, or larger than this analysis reads (docs/reliability.md, "
            "'Memory')"
        )
    return total


def read_declared(ds, p: Path, where: str):
    """All of a dataset as its shape declares it, never-written chunks as its fill value (a stopped
    map's rounds not reached); check_read_size has bounded the size. RunFileError when the data
    lives in another file."""
    check_own_data(ds, p, where)
    return read_checked(ds, (), p, where)


def check_own_data(ds, p: Path, where: str) -> None:
    """RunFileError when a dataset keeps its data in another file (external storage, virtual)."""
    plist = ds.id.get_create_plist()
    if ds.is_virtual or plist.get_external_count() > 0:
        raise RunFileError(f"{p}: {where} keeps its data in another file; an npmpi file keeps its own")


def read_checked(ds, selection, p: Path, where: str):
    """ds[selection]; RunFileError naming the dataset when HDF5 cannot read it, and saying so when
    its Fletcher-32 checksum (format 1.6) no longer matches its data."""
    try:
        return ds[selection]
    except OSError as exc:
        if ds.fletcher32 and "filter" in str(exc) and _left_running(ds):
            torn = _read_torn(ds, selection)
            if torn is not None:
                return torn
        if ds.fletcher32 and "filter" in str(exc):
            raise RunFileError(
                f"{p}: {where} fails its checksum (Fletcher-32): its data changed after they were "
                "written (a flipped bit, a damaged disk or copy); the file is corrupt"
            ) from None
        raise RunFileError(
            f"{p}: {where} cannot be read ({exc}); the file may be truncated or corrupt"
        ) from None


def _left_running(ds) -> bool:
    """Whether the file's writer never closed it (status `running`: killed, or its job aborted)."""
    status = ds.file.attrs.get("status", "")
    return (status.decode("utf-8", "replace") if isinstance(status, bytes) else str(status)) == "running"


def _read_torn(ds, selection):
    """ds[selection] of a file its writer never closed, chunk by chunk: a chunk whose Fletcher-32
    fails was being rewritten when the writer was killed (the kill tears the chunk, not a bit
    flip), and is read as stored, unchecked, as a file without checksums is; its rows beyond what
    the file counts are cut by the reader. None when the dataset has other filters (then the stored
    bytes are not the values) or a chunk is not as large as it should be."""
    if ds.chunks is None or ds.compression is not None or ds.shuffle or ds.scaleoffset is not None:
        return None
    out = np.empty(ds.shape, dtype=ds.dtype)
    for sl in ds.iter_chunks():
        try:
            out[sl] = ds[sl]
        except OSError:
            _mask, raw = ds.id.read_direct_chunk(tuple(s.start for s in sl))
            n = math.prod(ds.chunks)
            if len(raw) != n * ds.dtype.itemsize + 4:  # the values, then their 4-byte checksum
                return None
            chunk = np.frombuffer(raw[:-4], dtype=ds.dtype).reshape(ds.chunks)
            out[sl] = chunk[tuple(slice(0, s.stop - s.start) for s in sl)]
    return out[selection]


def check_text(ds, values, p: Path, where: str) -> None:
    """RunFileError when a text dataset's stored CRC-32 (format 1.6) differs from its text's."""
    from npmpi.runfile.format import TEXT_CHECKSUM, text_crc32

    stored = ds.attrs.get(TEXT_CHECKSUM)
    if stored is None:
        return
    try:
        stored = int(stored)
    except (TypeError, ValueError):
        raise RunFileError(f"{p}: {where}: attribute {TEXT_CHECKSUM} is not a number") from None
    if stored != text_crc32(values):
        raise RunFileError(
            f"{p}: {where} fails its checksum (CRC-32 of its text): its text changed after it was "
            "written (a flipped bit, a damaged disk or copy); the file is corrupt"
        )
