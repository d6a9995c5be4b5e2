"""npmpi-analyze's formulas against values computed by hand, on small synthetic run files."""

from __future__ import annotations

import math

import numpy as np
import pytest
from npmpi_analysis.numbers import compute, energy_windows, timeline
from npmpi_analysis.numbers.analyse import analyse_run, trial_windows
from npmpi_analysis.numbers.compute import FLAG_GAP, FLAG_NONE, FLAG_OK, FLAG_SHORT
from npmpi_analysis.numbers.node_power import caveat_for
from npmpi_analysis.synthetic import SynthChannel, SynthNode, write_run

from npmpi.power.clocksync import ClockOffset, interpolate_offset
from npmpi.runfile.reader import load_run

T0 = 1_000.0  # a small epoch keeps the hand arithmetic readable


def analyse(path, delay=None):
    return analyse_run(load_run(path), "r", delay)


def grid(start, stop, step):
    """Sample times start, start+step, ... < stop, computed without accumulating rounding."""
    n = round((stop - start) / step)
    return start + step * np.arange(n)


# ---------------------------------------------------------------- bandwidth


def test_bandwidth_sigma_and_latency_by_hand(tmp_path):
    # 1000 B, 10 round trips, trials of 0.1, 0.2 and 0.3 s: 2*10*8000 = 160000 bits per trial
    path = write_run(tmp_path / "r.h5", [1000], [10], [[0.1, 0.2, 0.3]], [[T0, T0 + 1, T0 + 2]])
    a = analyse(path)
    bw = a.bw
    assert bw.peak_bit_s[0] == pytest.approx(160000 / 0.1)  # the best trial: NetPIPE's figure
    assert bw.max_bit_s[0] == pytest.approx(1.6e6)
    assert bw.min_bit_s[0] == pytest.approx(160000 / 0.3)
    assert bw.trial_mean_s[0] == pytest.approx(0.2)
    assert bw.mean_bit_s[0] == pytest.approx(8e5)  # 2 i m / mean t
    # sigma_t: standard deviation of the mean = s / sqrt(3), s = 0.1 (ddof 1)
    sigma_t = 0.1 / math.sqrt(3)
    assert bw.trial_sigma_s[0] == pytest.approx(sigma_t)
    # sigma_b = b sigma_t / t (the paper's printed b / (sigma_t t) is dimensionally wrong)
    assert bw.sigma_bit_s[0] == pytest.approx(8e5 * sigma_t / 0.2)
    assert bw.sigma_bit_s[0] != pytest.approx(8e5 / (sigma_t * 0.2))
    assert bw.one_way_s[0] == pytest.approx(0.1 / 20)  # best / (2 i)
    assert a.power is None and a.rate is None


def test_trials_that_did_not_run_are_left_out(tmp_path):
    path = write_run(tmp_path / "r.h5", [8], [5], [[0.5, math.nan, 0.25]], [[T0, math.nan, T0 + 2]])
    bw = analyse(path).bw
    assert bw.trials_run[0] == 2
    assert bw.peak_bit_s[0] == pytest.approx(2 * 5 * 64 / 0.25)
    assert bw.trial_mean_s[0] == pytest.approx(0.375)
    assert bw.trial_sigma_s[0] == pytest.approx(np.std([0.5, 0.25], ddof=1) / math.sqrt(2))


def test_one_trial_has_no_spread():
    bw = compute.bandwidth(np.array([4]), np.array([3]), np.array([[0.5]]))
    assert bw.trial_sigma_s[0] == 0 and bw.sigma_bit_s[0] == 0
    assert bw.mean_bit_s[0] == pytest.approx(2 * 3 * 32 / 0.5)


def test_window_is_first_trial_start_to_last_trial_end(tmp_path):
    path = write_run(
        tmp_path / "r.h5",
        [1, 2],
        [1, 1],
        [[0.5, 0.5], [0.5, 0.5]],
        [[T0 + 1, T0], [T0 + 5, T0 + 6]],
        [[T0 + 1.5, T0 + 0.5], [T0 + 5.5, T0 + 6.5]],
    )
    starts, ends = trial_windows(load_run(path).pingpong)
    assert list(starts) == [T0, T0 + 5]
    assert list(ends) == [T0 + 1.5, T0 + 6.5]


# ---------------------------------------------------------------- power in a window


def one_node(t, p, **kw):
    chan = {k: kw.pop(k) for k in ("label", "sample_interval_s", "meter_delay_s") if k in kw}
    return SynthNode([SynthChannel(np.asarray(t), np.asarray(p), **chan)], **kw)


def test_mean_and_sigma_of_the_samples_in_the_window(tmp_path):
    t = grid(T0, T0 + 10, 0.1)
    p = t - T0  # 0.0, 0.1, 0.2, ... W
    path = write_run(
        tmp_path / "r.h5",
        [100],
        [10],
        [[0.5, 0.5]],
        [[T0 + 1.05, T0 + 1.55]],  # window 1.05 .. 2.05: samples 1.1 .. 2.0 (10 samples)
        nodes=[one_node(t, p, sample_interval_s=0.1)],
    )
    a = analyse(path)
    vals = np.arange(11, 21) / 10
    assert a.power.nodes[0].sizes.count[0] == 10
    assert a.power.job_w[0] == pytest.approx(vals.mean())  # 1.55 W
    assert a.power.job_sigma_w[0] == pytest.approx(vals.std())  # std of the samples (ddof 0)
    assert a.power.job_flag[0] == FLAG_OK


def test_constant_clock_offset_moves_samples_onto_rank0s_clock(tmp_path):
    # power steps from 10 W to 50 W at T0+5 (rank 0's clock); the node's clock is 2 s ahead
    true_t = grid(T0, T0 + 10, 0.1)
    p = np.where(true_t < T0 + 5 - 1e-9, 10.0, 50.0)
    node = one_node(true_t + 2.0, p, sample_interval_s=0.1, offset_start_s=2.0, measured_start_unix_s=T0)
    path = write_run(tmp_path / "r.h5", [1], [1], [[0.4]], [[T0 + 5.25]], nodes=[node])
    a = analyse(path)
    assert a.power.job_w[0] == pytest.approx(50.0)  # unaligned, the window would read 10 W
    # and the window just before the step reads the lower level
    path2 = write_run(tmp_path / "r2.h5", [1], [1], [[0.4]], [[T0 + 4.35]], nodes=[node])
    assert analyse(path2).power.job_w[0] == pytest.approx(10.0)


def test_drifting_offset_is_interpolated_between_start_and_end():
    # offset 0 at T0, 1.0 s at T0+100 (rank 0's clock): at rank-0 time T0+50 it is 0.5 s
    t_node = np.array([T0, T0 + 50.5, T0 + 101.0])
    t0 = timeline.node_to_rank0(t_node, 0.0, T0, 1.0, T0 + 100)
    assert t0 == pytest.approx([T0, T0 + 50, T0 + 100])
    start = ClockOffset(0.0, 0.0, 0.0, T0)
    end = ClockOffset(1.0, 0.0, 0.0, T0 + 100)
    assert t0 + interpolate_offset(start, end, t0) == pytest.approx(t_node)
    # start only: a constant offset
    assert timeline.node_to_rank0(t_node, 0.25, T0) == pytest.approx(t_node - 0.25)


def test_drift_applied_to_a_node_in_a_file(tmp_path):
    true_t = grid(T0, T0 + 200, 0.5)
    p = np.where(true_t < T0 + 150 - 1e-9, 10.0, 30.0)
    offset = 0.0 + (true_t - T0) * 0.02  # 0 s at T0, 2 s at T0+100, 4 s at T0+200
    node = one_node(
        true_t + offset,
        p,
        sample_interval_s=0.5,
        offset_start_s=0.0,
        measured_start_unix_s=T0,
        offset_end_s=4.0,
        measured_end_unix_s=T0 + 200,
    )
    # window T0+150.2 .. T0+151.0: on the node's clock the step is at T0+153
    path = write_run(tmp_path / "r.h5", [1], [1], [[0.8]], [[T0 + 150.2]], nodes=[node])
    assert analyse(path).power.job_w[0] == pytest.approx(30.0)


def test_meter_delay_moves_samples_earlier_and_the_option_overrides_it(tmp_path):
    # the step happens at T0+5 but a meter with a 1 s delay reports it at T0+6
    true_t = grid(T0, T0 + 10, 0.1)
    p = np.where(true_t < T0 + 5 - 1e-9, 10.0, 50.0)
    node = one_node(true_t + 1.0, p, sample_interval_s=0.1, meter_delay_s=1.0)
    path = write_run(tmp_path / "r.h5", [1], [1], [[0.5]], [[T0 + 5.25]], nodes=[node])
    assert analyse(path).power.job_w[0] == pytest.approx(50.0)  # the channel's meter_delay_s
    assert analyse(path, delay=0.0).power.job_w[0] == pytest.approx(10.0)  # --meter-delay 0
    assert analyse(path, delay=1.0).power.nodes[0].channels[0].delay_s == 1.0
    chan = analyse(path).summary()["nodes"][0]["channels"][0]
    assert (chan["meter_delay_s"], chan["meter_delay_source"]) == (1.0, "calibrated")
    assert (
        analyse(path, delay=0.0).summary()["nodes"][0]["channels"][0]["meter_delay_source"] == "--meter-delay"
    )


# ---------------------------------------------------------------- several nodes and channels


def test_nodes_sum_with_sigmas_in_quadrature(tmp_path):
    t = grid(T0, T0 + 10, 0.1)
    alt = np.arange(len(t)) % 2 == 0
    node0 = one_node(t, np.where(alt, 9.0, 11.0), sample_interval_s=0.1)  # 10 ± 1 W
    node1 = one_node(t + 0.05, np.where(alt, 17.0, 23.0), sample_interval_s=0.1)  # 20 ± 3 W
    # window T0+2.02 .. T0+4.02 holds 20 samples of each node: alternating values in equal numbers
    path = write_run(tmp_path / "r.h5", [64], [1], [[2.0]], [[T0 + 2.02]], nodes=[node0, node1])
    a = analyse(path)
    n0, n1 = a.power.nodes
    assert n0.sizes.count[0] == 20 and n1.sizes.count[0] == 20
    assert n0.sizes.mean[0] == pytest.approx(10.0) and n0.sizes.sigma[0] == pytest.approx(1.0)
    assert n1.sizes.mean[0] == pytest.approx(20.0) and n1.sizes.sigma[0] == pytest.approx(3.0)
    assert a.power.job_w[0] == pytest.approx(30.0)
    assert a.power.job_sigma_w[0] == pytest.approx(math.sqrt(1 + 9))
    # the summed series over time: both nodes on one time line
    inside = (a.power.series_t > T0 + 1) & (a.power.series_t < T0 + 9)
    assert a.power.series_w[inside].mean() == pytest.approx(30.0, abs=0.5)


def test_channels_of_a_node_are_interpolated_onto_common_times_and_summed(tmp_path):
    ta = grid(T0, T0 + 10, 0.1)  # the densest channel gives the times
    tb = grid(T0, T0 + 10.5, 0.5)
    node = SynthNode(
        [
            SynthChannel(ta, np.full(len(ta), 5.0), sample_interval_s=0.1),
            SynthChannel(tb, tb - T0, sample_interval_s=0.5),  # a ramp: 1 W per second
        ]
    )
    # window T0+2.05 .. T0+3.05: channel A's samples at 2.1 .. 3.0; B interpolated there = t - T0
    path = write_run(tmp_path / "r.h5", [1], [1], [[1.0]], [[T0 + 2.05]], nodes=[node])
    a = analyse(path)
    expect = 5.0 + np.arange(21, 31) / 10
    assert a.power.nodes[0].sizes.count[0] == 10
    assert a.power.job_w[0] == pytest.approx(expect.mean())
    assert a.power.job_sigma_w[0] == pytest.approx(expect.std())
    assert a.power.nodes[0].interval_s == 0.5  # the slowest channel decides what is "short"


def test_resample_sum_uses_the_common_span():
    t, y = energy_windows.resample_sum(
        [(np.array([0.0, 1, 2, 3]), np.ones(4)), (np.array([1.5, 2.5]), np.array([2.0, 4]))]
    )
    assert list(t) == [2.0]
    assert y == pytest.approx([1 + 3.0])


# ---------------------------------------------------------------- energy rate, energy per bit, baseline


def two_node_run(tmp_path, trial_s=(0.1, 0.2, 0.3), label="measured"):
    t = grid(T0 - 20, T0 + 20, 0.1)
    alt = np.arange(len(t)) % 2 == 0
    idle = t < T0 - 5
    p0 = np.where(idle, 8.0, np.where(alt, 9.0, 11.0))  # idle 8 W, active 10 ± 1 W
    p1 = np.where(idle, 12.0, np.where(alt, 17.0, 23.0))  # idle 12 W, active 20 ± 3 W
    nodes = [
        one_node(t, p0, sample_interval_s=0.1, label=label),
        one_node(t + 0.05, p1, sample_interval_s=0.1, label=label),
    ]
    starts = [T0 + 0.02, T0 + 0.02 + trial_s[0], T0 + 0.02 + trial_s[0] + trial_s[1]]
    return write_run(
        tmp_path / "r.h5",
        [1000],
        [10],
        [list(trial_s)],
        [starts],
        nodes=nodes,
        baseline=(T0 - 15, T0 - 10),
    )


def test_energy_rate_bounds_and_sigma_by_hand(tmp_path):
    a = analyse(two_node_run(tmp_path))
    b, sb = 8e5, 8e5 * (0.1 / math.sqrt(3)) / 0.2  # from test_bandwidth_sigma_and_latency_by_hand
    p, sp = 30.0, math.sqrt(10.0)  # window T0+0.02 .. T0+0.62: 6 samples per node, alternating
    assert a.power.job_w[0] == pytest.approx(p)
    assert a.power.job_sigma_w[0] == pytest.approx(sp)
    r = b / p
    assert a.rate.rate_bit_j[0] == pytest.approx(r)
    assert a.rate.high_bit_j[0] == pytest.approx((b + sb) / (p - sp))
    assert a.rate.low_bit_j[0] == pytest.approx((b - sb) / (p + sp))
    assert a.rate.sigma_bit_j[0] == pytest.approx(r * math.sqrt((sb / b) ** 2 + (sp / p) ** 2))
    # energy per bit: p / b in pJ/bit, same relative error
    assert a.energy_pj_bit[0] == pytest.approx(1e12 * p / b)
    assert a.energy_sigma_pj_bit[0] == pytest.approx(1e12 * p / b * math.sqrt((sb / b) ** 2 + (sp / p) ** 2))


def test_baseline_is_subtracted_for_the_dynamic_part(tmp_path):
    a = analyse(two_node_run(tmp_path))
    b, sb = 8e5, 8e5 * (0.1 / math.sqrt(3)) / 0.2
    assert [n.idle.mean[0] for n in a.power.nodes] == pytest.approx([8.0, 12.0])
    assert a.power.idle_w == pytest.approx(20.0)
    assert a.power.idle_sigma_w == pytest.approx(0.0)
    assert a.dynamic_w[0] == pytest.approx(10.0)
    assert a.dynamic_pj_bit[0] == pytest.approx(1e12 * 10.0 / b)
    sp = math.sqrt(10.0)  # the baseline's sigma (0 here) adds in quadrature
    assert a.dynamic_sigma_pj_bit[0] == pytest.approx(1e12 / b * math.sqrt(sp**2 + (10.0 * sb / b) ** 2))
    s = a.summary()
    assert s["idle_power_w"] == pytest.approx(20.0)
    assert s["nodes"][1]["idle_power_w"] == pytest.approx(12.0)


def test_no_baseline_means_no_dynamic_figures(tmp_path):
    t = grid(T0, T0 + 5, 0.1)
    path = write_run(
        tmp_path / "r.h5", [1], [1], [[0.5]], [[T0 + 1]], nodes=[one_node(t, np.full(len(t), 7.0))]
    )
    a = analyse(path)
    assert a.power.job_w[0] == pytest.approx(7.0)
    assert math.isnan(a.power.idle_w) and a.dynamic_pj_bit is None


# ---------------------------------------------------------------- short trials, gaps


def test_window_shorter_than_the_sample_interval_takes_the_nearest_samples(tmp_path):
    t = np.arange(100, dtype=float) + T0  # one sample a second
    p = np.arange(100, dtype=float)  # 0, 1, 2, ... W
    # 10 ms window between the samples at T0+3 and T0+4: no sample inside
    path = write_run(
        tmp_path / "r.h5",
        [1, 2],
        [1, 1],
        [[0.01], [2.5]],
        [[T0 + 3.4], [T0 + 10.2]],
        nodes=[one_node(t, p, sample_interval_s=1.0)],
    )
    a = analyse(path)
    assert a.power.job_flag[0] == FLAG_SHORT
    assert a.power.nodes[0].sizes.count[0] == 2
    assert a.power.job_w[0] == pytest.approx(3.5)  # the samples at 3 and 4 W
    assert a.power.job_sigma_w[0] == pytest.approx(0.5)
    assert a.power.job_flag[1] == FLAG_OK  # 2.5 s: samples 11 and 12 inside
    assert a.power.job_w[1] == pytest.approx(11.5)
    assert a.flag_names() == ["short", ""]


def test_gap_and_no_sample_near_the_window_are_flagged(tmp_path):
    t = np.array([0, 1, 2, 3, 6, 7, 8], dtype=float) + T0  # no samples at 4 and 5 s
    p = np.arange(7, dtype=float)
    path = write_run(
        tmp_path / "r.h5",
        [1, 2],
        [1, 1],
        [[1.2], [1.0]],
        [[T0 + 4.0], [T0 + 50.0]],
        nodes=[one_node(t, p, sample_interval_s=1.0)],
    )
    a = analyse(path)
    # 4.0 .. 5.2: long enough but empty; nearest: 3 s (1 s before) and 6 s (0.8 s after)
    assert a.power.job_flag[0] == FLAG_GAP
    assert a.power.job_w[0] == pytest.approx((3 + 4) / 2)
    # 50 .. 51: nothing within 1.5 intervals: no power, not an average over nothing
    assert a.power.job_flag[1] == FLAG_NONE
    assert math.isnan(a.power.job_w[1]) and math.isnan(a.rate.rate_bit_j[1])


def test_window_stats_directly():
    t = np.array([0.0, 1, 2, 3, 4])
    y = np.array([1.0, 2, 3, 4, 5])
    s = timeline.window_stats(t, y, np.array([0.5, 1.0, 2.2, 10.0]), np.array([3.5, 1.0, 2.3, 11.0]), 1.0)
    assert s.mean[0] == pytest.approx(3.0) and s.count[0] == 3 and s.flag[0] == FLAG_OK
    assert s.count[1] == 3 and s.flag[1] == FLAG_SHORT  # the sample at 1.0 plus one each side
    assert s.mean[2] == pytest.approx(3.5) and s.flag[2] == FLAG_SHORT
    assert s.flag[3] == FLAG_NONE and math.isnan(s.mean[3])


# ---------------------------------------------------------------- correlation and labels


def test_correlation_of_bandwidth_and_energy_rate(tmp_path):
    # three sizes, bandwidths 1, 2 and 4 Mbit/s, powers 10, 20 and 10 W
    t = grid(T0, T0 + 40, 0.1)
    p = np.select([t < T0 + 10, t < T0 + 20], [10.0, 20.0], 10.0)
    path = write_run(
        tmp_path / "r.h5",
        [1000, 1000, 1000],
        [125, 250, 500],  # 2*i*8000 bits in 2 s: 1, 2 and 4 Mbit/s
        [[2.0], [2.0], [2.0]],
        [[T0 + 4], [T0 + 14], [T0 + 24]],
        nodes=[one_node(t, p, sample_interval_s=0.1)],
    )
    a = analyse(path)
    b = np.array([1e6, 2e6, 4e6])
    r = np.array([1e5, 1e5, 4e5])
    assert a.bw.mean_bit_s == pytest.approx(b)
    assert a.rate.rate_bit_j == pytest.approx(r)
    db, dr = b - b.mean(), r - r.mean()
    by_hand = (db * dr).sum() / math.sqrt((db**2).sum() * (dr**2).sum())
    assert a.correlation == pytest.approx(by_hand)
    assert a.summary()["correlation_bandwidth_energy_rate"] == pytest.approx(0.9449111825230679)
    assert a.summary()["peak_energy_rate_size_bytes"] == 1000


def test_correlation_is_undefined_with_fewer_than_two_sizes():
    assert math.isnan(compute.correlation(np.array([1.0]), np.array([2.0])))
    assert math.isnan(compute.correlation(np.array([1.0, 2.0]), np.array([3.0, 3.0])))


def test_caveat_names_estimated_and_simulated_power():
    assert caveat_for(["measured", "measured"]) == ""
    assert caveat_for(["estimated"]) == "ESTIMATED, not measured"
    assert caveat_for(["simulated", "estimated"]) == "ESTIMATED/SIMULATED, not measured"
    assert caveat_for(["measured", "estimated"]) == "partly ESTIMATED, not all measured"
    assert caveat_for([""]) == "UNLABELLED, not measured"


def test_scaled_and_decimate():
    assert list(compute.scaled(np.array([1.0, 2.0, 4.0]))) == [0.25, 0.5, 1.0]
    t = np.arange(10.0)
    tm, _, lo, hi = energy_windows.decimate(t, t * 2, 5)
    assert list(tm) == [0.5, 2.5, 4.5, 6.5, 8.5]
    assert list(lo) == [0, 4, 8, 12, 16] and list(hi) == [2, 6, 10, 14, 18]
