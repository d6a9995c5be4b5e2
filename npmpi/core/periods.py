"""How often a device refreshes the value it serves, from the times its value was seen to change.

A meter polled at its own pace (a BMC's Redfish service) serves the same value until the device
refreshes it. The times of the changes give the refresh period, but some refreshes are missed (a
refresh that leaves the value as it was) and, where a change is only seen at the next poll, each
time is late by up to one poll interval. `refresh_period_s` counts the periods between changes
(a spacing of about two periods is two of them) and divides their span by that count.
"""

from __future__ import annotations

import math

import numpy as np

MIN_CHANGES = 3  # two spacings at least
MAX_CHANGES = 100_000  # a meter keeps this many change times at most (an hour at 30 Hz)


def refresh_period_s(times, exact: bool = False) -> float:
    """The refresh period (s) from the ascending times of value changes; NaN with fewer than
    MIN_CHANGES. `exact`: the times are the refreshes' own (a device's ReadingTime), so the shortest
    spacings are single periods; otherwise they are the polls that saw a change, late by up to a
    poll, and the median spacing is taken for one period (fewer than half the refreshes missed)."""
    t = np.asarray(times, dtype=float)
    t = np.unique(t[np.isfinite(t)])
    if len(t) < MIN_CHANGES:
        return math.nan
    d = np.diff(t)
    if exact:
        low = float(np.percentile(d, 10))
        one = float(np.median(d[d <= 1.5 * low]))
    else:
        one = float(np.median(d))
    if not one > 0:
        return math.nan
    periods = float(np.maximum(np.round(d / one), 1.0).sum())
    return float((t[-1] - t[0]) / periods)


def change_times(t, values) -> np.ndarray:
    """The times at which `values` (sampled at `t`) differ from the sample before, NaNs skipped."""
    t = np.asarray(t, dtype=float)
    v = np.asarray(values, dtype=float)
    ok = np.isfinite(t) & np.isfinite(v)
    t, v = t[ok], v[ok]
    if len(v) < 2:
        return np.zeros(0)
    return t[1:][v[1:] != v[:-1]]
