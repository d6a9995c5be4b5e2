"""Reading a map whose pairs are rows (format 2.0, npmpi/runfile/maprows.py) into the dense
[S, N, N, ...] matrices the analysis computes with, block by block.

The rows are checked before anything is expanded: `/map/pair` names members that exist, never a
member with itself, and each pair (each direction, when measured apart) once; `round_first_row`
starts at 0, never decreases and ends at the last row; every per-pair dataset is [S, P, ...]. The
matrices the expansion makes are bounded by what this machine can hold (the analysis needs about
ANALYSIS_FACTOR times them); a read is at most BLOCK_BYTES at once. The run-queue waits of the map's
own rounds are not read (the analysis uses the re-measured suspects' only).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from npmpi.core.errors import RunFileError
from npmpi.runfile.format import COND_DATASETS
from npmpi.runfile.maprows import (
    COND_PREFIX,
    PAIR,
    ROUND_FIRST_ROW,
    expand_rows,
    is_rows_layout,
    round_matrix_of,
)
from npmpi.runfile.opening import MAX_READ_BYTES, check_own_data, read_checked
from npmpi_analysis.map.pairmatrix import PairMatrix, cell_index
from npmpi_analysis.map.trials import FILLS, summarise

BLOCK_BYTES = 64 << 20  # a read of a per-pair dataset at most
# the map's analysis peaks at about this many times the matrices counted below (measured at 4,096
# nodes and 2 sizes with every output, 2026-11-29: 3.73 GiB without power, 1.15 times the 13 [S, N, N]
# of 8 bytes counted; 11.6 GiB with a 1 Hz meter a node, 1.26 times the 37)
ANALYSIS_FACTOR = 1.3
READ_FACTOR = 2.2  # what a map reads whole of its file (its power samples) at most 1 / this of free memory
# [S, N, N] of 8 bytes the conditions hold: each side's frequency, throttle events and NIC bytes and
# the wire figures, as rows (map/condrows.py: one row a pair, two for a map measuring both ways)
COND_MATRICES = 4
POWER_MATRICES = 24  # ... the pairs' power, windows, energy and their σ, flags (map/energy.pair_energy),
# the nodes' series (the job's plot) and their resampled readings
AS_ROWS = ("mean_s", "sigma_s", "sum_s")  # trial summaries kept as rows (PairMatrix): only pair_timing and
# the conditions' bounds read them, a pair at a time (the best, the counts: dense, read everywhere)
UNREAD = ("runq_wait_s",)  # per-pair datasets of a rows map the analysis does not read
COND_NAMES = tuple(COND_PREFIX + n for n in COND_DATASETS)
# per-pair datasets read in blocks and bounded by `check_memory`, not counted by the file's guard (opening.py)
BLOCKED = ("trial_s", "iterations", "bytes_moved", "pair_window_s", PAIR)


def unread_of(f) -> tuple[str, ...]:
    """The datasets of a file the guard on what is read of a file does not count: in a rows map
    the per-pair ones (read in blocks, bounded by `check_memory`) and those not read."""
    attrs = getattr(f.get("map"), "attrs", None)
    if attrs is None or not is_rows_layout(attrs):
        return ()
    return (*UNREAD, *BLOCKED, *COND_NAMES)


@dataclass
class MapRows:
    """A rows map's index: the rows of one size, their rounds, and the members."""

    pair: np.ndarray  # [P, 2] int64
    first: np.ndarray  # [R + 1] int64
    nodes: int
    directed: bool
    _cells: np.ndarray | None = None

    def expand(self, rows: np.ndarray, fill) -> np.ndarray:
        """[S, P, ...] rows as the dense [S, N, N, ...] (`fill` where no row is)."""
        return expand_rows(rows, self.pair, self.nodes, self.directed, fill)

    def round_matrix(self) -> np.ndarray:
        return round_matrix_of(self.pair, self.first, self.nodes)

    def cells(self) -> np.ndarray:
        """[N, N] int32 the row of each cell (-1: none), made once (map/pairmatrix.py)."""
        if self._cells is None:
            self._cells = cell_index(self.pair, self.nodes, self.directed)
        return self._cells


def stored(g, name: str, p: Path, required: bool = False):
    """g[name] when it is a dataset stored in this file, None when absent and not `required`;
    RunFileError for a link, a group or a required dataset missing."""
    import h5py

    link = g.get(name, getlink=True)
    if link is None:
        if required:
            raise RunFileError(f"{p}: dataset /map/{name} is missing: the map cannot be analysed")
        return None
    if not isinstance(link, h5py.HardLink) or not isinstance(g[name], h5py.Dataset):
        raise RunFileError(f"{p}: /map/{name} is not a dataset stored in this file")
    return g[name]


def read_index(g, p: Path, nodes: int, rounds: int, map_attrs: dict) -> MapRows:
    """/map/pair and /map/round_first_row, checked against the members and the rounds."""
    for name in (PAIR, ROUND_FIRST_ROW):
        stored(g, name, p, required=True)
    shape = getattr(g[PAIR], "shape", None)
    if not shape or shape[0] > nodes * (nodes - 1):
        raise RunFileError(f"{p}: /map/{PAIR} has shape {shape}: more rows than {nodes} members have pairs")
    pair = np.asarray(read_checked(g[PAIR], (), p, f"/map/{PAIR}"))
    first = np.asarray(read_checked(g[ROUND_FIRST_ROW], (), p, f"/map/{ROUND_FIRST_ROW}"))
    if pair.ndim != 2 or pair.shape[1] != 2 or pair.dtype.kind not in "iu":
        raise RunFileError(
            f"{p}: /map/{PAIR} has shape {pair.shape} and type {pair.dtype}, expected [P, 2] int"
        )
    if first.shape != (rounds + 1,) or first.dtype.kind not in "iu":
        raise RunFileError(
            f"{p}: /map/{ROUND_FIRST_ROW} has shape {first.shape}, expected ({rounds + 1},) "
            f"for {rounds} rounds"
        )
    pair, first = pair.astype(np.int64), first.astype(np.int64)
    if first[0] != 0 or first[-1] != len(pair) or np.any(np.diff(first) < 0):
        raise RunFileError(f"{p}: /map/{ROUND_FIRST_ROW} does not run from 0 to the last row of /map/{PAIR}")
    if np.any(pair < 0) or np.any(pair >= nodes) or np.any(pair[:, 0] == pair[:, 1]):
        raise RunFileError(f"{p}: /map/{PAIR} names a member that is not mapped, or a member with itself")
    directed = str(map_attrs.get("directions", "")) == "both"
    key = pair if directed else np.sort(pair, axis=1)
    key = np.sort(key[:, 0] * nodes + key[:, 1])  # a sort: np.unique's hash took 8 s on 8.4 million
    if np.any(key[1:] == key[:-1]):
        raise RunFileError(f"{p}: /map/{PAIR} holds a pair twice")
    return MapRows(pair, first, nodes, directed)


def check_memory(
    p: Path, nodes: int, sizes: int, trials: int, cond: bool, directed: bool, power: bool = False
) -> None:
    """RunFileError when the dense matrices of this map (the trials' summaries, or each direction's
    trials; counts, windows, the folded conditions, the pairs' power and energy) would outgrow what
    the analysis may hold: MAX_READ_BYTES, or 1 / ANALYSIS_FACTOR of this machine's free memory when
    more."""
    n2 = sizes * nodes * nodes
    # a map measuring both ways apart holds its trials and their symmetric copy (trials.dense_summaries)
    trial_part = 2 * trials if directed else len(FILLS)
    per_pair = trial_part + 3 + (COND_MATRICES * (2 if directed else 1) if cond else 0)
    need = n2 * 8 * (per_pair + (POWER_MATRICES if power else 0))
    cap = max(MAX_READ_BYTES, int(available_bytes() / ANALYSIS_FACTOR))
    if need > cap:
        raise RunFileError(
            f"{p}: a map of {nodes} members and {sizes} size(s) makes {need / (1 << 30):.3g} GiB of "
            f"N x N matrices, about {ANALYSIS_FACTOR * need / (1 << 30):.3g} GiB to analyse; this machine "
            f"has {ANALYSIS_FACTOR * cap / (1 << 30):.3g} GiB free for it: analyse the file on a machine "
            "with more memory (docs/clusters.md, 'Large machines')"
        )


def read_cap() -> int:
    """What a map's analysis reads of its file at once, besides its per-pair rows (its power
    samples: a 4,096-node map's at 1 Hz are 0.6 GiB): MAX_READ_BYTES, or 1 / READ_FACTOR of this
    machine's free memory when more (what is read whole, the analysis needs a multiple of)."""
    return max(MAX_READ_BYTES, int(available_bytes() / READ_FACTOR))


def available_bytes() -> int:
    """This machine's available memory (Linux MemAvailable), at most this process's address-space
    limit (`ulimit -v`); 0 when neither is known."""
    import resource

    known = []
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            known += [int(ln.split()[1]) * 1024 for ln in fh if ln.startswith("MemAvailable:")]
    except (OSError, ValueError, IndexError):
        pass
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft != resource.RLIM_INFINITY:
        known.append(int(soft))
    return min(known) if known else 0


def check_unread(g, p: Path, rows: MapRows, sizes: int, trials: int) -> list[str]:
    """The per-pair datasets the analysis does not use (UNREAD: the map's own run-queue waits)
    read block by block and dropped, so that damage to them is said: the problems found."""
    problems = []
    for name in UNREAD:
        if name in g:
            try:
                read_rows(
                    stored(g, name, p), p, f"/map/{name}", (sizes, len(rows.pair), trials, 2), keep=False
                )
            except (RunFileError, OSError, ValueError, TypeError, AttributeError) as exc:
                problems.append(f"{exc}; /map/{name} is kept in the file, not used")
    return problems


def read_rows(ds, p: Path, where: str, want: tuple[int, ...], keep: bool = True) -> np.ndarray | None:
    """All of a per-pair dataset [S, P, ...] read in blocks of at most BLOCK_BYTES, checked; its
    never-written rows as the fill value (None when not `keep`: read to check it only)."""
    if tuple(ds.shape) != want:
        raise RunFileError(
            f"{p}: {where} has shape {tuple(ds.shape)}, expected {want}: the map's datasets disagree"
        )
    check_own_data(ds, p, where)
    out = np.empty(ds.shape if keep else (0,), dtype=ds.dtype)
    row_bytes = max(1, math.prod(ds.shape[2:]) * ds.dtype.itemsize)
    step = max(1, BLOCK_BYTES // row_bytes)
    for s in range(ds.shape[0]):
        for a in range(0, ds.shape[1], step):
            block = read_checked(ds, (s, slice(a, a + step)), p, where)
            if keep:
                out[s, a : a + step] = block
    return out if keep else None


def dense_datasets(g, p: Path, rows: MapRows, size_bytes: np.ndarray, trials: int) -> dict:
    """The dense matrices of a rows map: round [N, N], iterations, bytes_moved and (when stored)
    pair_window_s [S, N, N]; and its trials: each pair's summaries (`trial_stats`, map/trials.py)
    read block by block when each pair was measured one way, else trial_s [S, N, N, T]."""
    P, sizes = len(rows.pair), len(size_bytes)
    out = {"round": rows.round_matrix()}
    for name, kinds, fill, required in (
        ("iterations", "iu", 0, True),
        ("bytes_moved", "iu", 0, True),
        ("pair_window_s", "f", np.nan, False),
    ):
        ds = stored(g, name, p, required)
        if ds is None:
            continue
        if ds.dtype.kind not in kinds:
            raise RunFileError(f"{p}: /map/{name} has type {ds.dtype}, expected numbers")
        values = read_rows(ds, p, f"/map/{name}", (sizes, P)).astype(np.float64 if kinds == "f" else np.int64)
        if name == "iterations":
            its = values  # each row's: the stall rule's
        out[name] = rows.expand(values, fill)
    ds = stored(g, "trial_s", p, True)
    if ds.dtype.kind != "f":
        raise RunFileError(f"{p}: /map/trial_s has type {ds.dtype}, expected numbers")
    if rows.directed:
        values = read_rows(ds, p, "/map/trial_s", (sizes, P, trials))
        out["trial_s"] = rows.expand(values.astype(np.float64), np.nan)
    else:
        got = read_trial_rows(ds, p, rows, size_bytes, trials, its)
        out["trial_stats"] = {
            k: PairMatrix(v, rows.cells(), FILLS[k]) if k in AS_ROWS else rows.expand(v, FILLS[k])
            for k, v in got.items()
        }
    return out


def read_trial_rows(ds, p: Path, rows: MapRows, size_bytes, trials: int, its: np.ndarray) -> dict:
    """A rows map's /map/trial_s [S, P, T] read in blocks of at most BLOCK_BYTES, each block's
    times checked (as check_values checks a dense map's) and summed up (map/trials.summarise):
    the summaries [S, P]."""
    from npmpi_analysis.map.checks import impossible_time_error, impossible_times

    sizes, P = len(size_bytes), len(rows.pair)
    if tuple(ds.shape) != (sizes, P, trials):
        raise RunFileError(
            f"{p}: /map/trial_s has shape {tuple(ds.shape)}, expected {(sizes, P, trials)}: the map's "
            "datasets disagree"
        )
    check_own_data(ds, p, "/map/trial_s")
    out = {k: np.empty((sizes, P), dtype=np.int32 if k.startswith("trials_") else np.float64) for k in FILLS}
    step = max(1, BLOCK_BYTES // max(1, trials * 8))
    for s in range(sizes):
        for a in range(0, P, step):
            t = np.asarray(read_checked(ds, (s, slice(a, a + step)), p, "/map/trial_s"), dtype=np.float64)
            bad = impossible_times(t)
            if np.any(bad):
                r, k = (int(x) for x in np.argwhere(bad)[0])
                i, j = sorted(int(x) for x in rows.pair[a + r])
                raise impossible_time_error(p, t[r, k], i, j, int(size_bytes[s]))
            part = summarise(t, its[s, a : a + step])
            if np.any((part["trials_run"] > 0) & (its[s, a : a + step] < 1)):
                raise RunFileError(f"{p}: /map/iterations holds values below 1 for a measured pair")
            for k, v in part.items():
                out[k][s, a : a + step] = v
    return out
