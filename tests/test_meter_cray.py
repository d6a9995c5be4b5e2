"""The `cray` meter against a fake /sys/cray/pm_counters tree (tests/fakes/cray_pm.py)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time

import numpy as np
import pytest
from fakes.cray_pm import FakePmCounters, LiveController, SquareWave
from fakes.sysfs import bounded, make_fifo

from npmpi.meters import cray, sysfs
from npmpi.meters.base import MeterError, MeterFault, make_meter, parse_meter_spec
from npmpi.meters.cray import CrayMeter
from npmpi.power.sampler import ChannelSampler


class Clock:
    def __init__(self) -> None:
        self.t = 500.0

    def __call__(self) -> float:
        return self.t


def spec_text(tree: FakePmCounters, channel: str = "") -> str:
    return f"cray:{channel + ',' if channel else ''}root={tree.root}"


def meter_for(tree: FakePmCounters, clock: Clock, channel: str = "") -> CrayMeter:
    meter = CrayMeter(parse_meter_spec(spec_text(tree, channel)), clock, wall=clock)
    meter.open()
    assert meter.read(0.0) == []
    return meter


def scan(tree: FakePmCounters, clock: Clock, seconds: float, host_seconds: float | None = None) -> None:
    tree.scan(seconds)
    clock.t += seconds if host_seconds is None else host_seconds


def test_spec_builds_without_io_and_refuses_unknown_channels():
    meter = make_meter("cray")
    assert isinstance(meter, CrayMeter) and meter.channel == "node" and meter.energy_file == "energy"
    assert make_meter("cray:accel2").energy_file == "accel2_energy"
    with pytest.raises(MeterError, match="unknown pm_counters channel 'gpu'"):
        make_meter("cray:gpu")
    with pytest.raises(
        MeterError,
        match=re.escape(
            "unknown parameter 'dir' for cray (its value is not shown); known parameters: root, max_w"
        ),
    ):
        parse_meter_spec("cray:dir=/x")


def test_file_formats_are_the_vendors(tmp_path):
    tree = FakePmCounters(tmp_path / "pm")
    assert (tree.root / "energy").read_text() == "12044825101 J 7810213855886 us\n"
    assert (tree.root / "power").read_text() == "620 W 7810213855886 us\n"
    assert (tree.root / "freshness").read_text() == "1235\n"
    assert cray.parse_counter("12044825101 J 7810213855886 us\n", "J", tree.root / "energy") == (
        12044825101,
        7810213855886,
    )
    with pytest.raises(ValueError, match="is in 'W', expected 'J'"):
        cray.parse_counter("620 W 1 us", "J", tree.root / "energy")
    with pytest.raises(ValueError, match="not 'VALUE J TIMESTAMP us'"):
        cray.parse_counter("620 J", "J", tree.root / "energy")


def test_node_power_and_energy_from_the_counter_over_its_own_time_stamps(tmp_path):
    tree = FakePmCounters(tmp_path / "pm")
    clock = Clock()
    meter = meter_for(tree, clock)
    assert meter.natural_interval_s == pytest.approx(0.1) and meter.version == 2
    readings = []
    for _ in range(5):
        # the host's clock runs 30 ms late on each read (scheduling): the controller's stamps are exact
        scan(tree, clock, 0.5, host_seconds=0.53)
        readings.extend(meter.read(0.0))
    assert len(readings) == 5
    # 620 W for 0.5 s is 310 J a scan; the counter's whole joules make each difference 310
    assert [r.power_w for r in readings] == [620.0] * 5
    assert readings[-1].energy_j == 5 * 310.0
    assert meter.host_spans == 0 and meter.counters()["host_clock_spans"] == 0


def test_no_update_since_the_last_read_gives_no_sample(tmp_path):
    tree = FakePmCounters(tmp_path / "pm")
    clock = Clock()
    meter = meter_for(tree, clock)
    clock.t += 0.05  # faster than the controller scans: nothing new
    assert meter.read(0.0) == []
    scan(tree, clock, 0.1)
    (r,) = meter.read(0.0)
    assert r.power_w == pytest.approx(620.0, abs=10.0)  # 62 J in 0.1 s


def test_host_span_when_the_stamp_steps(tmp_path):
    tree = FakePmCounters(tmp_path / "pm")
    clock = Clock()
    meter = meter_for(tree, clock)
    tree.scan(1.0)
    tree.stamp_us -= 900_000  # stamps 0.1 s apart, host 1 s apart: the stamp is not believed
    tree.scan(0.0)
    clock.t += 1.0
    (r,) = meter.read(0.0)
    assert meter.host_spans == 1
    assert r.power_w == pytest.approx(620.0, abs=1.0)  # 620 J over the host's 1 s, not over 0.1 s


def test_freshness_moving_during_a_read_reads_again(tmp_path, monkeypatch):
    tree = FakePmCounters(tmp_path / "pm")
    clock = Clock()
    meter = meter_for(tree, clock)
    original = sysfs.read_text
    interrupted = []

    def update_mid_read(path, max_chars=-1):
        text = original(path, max_chars)
        if path.name == "energy" and not interrupted:
            interrupted.append(True)
            tree.scan(0.1)  # the controller updates between the two reads of freshness
        return text

    monkeypatch.setattr(sysfs, "read_text", update_mid_read)
    clock.t += 0.1
    (r,) = meter.read(0.0)
    assert meter.retries == 1
    assert r.energy_j == 62.0  # the values of the second, consistent snapshot


def test_freshness_that_never_holds_still_is_a_fault(tmp_path, monkeypatch):
    tree = FakePmCounters(tmp_path / "pm")
    clock = Clock()
    meter = meter_for(tree, clock)
    original = sysfs.read_text

    def always_updating(path, max_chars=-1):
        text = original(path, max_chars)
        if path.name == "energy":
            tree.scan(0.1)
        return text

    monkeypatch.setattr(sysfs, "read_text", always_updating)
    with pytest.raises(MeterFault, match="freshness moved during each of 5 reads"):
        meter.read(0.0)
    meter.close()
    with pytest.raises(MeterError, match=r"cannot read .*freshness moved during each of 5 reads"):
        meter.open()  # at open it is a MeterError: the run does not start on a meter that never settles


def test_values_written_before_freshness_moves_are_read_once_it_has(tmp_path):
    tree = FakePmCounters(tmp_path / "pm")
    clock = Clock()
    meter = meter_for(tree, clock)
    tree.scan_values_only(0.1)
    tree.publish()
    clock.t += 0.1
    (r,) = meter.read(0.0)
    assert r.energy_j == 62.0


def test_controller_restart_is_a_fault_and_the_segment_starts_again(tmp_path):
    tree = FakePmCounters(tmp_path / "pm")
    clock = Clock()
    meter = meter_for(tree, clock)
    scan(tree, clock, 1.0)
    assert meter.read(0.0)[0].energy_j == 620.0
    tree.restart_controller()
    scan(tree, clock, 1.0)
    with pytest.raises(MeterFault, match=r"power controller restarted \(.*/startup 1699990000123456 -> "):
        meter.read(0.0)
    meter.close()
    meter.open()
    assert meter.read(0.0) == []  # a new reference on the restarted counter
    scan(tree, clock, 1.0)
    (r,) = meter.read(0.0)
    assert r.energy_j == 620.0 and r.power_w == 620.0  # the new segment's energy, from 0


def test_power_cap_change_is_a_fault(tmp_path):
    tree = FakePmCounters(tmp_path / "pm")
    clock = Clock()
    meter = meter_for(tree, clock)
    tree.change_power_cap(450)
    scan(tree, clock, 0.1)
    with pytest.raises(MeterFault, match=r"a power cap changed \(.*/generation 7 -> 8\)"):
        meter.read(0.0)


def test_counter_going_back_without_a_restart_is_a_fault(tmp_path):
    tree = FakePmCounters(tmp_path / "pm")
    clock = Clock()
    meter = meter_for(tree, clock)
    tree.energy_j["node"] -= 1000
    scan(tree, clock, 0.1)
    with pytest.raises(MeterFault, match=r"went back from 12044825101 to .* no controller restart"):
        meter.read(0.0)


def test_sampler_records_a_restart_once_and_resumes(tmp_path):
    tree = FakePmCounters(tmp_path / "pm")
    meter = CrayMeter(parse_meter_spec(spec_text(tree)))
    meter.open()
    sampler = ChannelSampler(meter, 0.1, "node 0 (test)")
    sampler._sample_once()  # the reference
    tree.scan(0.1)
    sampler._sample_once()
    tree.restart_controller()
    sampler._sample_once()  # the fault: closed, to be reopened
    sampler._sample_once()  # reopened: "meter is back", then the new reference
    tree.scan(0.1)
    sampler._sample_once()
    buf = sampler.drain()
    messages = [f.message for f in buf.faults]
    assert any("power controller restarted" in m for m in messages)
    assert any("meter is back" in m for m in messages)
    assert [r.energy_j for r in buf.readings] == [62.0, 62.0]  # the second segment starts again


def test_parts_are_their_own_channels(tmp_path):
    tree = FakePmCounters(tmp_path / "pm", accels=4)
    clock = Clock()
    cpu = meter_for(tree, clock, "cpu")
    accel = meter_for(tree, clock, "accel3")
    scan(tree, clock, 1.0)
    assert cpu.read(0.0)[0].power_w == 180.0
    assert accel.read(0.0)[0].power_w == 90.0
    assert accel.describe()["energy_file"] == "accel3_energy"


def test_missing_tree_or_channel_says_what_is_there(tmp_path):
    with pytest.raises(MeterError, match="not an HPE Cray EX or XC compute node"):
        make_meter(f"cray:root={tmp_path}/none").open()
    tree = FakePmCounters(tmp_path / "pm", accels=0)
    with pytest.raises(MeterError, match=r"no .*/accel0_energy on this node \(its energy counters: "):
        make_meter(spec_text(tree, "accel0")).open()


def test_garbage_in_a_counter_file_is_refused_at_open(tmp_path):
    tree = FakePmCounters(tmp_path / "pm")
    (tree.root / "energy").write_text("not a counter\n")
    with pytest.raises(MeterError, match="not 'VALUE J TIMESTAMP us'"):
        make_meter(spec_text(tree)).open()


def test_a_fifo_in_the_tree_is_refused_at_open_without_waiting(tmp_path):
    tree = FakePmCounters(tmp_path / "pm")
    make_fifo(tree.root / "freshness")
    meter = make_meter(spec_text(tree))
    with pytest.raises(MeterError, match=r"freshness is not a regular file but a FIFO \(named pipe\)"):
        bounded(meter.open, tree.root / "freshness")


def test_a_fifo_replacing_the_counter_mid_run_is_a_fault_and_sampling_resumes(tmp_path):
    tree = FakePmCounters(tmp_path / "pm")
    meter = CrayMeter(parse_meter_spec(spec_text(tree)))
    meter.open()
    sampler = ChannelSampler(meter, 0.1, "node 0 (test)")
    sampler._sample_once()  # the reference
    tree.scan(0.1)
    sampler._sample_once()
    make_fifo(tree.root / "energy")
    bounded(sampler._sample_once, tree.root / "energy")  # the fault: closed, to be reopened
    tree.scan(0.1)  # a file again
    sampler._sample_once()  # reopened: "meter is back", then the new reference
    tree.scan(0.1)
    sampler._sample_once()
    buf = sampler.drain()
    messages = [f.message for f in buf.faults]
    assert any(re.search(r"energy is not a regular file but a FIFO", m) for m in messages), messages
    assert any("meter is back" in m for m in messages)
    assert [r.energy_j for r in buf.readings] == [62.0, 62.0]


def test_a_stuck_counter_gives_no_sample_and_is_a_fault(tmp_path):
    """The energy counter holds still while freshness and the time stamps move: no 0 W samples, and a
    fault once still for STUCK_AFTER_S (as for rapl); a controller that stops updating altogether too."""
    tree = FakePmCounters(tmp_path / "pm")
    clock = Clock()
    meter = meter_for(tree, clock)
    scan(tree, clock, 0.1)
    assert len(meter.read(0.0)) == 1
    tree.stuck = True
    for _ in range(19):
        scan(tree, clock, 0.1)
        assert meter.read(0.0) == []  # not a sample of 0 W
    scan(tree, clock, 0.2)
    with pytest.raises(MeterFault, match=r"/energy has not moved for 2.1 s while its time stamps advanced"):
        meter.read(0.0)
    meter.close()
    tree.stuck = False
    meter.open()
    assert meter.read(0.0) == []
    clock.t += 2.1  # no update at all: neither the counter nor its stamps move
    with pytest.raises(MeterFault, match=r"has not moved for 2.1 s \(nor have its time stamps\)"):
        meter.read(0.0)


def test_a_still_counter_that_moves_again_gives_the_power_over_the_whole_span(tmp_path):
    tree = FakePmCounters(tmp_path / "pm")
    clock = Clock()
    meter = meter_for(tree, clock)
    tree.stuck = True
    scan(tree, clock, 0.1)
    assert meter.read(0.0) == []
    tree.stuck = False
    scan(tree, clock, 0.1)
    (r,) = meter.read(0.0)
    # the 62 J it gained are spread over the 0.2 s since the reference: 310 W, not 620 W then 0 W
    assert r.power_w == pytest.approx(310.0) and r.energy_j == 62.0


def test_readings_carry_the_controller_s_time_of_their_update_however_late_read(tmp_path, monkeypatch):
    """At open the meter reads the energy file every POLL_S until an update lands, which puts the
    controller's clock on the host's to within a poll; every reading is then stamped with its update's
    time, not with the moment the host read it (here up to 99 ms later, as on a loaded host)."""
    tree = FakePmCounters(tmp_path / "pm")
    clock = Clock()  # the host's clocks; the tree's next update lands at host time 500.05
    updates = [500.05]

    def poll_sleep(seconds: float) -> None:  # the polls at open: the host's time passes, the update lands
        clock.t += seconds
        if clock.t >= updates[-1]:
            clock.t = updates[-1]
            tree.scan(0.1)

    meter = CrayMeter(parse_meter_spec(spec_text(tree)), clock, wall=clock)
    monkeypatch.setattr(cray.time, "sleep", poll_sleep)
    meter.open()
    monkeypatch.undo()
    assert meter.describe()["controller_clock_width_s"] == pytest.approx(cray.POLL_S)
    assert meter.read(0.0) == []  # the reference
    lateness = [0.08, 0.001, 0.099, 0.03, 0.07, 0.0, 0.099, 0.05]
    for late_s in lateness:
        updates.append(updates[-1] + 0.1)
        clock.t = updates[-1]
        tree.scan(0.1)
        clock.t += late_s
        (r,) = meter.read(0.0)
        assert r.time_unix_s == pytest.approx(updates[-1], abs=cray.POLL_S / 2 + 1e-6)
        assert r.reading_time_unix_s == r.time_unix_s
    assert meter.counters()["receipt_stamps"] == 0
    assert meter.describe()["extra_sample_fields"] == ["reading_time_unix_s"]


def test_the_controller_clock_follows_a_drift_and_starts_again_at_a_step():
    clock = cray.ControllerClock()
    clock.observe(100.0, seen_by=1100.001, not_before=1099.999)  # offset 1000 s, to within 1 ms
    assert clock.known and clock.width_s == pytest.approx(0.002)
    # an hour on, the controller's clock has gained 50 ms (14 ppm): the bounds widened and the reads hold it
    clock.observe(3700.05, seen_by=4700.001, not_before=4699.999)
    assert clock.steps == 0 and clock.host_time(3700.05) == pytest.approx(4700.0, abs=1e-3)
    # the host's clock steps 5 s forward (NTP): the map starts again from the reads after it
    clock.observe(3700.15, seen_by=4705.101, not_before=4705.099)
    assert clock.steps == 1 and clock.host_time(3700.15) == pytest.approx(4705.1, abs=1e-3)
    # an update published 3 ms late once: less than a step, the bounds move to it
    clock.observe(3700.25, seen_by=4705.2031, not_before=4705.2029)
    assert clock.steps == 1 and clock.width_s == pytest.approx(0.0, abs=1e-6)


def window_errors(readings, wave: SquareWave, span_s: float = 2.0) -> np.ndarray:
    """The relative error of the energy over every span from a reading to the first one `span_s` or more
    later: the counter's joules between the two against the wave's exact energy between their stamps."""
    t = np.array([r.time_unix_s for r in readings])
    e = np.array([r.energy_j for r in readings])
    out = []
    for i in range(len(t)):
        j = int(np.searchsorted(t, t[i] + span_s))
        if j >= len(t):
            break
        truth = wave.energy_j(t[j]) - wave.energy_j(t[i])
        out.append((e[j] - e[i] - truth) / truth)
    return np.array(out)


@pytest.mark.slow
def test_windows_of_a_live_controller_are_exact_under_load(tmp_path):
    """A controller updating at 10 Hz a square wave of 200 and 400 W, and every core busy: the energy of
    every 2-s window between two readings is the wave's to 1 % (a reading stamped on receipt, as late as
    the loaded host read it, was off by up to 7 %)."""
    live = LiveController(tmp_path / "pm")
    hogs = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2 * (os.cpu_count() or 1))
    ]
    try:
        meter = CrayMeter(parse_meter_spec(f"cray:root={live.root}"))
        meter.open()
        sampler = ChannelSampler(meter, meter.natural_interval_s, "node 0 (test)")
        sampler.start()
        time.sleep(15.0)
        sampler.stop()
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
        live.stop()
    buf = sampler.drain()
    errors = np.abs(window_errors(buf.readings, live.wave))
    assert len(errors) >= 20, len(buf.readings)  # a loaded host reads less often than every update
    summary = (
        f"{np.mean(errors > 0.02):.1%} of {len(errors)} windows off by more than 2 %, max {errors.max():.2%}"
    )
    assert errors.max() < 0.01, summary
    assert meter.counters()["receipt_stamps"] == 0
