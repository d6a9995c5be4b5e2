"""Differences that are real (npmpi_analysis/numbers/verdicts.py): runs compared per size and per model
parameter with 95 % intervals from resampling both runs' trials, and a verdict; a run compared with
itself is the same within noise everywhere; a run whose large messages are 20 % slower reads 'slower'
(and its energy 'worse') there and 'same' below; the comparison CSV's verdict columns."""

from __future__ import annotations

import csv

import numpy as np
from npmpi_analysis.cli import main
from npmpi_analysis.synthetic import SynthChannel, SynthNode, write_run

T0 = 1.7e9
SIZES = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072]
ITERS = 100


def curve_run(path, slow_from: int | None = None, seed: int = 0):
    """Hockney's curve (2 us, 10 Gbit/s per message) with 2 % noise over 7 trials of 100 ping-pongs,
    one node at a constant 80 W with 0.5 W of reading noise; sizes from `slow_from` on 20 % slower."""
    rng = np.random.default_rng(seed)
    t = np.array([2e-6 + 8 * s / 10e9 for s in SIZES])
    if slow_from is not None:
        t = np.where(np.array(SIZES) >= slow_from, 1.2 * t, t)
    trials = (t[:, None] * 2 * ITERS) * (1 + 0.02 * rng.standard_normal((len(SIZES), 7)))
    starts, now = [], T0
    for k in range(len(SIZES)):
        starts.append(list(now + np.cumsum(np.r_[0.0, trials[k, :-1] + 0.01])))
        now = starts[-1][-1] + trials[k, -1] + 0.5
    ts = np.arange(T0 - 12, now + 8, 0.05)
    node = SynthNode(
        [
            SynthChannel(
                ts, 80 + 0.5 * rng.standard_normal(len(ts)), label="simulated", sample_interval_s=0.05
            )
        ],
        host="n0",
        measured_start_unix_s=T0,
    )
    return write_run(
        path,
        SIZES,
        [ITERS] * len(SIZES),
        trials.tolist(),
        starts,
        nodes=[node],
        baseline=(T0 - 10, T0 - 2),
        baseline_after=(now + 1, now + 7),
    )


def test_a_run_against_itself_is_the_same_within_noise(tmp_path, capsys):
    a = curve_run(tmp_path / "a.h5")
    b = tmp_path / "b.h5"
    b.write_bytes(a.read_bytes())
    assert main([str(a), str(b), "--compare-csv", str(tmp_path / "c.csv")]) == 0
    out = capsys.readouterr().out
    assert f"b vs a, time per message: {len(SIZES)} size(s) same within noise\n" in out
    assert f"b vs a, energy per message: {len(SIZES)} size(s) same within noise\n" in out
    model_lines = [line for line in out.splitlines() if "b vs a, model" in line]
    assert model_lines and all("slower" not in line and "faster" not in line for line in model_lines)
    rows = list(csv.DictReader((tmp_path / "c.csv").read_text().splitlines()))
    assert {r["b_time_verdict"] for r in rows} == {"same"} and {r["b_energy_verdict"] for r in rows} == {
        "same"
    }
    for r in rows:
        assert float(r["b_time_ratio_lo"]) <= 1.0 <= float(r["b_time_ratio_hi"])


def test_a_slower_run_reads_slower_where_it_is_and_same_elsewhere(tmp_path, capsys):
    a = curve_run(tmp_path / "a.h5", seed=1)
    b = curve_run(tmp_path / "b.h5", slow_from=4096, seed=2)
    assert main([str(a), str(b), "--compare-csv", str(tmp_path / "c.csv"), "-q"]) == 0
    rows = list(csv.DictReader((tmp_path / "c.csv").read_text().splitlines()))
    slow = [r for r in rows if int(r["size_bytes"]) >= 4096]
    alike = [r for r in rows if int(r["size_bytes"]) < 4096]
    assert {r["b_time_verdict"] for r in slow} == {"slower"} and {r["b_energy_verdict"] for r in slow} == {
        "worse"
    }
    assert all(float(r["b_time_ratio_lo"]) < 1.2 < float(r["b_time_ratio_hi"]) for r in slow)
    # 95 % intervals: about 1 in 20 sizes that did not change reads otherwise by chance
    assert sum(r["b_time_verdict"] != "same" for r in alike) <= 1
    assert sum(r["b_energy_verdict"] not in ("same", "") for r in alike) <= 1


def test_the_verdict_text_names_the_difference_and_its_interval(tmp_path, capsys):
    a = curve_run(tmp_path / "a.h5", seed=3)
    b = curve_run(tmp_path / "b.h5", slow_from=1, seed=4)
    assert main([str(a), str(b), "--report", str(tmp_path / "r.html")]) == 0
    out = capsys.readouterr().out
    page = (tmp_path / "r.html").read_text()
    assert (
        "<h3>Differences beyond noise</h3><ul id=verdicts><li>" in page and "b vs a, time per message" in page
    )
    line = next(x for x in out.splitlines() if "b vs a, time per message" in x)
    assert f"{len(SIZES)} size(s) slower" in line and "largest at" in line and "slower by " in line
    model = [x for x in out.splitlines() if "b vs a, model" in x]
    assert any("alpha slower by" in x for x in model) and any("beta slower by" in x for x in model), model
