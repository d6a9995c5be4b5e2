"""npmpi-analyze's outputs: table, CSV, JSON, np.out, figures, report, comparisons, bad input."""

from __future__ import annotations

import csv
import json
import math
import re
import subprocess
import sys

import h5py
import numpy as np
import pytest
from npmpi_analysis.cli import main
from npmpi_analysis.figures import run as plots
from npmpi_analysis.numbers.analyse import analyse_run
from npmpi_analysis.synthetic import SynthChannel, SynthNode, write_run

from npmpi.runfile.reader import load_run

T0 = 1_700_000_000.0
SIZES = [1, 2, 4, 8, 1024, 65536]
POWER_FIGURES = {
    "model",
    "power_bandwidth",
    "energy_rate",
    "energy_per_bit",
    "scaled_energy_rate",
    "power_time",
    "power_nodes",
}
ALL_FIGURES = POWER_FIGURES | {"bandwidth", "latency", "iterations"}


def make_run(path, label="estimated", nodes=2, power=True, kernel="python", slower=1.0, status="complete"):
    """Six sizes, 3 trials of 1 s each (1.0, 1.1, 1.2 s), a 5 s baseline, nodes sampled at 10 Hz."""
    iters = [1000] * len(SIZES)
    trial_s = [[1.0 * slower, 1.1 * slower, 1.2 * slower] for _ in SIZES]
    starts = [[T0 + 4 * k + 0.0, T0 + 4 * k + 1.2, T0 + 4 * k + 2.4] for k in range(len(SIZES))]
    node_list = None
    if power:
        t = T0 - 10 + 0.1 * np.arange(400)
        node_list = [
            SynthNode(
                [
                    SynthChannel(
                        t + 0.01 * i,
                        50.0 + 10 * i + (t > T0 - 1) * (5 + np.sin(t)),
                        label=label,
                        sample_interval_s=0.1,
                    )
                ],
                host=f"host{i}",
                offset_start_s=0.0,
                measured_start_unix_s=T0,
            )
            for i in range(nodes)
        ]
    return write_run(
        path,
        SIZES,
        iters,
        trial_s,
        starts,
        nodes=node_list,
        baseline=(T0 - 8, T0 - 3) if power else None,
        status=status,
        attrs={"kernel": kernel, "mpi_library_version": "Test MPI 1.0"},
    )


def read_csv(path):
    return list(csv.DictReader(path.read_text().splitlines()))


def run_cli(capsys, *args):
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


# ---------------------------------------------------------------- table and summary


def test_table_and_summary(tmp_path, capsys):
    path = make_run(tmp_path / "a.h5")
    code, out, err = run_cli(capsys, path)
    assert code == 0 and err == ""
    header = out.splitlines()[0].split()
    for word in ("bytes", "iters", "latency", "power", "Mbit/J", "pJ/bit", "flag"):
        assert word in header
    assert "±" in out.splitlines()[0]
    rows = [ln.split() for ln in out.splitlines()[1:7]]
    assert [int(r[0]) for r in rows] == SIZES
    for fragment in (
        "peak bandwidth:",
        "latency:",
        "peak energy rate:",
        "correlation bandwidth vs energy rate:",
        "MPI library: Test MPI 1.0",
        "kernel: python",
        "hosts: host0, host1",
        "status: complete",
        "node 0 host0: idle 50 ± 0 W",
        "node 1 host1: idle 60 ± 0 W",
        "power: ESTIMATED, not measured",
    ):
        assert fragment in out, fragment


def test_run_without_power_gives_bandwidth_and_latency(tmp_path, capsys):
    path = make_run(tmp_path / "a.h5", power=False)
    code, out, _ = run_cli(capsys, path, "--csv", tmp_path / "a.csv", "--plots", tmp_path / "p")
    assert code == 0
    assert "no power data" in out
    assert "Mbit/J" not in out
    assert sorted(p.stem for p in (tmp_path / "p").iterdir()) == [
        "bandwidth",
        "iterations",
        "latency",
        "model",
    ]
    header = (tmp_path / "a.csv").read_text().splitlines()[0]
    assert "power_w" not in header and "bandwidth_peak_bit_s" in header


def test_partial_run_is_analysed_with_a_notice(tmp_path, capsys):
    path = make_run(tmp_path / "a.h5", status="interrupted")
    code, out, err = run_cli(capsys, path)
    assert code == 0 and err == ""
    assert "notice: the run is interrupted" in out
    assert "6 sizes analysed" in out


def test_run_killed_mid_row_is_analysed_up_to_its_last_whole_row(tmp_path, capsys):
    path = make_run(tmp_path / "a.h5", status="running")
    with h5py.File(path, "r+") as f:  # the writer died after growing one dataset of a 7th row
        f["pingpong/size_bytes"].resize(7, axis=0)
        f["pingpong/size_bytes"][6] = 131072
    code, out, err = run_cli(capsys, path, "--np-out", tmp_path / "np.out")
    assert code == 0 and err == ""
    assert "notice: the run did not finish" in out
    assert "notice: 1 partially written row(s) at the end were ignored" in out
    assert "6 sizes analysed" in out
    assert len((tmp_path / "np.out").read_text().splitlines()) == 6


# ---------------------------------------------------------------- exports


def test_csv_json_and_np_out_contents(tmp_path, capsys):
    path = make_run(tmp_path / "a.h5")
    out = tmp_path / "out"
    out.mkdir()
    code, _, _ = run_cli(
        capsys, path, "-q", "--csv", out / "a.csv", "--json", out / "a.json", "--np-out", out / "np.out"
    )
    assert code == 0
    rows = read_csv(out / "a.csv")
    assert [int(r["size_bytes"]) for r in rows] == SIZES
    bits = 2 * 1000 * 8 * 1024
    r = rows[4]
    assert float(r["bandwidth_peak_bit_s"]) == pytest.approx(bits / 1.0)
    assert float(r["bandwidth_mean_bit_s"]) == pytest.approx(bits / 1.1)
    assert float(r["one_way_s"]) == pytest.approx(1.0 / 2000)
    assert r["power_flag"] == ""
    p = float(r["power_w"])
    assert float(r["node0_power_w"]) + float(r["node1_power_w"]) == pytest.approx(p)
    assert float(r["energy_rate_bit_j"]) == pytest.approx(bits / 1.1 / p)
    assert float(r["energy_pj_bit"]) == pytest.approx(1e12 * p / (bits / 1.1))
    assert float(r["dynamic_power_w"]) == pytest.approx(p - 110.0)

    doc = json.loads((out / "a.json").read_text())
    (run,) = doc["runs"]
    s = run["summary"]
    assert s["peak_bandwidth_bit_s"] == pytest.approx(2 * 1000 * 8 * 65536 / 1.0)
    assert s["peak_bandwidth_size_bytes"] == 65536
    assert s["latency_s"] == pytest.approx(1.0 / 2000)
    assert s["power_caveat"] == "ESTIMATED, not measured"
    assert s["idle_power_w"] == pytest.approx(110.0)
    assert [n["host"] for n in s["nodes"]] == ["host0", "host1"]
    assert len(run["sizes"]) == 6 and run["sizes"][0]["size_bytes"] == 1
    assert -1 <= s["correlation_bandwidth_energy_rate"] <= 1
    assert doc["comparison"] == []

    lines = (out / "np.out").read_text().splitlines()
    assert len(lines) == 6
    for line, size in zip(lines, SIZES, strict=True):
        t = 1.0 / 2000
        assert line == "%8d %f %12.8f" % (size, size * 8 / (t * 1024 * 1024), t)  # noqa: UP031 - C printf
    assert re.fullmatch(r" {7}1 \d+\.\d{6} {3}0\.00050000", lines[0])


def test_json_has_no_nan(tmp_path, capsys):
    path = make_run(tmp_path / "a.h5", power=False)
    run_cli(capsys, path, "--json", tmp_path / "a.json")
    text = (tmp_path / "a.json").read_text()
    assert "NaN" not in text
    assert json.loads(text)["runs"][0]["summary"]["has_power"] is False


# ---------------------------------------------------------------- figures and report


def test_plots_are_written_and_power_ones_say_estimated(tmp_path, capsys):
    path = make_run(tmp_path / "a.h5")
    code, out, _ = run_cli(capsys, path, "--plots", tmp_path / "p")
    assert code == 0 and "10 figure(s)" in out
    files = sorted((tmp_path / "p").iterdir())
    assert {f.stem for f in files} == ALL_FIGURES
    for f in files:
        data = f.read_bytes()
        assert data.startswith(b"\x89PNG")
        assert (b"ESTIMATED, not measured" in data) == (f.stem in POWER_FIGURES), f.name  # PNG metadata
    assert not list((tmp_path / "p").glob(".*"))  # no temporary files left


def test_every_power_figure_carries_the_label_in_its_text(tmp_path):
    a = analyse_run(load_run(make_run(tmp_path / "a.h5", label="simulated")), "a")
    figs = plots.all_plots([a])
    assert {p.name for p in figs} == ALL_FIGURES
    for p in figs:
        texts = [t.get_text() for t in p.figure.findobj(lambda o: hasattr(o, "get_text"))]
        labelled = any("SIMULATED" in t for t in texts)
        assert labelled == (p.name in POWER_FIGURES), p.name
        axes_texts = " ".join(ax.get_xlabel() + ax.get_ylabel() for ax in p.figure.axes)
        assert "message size" in axes_texts or "time" in axes_texts  # units and axis names
    measured = analyse_run(load_run(make_run(tmp_path / "m.h5", label="measured")), "m")
    for p in plots.all_plots([measured]):
        texts = [t.get_text() for t in p.figure.findobj(lambda o: hasattr(o, "get_text"))]
        assert not any("not measured" in t for t in texts)


def test_pdf_format(tmp_path, capsys):
    path = make_run(tmp_path / "a.h5", power=False)
    code, _, _ = run_cli(capsys, path, "--plots", tmp_path / "p", "--format", "pdf")
    assert code == 0
    assert all(f.read_bytes().startswith(b"%PDF") for f in (tmp_path / "p").glob("*.pdf"))
    assert len(list((tmp_path / "p").glob("*.pdf"))) == 4


def test_html_report_is_self_contained(tmp_path, capsys):
    path = make_run(tmp_path / "a.h5")
    code, _, _ = run_cli(capsys, path, "--report", tmp_path / "r.html")
    assert code == 0
    page = (tmp_path / "r.html").read_text()
    assert page.startswith("<!DOCTYPE html>")
    assert page.count("<img ") == len(ALL_FIGURES)
    assert page.count('src="data:image/png;base64,') == len(ALL_FIGURES)
    assert "Summary" in page and "<th class=l>peak bandwidth</th>" in page and "Test MPI 1.0" in page
    assert "Power is ESTIMATED, not measured" in page
    assert "Per message size" in page and "<table>" in page
    assert "http" not in page.replace("http-equiv", "")  # nothing fetched from elsewhere


# ---------------------------------------------------------------- comparing runs


def test_two_runs_are_overlaid_and_compared(tmp_path, capsys):
    a = make_run(tmp_path / "c.h5", kernel="c")
    b = make_run(tmp_path / "py.h5", kernel="python", slower=2.0)
    code, out, _ = run_cli(
        capsys,
        a,
        b,
        "--plots",
        tmp_path / "p",
        "--json",
        tmp_path / "x.json",
        "--np-out",
        tmp_path / "np.out",
    )
    assert code == 0
    assert "comparison (ratios to the first run):" in out
    line = next(ln for ln in out.splitlines() if ln.startswith("peak bandwidth (Gbit/s)"))
    assert line.split()[-1] == "0.500"  # twice the trial time: half the bandwidth
    lat = next(ln for ln in out.splitlines() if ln.startswith("latency (smallest size) (us)"))
    assert lat.split()[-1] == "2.000"
    names = {f.stem for f in (tmp_path / "p").iterdir()}
    assert {"bandwidth", "latency", "energy_rate", "power_bandwidth", "energy_per_bit"} <= names
    assert {"power_time_c", "power_time_py", "scaled_energy_rate_c", "iterations_py"} <= names
    doc = json.loads((tmp_path / "x.json").read_text())
    assert [r["summary"]["label"] for r in doc["runs"]] == ["c", "py"]
    peak = next(r for r in doc["comparison"] if r["key"] == "peak_bandwidth_bit_s")
    assert peak["ratio_to_first"] == pytest.approx([1.0, 0.5])
    assert (tmp_path / "np-c.out").exists() and (tmp_path / "np-py.out").exists()
    a_run = analyse_run(load_run(a), "c")
    legend = plots.plot_bandwidth([a_run, analyse_run(load_run(b), "py")]).figure.axes[0].get_legend()
    assert any("py (python)" in t.get_text() for t in legend.get_texts())


# ---------------------------------------------------------------- never overwrite


def test_existing_outputs_are_refused_without_force(tmp_path, capsys):
    path = make_run(tmp_path / "a.h5", power=False)
    target = tmp_path / "a.csv"
    target.write_text("keep me")
    code, _, err = run_cli(capsys, path, "--csv", target)
    assert code == 2
    assert err.count("\n") == 1 and "exists" in err and "--force" in err
    assert target.read_text() == "keep me"
    code, _, _ = run_cli(capsys, path, "--csv", target, "--force")
    assert code == 0 and target.read_text().startswith("run,size_bytes")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.csv", "a.h5"]  # no temporary left


def test_existing_figure_is_refused_and_nothing_is_written(tmp_path, capsys):
    path = make_run(tmp_path / "a.h5", power=False)
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "latency.png").write_bytes(b"old")
    code, _, err = run_cli(capsys, path, "--plots", tmp_path / "p", "--json", tmp_path / "a.json")
    assert code == 2 and "latency.png exists" in err
    assert (tmp_path / "p" / "latency.png").read_bytes() == b"old"
    assert not (tmp_path / "a.json").exists()  # checked before anything was written


# ---------------------------------------------------------------- bad input


def _bad_files(tmp_path):
    good = make_run(tmp_path / "good.h5")
    (tmp_path / "text.h5").write_text("not hdf5 at all\n")
    with h5py.File(tmp_path / "other.h5", "w") as f:
        f.attrs["format"] = "something-else"
    newer = make_run(tmp_path / "newer.h5", power=False)
    with h5py.File(newer, "r+") as f:
        f.attrs["format_version"] = "2.0"
    (tmp_path / "truncated.h5").write_bytes(good.read_bytes()[:3000])
    nogroup = make_run(tmp_path / "nogroup.h5", power=False)
    with h5py.File(nogroup, "r+") as f:
        del f["pingpong"]
    negative = make_run(tmp_path / "negative.h5", power=False)
    with h5py.File(negative, "r+") as f:
        f["pingpong/trial_s"][2, 1] = -1.0
    return {
        "missing.h5": "no such file",
        "text.h5": "not an HDF5 file",
        "other.h5": "not an npmpi run file",
        "newer.h5": "newer npmpi",
        "truncated.h5": "truncated",
        "nogroup.h5": "/pingpong is missing",
        "negative.h5": "non-positive",
    }


def test_bad_files_give_one_line_and_status_1(tmp_path, capsys):
    for name, fragment in _bad_files(tmp_path).items():
        code, out, err = run_cli(capsys, tmp_path / name)
        assert code == 1, name
        assert err.count("\n") == 1, (name, err)
        assert err.startswith("npmpi-analyze: error: ") and fragment in err, (name, err)
        assert "Traceback" not in err and out == ""


def test_bad_file_in_a_subprocess_has_no_traceback(tmp_path):
    (tmp_path / "text.h5").write_text("nope")
    proc = subprocess.run(
        [sys.executable, "-m", "npmpi_analysis", str(tmp_path / "text.h5")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 1
    assert proc.stderr.count("\n") == 1 and "not an HDF5 file" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    "args, fragment",
    [
        ([], "the following arguments are required"),
        (["x.h5", "--format", "gif"], "invalid choice"),
        (["x.h5", "--meter-delay", "abc"], "invalid float value"),
        (["x.h5", "--meter-delay", "-1"], "--meter-delay"),
        (["x.h5", "--bogus"], "unrecognized arguments"),
    ],
)
def test_bad_usage_is_one_line_and_status_2(capsys, args, fragment):
    code, out, err = run_cli(capsys, *args)
    assert code == 2
    assert err.count("\n") == 1 and fragment in err
    assert "usage:" not in err and out == ""


def test_usage_error_in_a_subprocess(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "npmpi_analysis", "--nope"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "usage" not in proc.stderr


def test_good_and_bad_files_together(tmp_path, capsys):
    good = make_run(tmp_path / "good.h5", power=False)
    code, out, err = run_cli(capsys, good, tmp_path / "missing.h5", "--csv", tmp_path / "a.csv")
    assert code == 1 and err.count("\n") == 1 and "missing.h5: no such file" in err
    assert "peak bandwidth" in out and (tmp_path / "a.csv").exists()  # what can be analysed is


def test_node_without_samples_is_named_and_the_rest_analysed(tmp_path, capsys):
    t = T0 + 0.1 * np.arange(300)
    nodes = [
        SynthNode([SynthChannel(t, np.full(len(t), 40.0), sample_interval_s=0.1)], host="a"),
        SynthNode([SynthChannel(np.zeros(0), np.zeros(0), sample_interval_s=0.1)], host="b"),
    ]
    path = write_run(tmp_path / "r.h5", [1, 2], [10, 10], [[1.0], [1.0]], [[T0 + 2], [T0 + 5]], nodes=nodes)
    code, out, err = run_cli(capsys, path, "--csv", tmp_path / "r.csv")
    assert code == 1
    assert err.count("\n") == 1 and "/power/node1 (b): no power samples" in err
    assert "node 0 a: idle - W, active 40" in out
    row = read_csv(tmp_path / "r.csv")[0]
    assert float(row["power_w"]) == pytest.approx(40.0)


def test_nan_and_negative_sample_times_are_reported_and_skipped(tmp_path, capsys):
    t = T0 + 0.1 * np.arange(300)
    t[[5, 6]] = [np.nan, -3.0]
    nodes = [SynthNode([SynthChannel(t, np.full(len(t), 40.0), sample_interval_s=0.1)], host="a")]
    path = write_run(tmp_path / "r.h5", [1], [10], [[1.0]], [[T0 + 2]], nodes=nodes)
    code, out, err = run_cli(capsys, path)
    assert code == 1 and err.count("\n") == 1
    assert "/power/node0/channel0/time_unix_s: 2 NaN or negative time(s) (first at sample 5)" in err
    assert "40 ± 0" in out


def test_nan_negative_and_implausible_power_is_reported_and_skipped(tmp_path, capsys):
    t = T0 + 0.1 * np.arange(300)
    p = np.full(len(t), 40.0)
    p[[7, 8, 9]] = [1e300, -1.0, np.nan]
    nodes = [SynthNode([SynthChannel(t, p, sample_interval_s=0.1)], host="a")]
    path = write_run(tmp_path / "r.h5", [1], [10], [[1.0]], [[T0 + 2]], nodes=nodes)
    code, out, err = run_cli(capsys, path, "--json", tmp_path / "r.json")
    assert code == 1 and err.count("\n") == 1
    assert "/power/node0/channel0/power_w: 3 NaN, negative or implausible (above 1e+06 W)" in err
    assert "(first at sample 7: 1e+300 W)" in err
    assert "40 ± 0" in out
    size = json.loads((tmp_path / "r.json").read_text())["runs"][0]["sizes"][0]
    assert size["power_w"] == pytest.approx(40.0)


def test_broken_power_part_still_gives_bandwidth(tmp_path, capsys):
    path = make_run(tmp_path / "a.h5")
    with h5py.File(path, "r+") as f:
        del f["power/node1/channel0/power_w"]
    code, out, err = run_cli(capsys, path)
    assert code == 1 and err.count("\n") == 1
    assert "/power/node1/channel0/power_w is missing" in err and "without power" in err
    assert "peak bandwidth" in out and "no power data" in out


def test_nan_in_exports_is_empty_or_null(tmp_path, capsys):
    t = T0 + np.arange(5.0)
    nodes = [SynthNode([SynthChannel(t, np.full(5, 10.0), sample_interval_s=1.0)])]
    path = write_run(tmp_path / "r.h5", [1, 2], [1, 1], [[0.5], [0.5]], [[T0 + 1.2], [T0 + 60]], nodes=nodes)
    code, out, _ = run_cli(capsys, path, "--csv", tmp_path / "r.csv", "--json", tmp_path / "r.json")
    assert code == 0
    rows = read_csv(tmp_path / "r.csv")
    assert rows[1]["power_flag"] == "none" and rows[1]["power_w"] == ""
    assert rows[0]["power_flag"] == "short"
    sizes = json.loads((tmp_path / "r.json").read_text())["runs"][0]["sizes"]
    assert sizes[1]["power_w"] is None and math.isfinite(sizes[0]["power_w"])
    assert "flagged 'short': 1 size(s)" in out and "flagged 'none': 1 size(s)" in out


def test_analysis_imports_no_mpi(tmp_path):
    path = make_run(tmp_path / "a.h5")
    code = (
        "import sys; sys.modules['mpi4py'] = None\n"  # any MPI import would fail
        "from npmpi_analysis.cli import main\n"
        f"rc = main([{str(path)!r}, '-q', '--plots', {str(tmp_path / 'p')!r}, "
        f"'--report', {str(tmp_path / 'r.html')!r}])\n"
        "assert 'mpi4py' not in [m.split('.')[0] for m in sys.modules if sys.modules[m] is not None]\n"
        "sys.exit(rc)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "r.html").exists()


def test_one_node_gets_no_stacked_power_figure(tmp_path, capsys):
    """A single node's stacked power would only repeat the job's power: it is not drawn."""
    path = make_run(tmp_path / "one.h5", nodes=1)
    code, out, _ = run_cli(capsys, path, "--plots", tmp_path / "p")
    assert code == 0 and "9 figure(s)" in out
    assert {f.stem for f in (tmp_path / "p").iterdir()} == ALL_FIGURES - {"power_nodes"}
