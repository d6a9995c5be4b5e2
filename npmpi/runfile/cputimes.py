"""Reading the optional CPU datasets of /pingpong (docs/file-format.md, "1.7: CPU time per size").

They are an addition, not the run: a file without them is read as before, and ones of another
shape or with impossible values are left out with a notice (the timing and the power stand without
them). A failed checksum is damage like any other dataset's: the reader refuses the file, naming it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from npmpi.runfile.format import CPU_DATASETS, CPU_RANKS_ATTR, MAX_ROWS

MAX_CPU_RANKS = 1_000_000  # more measuring ranks than this is damage


@dataclass
class CpuTimes:
    """Each measuring rank's process CPU time over each size's trials, and the span's wall time."""

    ranks: np.ndarray  # [r] the ranks' ids (int64)
    cpu_user_s: np.ndarray  # [n, r] NaN where not measured
    cpu_system_s: np.ndarray  # [n, r]
    cpu_wall_s: np.ndarray  # [n, r]
    cpu_runqueue_wait_s: np.ndarray  # [n, r] the main thread's wait for a CPU (NaN: not known)


def read_cpu(g, p: Path, n: int, notices: list[str], read_rows: Callable) -> CpuTimes | None:
    """The CPU datasets of the open /pingpong group `g` for its first n rows; None when the file has
    none (before format 1.7) or they are malformed (with a notice). `read_rows(ds, n, p, where)` is
    the reader's checked read: its RunFileError (a failed checksum) refuses the file."""
    if not all(name in g for name in CPU_DATASETS):
        if any(name in g for name in CPU_DATASETS):
            notices.append("/pingpong: some of the CPU datasets (cpu_*_s) are missing: CPU time left out")
        return None
    try:
        ranks, arrays = read_ranked(g, p, n, read_rows, CPU_DATASETS)
        return CpuTimes(ranks=ranks, **arrays)
    except Malformed as exc:
        notices.append(f"{p}: {exc}: CPU time left out")
    return None


class Malformed(Exception):
    """[size, rank] datasets of another shape or with impossible values: left out, not a refusal."""


def read_ranked(g, p: Path, n: int, read_rows: Callable, names: tuple[str, ...]) -> tuple[np.ndarray, dict]:
    """The [size, rank] datasets `names` of /pingpong (CPU time, conditions) for n rows, and their
    ranks; Malformed when one has another shape, no ranks, or negative or infinite values."""
    arrays = {}
    ranks = None
    for name in names:
        ds = g[name]
        where = f"/pingpong/{name}"
        if not hasattr(ds, "shape") or len(ds.shape) != 2 or ds.dtype.kind != "f":
            raise Malformed(f"{where} is not a 2-dimensional float dataset")
        if ds.shape[0] > MAX_ROWS or not 0 < ds.shape[1] <= MAX_CPU_RANKS:
            raise Malformed(f"{where} has an implausible shape {ds.shape}")
        try:
            these = np.asarray(ds.attrs.get(CPU_RANKS_ATTR, []), dtype=np.int64).ravel()
        except (TypeError, ValueError, OverflowError):
            raise Malformed(f"{where}: attribute {CPU_RANKS_ATTR} is not a list of ranks") from None
        if these.shape != (ds.shape[1],) or (ranks is not None and not np.array_equal(ranks, these)):
            raise Malformed(f"{where}: attribute {CPU_RANKS_ATTR} does not give each column's rank")
        ranks = these
        rows = min(n, ds.shape[0])
        data = np.full((n, ds.shape[1]), np.nan)
        data[:rows] = np.asarray(read_rows(ds, rows, p, where), dtype=np.float64)
        bad = np.isfinite(data) & (data < 0) | np.isinf(data)
        if bad.any():
            raise Malformed(f"{where} holds negative or infinite values")
        arrays[name] = data
    return ranks, arrays
