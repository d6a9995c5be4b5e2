"""The outputs of the largest maps (issue 44): numbers written by numpy a block of rows at a time
(npmpi_analysis.bulk_text) as C's "%.8e" writes them, integers as Python does, and the map's CSV and
JSON at that size: every cell the exact CSV's number to 9 significant digits, the JSON's nodes the
medians of the matrices it leaves out."""

from __future__ import annotations

import csv
import io
import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
from npmpi_analysis import bulk_text
from support.mapcells import analyze_in

DATA = Path(__file__).parent / "data" / "maps"
EDGES = [0.0, -0.0, 1.0, -1.0, 10.0, 0.1, 1e22, 1e23, 1e-22, 1e-23, 9.9999999995e5, 9.99999999949e5,
         123456789.5, 123456788.5, 999999999.6, 5e-324, 2.2250738585072014e-308, 1.7976931348623157e308,
         1e100, 1e-100, 3.0e-7, 2.5e10, 4.0e9]  # fmt: skip


def _rows(fields: np.ndarray) -> list[bytes]:
    return bulk_text.joined_rows([fields]).split(b"\n")[:-1]


def test_floats_are_written_as_printf_writes_them():
    rng = np.random.default_rng(44)
    x = np.concatenate(
        [
            rng.lognormal(-10, 6, 200_000) * rng.choice([-1, 1], 200_000),
            rng.uniform(0, 1, 20_000),
            np.round(rng.uniform(1, 1000, 20_000), 3),  # short decimals, ties of binary numbers near
            EDGES,
        ]
    )
    got = _rows(bulk_text.sci_fields(x))
    want = [f"{v:.8e}".encode() for v in x.tolist()]
    wrong = [(v, g, w) for v, g, w in zip(x.tolist(), got, want, strict=True) if g != w]
    assert not wrong, wrong[:5]


def test_undefined_numbers_are_empty_cells():
    got = _rows(bulk_text.sci_fields(np.array([np.nan, np.inf, -np.inf, 2.0])))
    assert got == [b"", b"", b"", b"2.00000000e+00"]


def test_integers_are_written_as_python_writes_them():
    rng = np.random.default_rng(7)
    cases = [
        rng.integers(-(2**63), 2**63 - 1, 50_000, endpoint=True),
        rng.integers(0, 5000, 50_000),
        np.array([0, -1, 1, 9, 10, -10, 99, 100, 10**8 - 1, 10**8, 2**63 - 1, -(2**63)]),
        np.array([0]),
        np.array([-7]),
        np.array([], dtype=np.int64),
    ]
    for x in cases:
        assert _rows(bulk_text.int_fields(x)) == [str(v).encode() for v in x.tolist()]


def test_texts_are_coded_once_and_rows_joined_with_commas():
    codes, texts = bulk_text.text_codes(np.array(["", "b", "", '"q"', "b"], dtype=object))
    assert texts == ["", "b", '"q"'] and codes.tolist() == [0, 1, 0, 2, 1]
    rows = bulk_text.joined_rows(
        [
            bulk_text.code_fields(codes, texts),
            bulk_text.int_fields(np.arange(5)),
            bulk_text.code_fields(np.zeros(5, int), ["m"]),
        ]
    )
    assert rows == b',0,m\nb,1,m\n,2,m\n"q",3,m\nb,4,m\n'


def _analyse(tmp_path: Path, name: str, capsys) -> tuple[list[list[str]], dict, str]:
    code, _, err = analyze_in(tmp_path, capsys, [name, "--json", "out.json", "--csv", "out.csv", "--force"])
    assert code == 0 and "Traceback" not in err, err
    rows = list(csv.reader(io.StringIO((tmp_path / "out.csv").read_text())))
    return rows, json.loads((tmp_path / "out.json").read_text()), err


@pytest.mark.parametrize("which", ["pp", "st"])
def test_a_map_at_the_largest_size_writes_each_number_to_nine_digits(tmp_path, capsys, monkeypatch, which):
    """The saved maps analysed as if they were the largest (BULK_ROWS 1): the same columns and rows,
    every cell the exact CSV's (repr) or, for a float, its "%.8e"; the JSON's nodes the medians of
    the exact JSON's matrices, which it leaves out; a note says so."""
    from npmpi_analysis.map import csv_rows

    shutil.copy(DATA / f"map_1_11_{which}.h5", tmp_path / "m.h5")
    exact_rows, exact_doc, quiet = _analyse(tmp_path, "m.h5", capsys)
    monkeypatch.setattr(csv_rows, "BULK_ROWS", 1)
    bulk_rows, bulk_doc, note = _analyse(tmp_path, "m.h5", capsys)
    assert "9 significant digits" in note and "9 significant digits" not in quiet
    assert bulk_rows[0] == exact_rows[0] and len(bulk_rows) == len(exact_rows) > 10
    changed = 0
    for exact, bulk in zip(exact_rows[1:], bulk_rows[1:], strict=True):
        assert len(exact) == len(bulk)
        for col, e, b in zip(exact_rows[0], exact, bulk, strict=True):
            if e != b:
                assert b == f"{float(e):.8e}" and "." in e + b, (col, e, b)
                changed += 1
            if col in ("size_bytes", "round", "trials", "trials_stalled", "bytes_moved", "host_a"):
                assert e == b
    assert changed > len(exact_rows)  # the floats went the bulk way
    exact_map, bulk_map = exact_doc["maps"][0], bulk_doc["maps"][0]
    assert "latency_s" in exact_map and "latency_s" not in bulk_map and "nodes" not in exact_map
    assert "pair-sizes" in bulk_map["matrices_left_out"]
    assert bulk_map["summary"] == exact_map["summary"] and bulk_map["outliers"] == exact_map["outliers"]
    nodes = bulk_map["nodes"]
    lat = np.array([[math.nan if v is None else v for v in row] for row in exact_map["latency_s"]])
    bw = np.array(
        [[[math.nan if v is None else v for v in row] for row in k] for k in exact_map["bandwidth_bit_s"]]
    )
    assert nodes["host"] == exact_map["summary"]["hosts"]
    assert np.allclose(nodes["median_latency_s"], np.nanmedian(lat, axis=1), rtol=0, atol=0)
    assert np.array_equal(nodes["median_bandwidth_bit_s"], np.nanmedian(bw, axis=2))
    assert np.array_equal(nodes["slowest_link_bandwidth_bit_s"], np.nanmin(bw, axis=2))
    for k in range(bw.shape[0]):
        for i, partner in enumerate(nodes["slowest_link_partner"][k]):
            j = nodes["host"].index(partner)
            assert bw[k, i, j] == np.nanmin(bw[k, i])
