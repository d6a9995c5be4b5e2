"""The run file's write errors: what caused one, and closing the file as `failed` after it.

HDF5 reports a failed write(2) inside its own message ("... errno = 28, error message = 'No space
left on device' ..."); `write_error` turns that into one line naming the cause. `salvage` runs
after a write error: it gives back the space the writer reserved at start-up (npmpi/core/outpath.py),
writes what HDF5 still holds with that space, records status `failed` and the cause, closes the
file, and checks by reopening it that the status says so.
"""

from __future__ import annotations

import contextlib
import errno
import math
import os
import re
from pathlib import Path

from npmpi.core.errors import RunFileWriteError

_ERRNO = re.compile(r"errno\s*=\s*(\d+)")


def write_error(path: Path, what: str, exc: BaseException) -> RunFileWriteError:
    """A RunFileWriteError naming the cause of `exc` (an h5py error) in words."""
    text = str(exc)
    m = _ERRNO.search(text)
    code = int(m.group(1)) if m else getattr(exc, "errno", None)
    if not code and _disk_full(path):
        code = errno.ENOSPC
    if code:
        cause = f"{os.strerror(code)} (errno {code})"
    else:
        cause = text.split("(")[0].strip() or type(exc).__name__
    return RunFileWriteError(f"cannot write the run file {path} while {what}: {cause}")


# disk space a run holds back from start-up (npmpi/core/outpath.py), given back to close the file when full
RESERVED_BYTES = 256 * 1024
# what a run or map file's first writes need beyond that (its groups, the power groups, the first
# flush's metadata): checked at start-up, so that a file system too small to begin is a usage error
START_ROOM_BYTES = 128 * 1024
# room a flush needs besides its data: HDF5's metadata (object headers, chunk indexes) per dataset
METADATA_BYTES = 64 * 1024
METADATA_BYTES_PER_DATASET = 4096


def check_space(path: Path, pending_bytes: int, datasets: int) -> None:
    """RunFileWriteError (no space left on device) before a flush the file system has no room for.

    HDF5 does not recover from a write that fails half-way (a chunk index may be lost with it), so
    the writer stops while the file is whole; the space reserved at start-up (npmpi/core/outpath.py) then
    lets it record why and close the file."""
    need = pending_bytes + METADATA_BYTES + METADATA_BYTES_PER_DATASET * datasets
    free = _free_bytes(path)
    if free is not None and free < need:
        raise RunFileWriteError(
            f"cannot write the run file {path}: {os.strerror(errno.ENOSPC)} (errno {errno.ENOSPC}): "
            f"{free // 1024} KiB free in {path.parent}, the next write needs about {need // 1024} KiB"
        )


def _free_bytes(path: Path) -> int | None:
    try:
        st = os.statvfs(path.parent if str(path.parent) else ".")
    except OSError:
        return None
    return (st.f_bavail if os.geteuid() else st.f_bfree) * st.f_frsize


def _disk_full(path: Path) -> bool:
    try:
        st = os.statvfs(path.parent if str(path.parent) else ".")
    except OSError:
        return False
    return st.f_bavail == 0 if os.geteuid() else st.f_bfree == 0


def salvage(f, res, error: RunFileWriteError, rows: int, shrink: list[tuple]) -> int:
    """Close the h5py file `f` (reserved as `res`) as failed after `error`; returns the sizes it holds.

    `rows`: the sizes whose rows were flushed; `shrink`: (dataset, shape at the last flush) of every
    dataset grown since, cut back to that shape (a write that failed may have lost their new data)."""
    import h5py

    from npmpi.core.outpath import free_ballast
    from npmpi.runfile.attrseal import seal_all

    free_ballast(res)
    message = str(error)
    with contextlib.suppress(Exception):
        if f:
            for ds, shape in shrink:
                with contextlib.suppress(Exception):
                    ds.resize(shape)
            f.attrs["sizes_completed"] = rows
            f.attrs["status"] = "failed"
            f.attrs["status_message"] = message
            with contextlib.suppress(Exception):
                seal_all(f)
            f.flush()
    with contextlib.suppress(Exception):
        f.close()
    if res.fd >= 0:
        with contextlib.suppress(Exception), h5py.File(res.fd_path, "r+", locking=False) as g:
            rows = min(rows, _trim_to_stored(g))
            if g.attrs.get("status") != "failed" or g.attrs.get("sizes_completed") != rows:
                g.attrs["sizes_completed"] = rows
                g.attrs["status"] = "failed"
                g.attrs["status_message"] = message
            seal_all(g)
    return rows


def _trim_to_stored(g) -> int:
    """Cut every appended dataset to the rows its file storage holds; returns /pingpong's rows.

    When a write fails inside HDF5 (the space check did not foresee it), the chunk being written
    can lose its entry in the dataset's chunk index: the rows it held are gone, and a dataset that
    claims them would make the whole file unreadable. What is stored stays readable."""
    import h5py

    rows = []

    def trim(name: str, obj) -> None:
        if not isinstance(obj, h5py.Dataset) or obj.chunks is None or obj.maxshape[0] is not None:
            return
        row_bytes = obj.dtype.itemsize * math.prod(obj.shape[1:])
        if obj.id.get_create_plist().get_nfilters():  # checksummed (format 1.6): count whole chunks
            stored = obj.id.get_num_chunks() * obj.chunks[0]
        else:
            stored = obj.id.get_storage_size() // row_bytes if row_bytes else obj.shape[0]
        if stored < obj.shape[0]:
            obj.resize(stored, axis=0)
        if name.startswith("pingpong/"):
            rows.append(obj.shape[0])

    g.visititems(trim)
    return min(rows, default=0)
