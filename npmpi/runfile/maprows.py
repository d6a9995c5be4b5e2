"""A map's pairs stored as rows (format 2.0 of a map file): one row per measured pair and direction,
round after round, so the file grows with the pairs measured, never with N x N.

`/map/pair` [P, 2] lists the rows of one size in the schedule's order, round by round (round r's
rows are `pair[round_first_row[r]:round_first_row[r + 1]]`); each per-pair dataset is [S, P, ...]
and a round of a size is one contiguous slice of each, written at once. A round-trip map has one
row per pair (measured both ways at once); a map measuring each direction apart (`directions` =
`both`) has the rows (i, j) and (j, i), i the transmitter. `dense_map` makes the [S, N, N, ...] matrices
of the dense layout (format 1.x) from the rows, for the analysis and for anyone reading the file.
"""

from __future__ import annotations

import contextlib

import numpy as np

from npmpi.runfile.format import COND_DATASETS

LAYOUT_ATTR = "pairs_layout"  # /map attribute: "rows" (format 2.0); absent in a dense map (1.x)
ROWS_LAYOUT = "rows"
PAIR = "pair"
ROUND_FIRST_ROW = "round_first_row"
COND_PREFIX = "cond_"
CHUNK_BYTES = 512 << 10  # a chunk of a per-pair dataset at most (HDF5 caches 1 MiB per dataset)
MIN_CHUNK_ROWS = 64  # a serial map's round is one row: chunks of 64 rounds
ROW_BLOCK_CELLS = 1 << 21  # cells a block of rows of the dense matrices holds (row_blocks): the analysis'
# elementwise work on [S, N, N] a block at a time, its temporaries a few MB instead of GBs at 4,096 nodes


def row_blocks(rows: int, row_cells: int, cells: int = ROW_BLOCK_CELLS):
    """Slices of `rows` rows, each holding at most `cells` cells of `row_cells` each (one row at
    least): an elementwise computation made a block at a time gives the same numbers as at once."""
    step = max(1, cells // max(1, row_cells))
    for i0 in range(0, rows, step):
        yield slice(i0, i0 + step)


def row_datasets(trials: int) -> list[tuple[str, tuple[int, ...], type, float, bool]]:
    """/map's per-pair datasets [S, P, ...]: (name, the shape after [S, P], type, fill, compressed).
    The run-queue waits and the conditions are compressed (gzip with shuffle: mostly zero or alike
    from pair to pair); the times, counts and windows are not, so a chunk torn by a killed writer
    can still be read as stored (npmpi/runfile/opening.py)."""
    nan = np.nan
    return [
        ("trial_s", (trials,), np.float64, nan, False),
        ("iterations", (), np.int64, 0, False),
        ("bytes_moved", (), np.int64, 0, False),
        ("pair_window_s", (), np.float64, nan, False),
        ("runq_wait_s", (trials, 2), np.float64, nan, True),
        *((COND_PREFIX + name, (2,), np.float64, nan, True) for name in COND_DATASETS),
    ]


def row_index(rounds: list[list[tuple[int, int]]], directed: bool) -> tuple[np.ndarray, np.ndarray]:
    """(pair [P, 2] int32, round_first_row [R + 1] int64) of a schedule's rounds: each round's pairs
    in its order, with `directed` each pair's (i, j) then (j, i)."""
    ways = 2 if directed else 1
    if hasattr(rounds, "array"):  # npmpi/map/schedule.py CircleRounds: all at once
        flat = rounds.array().reshape(-1, 2)
        counts = rounds.lengths() * ways
    else:
        flat = np.array([p for r in rounds for p in r], dtype=np.int32).reshape(-1, 2)
        counts = np.array([len(r) * ways for r in rounds], dtype=np.int64)
    first = np.zeros(len(rounds) + 1, dtype=np.int64)
    np.cumsum(counts, out=first[1:])
    if directed:
        flat = np.stack([flat, flat[:, ::-1]], axis=1).reshape(-1, 2)
    return flat, first


def chunk_rows(tail: tuple[int, ...], itemsize: int, per_round: int, rows: int) -> int:
    """Rows per chunk of a dataset: a round's rows (a round then touches one or two chunks), at
    least MIN_CHUNK_ROWS, at most CHUNK_BYTES of data, at most the rows there are."""
    row_bytes = max(1, int(np.prod(tail, dtype=np.int64)) * itemsize)
    return int(max(1, min(max(per_round, MIN_CHUNK_ROWS), CHUNK_BYTES // row_bytes, rows)))


def rows_data_bytes(rows: int, sizes: int, trials: int, rounds: int, members: int) -> int:
    """The bytes of a rows map's datasets once every round is stored, before compression: per size
    and row 24 x trials + 136 (the times, waits, conditions, counts, window), per row its pair, per
    size and round its window, the members' ranks."""
    per_row = sum(
        int(np.prod(tail, dtype=np.int64)) * np.dtype(dt).itemsize
        for _, tail, dt, _, _ in row_datasets(trials)
    )
    return (
        sizes * rows * per_row + rows * 8 + (rounds + 1) * 8 + sizes * rounds * 16 + sizes * 8 + members * 4
    )


def round_matrix_of(pair: np.ndarray, first: np.ndarray, n: int) -> np.ndarray:
    """[N, N] the round of each pair (symmetric), -1 on the diagonal and for pairs not scheduled."""
    out = np.full((n, n), -1, dtype=np.int64)
    rnd = np.repeat(np.arange(len(first) - 1), np.diff(first))
    out[pair[:, 0], pair[:, 1]] = rnd
    out[pair[:, 1], pair[:, 0]] = rnd
    return out


def is_rows_layout(attrs) -> bool:
    """Whether a /map group's attributes (h5py's or a dict) say its pairs are rows (format 2.0)."""
    from npmpi.runfile.opening import attr_value

    return str(attr_value(attrs.get(LAYOUT_ATTR, ""))) == ROWS_LAYOUT


def expand_rows(rows: np.ndarray, pair: np.ndarray, n: int, directed: bool, fill) -> np.ndarray:
    """[S, P, ...] rows as the dense [S, N, N, ...]: each row at [i, j], and at [j, i] too unless
    `directed`; `fill` where no row is."""
    dense = np.full((rows.shape[0], n, n, *rows.shape[2:]), fill, dtype=rows.dtype)
    for s in range(rows.shape[0]):
        dense[s, pair[:, 0], pair[:, 1]] = rows[s]
        if not directed:
            dense[s, pair[:, 1], pair[:, 0]] = rows[s]
    return dense


def dense_map(g) -> dict[str, np.ndarray]:
    """A /map group's per-pair datasets as dense [S, N, N, ...] matrices, with `round` [N, N] and
    the derived `latency_s` [N, N] and `bandwidth_bit_s` [S, N, N], whichever the layout (rows, or
    the dense matrices of format 1.x as stored): for reading a map with h5py, unchecked (the
    analysis's reader, npmpi_analysis.map.load, checks)."""
    from npmpi.runfile.opening import attr_value

    if not is_rows_layout(g.attrs):
        out = {k: g[k][()] for k in g if k in _DENSE_NAMES}
    else:
        pair, first = g[PAIR][()].astype(np.int64), g[ROUND_FIRST_ROW][()].astype(np.int64)
        n = len(g["hosts"])
        directed = str(attr_value(g.attrs.get("directions", ""))) == "both"
        out = {"round": round_matrix_of(pair, first, n)}
        for name in _DENSE_NAMES:
            if name in g and name != "round" and g[name].ndim >= 2 and g[name].shape[1] == len(pair):
                rows = g[name][()]
                out[name] = expand_rows(rows, pair, n, directed, 0 if rows.dtype.kind in "iu" else np.nan)
    if "trial_s" in out and "bandwidth_bit_s" not in out:
        out["latency_s"], out["bandwidth_bit_s"] = derived(g["size_bytes"][()], out["trial_s"])
    return out


_DENSE_NAMES = (
    "round",
    "trial_s",
    "iterations",
    "bytes_moved",
    "pair_window_s",
    "runq_wait_s",
    "latency_s",
    "bandwidth_bit_s",
    *(COND_PREFIX + name for name in COND_DATASETS),
)


def derived(size_bytes: np.ndarray, trial_s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(latency_s [N,N], bandwidth_bit_s [S,N,N]) from one-way times trial_s [S,N,N,T]:
    the best one-way time at the smallest size, and 8 * size / the best one-way time; NaN where no
    trial ran and on the diagonal."""
    with np.errstate(invalid="ignore"), warnings_off():
        best = np.nanmin(trial_s, axis=3)
    n = trial_s.shape[1]
    best[:, np.arange(n), np.arange(n)] = np.nan
    latency = best[0].copy()
    bandwidth = 8.0 * np.asarray(size_bytes, dtype=np.float64)[:, None, None] / best
    return latency, bandwidth


@contextlib.contextmanager
def warnings_off():
    """numpy's 'All-NaN slice' warning silenced (an unmeasured pair is NaN by design)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        yield
