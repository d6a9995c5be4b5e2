"""Rows of text made by numpy a block of rows at a time, for the outputs of the largest maps.

Python's float repr (number_text) costs about 0.4 µs a number; a 4,096-node map's CSV has 17 million
rows of about 20 numbers, over two minutes of repr alone. Here each column of a block of rows is a
[rows, width] array of bytes, a byte 0 where the cell has no character, and a block's rows are the
columns laid side by side with their commas and newline, the zeros left out. Made of integer
arithmetic on whole columns: about 75 ns a float and 40-60 ns an integer here (repr: 400-500 ns).

    sci_fields(x)      a float as C's "%.8e" writes it (9 significant digits: '1.23456789e-05'),
                       an empty cell for NaN and infinities
    int_fields(x)      an integer in decimal ('-1', '4194304')
    code_fields(c, t)  the text t[c] of each code c (texts already written as the CSV writes them;
                       t a list or its text_table)
    text_codes(x)      an object array of texts as (codes, texts): each distinct text once
    joined_rows(cols)  the rows' bytes: cells separated by commas, each row ended by a newline

The digits are those of the number scaled by one power of ten and rounded to an integer (one rounding
of the product, and of the power below 10^-22 or above 10^22): the same text as "%.8e" except, in
about one number in ten million, the ninth digit one away when the number lies within one part in
10^16 of halfway between two 9-digit texts (tests/test_bulk_text.py compares them).
"""

from __future__ import annotations

import numpy as np

DIGITS = 9  # significant digits of sci_fields
_ZERO, _DOT, _E, _PLUS, _MINUS = (ord(c) for c in "0.e+-")
_EXACT = 22  # 10^k is a float without rounding up to here
_MUL = np.concatenate([np.ones(_EXACT), 10.0 ** np.arange(_EXACT + 1)])  # by k + _EXACT: 10^k for k >= 0
_DIV = _MUL[::-1].copy()  # ... and 10^-k for k < 0
_POW10 = 10 ** np.arange(1, 20, dtype=np.uint64)  # a number has 1 + (how many of these <= it) digits
_TWO = np.array([[_ZERO + d // 10, _ZERO + d % 10] for d in range(100)], dtype=np.uint8)  # "00" ... "99"


def sci_fields(x) -> np.ndarray:
    """[n, 16] bytes: each float of x (1-D) as "%.8e" writes it; no character for NaN and inf."""
    x = np.asarray(x, dtype=np.float64).ravel()
    a = np.abs(x)
    usual = (a > 0) & (a < np.inf)  # not 0, NaN or infinite
    if not usual.all():
        a = np.where(usual, a, 1.0)
    e = np.floor(np.log10(a)).astype(np.int64)
    m = _scaled(a, e)
    off = np.flatnonzero((m >= 10**DIGITS) | (m < 10 ** (DIGITS - 1)))  # log10 a step off at the edges
    if len(off):
        e[off] += np.where(m[off] >= 10**DIGITS, 1, -1)
        m[off] = _scaled(a[off], e[off])
        up = off[m[off] >= 10**DIGITS]  # 9.9999999995e5 rounds up to the next power
        m[up], e[up] = 10 ** (DIGITS - 1), e[up] + 1
    zero = ~usual & (x == 0)
    m[zero], e[zero] = 0, 0
    first = m // 10 ** (DIGITS - 1)
    out = np.empty((len(x), 16), dtype=np.uint8)
    out[:, 0] = np.signbit(x) * _MINUS
    out[:, 1] = first + _ZERO
    out[:, 2] = _DOT
    out[:, 3 : 2 + DIGITS] = _eight_digits((m - first * 10 ** (DIGITS - 1)).astype(np.uint64))
    out[:, 11] = _E
    out[:, 12] = np.where(e < 0, _MINUS, _PLUS)
    ae = np.abs(e)
    out[:, 13] = (ae >= 100) * (ae // 100 + _ZERO)
    out[:, 14] = (ae // 10) % 10 + _ZERO
    out[:, 15] = ae % 10 + _ZERO
    out[~(usual | zero)] = 0
    return out


def _scaled(a: np.ndarray, e: np.ndarray) -> np.ndarray:
    """round(a x 10^(DIGITS - 1 - e)) as int64: multiplied or divided by an exact power of ten
    where there is one (a single rounding, as printf's)."""
    k = DIGITS - 1 - e
    at = np.clip(k, -_EXACT, _EXACT) + _EXACT
    y = a * np.take(_MUL, at) / np.take(_DIV, at)
    far = np.flatnonzero(np.abs(k) > _EXACT)
    if len(far):  # a subnormal or a number beyond 10^±30: two inexact powers, one at a time
        half = k[far] // 2
        y[far] = (
            a[far]
            * np.power(10.0, half.astype(np.float64))
            * np.power(10.0, (k[far] - half).astype(np.float64))
        )
    return np.rint(y).astype(np.int64)


def _eight_digits(v: np.ndarray) -> np.ndarray:
    """[n, 8] digit bytes of each v (0 <= v < 10^8), most significant first: the digits split in
    the lanes of one 64-bit integer (4 + 4, then 2 + 2 of each, then 1 + 1), each division by 100 or
    10 a multiplication and a shift that is exact below 10^4 and 10^2."""
    hi = v // np.uint64(10_000)
    x = hi | ((v - hi * np.uint64(10_000)) << np.uint64(32))  # [d1-d4 | d5-d8] in 32-bit lanes
    q = ((x * np.uint64(10_486)) >> np.uint64(20)) & np.uint64(0x0000_007F_0000_007F)  # // 100
    x = q | ((x - q * np.uint64(100)) << np.uint64(16))  # 16-bit lanes: d1d2, d3d4, d5d6, d7d8
    q = ((x * np.uint64(103)) >> np.uint64(10)) & np.uint64(0x000F_000F_000F_000F)  # // 10
    x = q | ((x - q * np.uint64(10)) << np.uint64(8))  # a digit a byte, the first in the lowest
    x = (x | np.uint64(0x3030_3030_3030_3030)).astype("<u8")
    return x.view(np.uint8).reshape(len(v), 8)


def int_fields(x) -> np.ndarray:
    """[n, width] bytes: each integer of x (1-D, within int64) in decimal, a '-' before a negative."""
    x = np.asarray(x, dtype=np.int64).ravel()
    a = np.abs(x).astype(np.uint64)  # -2^63 too
    groups = -(-len(str(int(a.max()) if len(a) else 0)) // 8)  # the widest number's, 8 digits each
    eight = np.uint64(10**8)
    parts = [(a // eight ** np.uint64(g)) % eight for g in range(groups - 1, -1, -1)]
    width = 8 * groups
    out = np.zeros((len(x), width + 1), dtype=np.uint8)
    for g, part in enumerate(parts):
        out[:, 1 + 8 * g : 9 + 8 * g] = _eight_digits(part)
    lead = width - 1 - np.searchsorted(_POW10, a, side="right")  # the blank cells before the digits
    out[np.arange(width + 1)[None, :] <= lead[:, None]] = 0
    neg = np.flatnonzero(x < 0)
    out[neg, lead[neg]] = _MINUS  # just before the first digit
    return out


def text_table(texts: list[str]) -> np.ndarray:
    """[texts, width] bytes: each text (of printable characters, no byte 0), zeros after it."""
    raw = [t.encode() for t in texts]
    table = np.zeros((max(len(raw), 1), max([len(r) for r in raw] + [1])), dtype=np.uint8)
    for k, r in enumerate(raw):
        table[k, : len(r)] = np.frombuffer(r, dtype=np.uint8)
    return table


def code_fields(codes, texts: list[str] | np.ndarray) -> np.ndarray:
    """[n, width] bytes: texts[c] of each code c (`texts` a list, or its text_table made once for
    many blocks of rows)."""
    table = texts if isinstance(texts, np.ndarray) else text_table(texts)
    return np.take(table, np.asarray(codes, dtype=np.intp).ravel(), axis=0)


def text_codes(x) -> tuple[np.ndarray, list]:
    """(codes, distinct values) of an object array (1-D) whose values repeat, mostly ''."""
    x = np.asarray(x, dtype=object).ravel()
    codes = np.zeros(len(x), dtype=np.intp)
    values: list = [""]
    where = np.flatnonzero(x != "")
    seen: dict = {"": 0}
    if len(where):
        codes[where] = [seen.setdefault(v, len(seen)) for v in x[where].tolist()]
        values = list(seen)
    return codes, values


def joined_rows(columns: list[np.ndarray]) -> bytes:
    """The rows of [n, width_c] byte columns: their characters, a comma between cells, a newline
    after each row."""
    if not columns:
        return b""
    n = columns[0].shape[0]
    width = sum(c.shape[1] + 1 for c in columns)
    out = np.zeros((n, width), dtype=np.uint8)
    at = 0
    for k, c in enumerate(columns):
        out[:, at : at + c.shape[1]] = c
        at += c.shape[1]
        out[:, at] = ord("\n") if k == len(columns) - 1 else ord(",")
        at += 1
    return out[out != 0].tobytes()
