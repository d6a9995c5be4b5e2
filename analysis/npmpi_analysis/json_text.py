"""JSON text of a document holding large numeric matrices (a map's N x N per size): the structure
indented one space per level, as `json.dumps(indent=1)` writes it, and each innermost list of
numbers on one line, written by the json module's C encoder; NaN and infinities as null.

`json.dumps(indent=1)` of a 1,024-node map's matrices wrote 40 million lines in Python (minutes);
the values and the structure are the same, only the whitespace inside the innermost lists differs.
"""

from __future__ import annotations

import json
import math
from typing import Any, BinaryIO

import numpy as np

from npmpi_analysis.number_text import float_texts

_ENCODE = json.JSONEncoder(allow_nan=False).encode  # the C encoder (no indent)
NARROW = 4  # rows of at most this many numbers are laid out a column at a time


def dumps(x: Any) -> str:
    """The document as JSON text (see the module's docstring)."""
    out: list[str] = []
    _write(x, 0, out)
    return "".join(out)


def dump(x: Any, f: BinaryIO) -> None:
    """dumps(x) encoded as UTF-8 into the binary file `f`, FLUSH_CHARS or so at a time (a large
    map's JSON is gigabytes: never held whole)."""
    out = _Flushing(f)
    _write(x, 0, out)
    out.flush()


FLUSH_CHARS = 1 << 24


class _Flushing(list):
    """The parts of the text, written to a file whenever they add up to FLUSH_CHARS."""

    def __init__(self, f: BinaryIO) -> None:
        super().__init__()
        self.f, self.chars = f, 0

    def append(self, part: str) -> None:
        super().append(part)
        self.chars += len(part)
        if self.chars >= FLUSH_CHARS:
            self.flush()

    def flush(self) -> None:
        self.f.write("".join(self).encode())
        self.clear()
        self.chars = 0


def _write(x: Any, level: int, out: list[str]) -> None:
    if isinstance(x, dict):
        if not x:
            out.append("{}")
            return
        pad = "\n" + " " * (level + 1)
        out.append("{")
        for k, (key, value) in enumerate(x.items()):
            out.append(("," if k else "") + pad + _ENCODE(str(key)) + ": ")
            _write(value, level + 1, out)
        out.append("\n" + " " * level + "}")
    elif isinstance(x, np.ndarray):
        _array(x, level, out)
    elif isinstance(x, (list, tuple)):
        if not any(isinstance(v, (dict, list, tuple, np.ndarray)) for v in x):
            out.append(_ENCODE([_scalar(v) for v in x]))
            return
        _items(x, level, out)
    else:
        out.append(_ENCODE(_scalar(x)))


def _items(items, level: int, out: list[str], each=None) -> None:
    """A list of items, each on its own line, written by `each` (_write)."""
    if not len(items):
        out.append("[]")
        return
    pad = "\n" + " " * (level + 1)
    out.append("[")
    for k, value in enumerate(items):
        out.append(("," if k else "") + pad)
        (each or _write)(value, level + 1, out)
    out.append("\n" + " " * level + "]")


def _array(a: np.ndarray, level: int, out: list[str]) -> None:
    if a.ndim == 0:
        out.append(_ENCODE(_scalar(a.item())))
    elif a.dtype.kind == "f":
        _cells(float_texts(a, "null"), level, out)
    elif a.ndim == 1:
        out.append(_ENCODE(_leaf(a)))
    elif a.ndim == 2 and a.dtype.kind in "iub" and a.shape[0]:
        # a numeric matrix in one call of the encoder, its rows then put on lines of their own
        # (numbers and null hold no "], [")
        text = _ENCODE(_leaf(a))[1:-1]
        pad = "\n" + " " * (level + 1)
        out.append("[" + pad + text.replace("], [", "]," + pad + "[") + "\n" + " " * level + "]")
    elif a.dtype.kind == "O" and a.size and _all_text(a):
        _cells(_texts(a), level, out)
    else:
        _items(list(a), level, out)


def _all_text(a: np.ndarray) -> bool:
    return all(type(v) is str for v in a.ravel().tolist())


def _texts(a: np.ndarray) -> np.ndarray:
    """An object array of str as the encoder writes each, every distinct text encoded once (a
    map's flags: millions of cells, a few texts)."""
    done: dict[str, str] = {}
    out = np.empty(a.shape, dtype=object)
    out.ravel()[:] = [done[v] if v in done else done.setdefault(v, _ENCODE(v)) for v in a.ravel().tolist()]
    return out


def _cells(cells: np.ndarray, level: int, out: list[str]) -> None:
    """Numbers already written as text (number_text.float_texts) laid out as _array lays out the
    numbers: the innermost lists on one line each, as the encoder writes them."""
    if cells.ndim == 1:
        out.append("[" + ", ".join(cells.tolist()) + "]")
    elif not cells.shape[0]:
        out.append("[]")
    elif cells.ndim == 2:
        pad = "\n" + " " * (level + 1)
        if 0 < cells.shape[1] <= NARROW:  # many short rows (each side's of N x N pairs): column-wise
            text = "[" + cells[:, 0]
            for k in range(1, cells.shape[1]):
                text = text + ", " + cells[:, k]
            rows = (text + "]").tolist()
        else:
            rows = ["[" + ", ".join(r) + "]" for r in cells.tolist()]
        out.append("[" + pad + ("," + pad).join(rows) + "\n" + " " * level + "]")
    else:
        _items(cells, level, out, _cells)


def _leaf(a: np.ndarray) -> list:
    """An array as (nested) lists of plain values, non-finite floats as None."""
    if a.dtype.kind == "f":
        obj = a.astype(object)
        obj[~np.isfinite(a)] = None
        return obj.tolist()
    if a.dtype.kind in "iub":
        return a.tolist()
    return [_scalar(v) for v in a.tolist()]  # 1-D only: text, objects


def _scalar(x: Any) -> Any:
    if isinstance(x, np.generic):
        x = x.item()
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x
