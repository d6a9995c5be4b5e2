"""Clock offsets between a power rank and rank 0 (npmpi/power/clocksync.py): the offset of the exchange
with the smallest round trip, and the offset interpolated between the start and the end of a run
whose clocks drift apart."""

from __future__ import annotations

import numpy as np
import pytest

from npmpi.power.clocksync import ClockOffset, best_offset, interpolate_offset


def test_best_offset_takes_the_smallest_round_trip():
    # remote clock is 5 s ahead; exchange 1 was delayed on the way back (round trip 3 ms)
    t_send = np.array([100.000, 101.000, 102.000])
    t_recv = np.array([100.003, 101.0002, 102.001])
    t_remote = np.array([105.0005, 105.0 + 1.0001, 107.0007])
    off = best_offset(t_send, t_remote, t_recv)
    assert off.round_trip_s == pytest.approx(0.0002)
    assert off.offset_s == pytest.approx(106.0001 - 101.0001)  # remote - midpoint
    assert off.uncertainty_s == pytest.approx(0.0001)
    assert off.measured_unix_s == pytest.approx(101.0001)


def test_interpolated_offset_follows_drift():
    start = ClockOffset(0.010, 1e-5, 2e-5, 1000.0)
    end = ClockOffset(0.020, 1e-5, 2e-5, 2000.0)
    np.testing.assert_allclose(
        interpolate_offset(start, end, np.array([1000.0, 1500.0, 2500.0])), [0.010, 0.015, 0.025]
    )
    np.testing.assert_allclose(interpolate_offset(start, None, np.array([0.0, 5000.0])), [0.010, 0.010])
