"""A rows map's figures held as rows (analysis/npmpi_analysis/map/pairmatrix.py) read as the dense
matrix `expand_rows` makes of them, whatever is read: a cell, many cells, a block of rows, the
sizes in another order, the whole, a stopped map's cells blanked; for maps measured one way and
both ways, with some pairs unmeasured or none at all."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from npmpi_analysis.map.pairmatrix import PairMatrix, cell_index
from npmpi_analysis.numbers.conditions import FLAG_WORDS

from npmpi.runfile.maprows import expand_rows


def _same(got, want) -> bool:
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape or got.dtype != want.dtype:
        return False
    return bool(np.array_equal(got, want, equal_nan=want.dtype.kind == "f"))


def _case(rng, n: int, s: int, directed: bool, share: float, tail: tuple, kind: str):
    """(PairMatrix, the dense matrix) of n members, s sizes, `share` of the pairs measured."""
    every = [(i, j) for i in range(n) for j in range(n) if i != j and (directed or i < j)]
    kept = [p for p in every if rng.random() < share]
    rng.shuffle(kept)
    pair = np.array(kept, dtype=np.int64).reshape(-1, 2)
    if not directed and len(pair):  # a row names its pair either way round
        flip = rng.random(len(pair)) < 0.5
        pair[flip] = pair[flip][:, ::-1]
    shape, table = (s, len(pair), *tail), None
    if kind == "f":
        rows, fill = rng.normal(size=shape), np.nan
        rows[rng.random(shape) < 0.2] = np.nan
    elif kind == "i":
        rows, fill = rng.integers(0, 100, size=shape), np.int64(0)
    elif kind == "b":
        rows, fill = rng.random(shape) < 0.5, False
    else:
        rows, fill, table = rng.integers(0, 4, size=shape).astype(np.int8), 0, FLAG_WORDS
    x = PairMatrix(rows, cell_index(pair, n, directed), fill, table)
    dense = expand_rows(rows, pair, n, directed, fill)
    return x, dense if table is None else table[dense]


def _keys(rng, n: int, s: int, tail: tuple) -> list:
    ii, jj = (v.astype(np.int32) for v in np.nonzero(np.ones((n, n), dtype=bool)))
    ks = rng.integers(0, max(s, 1), size=len(ii)).astype(np.int32)
    keys: list = []
    for k, i, j in itertools.product(range(s), range(n), range(n)):
        keys += [(k, i, j), (np.int64(k), np.int32(i), np.int64(j)), (k - s, i - n, j)]
        keys += [(k, i, j, 0), (k, i, j, -1)] if tail else []
    if s:
        keys += [(ks, ii, jj), (slice(None), ii, jj), (ks[:0], ii[:0], jj[:0]), (0, ii, jj)]
        keys += [(ks, ii, jj, 1), (slice(None), ii, jj, 0)] if tail else []
    keys += [(slice(None), slice(a, b)) for a in range(n + 1) for b in range(a, n + 1)]
    keys += [k for k in range(-s, s)] + [np.int64(k) for k in range(s)]  # a size's [N, N] matrix
    keys += [(k, i) for k in range(s) for i in range(n)]  # a member's row at a size
    return keys


@pytest.mark.parametrize("directed", [False, True])
@pytest.mark.parametrize("kind", ["f", "i", "b", "table"])
def test_a_pair_matrix_reads_as_the_dense_matrix_of_its_rows(directed, kind):
    """Every key the analysis reads with, on maps of 1 to 5 members, 0 to 3 sizes, none, some or
    every pair measured, a value a row or a pair of sides: the dense matrix's values, shape and type."""
    rng = np.random.default_rng(7)
    for n, s, share, tail in itertools.product([1, 2, 3, 5], [0, 1, 3], [0.0, 0.5, 1.0], [(), (2,)]):
        if kind == "table" and tail:
            continue
        x, dense = _case(rng, n, s, directed, share, tail, kind)
        where = (n, s, share, tail)
        assert x.shape == dense.shape and x.dtype == dense.dtype, where
        assert _same(np.asarray(x), dense), where
        for key in _keys(rng, n, s, tail):
            assert _same(x[key], dense[key]), (where, key)
        order = np.arange(s)[::-1]
        assert _same(np.asarray(x[order]), dense[order]), where
        late = rng.random((s, n, n)) < 0.4
        late = late if directed else late | np.swapaxes(late, 1, 2)  # a round's pair is late both ways
        blanked = dense.copy()
        blanked[late] = x.table[x.fill] if x.table is not None else x.fill
        assert _same(np.asarray(x.blank(late)), blanked), where


def test_a_pair_matrix_does_what_an_array_does_on_its_dense_matrix():
    """What a reader of the analysis may do with a matrix (the API gives the analysis itself):
    arithmetic, comparisons, numpy's functions, its length and sizes one by one, `.T`, `.copy()`."""
    rng = np.random.default_rng(3)
    x, dense = _case(rng, 4, 2, False, 0.7, (), "f")
    for got, want in (
        (x / 1e9, dense / 1e9),
        (2.0 * x, 2.0 * dense),
        (x * x, dense * dense),
        (x > 0, dense > 0),
        (np.exp(x), np.exp(dense)),
        (np.sum(x, axis=2), np.sum(dense, axis=2)),
        (np.where(x > 0, x, 0.0), np.where(dense > 0, dense, 0.0)),
        (x.T, dense.T),
        (x.copy(), dense),
        (np.stack(list(x)), dense),
    ):
        assert _same(got, want)
    assert len(x) == 2 and x.ndim == 3 and _same(x.sum(), dense.sum())
    with pytest.raises(TypeError):
        np.add(x, 1.0, out=x)  # its dense matrix is made for the call: a write into it would be lost
