"""What the analysis shows is what the readings support: dynamic energy that is not above its own σ
is a bound, never a negative or noise-sized number; the headline figures come from unflagged sizes;
the CSV's reading columns say what they count."""

from __future__ import annotations

import csv
import io
import json

import numpy as np
import pytest
from npmpi_analysis.figures.run import plot_energy_per_bit
from npmpi_analysis.numbers.analyse import analyse_run
from npmpi_analysis.numbers.compute import not_above_idle
from npmpi_analysis.report import csv_bytes, json_bytes, size_table, summary_text
from npmpi_analysis.synthetic import SynthChannel, SynthNode, write_run

from npmpi.runfile.reader import load_run

T0 = 3_000.0


def test_not_above_idle_by_hand():
    b = np.array([8e9, 8e9, 8e9, 8e9])  # bit/s: 1 W is 125 pJ/bit
    dyn = np.array([10.0, 1.0, -3.0, np.nan])
    sigma = np.array([2.0, 2.0, 2.0, 2.0])
    low, bound = not_above_idle(b, dyn, sigma)
    assert list(low) == [False, True, True, False]
    assert bound[1] == pytest.approx((1.0 + 4.0) * 125.0)  # value + 2σ
    assert bound[2] == pytest.approx(4.0 * 125.0)  # negative: 2σ alone
    assert np.isnan(bound[0]) and np.isnan(bound[3])


def noisy_run(tmp_path, busy_w: float, short_first: bool = True, repeats: int = 1):
    """Idle 100 W ± 3 (readings every 0.1 s alternating every `repeats` readings) in both
    baselines; the sizes at 100 + busy_w W. Size 1 (when short_first) lasts 0.05 s, shorter than a
    reading's interval."""
    t = np.arange(0.0, 40.0, 0.1)
    p = 100.0 + np.where((np.arange(len(t)) // repeats) % 2 == 0, 3.0, -3.0)
    sweep = (t >= 10.0) & (t < 30.0)
    p[sweep] += busy_w
    ch = SynthChannel(T0 + t, p, label="measured", kind="hwmon", sample_interval_s=0.1)
    sizes = [1 << 20, 2 << 20, 4 << 20]
    lengths = [0.05 if short_first else 2.0, 2.0, 2.0]
    starts = [[T0 + 11.0 + 4 * k] for k in range(3)]
    trial_s = [[x] for x in lengths]
    path = write_run(tmp_path / f"r{busy_w:g}.h5", sizes, [400, 100, 60], trial_s, starts,
                     nodes=[SynthNode([ch])], baseline=(T0 + 2.0, T0 + 8.0),
                     baseline_after=(T0 + 32.0, T0 + 38.0))  # fmt: skip
    return analyse_run(load_run(path), "r")


def test_dynamic_energy_not_above_idle_is_a_bound_everywhere(tmp_path):
    a = noisy_run(tmp_path, busy_w=0.0)
    assert a.dynamic_not_above_idle.all()  # 0 W above idle, σ of a few W: noise
    table = size_table(a)
    for line in table.splitlines()[1:]:
        assert "(2σ)" in line and " -" not in line.split("±")[-1]  # a bound, never a negative value
    assert "dyn pJ/bit ± σ" in table.splitlines()[0]
    summary = summary_text(a)
    assert "dynamic not above idle (<" in summary and "pJ/bit, 2σ)" in summary
    rows = list(csv.DictReader(io.StringIO(csv_bytes([a]).decode())))
    assert {r["dynamic_flag"] for r in rows} == {"not above idle"}
    for r, bound in zip(rows, a.dynamic_bound_pj_bit, strict=True):
        assert float(r["dynamic_energy_bound_pj_bit"]) == pytest.approx(bound)
        assert float(r["dynamic_energy_sigma_pj_bit"]) > 0  # the value and its σ stay in the CSV
    doc = json.loads(json_bytes([a]))
    assert "not above idle" in doc["dynamic_flags"]
    s = doc["runs"][0]["summary"]
    assert s["dynamic_not_above_idle_at_min"] is True and s["dynamic_energy_bound_pj_bit_at_min"] > 0
    # the figure marks them at their bound instead of dropping them from its log scale
    plot = plot_energy_per_bit([a])
    marked = [ln for ln in plot.figure.axes[0].lines if "not above idle" in str(ln.get_label())]
    assert len(marked) == 1 and np.allclose(marked[0].get_ydata(), a.dynamic_bound_pj_bit)


def test_dynamic_energy_above_idle_is_shown_with_its_sigma(tmp_path):
    a = noisy_run(tmp_path, busy_w=50.0)
    assert not a.dynamic_not_above_idle[1:].any()
    assert "dynamic not above idle" not in summary_text(a)
    assert "±" in size_table(a).splitlines()[2].split("  ")[-3]  # the dyn column: value ± σ


def test_headline_figures_come_from_unflagged_sizes_and_say_so_otherwise(tmp_path):
    a = noisy_run(tmp_path, busy_w=50.0)  # size 1 MiB is flagged short and has the least pJ/bit
    assert a.flag_names()[0] == "short"
    assert a.energy_pj_bit[0] < a.energy_pj_bit[1:].min()
    s = a.summary()
    assert s["min_energy_size_bytes"] != 1 << 20 and s["min_energy_flag"] == ""
    assert s["peak_energy_rate_size_bytes"] != 1 << 20 and s["headline_sizes"] == "unflagged"
    assert "flagged" not in next(ln for ln in summary_text(a).splitlines() if "least energy" in ln)
    # every size flagged: the figure comes from them, and its line says so
    (tmp_path / "b").mkdir()
    b = noisy_run(tmp_path / "b", busy_w=50.0)
    b.power.job_flag[:] = 1
    line = next(ln for ln in summary_text(b).splitlines() if "least energy" in ln)
    assert "(flagged 'short' — every size is flagged)" in line


def test_csv_counts_readings_and_distinct_readings(tmp_path):
    # a meter read twice per refresh: every other reading repeats the one before it
    a = noisy_run(tmp_path, busy_w=50.0, short_first=False, repeats=2)
    rows = list(csv.DictReader(io.StringIO(csv_bytes([a]).decode())))
    assert "node0_samples" not in rows[0]
    # a 2 s window of readings every 0.1 s: 20 or 21 readings, half of them new values
    assert all(int(r["node0_readings"]) in (20, 21) for r in rows)
    assert all(int(r["node0_distinct_readings"]) in (10, 11) for r in rows)
