"""A rows map's per-pair figures held as its rows, read as the dense [S, N, N, ...] matrix.

A map whose pairs are rows (format 2.0) measured one way per pair has one row for the cells (i, j)
and (j, i) of a dense matrix: held as rows, a figure takes half the memory, and none for the
diagonal. `PairMatrix` keeps the rows [S, P, ...] and an index [N, N] of each cell's row (-1 where
no row is), and gives what the dense matrix would for the ways the analysis reads it: a cell, or
many at once (`x[ks, ii, jj]`, `x[:, ii, jj]`, with a trailing side), a block of rows of the
matrices (`x[:, r]`, r a slice: the analysis' elementwise work, maprows.row_blocks) and the whole
(`np.asarray(x)`, for the small maps whose JSON holds every matrix). Computing on the rows and
reading the cells gives the same numbers, bit for bit, as computing on the dense matrix.
"""

from __future__ import annotations

import numpy as np
from numpy.lib.mixins import NDArrayOperatorsMixin


class PairMatrix(NDArrayOperatorsMixin):
    """[S, N, N, ...] as rows [S, P, ...] with `index` [N, N] (int32, -1: no row, read as `fill`);
    `table`, when given, maps each stored value (a small int code) to what is read. Anything else
    an array does (arithmetic, ufuncs, numpy's functions, `.T`, `.copy()`, a size `x[k]`, iterating
    over the sizes) it does on the dense matrix, made for it: a reader of the analysis (the API's
    users) can take it for an array."""

    def __init__(self, rows: np.ndarray, index: np.ndarray, fill, table: np.ndarray | None = None):
        self.rows, self.index, self.fill, self.table = rows, index, fill, table

    @property
    def shape(self) -> tuple[int, ...]:
        n = self.index.shape[0]
        return (self.rows.shape[0], n, n, *self.rows.shape[2:])

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def dtype(self) -> np.dtype:
        return self.table.dtype if self.table is not None else self.rows.dtype

    def like(self, rows: np.ndarray, fill, table: np.ndarray | None = None) -> PairMatrix:
        """Other rows of the same pairs."""
        return PairMatrix(rows, self.index, fill, table)

    def __len__(self) -> int:
        return self.rows.shape[0]

    def __iter__(self):
        return (self[k] for k in range(len(self)))

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        if any(isinstance(x, PairMatrix) for x in kwargs.get("out", ())):
            return NotImplemented  # its dense matrix is made for the call: written into, it is lost
        inputs = tuple(np.asarray(x) if isinstance(x, PairMatrix) else x for x in inputs)
        return getattr(ufunc, method)(*inputs, **kwargs)

    def __getattr__(self, name: str):
        if name.startswith("_") or name in ("rows", "index", "fill", "table"):
            raise AttributeError(name)
        return getattr(np.asarray(self), name)  # .T, .copy(), .ravel(), .sum(), ... of the dense matrix

    def __getitem__(self, key):
        if not isinstance(key, tuple):
            if np.ndim(key) == 0 and not isinstance(key, slice):  # one size: its [N, N, ...] matrix
                return np.asarray(self.like(self.rows[[key]], self.fill, self.table))[0]
            return self.like(self.rows[key], self.fill, self.table)  # sizes: x[order], x[a:b]
        if len(key) == 2:  # x[:, r]: a block of rows of the matrices
            key = (*key, slice(None))
        if self.rows.ndim < 2 or self.rows.shape[1] == 0:  # no row at all (a forged map): all fill
            return np.asarray(self)[key]
        k, i, j, *rest = key
        row = self.index[i, j]
        got = self.rows[(k, np.maximum(row, 0), *rest)]
        missing = row < 0
        if self.table is not None:
            got = self.table[got]
            fill = self.table[self.fill]
        else:
            fill = self.fill
        if np.ndim(got) == 0:
            return fill if missing else got
        if np.any(missing):
            got = np.where(_against(missing, got, k, rest), fill, got)
        return got

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        dense = np.full(self.shape, self.fill, dtype=self.rows.dtype)
        cells = np.nonzero(self.index >= 0)
        dense[:, cells[0], cells[1]] = self.rows[:, self.index[cells]]
        if self.table is not None:
            dense = self.table[dense]
        return dense if dtype is None else dense.astype(dtype)

    def blank(self, where: np.ndarray) -> PairMatrix:
        """The rows with the cells `where` [S, N, N] (alike for (i, j) and (j, i)) as `fill`."""
        ii, jj = _first_cells(self.index)
        late = where[:, ii, jj]
        late = late.reshape(late.shape + (1,) * (self.rows.ndim - 2))
        return self.like(np.where(late, self.rows.dtype.type(self.fill), self.rows), self.fill, self.table)


def _against(missing, got, k, rest) -> np.ndarray:
    """`missing` (of the cells read) shaped to broadcast against what was read of them: after the
    sizes' axis when all sizes were read, before the trailing axes of each cell."""
    m = np.asarray(missing)
    if isinstance(k, slice):
        m = m[None]
    trailing = got.ndim - m.ndim
    return m.reshape(m.shape + (1,) * trailing) if trailing > 0 else m


def _first_cells(index: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(i, j) of a cell of each row, in the rows' order (either of a row's two cells: `blank`'s
    `where` is alike for both)."""
    cells = np.flatnonzero(index >= 0)
    rows = index.ravel()[cells]
    one = np.full(int(rows.max()) + 1 if len(rows) else 0, -1, dtype=np.int64)
    one[rows] = cells
    return np.unravel_index(one, index.shape)


def cell_index(pair: np.ndarray, nodes: int, directed: bool) -> np.ndarray:
    """[N, N] int32: the row of each cell (i, j), and of (j, i) too unless `directed`; -1 where none."""
    index = np.full((nodes, nodes), -1, dtype=np.int32)
    rows = np.arange(len(pair), dtype=np.int32)
    index[pair[:, 0], pair[:, 1]] = rows
    if not directed:
        index[pair[:, 1], pair[:, 0]] = rows
    return index


def rows_of(x):
    """What is computed on: a PairMatrix's rows, or the dense matrix itself."""
    return x.rows if isinstance(x, PairMatrix) else x
