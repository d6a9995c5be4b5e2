"""npmpi_analysis.open_run, the public Python API: a run, a map and a coll file give the very numbers
of npmpi-analyze's CSV and JSON; samples, faults, channels; to_pandas with and without pandas."""

from __future__ import annotations

import csv
import json
import math
import sys

import npmpi_analysis
import numpy as np
import pytest
from npmpi_analysis import API_VERSION, open_run
from npmpi_analysis.cli import main
from npmpi_analysis.synthetic import SynthChannel, SynthNode, write_run
from test_analysis_outputs import T0, make_run
from test_map_analysis import power_map


def coll_file(path):
    """A coll file (allreduce on 2 ranks, as tests/test_coll.py's): two nodes of 60 W and 90 W while
    it runs, 40 W and 50 W idle before; 1 KiB and 4 KiB, 3 trials each."""
    stamps = np.arange(T0 - 4, T0 + 8, 0.01)
    nodes = [
        SynthNode([SynthChannel(stamps, np.where(stamps < T0 - 1, idle, busy), sample_interval_s=0.01)])
        for idle, busy in ((40.0, 60.0), (50.0, 90.0))
    ]
    trials = [[0.10, 0.11, 0.12], [0.20, 0.22, 0.21]]
    starts = [[T0, T0 + 0.5, T0 + 1.0], [T0 + 2, T0 + 2.5, T0 + 3.0]]
    ends = [[s + d for s, d in zip(ss, dd, strict=True)] for ss, dd in zip(starts, trials, strict=True)]
    attrs = {"kind": "coll", "mode": "coll", "bytes_per_iteration_factor": 1, "one_way_divisor": 1}
    attrs |= {
        "coll_op": "allreduce",
        "coll_ranks": 2,
        "coll_bus_factor": 1.0,
        "coll_bus_factor_formula": "2(n-1)/n",
    }
    return write_run(path, [1024, 4096], [1000, 500], trials, starts, ends, nodes=nodes,
                     baseline=(T0 - 3.5, T0 - 1.5), attrs=attrs)  # fmt: skip


def cli_outputs(tmp_path, path):
    """npmpi-analyze's CSV rows and JSON of one file."""
    out_csv, out_json = tmp_path / f"{path.stem}.csv", tmp_path / f"{path.stem}.json"
    assert main([str(path), "--csv", str(out_csv), "--json", str(out_json), "-q"]) == 0
    rows = list(csv.DictReader(out_csv.read_text().splitlines()))
    return rows, json.loads(out_json.read_text())


def same_as_csv(table, rows) -> None:
    """Every cell of the API's table is the CSV's: the same columns in the same order, floats to the
    last bit (the CSV writes repr), an undefined figure NaN where the CSV cell is empty."""
    assert table.columns == list(rows[0]) and len(table) == len(rows)
    for got, row in zip(table.records(), rows, strict=True):
        for name, cell in row.items():
            value = got[name]
            if isinstance(value, str):
                assert value == cell, name
            elif cell == "":
                assert isinstance(value, float) and math.isnan(value), name
            elif isinstance(value, bool):
                assert str(value) == cell, name
            else:
                assert value == type(value)(cell), (name, value, cell)


def json_safe(x):
    """As the JSON writes it: NaN and infinities null, tuples lists."""
    return json.loads(json.dumps(x, default=float).replace("NaN", "null").replace("Infinity", "null"))


def test_a_run_is_the_csv_and_the_json(tmp_path):
    path = make_run(tmp_path / "r.h5")
    rows, doc = cli_outputs(tmp_path, path)
    run = open_run(path)
    assert API_VERSION == "1.0" and npmpi_analysis.open_run is open_run
    assert run.kind == "run" and run.label == "r" and run.problems == []
    same_as_csv(run.sizes, rows)
    assert json_safe(run.summary) == doc["runs"][0]["summary"]
    assert run.sizes["size_bytes"].dtype == np.int64 and run.sizes["energy_pj_bit"].dtype == float
    assert list(run.sizes["power_flag"]) == [r["power_flag"] for r in rows]
    # the channels and the samples the analysis used (offset 0, no delay: as stored)
    assert run.channels["host"].tolist() == ["host0", "host1"] and set(run.channels["samples"]) == {400}
    samples = run.power_samples()
    assert len(samples) == 800 and samples.columns == ["node", "host", "channel", "time_unix_s", "power_w"]
    one = run.power_samples(node=1, channel=0)
    t = T0 - 10 + 0.1 * np.arange(400) + 0.01
    assert np.array_equal(one["time_unix_s"], t) and one["power_w"][0] == 60.0
    assert len(run.faults) == 0 and run.faults.columns[:3] == ["node", "host", "channel"]


def test_a_map_is_the_csv_and_the_json(tmp_path):
    path = power_map(tmp_path / "m.h5")
    rows, doc = cli_outputs(tmp_path, path)
    m = open_run(path)
    assert m.kind == "map"
    same_as_csv(m.sizes, rows)
    assert json_safe(m.summary) == doc["maps"][0]["summary"]
    assert sorted(set(m.power_samples()["host"])) == ["h0", "h1", "h2", "h3"]


def test_a_coll_file_is_the_csv(tmp_path):
    path = coll_file(tmp_path / "c.h5")
    rows, doc = cli_outputs(tmp_path, path)
    c = open_run(path)
    assert c.kind == "coll" and c.summary["collective"]["op"] == "allreduce"
    same_as_csv(c.sizes, rows)
    assert "energy_per_op_j" in c.sizes.columns
    assert json_safe(c.summary) == doc["runs"][0]["summary"]


def test_a_coll_file_of_several_series_is_the_csv_series_by_series(tmp_path):
    """Before: analysed as one run with the file's rank count (the 2-rank series' pJ/bit halved, its
    busbw NaN); now each series as the command does, and the rows together are the CSV's."""
    from test_coll_series import synthetic_series

    path, _ = synthetic_series(tmp_path / "s.h5")
    rows, doc = cli_outputs(tmp_path, path)
    c = open_run(path)
    assert [s.label for s in c.series] == ["s-allreduce-2", "s-allreduce-4"]
    same_as_csv(c.sizes, rows)
    assert c.sizes["coll_ranks"].tolist() == [2, 4, 4] and np.isfinite(c.sizes["busbw_bit_s"]).all()
    assert [json_safe(s.summary) for s in c.series] == [r["summary"] for r in doc["runs"]]
    assert c.summary == {"series": [s.summary for s in c.series]}
    with pytest.raises(ValueError, match="meter_delay_s=-3"):
        open_run(path, meter_delay_s=-3.0)


def test_faults_are_rows_with_their_times(tmp_path):
    t = T0 - 10 + 0.1 * np.arange(300)
    node = SynthNode(
        [SynthChannel(t, np.full(300, 50.0), sample_interval_s=0.1, faults=[(T0 + 1.0, "meter timed out")])],
        host="n0",
    )
    path = write_run(tmp_path / "f.h5", [1, 64], [100, 100], [[1.0, 1.0]] * 2,
                     [[T0, T0 + 1.0], [T0 + 3, T0 + 4]], nodes=[node], baseline=(T0 - 8, T0 - 3))  # fmt: skip
    (fault,) = open_run(path).faults.records()
    assert fault["host"] == "n0" and fault["message"] == "meter timed out" and fault["count"] == 1
    assert fault["since_first_trial_s"] == pytest.approx(1.0)


def test_a_fault_of_the_fabric_s_meter_is_a_row_and_in_the_report(tmp_path):
    """The fabric's devices are node -1 of the API's faults, and the HTML report's fault table, built
    from these rows, shows it beside the nodes' (before, only the nodes' were in it)."""
    t = T0 - 10 + 0.1 * np.arange(300)
    node = SynthNode([SynthChannel(t, np.full(300, 50.0), sample_interval_s=0.1)], host="n0")
    switch = SynthNode(
        [SynthChannel(t, np.full(300, 30.0), sample_interval_s=0.1, faults=[(T0 + 2.0, "switch timed out")])],
        host="sw1",
    )
    path = write_run(tmp_path / "f.h5", [1, 64], [100, 100], [[1.0, 1.0]] * 2,
                     [[T0, T0 + 1.0], [T0 + 3, T0 + 4]], nodes=[node], fabric=switch,
                     baseline=(T0 - 8, T0 - 3))  # fmt: skip
    (fault,) = open_run(path).faults.records()
    assert fault["node"] == -1 and fault["message"] == "switch timed out"
    assert fault["since_first_trial_s"] == pytest.approx(2.0)
    report = tmp_path / "f.html"
    main([str(path), "--report", str(report), "-q"])
    html = report.read_text()
    table = html.split("<div id=faults>", 1)[1].split("</div>", 1)[0]
    assert "switch timed out" in table and "fabric " in table and "+2.0 s" in table


def test_to_pandas_with_and_without_pandas(tmp_path, monkeypatch):
    path = make_run(tmp_path / "r.h5", power=False)
    run = open_run(path)
    pandas = pytest.importorskip("pandas")
    df = run.to_pandas()
    assert isinstance(df, pandas.DataFrame) and list(df.columns) == run.sizes.columns
    assert df["bandwidth_peak_bit_s"].tolist() == run.sizes["bandwidth_peak_bit_s"].tolist()
    assert run.faults.to_pandas().empty
    monkeypatch.setitem(sys.modules, "pandas", None)  # as on a machine without it
    with pytest.raises(ImportError, match=r"pip install 'npmpi\[pandas\]'"):
        run.to_pandas()
    assert run.sizes.records()[0]["size_bytes"] == 1  # the rest needs numpy only


def test_a_damaged_file_is_one_line(tmp_path):
    from npmpi.core.errors import RunFileError

    bad = tmp_path / "x.h5"
    bad.write_bytes(b"not hdf5")
    with pytest.raises(RunFileError, match=r"x\.h5"):
        open_run(bad)
