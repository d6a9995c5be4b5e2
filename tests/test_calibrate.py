"""The delay estimator against synthetic meters with known, injected delays."""

from __future__ import annotations

import numpy as np
import pytest

from npmpi.power.delayfit import estimate_delay, make_schedule


def fake_meter(
    schedule, delay_s, interval_s=1.0, idle_w=60.0, load_w=40.0, noise_w=2.0, seed=1, phase_s=0.37
):
    """Samples every interval of the power drawn `delay_s` earlier, plus noise (a lagging meter)."""
    rng = np.random.default_rng(seed)
    t = np.arange(phase_s, schedule.duration_s + 6.0, interval_s)
    w = idle_w + load_w * schedule.level_at(t - delay_s) + rng.normal(0, noise_w, len(t))
    return t, w


def test_schedule_is_random_and_not_periodic():
    s = make_schedule(60, 1.5, 4.0, seed=3)
    lengths = np.diff(s.edges_s)
    assert s.edges_s[0] == 0 and s.duration_s >= 60
    assert set(s.levels.tolist()) == {0.0, 1.0} and s.levels[0] == 0 and s.levels[-1] == 0
    assert np.all(np.abs(np.diff(s.levels)) == 1)  # alternates
    assert lengths[:-1].std() > 0.3  # burst lengths vary: edges fall at every phase of a sample clock
    assert make_schedule(60, 1.5, 4.0, seed=3).edges_s.tolist() == s.edges_s.tolist()  # reproducible
    assert s.level_at(np.array([-1.0, 1e6])).tolist() == [0.0, 0.0]


@pytest.mark.parametrize("true_delay", [0.0, 1.7, 2.0])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_injected_delay_is_found_within_0_15_s(true_delay, seed):
    schedule = make_schedule(60, 1.5, 4.0, seed=seed)
    t, w = fake_meter(schedule, true_delay, seed=seed, phase_s=0.1 * seed)
    est = estimate_delay(t, w, schedule)
    assert est.delay_s is not None, est.reason
    assert abs(est.delay_s - true_delay) < 0.15
    assert abs(est.delay_s - true_delay) <= 2 * est.uncertainty_s  # the stated uncertainty covers it
    assert est.quality > 0.8 and est.samples == len(t)


def test_fast_meter_gives_a_precise_delay():
    schedule = make_schedule(30, 1.0, 2.0, seed=7)
    t, w = fake_meter(schedule, 0.25, interval_s=0.1, noise_w=1.0)
    est = estimate_delay(t, w, schedule)
    assert est.delay_s == pytest.approx(0.25, abs=0.05) and est.uncertainty_s < 0.1


def test_meter_that_ignores_the_load_gives_no_delay():
    schedule = make_schedule(60, 1.5, 4.0, seed=4)
    t, w = fake_meter(schedule, 1.0, load_w=0.0)
    est = estimate_delay(t, w, schedule)
    assert est.delay_s is None and est.uncertainty_s is None
    assert "not visible" in est.reason


def test_too_few_samples_and_delay_beyond_the_search():
    schedule = make_schedule(60, 1.5, 4.0, seed=5)
    t, w = fake_meter(schedule, 1.0)
    assert "only 5 samples" in estimate_delay(t[:5], w[:5], schedule).reason
    t, w = fake_meter(schedule, 3.1, noise_w=0.5)
    est = estimate_delay(t, w, schedule, max_delay_s=3.0)
    assert est.delay_s is None and "search limit" in est.reason
