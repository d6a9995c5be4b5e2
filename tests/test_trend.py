"""`npmpi-analyze --trend`: real runs in time order, the run-to-run spread, a change flagged where a run
leaves the runs before it (the kernel changed: the conditions are shown beside), and the rule by hand."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest
from conftest import run_mpi
from npmpi_analysis import open_run
from npmpi_analysis.cli import main
from npmpi_analysis.synthetic import SynthChannel, SynthNode, write_run
from npmpi_analysis.trend import numbers as tr
from test_analysis_outputs import T0, make_run

QUICK = ["--quick", "-u", "256", "--meter", "estimate", "--baseline", "0.2", "-q"]


@pytest.mark.mpi
@pytest.mark.slow
def test_a_series_of_real_runs_and_the_step_of_a_kernel_change(tmp_path, capsys):
    """Three runs of the C kernel, then one of the Python kernel checking every message
    (--integrity): some 30x the small sizes' latency of the C kernel, far beyond the C runs' spread
    even on a loaded machine (1.0-3.9 us there, against 39 us; TCP instead of MPI, or the Python
    kernel alone, were within it under load). The fourth is flagged, the conditions that changed
    beside it."""
    names = []
    for k, extra in enumerate([["--kernel", "c"]] * 3 + [["--kernel", "python", "--integrity"]]):
        name = f"night{k}.h5"
        proc = run_mpi([*QUICK, *extra, "-o", name], np=3, cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        names.append(tmp_path / name)
    out = tmp_path / "out"
    args = ["--trend", *map(str, reversed(names)), "--csv", str(out / "t.csv"), "--json", str(out / "t.json")]
    out.mkdir()
    code = main([*args, "--plots", str(out / "plots"), "--report", str(out / "t.html")])
    text, err = capsys.readouterr()
    assert code == 0, err
    rows = list(csv.DictReader((out / "t.csv").read_text().splitlines()))
    assert [r["run"] for r in rows] == ["night0", "night1", "night2", "night3"]  # by start time
    assert [r["start_utc"] for r in rows] == sorted(r["start_utc"] for r in rows)
    assert [r["condition_kernel"] for r in rows] == ["c", "c", "c", "python"]
    # the three first are not judged (no history yet); the fourth leaves it
    assert not any(r[f"{key}_change"] for r in rows[:3] for key, *_ in tr.FIGURES)
    last = rows[3]
    assert last["latency_s_change"] == "up", [r["latency_s"] for r in rows]
    assert last["conditions_changed"] == "kernel: c -> python; timing_comparable: True -> False"
    step, lo, hi = (float(last[f"latency_s_step{end}"]) for end in ("", "_lo", "_hi"))
    assert 1 < lo <= step <= hi and not rows[2]["latency_s_step"]  # the step and its interval
    assert "step at night3: latency <= 64 B x " in text
    doc = json.loads((out / "t.json").read_text())
    assert doc["format"] == "npmpi-trend" and doc["k_mad"] == tr.K_MAD and len(doc["runs"]) == 4
    assert doc["spread"]["latency_s"]["runs"] == 4 and doc["runs"][0]["conditions"]["kernel"] == "c"
    # the same numbers as the API's (and so the CSV's of each run)
    first = open_run(names[0])
    assert float(rows[0]["peak_bandwidth_bit_s"]) == first.summary["peak_bandwidth_bit_s"]
    sizes = first.sizes
    assert float(rows[0]["latency_s"]) == tr.small_latency_s(sizes["size_bytes"], sizes["latency_min_s"])
    assert "kernel: c -> python" in text and "power ESTIMATED" in text
    assert (out / "plots" / "trend.png").stat().st_size > 0
    assert b"<img" in (out / "t.html").read_bytes()


def test_the_rule_flags_a_step_once_and_not_the_noise():
    """Noise of ±2 % around 10, then a step to 13: flagged once, where it starts; the history then
    starts again at the step, so the runs after it are not flagged."""
    values = [10.0, 10.2, 9.8, 10.1, 9.9, 13.0, 13.1, 12.9, 13.0]
    points = [
        tr.TrendPoint(f"r{k}", "", "", float(k), {"latency_s": v, "peak_bandwidth_bit_s": np.nan,
                      "min_energy_pj_bit": np.nan}, [], {})
        for k, v in enumerate(values)
    ]  # fmt: skip
    tr.flag_changes(points)
    assert [p.changes.get("latency_s", "") for p in points] == [""] * 5 + ["up"] + [""] * 3
    # the step's interval: 13 over the median of the history resampled (its runs' 9.8 to 10.2)
    ratio, lo, hi = points[5].steps["latency_s"]
    assert ratio == 13.0 / 10.0 and 13.0 / 10.2 <= lo < ratio < hi <= 13.0 / 9.8
    assert [list(p.steps) for p in points] == [[]] * 5 + [["latency_s"]] + [[]] * 3
    # the MAD bound: 10 +- 3 x 1.4826 x MAD; a run inside it is not flagged, even with 10 % off
    h = np.array(values[:5])
    mad = np.median(np.abs(h - np.median(h)))
    assert 3 * 1.4826 * mad < 0.1 * 10  # here the 10 % floor is the bound
    points[5].values["latency_s"] = 10.9
    points[5].changes = {}
    tr.flag_changes(points[:6])
    assert "latency_s" not in points[5].changes


def test_conditions_are_read_by_name_from_the_root_and_the_nodes(tmp_path):
    """A file carrying a governor per node and a CPU frequency at its root: both shown; a change of
    the governor is named beside the run."""
    paths = []
    for k, governor in enumerate(["performance", "performance", "powersave"]):
        t = T0 + 100 * k - 10 + 0.1 * np.arange(200)
        node = SynthNode([SynthChannel(t, np.full(200, 50.0), sample_interval_s=0.1)], host="n0",
                         attrs={"governor": governor})  # fmt: skip
        start = T0 + 100 * k
        paths.append(
            write_run(tmp_path / f"g{k}.h5", [1, 1024], [100, 100], [[1.0, 1.0]] * 2,
                      [[start, start + 1], [start + 2, start + 3]], nodes=[node],
                      attrs={"cpu_freq_hz": 2.4e9, "created_utc": f"2026-01-0{k + 1}T02:00:00+00:00"})
        )  # fmt: skip
    t = tr.trend([open_run(p) for p in paths])
    assert [p.conditions["governor"] for p in t.points] == ["performance", "performance", "powersave"]
    assert t.points[0].conditions["cpu_freq_hz"] == "2.4e+09"
    assert t.points[2].changed_conditions == {"governor": ("performance", "powersave")}
    assert not t.points[1].changed_conditions


def test_the_ranks_core_settings_and_measured_frequency_are_read_where_a_file_has_them():
    """The root attribute `conditions` (the conditions' records: per measuring rank its settings at
    its first size) and per-size `…cpu_freq_hz` columns: shown when present, nothing when not."""
    from npmpi_analysis.api import Table

    doc = {"ranks": {"0": {"settings_before": {"governor": "powersave", "boost": 1}},
                     "1": {"settings_before": {"governor": "performance"}}}}  # fmt: skip
    assert tr.rank_settings({"conditions": json.dumps(doc)}) == {
        "governor": "powersave/performance",
        "boost": "1",
    }
    assert tr.rank_settings({"conditions": "{not json"}) == {} and tr.rank_settings({}) == {}
    assert (
        tr.conditions_of({"conditions": json.dumps(doc), "kernel": "c"}, [])["governor"]
        == "powersave/performance"
    )
    sizes = Table([{"size_bytes": 1, "rank0_cpu_freq_hz": 2.41e9, "rank0_cpu_freq_min_hz": 1e9},
                   {"size_bytes": 2, "rank0_cpu_freq_hz": 2.39e9, "rank0_cpu_freq_min_hz": 1e9}])  # fmt: skip
    assert tr.measured_frequency(sizes) == {"cpu_ghz_measured": "2.4"}
    assert tr.measured_frequency(Table([{"size_bytes": 1}])) == {}


@pytest.mark.parametrize(
    "extra, words",
    [
        ([], "give two run files or more"),
        (["--np-out", "np.out"], "--np-out is one run's NetPIPE output"),
        (["--compare-csv", "c.csv"], "--compare-csv compares runs size by size"),
    ],
)
def test_what_a_trend_cannot_give_is_one_line(tmp_path, capsys, extra, words):
    a = make_run(tmp_path / "a.h5")
    files = [str(a)] if not extra else [str(a), str(make_run(tmp_path / "b.h5"))]
    assert main(["--trend", *files, *[str(tmp_path / e) if "." in e else e for e in extra]]) == 2
    err = capsys.readouterr().err
    assert words in err and err.count("\n") == 1


def test_a_map_in_a_trend_is_refused(tmp_path, capsys):
    from test_map_analysis import power_map

    m = power_map(tmp_path / "m.h5")
    assert main(["--trend", str(make_run(tmp_path / "a.h5")), str(m)]) == 2
    assert "is a cluster map: --trend follows sweep runs" in capsys.readouterr().err


def test_a_coll_file_of_several_series_in_a_trend_is_refused(tmp_path, capsys):
    """Its series (an op at 2 and at 4 ranks) are different measurements: one line, exit 2."""
    from test_coll_series import synthetic_series

    path, _ = synthetic_series(tmp_path / "s.h5")
    assert main(["--trend", str(make_run(tmp_path / "a.h5")), str(path)]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert "holds 2 series of collectives (s-allreduce-2, s-allreduce-4)" in line and "Traceback" not in line


def test_a_file_that_cannot_be_read_is_one_line_and_the_others_still_trend(tmp_path, capsys):
    bad = tmp_path / "broken.h5"
    bad.write_bytes(b"not an HDF5 file")
    runs = [make_run(tmp_path / "a.h5"), bad, make_run(tmp_path / "b.h5", slower=2.0)]
    assert main(["--trend", *map(str, runs), "--json", str(tmp_path / "t.json")]) == 1
    out, err = capsys.readouterr()
    assert err.count("\n") == 1 and "broken.h5" in err and "trend of 2 runs" in out
    assert [r["run"] for r in json.loads((tmp_path / "t.json").read_text())["runs"]] == ["a", "b"]


def test_runs_of_one_second_and_runs_without_power_keep_their_time_order(tmp_path):
    """created_utc is to the second: runs created in the same one are ordered by their first trial,
    then by the label's natural order (night9 before night10; before: by text, night10 first). A run
    with no created_utc and no meter is placed by its first trial's start (before: last)."""

    def run_at(name: str, t0: float, created: str = "2024-01-01T00:00:00+00:00"):
        return write_run(tmp_path / f"{name}.h5", [1, 2], [10, 10], [[1e-3], [1e-3]], [[t0], [t0 + 1]],
                         attrs={"created_utc": created})  # fmt: skip

    base = 1704067200.0  # 2024-01-01T00:00:00Z, the synthetic files' created_utc
    paths = [
        run_at("night10", base + 20),
        run_at("night9", base + 10),
        run_at("undated", base - 60, created=""),
    ]
    t = tr.trend([open_run(p) for p in paths])
    assert [p.label for p in t.points] == ["undated", "night9", "night10"]
    undated = open_run(paths[2])
    assert tr.point(undated).start_unix_s == base - 60 and not undated.summary.get("has_power")
    same = [run_at("b10", base + 30), run_at("b9", base + 30)]
    assert [p.label for p in tr.trend([open_run(p) for p in same]).points] == ["b9", "b10"]


def test_the_spread_counts_the_runs_that_have_the_figure():
    """Five runs, energy in two: "over the 2 runs" (before: 5, the positions between)."""
    from npmpi_analysis.trend.cli import spread_lines

    points = [
        tr.TrendPoint(f"r{k}", "", "", float(k), {"latency_s": 1e-6, "peak_bandwidth_bit_s": 1e9,
                      "min_energy_pj_bit": e}, [], {})
        for k, e in enumerate([np.nan, 5.0, np.nan, 6.0, np.nan])
    ]  # fmt: skip
    tr.flag_changes(points)
    spread = {key: {"runs": sum(np.isfinite(p.values[key]) for p in points), "min": 1.0, "max": 2.0}
              for key, *_ in tr.FIGURES}  # fmt: skip
    stretches = {key: tr._stretches(points, key) for key, *_ in tr.FIGURES}
    lines = spread_lines(tr.Trend(points, spread, stretches))
    energy = next(line for line in lines if "energy" in line)
    assert "over the 2 runs all" in energy, energy
