"""A measuring rank's conditions over one size's trials: read at the start, after each trial and at
the end, never inside a timed loop (the sweep calls `start`, `lap` and `stop` where it reads its CPU
time: npmpi/persize/cputime.py).

Per size, in COND_DATASETS' order (NaN: unknown): the effective core frequency over the trials and its
lowest and highest over single trials (Hz), the core's and its package's thermal throttle events
during the size, and the node's NIC bytes sent and received (npmpi/conditions/nic.py). The frequency
is the rank's own cycles over its running time where the kernel gives a cycles counter
(npmpi/conditions/cycles.py), else cpufreq's scaling_cur_freq of its core sampled at each read,
else unknown with the reason (`cpu_freq_reason`). A read no machine gives (a frequency outside a
core's range, a throttle or byte counter beyond what it can count in the size's time: cpufreq.py,
nic.py) is unknown, its reason in the rank's text (`refused`).
"""

from __future__ import annotations

import itertools
import math
import time

import numpy as np

from npmpi.conditions import cpufreq, cycles, nic
from npmpi.conditions.paths import Root
from npmpi.runfile.format import COND_DATASETS

SOURCE_CPUFREQ = "cpufreq scaling_cur_freq (sampled)"
MAX_REFUSED = 8  # reasons kept per size


class Probe:
    """What one rank reads, found once: its core, its cycles counter or why none, the node's NIC counters."""

    def __init__(self, root: Root | None = None, opener=None) -> None:
        self.root = root or Root()
        self.cpu = cpufreq.pinned_cpu()  # -1: not bound to one core, each read asks where it runs
        found = cycles.open_cycles(self.root) if opener is None else cycles.open_cycles(self.root, *opener)
        self.cycles = found if isinstance(found, cycles.Cycles) else None
        self.no_cycles = found if isinstance(found, str) else ""
        self.counters = nic.find_counters(self.root)
        self.first_settings: dict | None = None

    def core(self) -> int:
        """The rank's core now: its bound one, else where it last ran (-1: not known)."""
        return self.cpu if self.cpu >= 0 else cpufreq.rank_cpu()

    def source(self) -> tuple[str, str]:
        """(source of the frequency, reason when unknown)."""
        if self.cycles is not None:
            return self.cycles.source, ""
        core = self.core()
        if cpufreq.cur_freq_hz(self.root, core) is not None:
            return SOURCE_CPUFREQ, ""
        why = "cpufreq gives no scaling_cur_freq for its core"
        if core < 0:
            why = "the rank's core is not known"
        return "unknown", f"unknown, because {self.no_cycles or 'no cycles counter was opened'} and {why}"


_PROBE: Probe | None = None


def probe() -> Probe:
    """This rank's probe, made at its first size."""
    global _PROBE
    if _PROBE is None:
        _PROBE = Probe()
    return _PROBE


def _read_cycles(p: Probe) -> tuple[int, int] | None:
    if p.cycles is None:
        return None
    try:
        return p.cycles.read()
    except OSError:
        return None


class ConditionSpan:
    """Start before the first trial, `lap()` after each, `stop()` after the last lap."""

    def __init__(self, p: Probe | None = None) -> None:
        self.p = p if p is not None else probe()
        self.cpu0 = self.p.core()
        if self.p.first_settings is None:
            self.p.first_settings = cpufreq.settings(self.p.root, self.cpu0)
        self.throttle0 = cpufreq.throttle_counts(self.p.root, self.cpu0)
        self.nic0 = nic.read_all(self.p.root, self.p.counters)
        self.refused: list[str] = []
        self.freq_refused = ""  # the first frequency refused
        self.t0 = time.monotonic()
        self.marks = [_read_cycles(self.p)]
        self.sampled = [self._cur_freq(self.cpu0)]

    def _refuse(self, why: str, freq: bool = False) -> None:
        if freq and why and not self.freq_refused:
            self.freq_refused = why
        if why and why not in self.refused and len(self.refused) < MAX_REFUSED:
            self.refused.append(why)

    def _cur_freq(self, cpu: int) -> float | None:
        hz, why = cpufreq.read_cur_freq(self.p.root, cpu)
        self._refuse(why, freq=True)
        return hz

    def lap(self, value=None):
        """A read between two trials (returns `value`, so it wraps a trial's result)."""
        if self.p.cycles is not None:
            self.marks.append(_read_cycles(self.p))
        else:
            self.sampled.append(self._cur_freq(self.p.core()))  # an unbound rank moves
        return value

    def _bounded(self, hz: float) -> float:
        """A cycles counter's frequency, NaN (said) above any core's: user-mode cycles over running
        time may be far below the core's clock, so only the upper bound applies."""
        if math.isfinite(hz) and hz > cpufreq.FREQ_MAX_HZ:
            self._refuse(cpufreq.freq_refused(hz, self.p.cycles.source if self.p.cycles else "cycles"), True)
            return math.nan
        return hz

    def _frequency(self) -> tuple[float, float, float]:
        if self.p.cycles is not None:
            marks = self.marks
            if any(m is None for m in marks) or len(marks) < 2:
                return math.nan, math.nan, math.nan
            spans = [(b[0] - a[0], b[1] - a[1]) for a, b in itertools.pairwise(marks)]
            per = [self._bounded(c / t * 1e9) for c, t in spans if t > 0 and c >= 0]
            per = [f for f in per if math.isfinite(f)]
            c_all, t_all = marks[-1][0] - marks[0][0], marks[-1][1] - marks[0][1]  # type: ignore[index]
            mean = self._bounded(c_all / t_all * 1e9) if t_all > 0 and c_all >= 0 else math.nan
            return mean, min(per, default=math.nan), max(per, default=math.nan)
        known = [f for f in self.sampled if f is not None]
        if not known:
            return math.nan, math.nan, math.nan
        return float(np.mean(known)), min(known), max(known)

    def stop(self) -> tuple[np.ndarray, dict]:
        """(COND_DATASETS' values, the rank's text: core, source, reason, counters, settings). The
        last trial's lap ends the last span: a read here would add a span of no trial (the code
        between the lap and this call, mostly kernel time, which user-mode cycles do not count) to
        the lowest and highest frequency. Only a span never lapped is ended here."""
        if len(self.marks) < 2 and len(self.sampled) < 2:
            self.lap()
        cpu1 = self.p.core()
        elapsed = time.monotonic() - self.t0
        throttle1 = cpufreq.throttle_counts(self.p.root, cpu1)
        same_core = cpu1 == self.cpu0
        throttled = []
        for a, b, which in zip(self.throttle0, throttle1, ("core", "package"), strict=True):
            why = cpufreq.throttle_refused(a, b, elapsed, f"cpu{cpu1}'s {which}_throttle_count")
            self._refuse(why)
            known = same_core and a is not None and b is not None and b >= a and not why
            throttled.append(float(b - a) if known else math.nan)  # type: ignore[operator]
        why_nic: list[str] = []
        after = nic.read_all(self.p.root, self.p.counters)
        tx, rx = nic.totals(self.p.counters, self.nic0, after, elapsed, why_nic)
        for why in why_nic:
            self._refuse(why)
        values = np.array([*self._frequency(), *throttled, tx, rx], dtype=np.float64)
        assert len(values) == len(COND_DATASETS)
        source, reason = self.p.source()
        if self.freq_refused and (source == "unknown" or not np.isfinite(values[0])):
            source, reason = "unknown", f"unknown, because {self.freq_refused}"
        info = {
            "cpu": cpu1,
            "cpu_freq_source": source,
            "cpu_freq_reason": reason,
            "nic_counters": sorted({f"{c.name}" for c in self.p.counters}),
            "settings_before": self.p.first_settings,
            "settings_after": cpufreq.settings(self.p.root, cpu1),
        }
        if self.refused:
            info["refused"] = list(self.refused)
        return values, info
