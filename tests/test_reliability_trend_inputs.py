"""Files a trend or an analysis cannot take are one line (issue 45, classes 8 and 10):
`npmpi-analyze --trend` refuses files of different kinds
in one line and counts a file given twice once, with a notice; a trend of files whose trial times
are beyond datetime's years, a coll series whose `ranks` is text, never an "internal error"."""

from __future__ import annotations

import json

import h5py
import pytest
from npmpi_analysis.cli import main
from npmpi_analysis.synthetic import write_run
from test_analysis_outputs import make_run

from npmpi.runfile.attrseal import seal


def one_coll(path, op="allreduce", ranks=2):
    """A coll file of one series (an op at one rank count), two sizes."""
    attrs = {"kind": "coll", "mode": "coll", "bytes_per_iteration_factor": 1, "one_way_divisor": 1}
    attrs |= {"coll_op": op, "coll_ranks": ranks, "coll_bus_factor": 1.0}
    return write_run(path, [8, 64], [100, 100], [[1e-3], [2e-3]], [[1000.0], [1001.0]], attrs=attrs)


@pytest.mark.parametrize(
    "second, words",
    [
        (lambda p: one_coll(p), "is a ping-pong run, "),
        (lambda p: one_coll(p, op="bcast"), "a coll file of bcast on 2 ranks"),
    ],
)
def test_a_trend_of_files_of_different_kinds_is_refused_in_one_line(tmp_path, capsys, second, words):
    """Before: a ping-pong latency and an allreduce's time per operation in one median, exit 0."""
    first = make_run(tmp_path / "a.h5") if "ping-pong" in words else one_coll(tmp_path / "a.h5")
    other = second(tmp_path / "b.h5")
    assert main(["--trend", str(first), str(other), "--json", str(tmp_path / "t.json")]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert words in line and "--trend follows one measurement" in line and "b.h5" in line
    assert not (tmp_path / "t.json").exists()


def test_a_file_given_twice_in_a_trend_is_counted_once_with_a_notice(tmp_path, capsys):
    """Before: `a` and `a-2`, one run counted twice in the medians and the spread."""
    a, b = make_run(tmp_path / "a.h5"), make_run(tmp_path / "b.h5", slower=1.05)
    again = tmp_path / "sub" / ".." / "a.h5"
    (tmp_path / "sub").mkdir()
    assert main(["--trend", str(a), str(b), str(again), "--json", str(tmp_path / "t.json")]) == 0
    out, err = capsys.readouterr()
    assert err == "" and "trend of 2 runs" in out
    assert f"notice: {again} is the file {a} again: counted once" in out
    doc = json.loads((tmp_path / "t.json").read_text())
    assert [r["run"] for r in doc["runs"]] == ["a", "b"] and doc["spread"]["latency_s"]["runs"] == 2
    assert any("counted once" in n for n in doc["notes"])


@pytest.mark.parametrize("t0", [1e15, 1e20, -1e12])
def test_a_trend_of_files_with_trial_times_beyond_any_year_is_no_internal_error(tmp_path, capsys, t0):
    """No parsable created_utc and trial starts at 1e15, 1e20, -1e12 s (before: ValueError `year
    31690708 is out of range`, OverflowError; the plain analysis of the same file exits 0)."""
    odd = write_run(tmp_path / "odd.h5", [1, 2], [10, 10], [[1e-3], [1e-3]], [[t0], [t0 + 1]],
                    attrs={"created_utc": ""})  # fmt: skip
    assert main([str(odd), "-q"]) == 0
    assert main(["--trend", str(odd), str(make_run(tmp_path / "a.h5")), "-q"]) == 0
    assert capsys.readouterr().err == ""


def test_a_coll_series_whose_ranks_is_text_is_no_internal_error(tmp_path, capsys):
    """coll_series_json's row with "ranks": "x" (before: ValueError from int('x') in every output)."""
    from test_coll_series import synthetic_series

    path, _ = synthetic_series(tmp_path / "s.h5")
    with h5py.File(path, "r+") as f:
        table = json.loads(f.attrs["coll_series_json"])
        table[0]["ranks"] = "x"
        f.attrs["coll_series_json"] = json.dumps(table)
        seal(f)
    out = [("--csv", tmp_path / "s.csv"), ("--json", tmp_path / "s.json"), ("--report", tmp_path / "s.html")]
    assert main([str(path), "-q", *[str(x) for pair in out for x in pair]]) == 0
    assert "internal error" not in capsys.readouterr().err
    rows = json.loads((tmp_path / "s.json").read_text())["runs"]
    assert [r["sizes"][0]["coll_ranks"] for r in rows] == [0, 4]  # no whole number: 0, as when missing
