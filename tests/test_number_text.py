"""Numbers written as text once (npmpi_analysis.number_text) and the JSON laid out from them
(json_text): every text is exactly Python's repr, and the JSON is the one the json module's encoder
writes, on matrices that are symmetric, that repeat, that hold NaN, infinities and -0.0."""

from __future__ import annotations

import json

import numpy as np
import pytest
from npmpi_analysis import json_text
from npmpi_analysis.number_text import float_texts


def _want(x: np.ndarray, undefined: str) -> list:
    return np.array(
        [repr(v) if np.isfinite(v) else undefined for v in np.asarray(x, dtype=float).ravel().tolist()],
        dtype=object,
    ).reshape(np.shape(x))


def _symmetric(n: int, rng) -> np.ndarray:
    x = rng.lognormal(0, 2, (n, n))
    x = np.triu(x) + np.triu(x, 1).T
    x[3, 5] = x[5, 3] = np.nan
    x[7, 9] = x[9, 7] = 0.0
    x[1, 1] = -0.0
    return x


def _cases():
    rng = np.random.default_rng(7)
    sym = _symmetric(70, rng)
    unlike = sym.copy()
    unlike[9, 7] = -0.0  # 0.0 in (7, 9): equal as numbers, not as texts
    other = sym.copy()
    other[20, 30] = np.nextafter(other[20, 30], 1.0)  # one number a bit apart
    repeats = rng.choice([2.4, 2.401, 0.0, -0.0, 1e300, 5e-324, np.nan, np.inf, -np.inf], 20000)
    return {
        "symmetric": sym,
        "symmetric with -0.0 facing 0.0": unlike,
        "one number apart": other,
        "symmetric sizes": np.stack([sym, 2 * sym]),
        "symmetric with sides": np.stack([np.stack([sym, 3 * sym], -1), np.stack([unlike, other], -1)]),
        "repeats": repeats,
        "repeats as matrices": repeats.reshape(2, 100, 100),
        "distinct": rng.normal(0, 1e6, 9000),
        "small": np.array([[1.5, np.nan], [np.inf, -0.0]]),
        "narrow rows": rng.normal(0, 1, (3, 7, 3)),
        "empty": np.zeros((0, 3)),
        "all undefined": np.full((65, 65), np.nan),
    }


@pytest.mark.parametrize("name", list(_cases()))
def test_every_text_is_reprs(name):
    x = _cases()[name]
    for undefined in ("", "null"):
        got = float_texts(x, undefined)
        assert got.shape == x.shape and got.dtype == object
        assert got.tolist() == _want(x, undefined).tolist()


def _encoder_json(doc) -> str:
    """The layout json_text writes, with every array's numbers written by the json module's encoder
    (as before number_text): the reference."""
    encode = json.JSONEncoder(allow_nan=False).encode

    def leaf(a):
        obj = a.astype(object)
        obj[~np.isfinite(a)] = None
        return obj.tolist()

    def array(a, level):
        pad = "\n" + " " * (level + 1)
        if a.ndim == 1:
            return encode(leaf(a))
        if not a.shape[0]:
            return "[]"
        if a.ndim == 2:
            rows = encode(leaf(a))[1:-1].replace("], [", "]," + pad + "[")
            return "[" + pad + rows + "\n" + " " * level + "]"
        return "[" + ",".join(pad + array(sub, level + 1) for sub in a) + "\n" + " " * level + "]"

    return "{" + ",".join(f'\n "{k}": ' + array(v, 1) for k, v in doc.items()) + "\n}"


def test_the_json_of_numbers_is_the_encoders():
    doc = {name.replace(" ", "_"): x for name, x in _cases().items()}
    got = json_text.dumps(doc)
    assert got == _encoder_json(doc)
    back = json.loads(got)
    assert back["symmetric"][3][5] is None and back["symmetric"][1][1] == 0.0
    flags = np.array(["", "frequency moved", 'a "quoted" \u00e9 text', "throttled"] * 50, dtype=object)
    texts = {
        "flags": flags.reshape(2, 10, 10),
        "one": flags[:3],
        "mixed": np.array([["a", 1.5]], dtype=object),
    }
    got = json.loads(json_text.dumps(texts))
    assert got == {
        "flags": flags.reshape(2, 10, 10).tolist(),
        "one": flags[:3].tolist(),
        "mixed": [["a", 1.5]],
    }
    assert (
        json_text.dumps({"f": flags.reshape(20, 10)})
        == "{\n " + '"f": ' + _rows_of(flags.reshape(20, 10)) + "\n}"
    )


def _rows_of(a: np.ndarray) -> str:
    encode = json.JSONEncoder(allow_nan=False).encode
    return "[" + ",".join("\n  " + encode(r) for r in a.tolist()) + "\n ]"
