"""The RAPL meter against synthetic /sys/class/powercap trees.

Permission denial: mode 0 does not stop root, so when the tests run as root (`os.geteuid() == 0`)
`enforce_denials` also makes the meter's file-reading function raise EACCES for denied files.
"""

from __future__ import annotations

import math

import pytest
from fakes.sysfs import FakePowercap, bounded, enforce_denials, make_fifo

from npmpi.meters import rapl
from npmpi.meters.base import MeterError, MeterFault, make_meter, parse_meter_spec
from npmpi.meters.rapl import RaplMeter

SMALL_RANGE_UJ = 100_000_000  # 100 J: wraps are easy to cause and to count by hand


class Clock:
    """The meter's monotonic clock, moved by the test."""

    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def meter_for(tree: FakePowercap, clock: Clock, extra: str = "") -> RaplMeter:
    meter = RaplMeter(parse_meter_spec(f"rapl:{tree.root}{extra}"), monotonic=clock)
    reopen(meter)
    return meter


def reopen(meter: RaplMeter) -> None:
    """Open, then the first read, which only takes the counters' reference (no power from 0 s)."""
    meter.open()
    assert meter.read(0.0) == []


def step(meter: RaplMeter, clock: Clock, seconds: float):
    clock.t += seconds
    (reading,) = meter.read(0.0)
    return reading


def test_registry_builds_without_io():
    meter = make_meter("rapl:/nonexistent")
    assert isinstance(meter, RaplMeter)
    assert not meter.streaming and meter.natural_interval_s == 0.1
    assert meter.quantities == ("power_w", "energy_j")


def test_power_and_energy_from_one_package(tmp_path):
    tree = FakePowercap(tmp_path)
    clock = Clock()
    meter = meter_for(tree, clock)
    tree.zone("package-0").advance_j(10.0)
    r = step(meter, clock, 0.5)
    assert r.power_w == pytest.approx(20.0)
    assert r.energy_j == pytest.approx(10.0)
    tree.zone("package-0").advance_j(3.0)
    r = step(meter, clock, 0.1)
    assert r.power_w == pytest.approx(30.0)
    assert r.energy_j == pytest.approx(13.0)
    assert math.isnan(r.volts)


def test_sums_packages_not_subzones_nor_mmio(tmp_path):
    tree = FakePowercap(tmp_path, packages=2, dram=True, mmio=True)
    clock = Clock()
    meter = meter_for(tree, clock)
    assert [z.name for z in meter.zones] == ["package-0", "package-1"]
    tree.zone("package-0").advance_j(4.0)
    tree.zone("package-1").advance_j(6.0)
    tree.zone("intel-rapl:0:0").advance_j(3.0)  # core: already inside package-0
    tree.zone("intel-rapl:0:2").advance_j(2.0)  # dram: not asked for
    r = step(meter, clock, 1.0)
    assert r.energy_j == pytest.approx(10.0)
    assert r.power_w == pytest.approx(10.0)


def test_package_plus_dram(tmp_path):
    tree = FakePowercap(tmp_path, packages=2, dram=True)
    clock = Clock()
    meter = meter_for(tree, clock, ",domains=package+dram")
    assert sorted(z.name for z in meter.zones) == ["dram", "dram", "package-0", "package-1"]
    tree.zone("package-0").advance_j(4.0)
    tree.zone("intel-rapl:1:2").advance_j(1.5)  # dram of package 1
    assert step(meter, clock, 0.5).energy_j == pytest.approx(5.5)


def test_psys_alone(tmp_path):
    tree = FakePowercap(tmp_path, psys=True)
    clock = Clock()
    meter = meter_for(tree, clock, ",domains=psys")
    assert [z.name for z in meter.zones] == ["psys"]
    tree.zone("psys").advance_j(7.0)
    tree.zone("package-0").advance_j(5.0)
    assert step(meter, clock, 1.0).energy_j == pytest.approx(7.0)


@pytest.mark.parametrize("domains", ["psys+package", "package+core", "gpu", "+"])
def test_domains_that_count_twice_or_do_not_exist(domains):
    with pytest.raises(MeterError, match=r"domain|psys|core"):
        make_meter(f"rapl:/x,domains={domains}")


def test_one_wrap_is_counted(tmp_path):
    tree = FakePowercap(tmp_path, max_range_uj=SMALL_RANGE_UJ, energy_uj=SMALL_RANGE_UJ - 2_000_000)
    clock = Clock()
    meter = meter_for(tree, clock, ",max_w=100")  # with a 100 J counter, a wrap at most every second
    assert tree.zone("package-0").advance_j(5.0) == 1  # the fake wrapped once: 98 J + 5 J -> 3 J
    assert tree.zone("package-0").energy_uj == 3_000_000
    r = step(meter, clock, 0.1)
    assert r.energy_j == pytest.approx(5.0)
    assert r.power_w == pytest.approx(50.0)


def test_wraps_in_successive_reads_all_count(tmp_path):
    tree = FakePowercap(tmp_path, max_range_uj=SMALL_RANGE_UJ, energy_uj=0)
    clock = Clock()
    meter = meter_for(tree, clock, ",max_w=400")
    wraps = 0
    for _ in range(7):  # 7 x 60 J through a 100 J counter: 4 wraps
        wraps += tree.zone("package-0").advance_j(60.0)
        r = step(meter, clock, 0.2)
    assert wraps == 4
    assert r.energy_j == pytest.approx(420.0)


def test_gap_long_enough_for_several_wraps_is_a_fault(tmp_path):
    # 100 J range at max_w=1000: a wrap can happen every 0.1 s, so after 1 s the count is unknown
    tree = FakePowercap(tmp_path, max_range_uj=SMALL_RANGE_UJ, energy_uj=0)
    clock = Clock()
    meter = meter_for(tree, clock)
    tree.zone("package-0").advance_j(50.0)
    assert step(meter, clock, 0.1).energy_j == pytest.approx(50.0)
    assert tree.zone("package-0").advance_j(250.0) == 3  # wrapped three times
    with pytest.raises(MeterFault, match=r"wrap period .* unknown; read more often"):
        step(meter, clock, 1.0)
    meter.close()
    reopen(meter)  # the power rank reopens: counting starts again, never from a guess
    tree.zone("package-0").advance_j(20.0)
    assert step(meter, clock, 0.1).energy_j == pytest.approx(20.0)


def test_wrap_count_needs_max_w(tmp_path):
    # 50 J -> +70 J in 1 s -> 20 J on a 100 J counter: 70 J, or 170 J after one more wrap
    tree = FakePowercap(tmp_path, max_range_uj=SMALL_RANGE_UJ, energy_uj=50_000_000)
    clock = Clock()
    meter = meter_for(tree, clock, ",max_w=80")  # 170 J in 1 s would be 170 W: only 70 J fits
    tree.zone("package-0").advance_j(70.0)
    r = step(meter, clock, 1.0)
    assert r.energy_j == pytest.approx(70.0)
    assert meter.describe()["shortest_wrap_period_s"] == pytest.approx(100 / 80)
    # the same at max_w=200 is ambiguous: refused rather than guessed
    meter = meter_for(tree, clock, ",max_w=200")
    tree.zone("package-0").advance_j(70.0)
    with pytest.raises(MeterFault, match="unknown"):
        step(meter, clock, 1.0)


def test_reset_is_a_fault_not_a_wrap(tmp_path):
    tree = FakePowercap(tmp_path, max_range_uj=SMALL_RANGE_UJ, energy_uj=50_000_000)
    clock = Clock()
    meter = meter_for(tree, clock)
    tree.zone("package-0").reset(1_000_000)  # 50 J -> 1 J: as a wrap, 51 J in 0.01 s = 5 kW
    with pytest.raises(MeterFault, match=r"jumped back .* counter reset"):
        step(meter, clock, 0.01)


def test_forward_jump_beyond_max_w_is_a_fault(tmp_path):
    tree = FakePowercap(tmp_path)
    clock = Clock()
    meter = meter_for(tree, clock)
    tree.zone("package-0").advance_j(500.0)
    with pytest.raises(MeterFault, match="jumped forward"):
        step(meter, clock, 0.1)


@pytest.mark.parametrize("bad", ["garbage", "0", "-5", None])
def test_unreadable_max_range_never_gives_negative_energy(tmp_path, monkeypatch, bad):
    tree = FakePowercap(tmp_path, max_range_uj=SMALL_RANGE_UJ, energy_uj=SMALL_RANGE_UJ - 1_000_000)
    zone = tree.zone("package-0")
    if bad is None:
        tree.deny(zone.directory / "max_energy_range_uj")
        enforce_denials(monkeypatch, rapl, tree)
    else:
        tree.set_max_range("package-0", bad)
    clock = Clock()
    meter = meter_for(tree, clock)
    assert meter.describe()["max_energy_range_uj"] == [-1]
    zone.advance_j(0.5)  # still below the top: fine
    assert step(meter, clock, 0.1).energy_j == pytest.approx(0.5)
    zone.set_energy_uj(2_000_000)  # the counter wrapped (or was reset): nobody can tell which
    with pytest.raises(MeterFault, match="max_energy_range_uj is unreadable"):
        step(meter, clock, 0.1)


def test_permission_denied_at_open_says_why_and_what_to_do(tmp_path, monkeypatch):
    tree = FakePowercap(tmp_path)
    tree.deny(tree.zone("package-0").energy_file)
    enforce_denials(monkeypatch, rapl, tree)
    with pytest.raises(MeterError) as info:
        meter_for(tree, Clock())
    text = str(info.value)
    assert "permission denied" in text and "CVE-2020-8694" in text
    assert "chmod g+r" in text and "udev" in text


def test_permission_revoked_mid_run_then_restored(tmp_path, monkeypatch):
    tree = FakePowercap(tmp_path)
    clock = Clock()
    meter = meter_for(tree, clock)
    enforce_denials(monkeypatch, rapl, tree)
    tree.zone("package-0").advance_j(1.0)
    step(meter, clock, 0.1)
    tree.deny(tree.zone("package-0").energy_file)
    with pytest.raises(MeterFault, match=r"permission .* revoked"):
        step(meter, clock, 0.1)
    tree.allow(tree.zone("package-0").energy_file)
    meter.close()
    reopen(meter)
    tree.zone("package-0").advance_j(2.0)
    assert step(meter, clock, 0.1).energy_j == pytest.approx(2.0)


def test_vanished_and_garbage_counters_are_faults(tmp_path):
    tree = FakePowercap(tmp_path)
    clock = Clock()
    meter = meter_for(tree, clock)
    tree.zone("package-0").energy_file.write_text("12ab\n")
    with pytest.raises(MeterFault, match="cannot read"):
        step(meter, clock, 0.1)
    tree.zone("package-0").energy_file.unlink()
    with pytest.raises(MeterFault, match="cannot read"):
        step(meter, clock, 0.1)


def test_fifos_are_refused_without_waiting(tmp_path):
    """A FIFO in a counter's place: refused at open and a fault mid-run, never waited on; a FIFO as
    max_energy_range_uj is an unreadable range (wraps are then not counted but refused)."""
    tree = FakePowercap(tmp_path)
    package = tree.zone("package-0")
    make_fifo(package.directory / "max_energy_range_uj")
    clock = Clock()
    meter = RaplMeter(parse_meter_spec(f"rapl:{tree.root}"), monotonic=clock)
    bounded(meter.open, package.directory / "max_energy_range_uj")
    assert meter.zones[0].max_range_uj is None
    assert meter.description().endswith(
        "max_energy_range_uj unreadable in intel-rapl:0: a wrap is refused, not counted"
    )
    assert meter.read(0.0) == []
    make_fifo(package.energy_file)
    with pytest.raises(MeterFault, match=r"energy_uj is not a regular file but a FIFO \(named pipe\)"):
        bounded(lambda: step(meter, clock, 0.1), package.energy_file)
    meter.close()
    with pytest.raises(MeterError, match=r"cannot read .*energy_uj: .* is not a regular file but a FIFO"):
        bounded(meter.open, package.energy_file)
    package.set_energy_uj(5_000_000)  # a file again: the meter opens and counts
    reopen(meter)
    package.advance_j(2.0)
    assert step(meter, clock, 0.1).power_w == pytest.approx(20.0)


def test_stuck_counter_gives_no_sample_then_is_a_fault(tmp_path):
    tree = FakePowercap(tmp_path)
    clock = Clock()
    meter = meter_for(tree, clock)
    for _ in range(15):  # 1.5 s without a change: no fault yet, and no sample (a still counter is not 0 W)
        clock.t += 0.1
        assert meter.read(0.0) == []
    tree.zone("package-0").advance_j(8.0)  # it moves again: the sample spans the 1.6 s since the last one
    r = step(meter, clock, 0.1)
    assert r.power_w == pytest.approx(5.0) and r.energy_j == pytest.approx(8.0)
    for _ in range(19):
        clock.t += 0.1
        assert meter.read(0.0) == []
    clock.t += 0.2
    with pytest.raises(MeterFault, match=r"intel-rapl:0 \(package-0\) has not moved for 2.1 s: .* not 0 W"):
        meter.read(0.0)


def test_no_powercap_and_no_zones(tmp_path):
    with pytest.raises(MeterError, match=r"no powercap directory .*modprobe intel_rapl_msr"):
        RaplMeter(parse_meter_spec(f"rapl:{tmp_path / 'missing'}")).open()
    tree = FakePowercap(tmp_path / "sys")
    with pytest.raises(
        MeterError, match=r"no RAPL zone for domains=psys .* found: intel-rapl:0 \(package-0\)"
    ):
        meter_for(tree, Clock(), ",domains=psys")


def test_reopen_restarts_energy_and_describe(tmp_path):
    tree = FakePowercap(tmp_path, packages=2)
    clock = Clock()
    meter = meter_for(tree, clock)
    tree.zone("package-0").advance_j(5.0)
    tree.zone("package-1").advance_j(5.0)
    assert step(meter, clock, 1.0).energy_j == pytest.approx(10.0)
    meter.close()
    with pytest.raises(MeterFault, match="not open"):
        meter.read(0.0)
    reopen(meter)
    tree.zone("package-1").advance_j(1.0)
    assert step(meter, clock, 1.0).energy_j == pytest.approx(1.0)
    d = meter.describe()
    assert d["zones"] == ["intel-rapl:0 (package-0)", "intel-rapl:1 (package-1)"]
    assert d["shortest_wrap_period_s"] == pytest.approx(262.14332885)
    assert "intel-rapl:0 (package-0)" in meter.description()


# --- resets, reopenings and tiny counters (the meter's own history decides) --------------------

P_W = 50.0  # the injected power
DT_S = 0.1


def steady(meter: RaplMeter, tree: FakePowercap, clock: Clock, steps: int = 10) -> None:
    """Feed P_W for a few intervals: the meter's recent history."""
    for _ in range(steps):
        tree.zone("package-0").advance_j(P_W * DT_S)
        assert step(meter, clock, DT_S).power_w == pytest.approx(P_W, rel=1e-6)


def reset_during_interval(tree: FakePowercap, before_j: float, after_j: float) -> None:
    """Energy before_j reaches the counter, then it resets to 0 and after_j more arrives."""
    zone = tree.zone("package-0")
    zone.advance_j(before_j)
    zone.reset(0)
    zone.advance_j(after_j)


@pytest.mark.parametrize(
    "position_j",
    [
        1.0,  # bottom: as a wrap, ~99 J in 0.1 s
        SMALL_RANGE_UJ / 2e6,  # middle
        SMALL_RANGE_UJ / 1e6 - 8.0,  # top: as a wrap, 8 J + 2.5 J = 105 W, twice the truth
        SMALL_RANGE_UJ / 1e6 - 3.0,  # nearer the top: 55.0 W, the edge of believable
        SMALL_RANGE_UJ / 1e6 - 0.3,  # at the top: indistinguishable from a wrap, and below the truth
    ],
)
@pytest.mark.parametrize("split", [0.0, 0.5, 1.0])  # when in the interval the reset came
def test_reset_anywhere_in_the_range_never_gives_a_high_sample(tmp_path, position_j, split):
    tree = FakePowercap(tmp_path, max_range_uj=SMALL_RANGE_UJ, energy_uj=0, max_power_uw=60_000_000)
    clock = Clock()
    meter = meter_for(tree, clock)
    assert meter.zones[0].bound_w == pytest.approx(180.0)  # three times the constraint's max power
    steady(meter, tree, clock)  # the recent history: 50 W
    tree.zone("package-0").set_energy_uj(round(position_j * 1e6))
    reopen(meter)  # the counter was moved by hand: take it as the reference (the history stays)
    readings = []
    faults = []
    start = tree.zone("package-0").energy_uj
    reset_during_interval(tree, P_W * DT_S * split, P_W * DT_S * (1 - split))
    clock.t += DT_S
    try:
        readings += meter.read(0.0)
    except MeterFault as exc:
        faults.append(str(exc))
        reopen(meter)
    for _ in range(5):  # and sampling goes on at the true power
        tree.zone("package-0").advance_j(P_W * DT_S)
        readings.append(step(meter, clock, DT_S))
    assert all(r.power_w <= 1.1 * P_W for r in readings), [r.power_w for r in readings]
    assert readings[-1].power_w == pytest.approx(P_W)
    end_j = P_W * DT_S * (1 - split)
    backward = end_j * 1e6 < start
    wrap_j = SMALL_RANGE_UJ / 1e6 - start / 1e6 + end_j
    # a reset that leaves the counter higher than before reads low, never high (a lost stretch);
    # one that sends it back and, as a wrap, would read above the truth is refused
    if backward and wrap_j > 1.1 * P_W * DT_S + 1e-9:
        assert len(faults) == 1 and "counter reset, not a wrap" in faults[0], faults


def test_reset_below_the_top_of_a_real_counter_is_refused(tmp_path):
    # the reported case: 300 W steady; a reset 85.4 J below the top of a 262 kJ counter once read
    # as an 854 W sample (the old bound was 1 kW); the meter's own history now refuses it
    tree = FakePowercap(tmp_path, energy_uj=0)
    clock = Clock()
    meter = meter_for(tree, clock)
    zone = tree.zone("package-0")
    zone.set_energy_uj(zone.max_range_uj - 85_400_000 - 30_000_000 * 10)
    reopen(meter)
    for _ in range(10):
        zone.advance_j(30.0)
        assert step(meter, clock, 0.1).power_w == pytest.approx(300.0)
    zone.reset(0)
    with pytest.raises(MeterFault, match=r"854 W, far from its recent readings \(at most 300 W\)"):
        step(meter, clock, 0.1)


def test_single_and_double_wraps(tmp_path):
    tree = FakePowercap(tmp_path, max_range_uj=SMALL_RANGE_UJ, energy_uj=0, max_power_uw=60_000_000)
    clock = Clock()
    meter = meter_for(tree, clock)
    zone = tree.zone("package-0")
    total = 0.0
    wraps = 0
    for _ in range(50):  # 50 x 5 J through a 100 J counter: two single wraps, each counted
        wraps += zone.advance_j(P_W * DT_S)
        total += P_W * DT_S
        r = step(meter, clock, DT_S)
        assert r.power_w == pytest.approx(P_W)
    assert wraps == 2 and r.energy_j == pytest.approx(total)
    # two wraps between reads (reads 2.5 s apart at 80 W): how many is unknown, a fault
    assert zone.advance_j(200.0) == 2
    with pytest.raises(
        MeterFault, match=r"2.5 s since the last read .* shortest wrap period \(556 ms at 180 W"
    ):
        step(meter, clock, 2.5)


def test_reopen_gives_no_zero_and_no_spike(tmp_path):
    tree = FakePowercap(tmp_path)
    clock = Clock()
    meter = meter_for(tree, clock)
    steady(meter, tree, clock, 3)
    meter.close()
    meter.open()
    tree.zone("package-0").advance_j(0.2)  # the counter ticks between open and the first read
    clock.t += 20e-6  # microseconds later: 0.2 J in 20 µs would read as 10 kW
    assert meter.read(0.0) == []  # only the reference
    tree.zone("package-0").advance_j(P_W * DT_S)
    r = step(meter, clock, DT_S)
    assert r.power_w == pytest.approx(P_W) and r.energy_j == pytest.approx(P_W * DT_S)


def test_a_counter_that_wraps_too_often_shortens_the_interval_or_is_refused(tmp_path):
    from npmpi.power.sampler import open_meters, sample_interval_for

    # 10 J at up to 100 W: a wrap every 0.1 s, so a read every 0.05 s at the latest
    tree = FakePowercap(tmp_path / "a", max_range_uj=10_000_000)
    meter = meter_for(tree, Clock(), ",max_w=100")
    assert meter.natural_interval_s == pytest.approx(0.05)
    assert sample_interval_for(meter, None) == pytest.approx(0.05)
    assert sample_interval_for(meter, 1.0) == pytest.approx(0.05)  # --sample-interval 1 is too slow
    assert meter.describe()["max_interval_s"] == pytest.approx(0.05)
    # 1 J at 1 kW: a wrap every millisecond; no power rank keeps that
    tree = FakePowercap(tmp_path / "b", max_range_uj=1_000_000)
    spec = f"rapl:{tree.root}"
    with pytest.raises(MeterError) as err:
        make_meter(spec).open()
    message = str(err.value)
    assert "max_energy_range_uj=1000000" in message and "every 1 ms at 1000 W" in message
    assert "read every 0.5 ms, faster than the 20 ms a power rank can keep" in message
    assert err.value.exit_code == 2
    meters, skipped = open_meters([spec], optional=True)  # --meter-optional: skipped, with the reason
    assert meters == [] and skipped == [message]
