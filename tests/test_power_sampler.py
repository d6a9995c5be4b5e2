"""The sampling thread: buffering, faults recorded once, resume after the device returns, stalls."""

from __future__ import annotations

import time

import numpy as np
import pytest

from npmpi.meters.base import Meter, MeterError, MeterFault, MeterSpec, Reading, parse_meter_spec
from npmpi.power.sampler import ChannelSampler, node_meter_specs, sample_interval_for


class ScriptedMeter(Meter):
    """Reads follow a script: a number is a reading in watts, 'fault' raises, 'none' returns nothing."""

    kind = "scripted"
    natural_interval_s = 0.01

    def __init__(self, script, reopen_ok=True):
        super().__init__(MeterSpec("scripted", text="scripted"))
        self.script = list(script)
        self.reopen_ok = reopen_ok
        self.opens = 1  # the power rank opened it before sampling starts

    def open(self):
        self.opens += 1
        if self.opens > 1 and not self.reopen_ok:
            raise MeterError("still unplugged")

    def read(self, timeout_s):
        step = self.script.pop(0) if self.script else "none"
        if step == "fault":
            raise MeterFault("device unplugged")
        if step == "none":
            return []
        return [Reading(time.time(), float(step))]


def run_sampler(meter, seconds, interval=0.01):
    s = ChannelSampler(meter, interval, "node 0 (test)")
    s.start()
    time.sleep(seconds)
    s.stop()
    return s.drain()


def test_readings_are_buffered_in_order(capsys):
    buf = run_sampler(ScriptedMeter([1, 2, 3]), 0.1)
    assert [r.power_w for r in buf.readings] == [1.0, 2.0, 3.0]
    times = [r.time_unix_s for r in buf.readings]
    assert times == sorted(times)


def test_fault_is_recorded_and_sampling_resumes(capsys, monkeypatch):
    monkeypatch.setattr("npmpi.power.sampler.REOPEN_AFTER_S", 0.01)
    buf = run_sampler(ScriptedMeter([1, "fault", 2, 3]), 0.3)
    messages = [f.message for f in buf.faults]
    assert any("device unplugged" in m for m in messages)
    assert any("sampling resumed" in m for m in messages)
    assert [r.power_w for r in buf.readings] == [1.0, 2.0, 3.0]
    assert "device unplugged" in capsys.readouterr().err


def test_a_meter_that_stays_away_is_reported_once(monkeypatch):
    monkeypatch.setattr("npmpi.power.sampler.REOPEN_AFTER_S", 0.01)
    buf = run_sampler(ScriptedMeter([1, "fault"], reopen_ok=False), 0.2)
    assert sum("device unplugged" in m for m in (f.message for f in buf.faults)) == 1
    assert not any("resumed" in m for m in (f.message for f in buf.faults))


def test_stall_is_a_fault_reported_once_and_its_end_too():
    buf = run_sampler(ScriptedMeter([1] + ["none"] * 20 + [2]), 0.5)
    messages = [f.message for f in buf.faults]
    # one message when the stall starts (not one per interval), one when readings come back; the
    # script then runs dry, which is a second stall
    assert "stalled" in messages[0] and "resumed after a stall" in messages[1]
    assert all("stalled" in m for m in messages[2:]) and len(messages) <= 3
    assert [r.power_w for r in buf.readings] == [1.0, 2.0]


def test_sample_interval_rules():
    m = ScriptedMeter([])
    assert sample_interval_for(m, None) == pytest.approx(0.01)
    assert sample_interval_for(m, 0.5) == 0.5


def test_per_node_override(monkeypatch):
    monkeypatch.delenv("NPMPI_METERS", raising=False)
    estimate = parse_meter_spec("estimate")
    assert node_meter_specs([estimate]) == [estimate]
    monkeypatch.setenv("NPMPI_METERS", "rapl; replay:x.csv")
    assert [s.text for s in node_meter_specs([estimate])] == ["rapl", "replay:x.csv"]
    monkeypatch.setenv("NPMPI_METERS", "rapl;nosuch")  # the node's own specs: named as such
    with pytest.raises(MeterError, match=r"^NPMPI_METERS nosuch: unknown meter"):
        node_meter_specs([estimate])


def test_repeated_faults_are_printed_once_and_stored_once_with_a_count(capsys, monkeypatch):
    monkeypatch.setattr("npmpi.power.sampler.REOPEN_AFTER_S", 0.01)

    class ResettingMeter(ScriptedMeter):
        """Every read finds the counter reset, with a different value each time."""

        def read(self, timeout_s):
            self.opens += 0
            raise MeterFault(f"the counter went back from {time.monotonic_ns()} to {self.opens} µJ")

    s = ChannelSampler(ResettingMeter([]), 0.005, "node 0 (test)")
    s.start()
    time.sleep(0.3)
    first = s.drain()
    time.sleep(0.2)
    s.stop()
    second = s.drain()
    err = capsys.readouterr().err.splitlines()
    # one line per distinct fault: the reset and the resume that follows every reopening
    assert len(err) == 2, err
    assert "went back" in err[0] and "sampling resumed" in err[1]
    reset = [f for f in first.faults if "went back" in f.message]
    assert len(reset) == 1 and reset[0].count > 10 and reset[0].last_unix_s > reset[0].first_unix_s
    again = [f for f in second.faults if "went back" in f.message]
    # the second batch sends the same record (same id) with its grown count and last time
    assert len(again) == 1 and again[0].fault_id == reset[0].fault_id
    assert again[0].count > reset[0].count and again[0].first_unix_s == reset[0].first_unix_s


def test_heartbeat_ticks_find_a_stopped_sampler():
    from npmpi.runfile.faults import KIND_GAP, Heartbeat

    s = ChannelSampler(ScriptedMeter([1.0] * 1000), 0.01, "node 0 (test)")
    s.start()
    time.sleep(0.2)
    ticks = s.drain().ticks
    s.stop()
    assert len(ticks) >= 10 and float(np.max(np.diff(ticks))) < 0.5
    beat = Heartbeat(0.1, "scripted on node 0")  # a gap is 5 intervals, at least 1 s
    assert beat.observe(ticks) == []
    t0 = ticks[-1]
    later = [t0 + 10.0 + 0.1 * k for k in range(5)]  # the process was stopped for 10 s
    (gap,) = beat.observe(later)
    assert gap.kind == KIND_GAP and gap.first_unix_s == t0 and gap.last_unix_s == later[0]
    assert "did not run for 10.0 s" in gap.message
    (gap,) = beat.observe([later[-1] + 0.1, later[-1] + 3.0])  # within one batch, too
    assert gap.last_unix_s - gap.first_unix_s == pytest.approx(2.9)


def test_what_makes_two_faults_the_same():
    from npmpi.runfile.faults import fault_key

    same = [
        "the counter of intel-rapl:0 (package-0) jumped back from 279931790 to 1748792 µJ (2.547e+06 W)",
        "the counter of intel-rapl:0 (package-0) jumped back from 5 to 17 µJ (-3.1 W)",
    ]
    assert fault_key(same[0]) == fault_key(same[1])
    different = [
        "cannot read /sys/class/powercap/intel-rapl:0/energy_uj",
        "cannot read /sys/class/powercap/intel-rapl:1/energy_uj",
        "Could not open device at /dev/ipmi0",
        "Could not open device at /dev/ipmi1",
        "GPU 0 (NVIDIA H100) is lost",
        "GPU 1 (NVIDIA H100) is lost",
    ]
    assert len({fault_key(m) for m in different}) == len(different)


def test_rank_0_counts_distinct_faults_and_every_occurrence():
    from npmpi.power.rank import PowerCollector
    from npmpi.runfile.faults import FaultRecord, gap_record

    c = PowerCollector(None, [2], [[{"sample_interval_s": 0.1}]])
    c._count_faults(
        0, 0, [FaultRecord(1, 1, 1, "reset", fault_id=0), FaultRecord(1, 2, 3, "gone", fault_id=1)]
    )
    c._count_faults(0, 0, [FaultRecord(1, 5, 40, "reset", fault_id=0), gap_record(6, 16, "x")])
    assert (c.faults_total, c.fault_events_total) == (3, 1 + 3 + 39 + 1)
    c._count_faults(1, 0, [FaultRecord(1, 1, 1, "reset", fault_id=0)])  # another node's fault 0
    assert (c.faults_total, c.fault_events_total) == (4, 45)
