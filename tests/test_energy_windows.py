"""A window's power from energy counters, averaging spans and samples; sigma_p's terms; the baselines.

Every expected value is computed here from a known truth (an analytic power curve and its exact
integral, or a hand-worked overlap), never copied from the code's output."""

from __future__ import annotations

import math

import h5py
import numpy as np
import pytest
from npmpi_analysis.numbers import baselines
from npmpi_analysis.numbers.analyse import analyse_run
from npmpi_analysis.numbers.compute import FLAG_NONE, FLAG_OK, FLAG_SHORT
from npmpi_analysis.numbers.energy_windows import (
    METHOD_AVERAGE,
    METHOD_COUNTER,
    METHOD_INSTANT,
    ChannelReadings,
    average_spans,
    counter_spans,
    segment_breaks,
    span_means,
    window_power,
)
from npmpi_analysis.synthetic import SynthChannel, SynthNode, write_run

from npmpi.runfile.attrseal import unseal_all
from npmpi.runfile.format import FORMAT_VERSION
from npmpi.runfile.reader import load_run

T0 = 1_000.0
Z = np.zeros(0)

# the truth: P(t) = 50 + 30 sin(2 pi t / 3.7) W, E(t) its exact integral from 0
A, B, PERIOD = 50.0, 30.0, 3.7
OMEGA = 2 * math.pi / PERIOD


def true_energy(t):
    return A * t + B / OMEGA * (1 - np.cos(OMEGA * t))


def counter_channel(dt=0.1, jitter=0.02, resolution_j=1e-6, seed=3, span=20.0):
    """A RAPL-like counter read about every dt (jittered stamps), rounded to its resolution."""
    rng = np.random.default_rng(seed)
    t = np.cumsum(np.full(int(span / dt), dt) + rng.uniform(-jitter, jitter, int(span / dt)))
    e = np.round(true_energy(t) / resolution_j) * resolution_j
    e -= e[0]  # the counter starts at 0 when the meter is opened
    lo, hi, pw = counter_spans(t, e, segment_breaks(t, Z))
    ch = ChannelReadings(
        t, np.diff(e, prepend=np.nan), METHOD_COUNTER, dt, lo, hi, pw, energy_resolution_j=resolution_j
    )
    return ch, t


@pytest.mark.parametrize("length_s", [0.03, 0.07, 0.35, 2.5, 9.0])
def test_counter_energy_over_a_window_matches_the_exact_integral(length_s):
    dt = 0.1
    ch, _ = counter_channel(dt)
    starts = np.linspace(1.0, 9.0, 40) + 0.013
    ends = starts + length_s
    got = window_power(ch, starts, ends)
    exact = (true_energy(ends) - true_energy(starts)) / length_s
    # linear interpolation of the counter at each edge is off by at most h²/8 max|P'| (h: the span
    # around the edge, at most dt + 2 jitter), plus the counter's rounding at both edges
    h = dt + 2 * 0.02
    bound = (2 * (h * h / 8) * B * OMEGA + 2e-6) / length_s
    assert np.all(np.abs(got.mean - exact) <= bound)
    # shorter than a sample interval: flagged, still the counter's value over the window
    assert np.all(got.flag == (FLAG_SHORT if length_s < dt else FLAG_OK))
    # the old way, the mean of the power readings stamped inside the window, is far worse when long
    if length_s > 1:
        old = np.array(
            [np.mean(ch.pw[(ch.hi >= s) & (ch.hi <= e)]) for s, e in zip(starts, ends, strict=True)]
        )
        assert np.max(np.abs(got.mean - exact)) < 0.2 * np.max(np.abs(old - exact))


def test_counter_power_is_exact_when_power_changes_only_between_readings():
    # a load that steps at reading times: the counter's linear interpolation is the truth
    t = np.arange(0.0, 10.01, 0.5)
    p = np.where((t[1:] > 3) & (t[1:] <= 6), 90.0, 40.0)  # power over each span (t[i-1], t[i]]
    e = np.concatenate(([0.0], np.cumsum(p * 0.5)))
    lo, hi, pw = counter_spans(t, e, segment_breaks(t, Z))
    ch = ChannelReadings(t, np.full(len(t), np.nan), METHOD_COUNTER, 0.5, lo, hi, pw)
    # [2.75, 3.25]: 0.25 s at 40 W and 0.25 s at 90 W; [0.1, 0.3]: inside one span (shorter than it)
    got = window_power(ch, np.array([2.75, 0.1, 1.0]), np.array([3.25, 0.3, 9.0]))
    truth_19 = (2.0 * 40 + 3.0 * 90 + 3.0 * 40) / 8.0
    assert got.mean == pytest.approx([65.0, 40.0, truth_19], abs=1e-12)


def test_a_stale_counter_read_faster_than_it_refreshes_never_reads_zero():
    # a BMC's EnergykWh refreshed every 0.25 s, read every 0.23 s: about one reading in twelve
    # repeats the previous value. Each value is kept from its first reading only.
    refresh, read, watts = 0.25, 0.23, 300.0
    t = np.arange(0.0, 30.0, read) + 0.011
    e = np.floor(t / refresh) * refresh * watts  # the energy at the last refresh
    e -= e[0]
    assert np.sum(np.diff(e) == 0) >= 5  # the stale repeats this test is about
    lo, hi, pw = counter_spans(t, e, segment_breaks(t, Z))
    assert np.all(np.diff(hi) > 0) and len(hi) == len(np.unique(e)) - 1
    ch = ChannelReadings(t, np.full(len(t), np.nan), METHOD_COUNTER, refresh, lo, hi, pw)
    starts = np.arange(1.0, 25.0, 0.37)
    for length_s, tolerance in ((0.1, 0.5), (0.3, 0.5), (1.0, 0.2), (4.0, 0.05)):
        got = window_power(ch, starts, starts + length_s)
        # never 0 W (a window between a stale repeat and the next change read 0 W before); long
        # windows within the edges' timing error: each edge's value lags its refresh by < 0.23 s
        assert np.all(np.abs(got.mean - watts) <= tolerance * watts), (length_s, got.mean.min())
    long = window_power(ch, np.array([2.0]), np.array([27.0])).mean[0]
    assert long == pytest.approx(watts, rel=2 * read / 25.0)


def test_a_counter_restarting_at_zero_after_a_reopen_is_two_stretches():
    t = np.arange(0.0, 10.01, 1.0)
    e = np.concatenate((np.arange(6) * 50.0, np.arange(5) * 70.0))  # 50 W, reopened at t=6, then 70 W
    breaks = segment_breaks(t, np.array([5.5]))  # the meter's fault record between the two stretches
    lo, hi, pw = counter_spans(t, e, breaks)
    assert list(pw) == [50.0] * 5 + [70.0] * 4  # no span across the restart
    assert list(lo) == [0, 1, 2, 3, 4, 6, 7, 8, 9]
    ch = ChannelReadings(t, np.full(len(t), np.nan), METHOD_COUNTER, 1.0, lo, hi, pw)
    # a window over the restart: 1 s at 50 W, the unknown second (5, 6) left out, 1 s at 70 W
    assert window_power(ch, np.array([4.0]), np.array([7.0])).mean[0] == pytest.approx(60.0)


def test_averaging_readings_are_weighted_by_their_overlap_with_the_window():
    # readings at 1, 2, 3, 4 s each averaging the second before (the first: one sample interval)
    t = np.array([1.0, 2.0, 3.0, 4.0])
    p = np.array([10.0, 20.0, 30.0, 40.0])
    lo, hi, pw = average_spans(t, p, "previous", 0.0, 1.0, segment_breaks(t, Z))
    assert list(lo) == [0.0, 1.0, 2.0, 3.0]
    mean, covered = span_means(lo, hi, pw, np.array([1.5, 0.5]), np.array([3.25, 0.75]))
    # [1.5, 3.25]: 0.5 s of the 20 W reading, 1 s of the 30 W one, 0.25 s of the 40 W one
    assert mean[0] == pytest.approx((0.5 * 20 + 1.0 * 30 + 0.25 * 40) / 1.75)
    assert covered == pytest.approx([1.75, 0.25])
    assert mean[1] == pytest.approx(10.0)  # inside the first reading's span
    # a fixed 2 s average (NVML power): overlapping spans, each weighted by its overlap
    lo, hi, pw = average_spans(t, p, "fixed", 2.0, 1.0, segment_breaks(t, Z))
    mean, _ = span_means(lo, hi, pw, np.array([2.5]), np.array([3.5]))
    # spans [-1,1] (10 W) and [0,2] (20 W) miss [2.5, 3.5]; [1,3] (30 W) meets 0.5 s of it, [2,4] (40 W) 1 s
    assert mean[0] == pytest.approx((30 * 0.5 + 40 * 1.0) / 1.5)


def test_an_averaging_meter_read_at_the_end_of_its_interval_is_not_half_an_interval_early():
    # a step from 40 to 120 W at t = 5.0 s; the meter reports the mean of the 1 s before each stamp
    t = np.arange(1.0, 11.0, 1.0) + 0.5  # stamps 1.5, 2.5, ...: the step falls inside (4.5, 5.5]
    p = np.where(t <= 4.5, 40.0, np.where(t <= 5.5, 80.0, 120.0))
    lo, hi, pw = average_spans(t, p, "previous", 0.0, 1.0, segment_breaks(t, Z))
    ch = ChannelReadings(t, p, METHOD_AVERAGE, 1.0, lo, hi, pw)
    got = window_power(ch, np.array([2.5, 6.5]), np.array([4.5, 9.5]))
    assert got.mean == pytest.approx([40.0, 120.0])  # whole spans: the exact levels
    # stamps taken as instants would have put 80 W (the step's span) into [5.5, 6.5): check it is not
    assert window_power(ch, np.array([5.5]), np.array([6.5])).mean[0] == pytest.approx(120.0)


def instant(t, p, interval, **kw):
    return ChannelReadings(t, p, METHOD_INSTANT, interval, Z, Z, Z, **kw)


def test_one_sample_windows_have_a_positive_sigma_that_grows_with_the_delay_uncertainty():
    t = np.arange(0.0, 20.0, 1.0)
    p = 100.0 + 5.0 * t  # a ramp: a window's power depends on where the window is
    starts, ends = np.array([4.8, 10.9]), np.array([5.2, 11.1])  # one sample each (5 and 11)
    sigmas = []
    for sigma_delay in (0.0, 0.5, 1.5):
        got = window_power(instant(t, p, 1.0, resolution_w=0.1, sigma_delay_s=sigma_delay), starts, ends)
        assert np.all(got.sigma > 0)
        sigmas.append(got.sigma)
    assert np.all(sigmas[1] > sigmas[0]) and np.all(sigmas[2] > sigmas[1])
    # with no spread nearby the resolution is the floor: 0.1 W / sqrt(12)
    flat = instant(t, np.full(len(t), 60.0), 1.0, resolution_w=0.1)
    assert window_power(flat, starts, ends).sigma == pytest.approx(0.1 / math.sqrt(12))
    # the delay term by hand: shifting [10.9, 11.1] by +-1.5 s takes the samples at 12 and 9 or 10
    d = window_power(instant(t, np.full(len(t), 60.0), 1.0, sigma_delay_s=0.0), starts, ends)
    assert d.sigma == pytest.approx([0.0, 0.0])


def test_sigma_combines_the_terms_in_quadrature():
    t = np.arange(0.0, 20.0, 0.1)
    p = 100.0 + 10.0 * np.sin(t)
    s, e = np.array([5.0]), np.array([8.0])
    spread_only = window_power(instant(t, p, 0.1), s, e).sigma[0]
    inside = p[(t >= 5.0) & (t <= 8.0)]
    assert spread_only == pytest.approx(inside.std())
    up = instant(t, p, 0.1, sigma_delay_s=0.3)
    shifted = [p[(t >= 5.0 + k) & (t <= 8.0 + k)].mean() for k in (0.3, -0.3)]
    delay_term = abs(shifted[0] - shifted[1]) / 2
    both = window_power(instant(t, p, 0.1, sigma_delay_s=0.3, sigma_offset_s=0.3), s, e).sigma[0]
    assert window_power(up, s, e).sigma[0] == pytest.approx(math.hypot(spread_only, delay_term), rel=1e-6)
    assert both == pytest.approx(math.sqrt(spread_only**2 + 2 * delay_term**2), rel=1e-6)


def test_a_repeated_reading_counts_once():
    # a meter updating once a second, polled ten times a second: each value repeats ten times
    t = np.arange(0.0, 10.0, 0.1)
    values = np.array([10.0, 14.0, 10.0, 14.0, 10.0, 14.0, 10.0, 14.0, 10.0, 14.0])
    p = np.repeat(values, 10)
    got = window_power(instant(t, p, 0.1), np.array([0.0]), np.array([3.95]))
    assert got.count[0] == 4  # 10, 14, 10, 14: four readings, not forty
    assert got.sigma[0] == pytest.approx(2.0)


def test_counter_sigma_from_resolution_and_edge_times():
    ch, _ = counter_channel(dt=0.1, resolution_j=0.01)
    s, e = np.array([3.0]), np.array([5.0])
    quiet = window_power(ch, s, e).sigma[0]
    assert quiet == pytest.approx(math.sqrt(2) * 0.01 / math.sqrt(12) / 2.0)
    ch.sigma_delay_s = 0.2
    loud = window_power(ch, s, e).sigma[0]
    # moving both edges by +-0.2 s changes the energy by about (P(e) - P(s)) x 0.2 s
    exact = [float((true_energy(e + k) - true_energy(s + k))[0]) / 2.0 for k in (0.2, -0.2)]
    assert loud == pytest.approx(math.hypot(quiet, abs(exact[0] - exact[1]) / 2), rel=0.05)


def test_a_counter_channel_in_a_run_file_gives_the_exact_integral(tmp_path):
    dt = 0.1
    t = np.arange(0.0, 30.0, dt)
    e = true_energy(t) - true_energy(t[0])
    ch = SynthChannel(
        T0 + t,
        np.full(len(t), np.nan),
        kind="rapl",
        sample_interval_s=dt,
        energy_j=e,
        attrs={"averaging": "previous", "energy_from_counter": True, "energy_resolution_j": 1e-6},
    )
    # power_w is NaN on every sample (dropped as invalid): give it a plausible value instead
    ch.power_w = np.full(len(t), 50.0)
    starts = [[T0 + 5.0], [T0 + 12.3], [T0 + 20.01]]
    trial_s = [[2.0], [0.05], [4.0]]
    path = write_run(tmp_path / "c.h5", [1, 2, 3], [1, 1, 1], trial_s, starts, nodes=[SynthNode([ch])])
    a = analyse_run(load_run(path), "c")
    s = np.array([5.0, 12.3, 20.01])
    d = np.array([2.0, 0.05, 4.0])
    exact = (true_energy(s + d) - true_energy(s)) / d
    assert a.power.job_w == pytest.approx(exact, abs=(2 * (dt * dt / 8) * B * OMEGA) / d.min())
    assert a.power.nodes[0].channels[0].method == METHOD_COUNTER


def test_idle_from_both_baselines_and_the_after_window_ends_one_delay_early(tmp_path):
    # 40 W idle before; the sweep at 100 W from 10 to 20 s; idle again at 44 W; a 2 s meter delay
    delay = 2.0
    t = np.arange(0.0, 30.0, 0.1)
    truth = np.where((t >= 10) & (t < 20), 100.0, np.where(t < 10, 40.0, 44.0))
    stamps = T0 + t + delay  # the meter reports 2 s late
    ch = SynthChannel(stamps, truth, sample_interval_s=0.1, meter_delay_s=delay)
    path = write_run(
        tmp_path / "b.h5",
        [1],
        [1],
        [[9.95]],  # the sweep's window: 10.0 to 19.95 s
        [[T0 + 10.0]],
        nodes=[SynthNode([ch])],
        baseline=(T0 + 5.0, T0 + 9.9),
        baseline_after=(T0 + 20.1, T0 + 30.0 + delay - 0.05),  # sampling stopped when it ended
    )
    a = analyse_run(load_run(path), "b")
    pw = a.power
    assert pw.idle_before_w == pytest.approx(40.0)
    assert pw.idle_after_w == pytest.approx(44.0)
    assert pw.idle_w == pytest.approx(42.0)
    assert pw.idle_sigma_w == pytest.approx(math.sqrt(4.0**2 / 12))
    assert pw.job_w[0] == pytest.approx(100.0)
    assert pw.idle_drift and any("drifted" in n for n in a.notices)
    # the after window ends `delay` early: the node's window is fully covered, not flagged
    assert pw.nodes[0].idle_after.flag[0] == FLAG_OK


def test_combine_idle_and_drift_by_hand():
    assert baselines.combine_idle((40.0, 1.0), (42.0, 1.0)) == pytest.approx((41.0, math.sqrt(0.5 + 4 / 12)))
    assert baselines.combine_idle((40.0, 1.0), (math.nan, math.nan)) == (40.0, 1.0)
    assert baselines.drift_notice((40.0, 1.0), (41.0, 1.0), "r") is None  # 1 W < sqrt(2) W
    assert "drifted" in baselines.drift_notice((40.0, 1.0), (42.0, 1.0), "r")


def test_disturbed_baselines_are_flagged():
    layout = {"host": ["a", "a", "a"], "baseline_cpu_s": np.array([[0.01, 0.0], [2.9, 0.02], [0.02, 0.01]])}
    nodes = [{"host": "a", "baseline_system_busy_fraction": 0.05, "baseline_after_system_busy_fraction": 0.6}]
    notes = baselines.disturbed_notices(layout, nodes, ((0.0, 3.0), (10.0, 13.0)), "r.h5")
    assert len(notes) == 2
    assert "rank 1 on a used 2.9 s of CPU in 3 s (97 % of a core" in notes[0] and "before" in notes[0]
    assert "60 % busy" in notes[1] and "after" in notes[1]


def test_baseline_cpu_is_stored_per_rank_and_format_1_3_files_still_read(tmp_path):
    path = write_run(tmp_path / "v.h5", [1], [1], [[1.0]], [[T0]])
    with h5py.File(path, "r+") as f:
        assert f.attrs["format_version"] == f"{FORMAT_VERSION[0]}.{FORMAT_VERSION[1]}" == "1.11"
        f.attrs["format_version"] = "1.3"
        unseal_all(f)  # a 1.3 file has no attribute checksums
    run = load_run(path)
    assert "baseline_cpu_s" not in run.layout and len(run.pingpong) == 1
    a = analyse_run(run, "v")
    assert a.power is None
    from npmpi.runfile.writer import RunWriter

    w = RunWriter(tmp_path / "w.h5", {}, {"role": ["transmitter", "reflector", "power"]}, 1)
    w.set_baseline_cpu(0, [0.001, 0.002, 0.003])
    w.set_baseline_cpu(1, [0.004, 0.005, 0.006])
    w.finish("complete")
    cpu = load_run(tmp_path / "w.h5").layout["baseline_cpu_s"]
    assert cpu.shape == (3, 2) and cpu[:, 1] == pytest.approx([0.004, 0.005, 0.006])


def test_flag_none_when_no_reading_is_near():
    t = np.arange(0.0, 5.0, 0.1)
    p = np.full(len(t), 10.0)
    lo, hi, pw = average_spans(t, p, "previous", 0.0, 0.1, segment_breaks(t, Z))
    ch = ChannelReadings(t, p, METHOD_AVERAGE, 0.1, lo, hi, pw)
    got = window_power(ch, np.array([50.0]), np.array([51.0]))
    assert got.flag[0] == FLAG_NONE and math.isnan(got.mean[0]) and got.count[0] == 0


def test_an_after_baseline_shorter_than_the_delay_gives_a_notice_not_idle(tmp_path):
    t = np.arange(0.0, 13.0, 0.1)
    ch = SynthChannel(T0 + t + 2.0, np.where(t < 5, 40.0, 90.0), sample_interval_s=0.1)  # 2 s late
    path = write_run(
        tmp_path / "s.h5",
        [1],
        [1],
        [[4.0]],
        [[T0 + 6.0]],
        nodes=[SynthNode([ch])],
        baseline=(T0 + 1.0, T0 + 4.0),
        baseline_after=(T0 + 10.5, T0 + 11.0),  # 0.5 s: recorded without a calibrated delay
    )
    a = analyse_run(load_run(path), "s", meter_delay_s=2.0)  # analysed with a 2 s delay
    assert a.problems == []
    assert any("not longer than the meter delay" in n for n in a.notices)
    assert a.power.idle_w == pytest.approx(40.0) and math.isnan(a.power.idle_after_w)
