"""A run file's datasets read defensively (npmpi/runfile/reader.py, powerreader.py): a member that
is stored in this file and of the kind asked, and only the rows the file holds (a damaged or forged
file may claim any shape)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from npmpi.core.errors import RunFileError
from npmpi.runfile.format import (
    MAX_COMPRESSION_RATIO,
)
from npmpi.runfile.opening import read_checked


def member(group, name: str, p: Path, where: str, dataset: bool, required: bool = True):
    """group[name] if it is a dataset (or group) stored in this file; RunFileError otherwise.

    Links are not followed: a soft link leads elsewhere in the file, an external one to another file.
    """
    import h5py

    what = "dataset" if dataset else "group"
    link = group.get(name, getlink=True)
    if link is None:
        if required:
            raise RunFileError(f"{p}: {what} {where} is missing")
        return None
    if not isinstance(link, h5py.HardLink):
        raise RunFileError(f"{p}: {where} is a {type(link).__name__}, not a {what} stored in this file")
    obj = group[name]
    if not isinstance(obj, h5py.Dataset if dataset else h5py.Group):
        raise RunFileError(f"{p}: {where} is not a {what}")
    return obj


def read_rows(ds, n: int, p: Path, where: str) -> np.ndarray:
    """The first n rows of a dataset, after checking that the file holds them."""
    check_stored(ds, n, p, where)
    return read_checked(ds, np.s_[:n], p, where)


def read_whole(ds, p: Path, where: str) -> np.ndarray:
    """All of a dataset of one or more dimensions, after checking that the file holds it (a damaged
    or forged file may claim any shape): RunFileError if not."""
    return read_rows(ds, ds.shape[0], p, where)


def check_stored(ds, n: int, p: Path, where: str) -> None:
    """Refuse a dataset whose file does not hold its first n rows (a file may claim any shape:
    reading unallocated data would fill memory with nothing). Costs no read of the data."""
    plist = ds.id.get_create_plist()
    if ds.is_virtual or plist.get_external_count() > 0:
        raise RunFileError(f"{p}: {where} keeps its data in another file; a run file keeps its own")
    need = n * ds.dtype.itemsize * math.prod(ds.shape[1:])
    stored = ds.id.get_storage_size()
    allowed = stored * (MAX_COMPRESSION_RATIO if plist.get_nfilters() else 1)
    if need > allowed:
        raise RunFileError(
            f"{p}: {where} claims shape {ds.shape} but the file holds {stored} bytes of it, "
            f"not the {need} bytes of its first {n} rows; the file is damaged or forged"
        )
