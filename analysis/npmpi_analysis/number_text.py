"""Many floats written as Python writes them (repr: the shortest text that reads back the same
number), each distinct number formatted once.

A map's CSV and JSON write tens of millions of numbers (a 1,024-node map: 24 million in the JSON,
18 million in the CSV), and Python's float repr costs about 0.4 µs a number however it is called
(repr, the json module's C encoder, numpy's astype(str)). Most of those numbers repeat: every
matrix of an unordered map is symmetric (each pair's value in (i, j) and in (j, i)), and the
conditions (a node's clock, its throttle count) take few values. Here a symmetric matrix's upper
triangle is formatted and mirrored (a matrix of [N, N, sides] each side's [N, N] in turn), and a
column whose numbers repeat is formatted by its distinct values. Repeats are found on the numbers'
bits, so 0.0 and -0.0 stay two texts; the text of every number is exactly repr's.
"""

from __future__ import annotations

import numpy as np

SAMPLE = 4096  # numbers looked at to decide whether a column's numbers repeat
REPEATS = 0.5  # ... they do when at most this fraction of the sample is distinct


def float_texts(x, undefined: str) -> np.ndarray:
    """repr of each float of `x` (any shape) as an object array of str, `undefined` where the
    number is NaN or infinite."""
    x = np.asarray(x, dtype=np.float64)
    if x.ndim >= 3 and x.shape[-3] == x.shape[-2] != x.shape[-1]:  # [..., N, N, sides]: each side's
        return np.moveaxis(float_texts(np.moveaxis(x, -1, 0), undefined), 0, -1)  # [N, N] in turn
    x = np.ascontiguousarray(x)
    finite = np.isfinite(x)
    symmetric = _symmetric(x, finite)
    chosen = finite & np.triu(np.ones(x.shape[-2:], dtype=bool)) if symmetric else finite
    where = np.flatnonzero(chosen)
    texts, index = _texts(x.ravel()[where])
    pick = np.full(x.size, len(texts), dtype=np.intp)  # the last text: `undefined`
    pick[where] = index
    pick = pick.reshape(x.shape)
    if symmetric:
        pick = np.where(np.tril(np.ones(x.shape[-2:], dtype=bool), -1), np.swapaxes(pick, -1, -2), pick)
    return np.append(texts, np.array([undefined], dtype=object))[pick]


def _symmetric(x: np.ndarray, finite: np.ndarray) -> bool:
    """Whether [..., N, N] square matrices hold the same number (to the bit) in (i, j) and (j, i)
    wherever either is finite; not worth looking at below 64 x 64."""
    if x.ndim < 2 or x.shape[-1] != x.shape[-2] or x.shape[-1] < 64:
        return False
    if not np.array_equal(finite, np.swapaxes(finite, -1, -2)):
        return False
    bits = np.where(finite, x, 0.0).view(np.int64)
    return bool(np.array_equal(bits, np.swapaxes(bits, -1, -2)))


def _texts(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(texts, index): repr of the (finite) `values` [n] is texts[index]; each distinct number's
    text made once when the numbers repeat."""
    n = len(values)
    if n > SAMPLE:
        bits = values.view(np.int64)
        step = n // SAMPLE
        if len(np.unique(bits[::step][:SAMPLE])) <= REPEATS * SAMPLE:
            distinct, index = np.unique(bits, return_inverse=True)
            return _repr(distinct.view(np.float64)), index.ravel()
    return _repr(values), np.arange(n)


def _repr(values: np.ndarray) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    out[:] = list(map(float.__repr__, values.tolist()))
    return out
