"""The hwmon meter against synthetic /sys/class/hwmon trees.

Permission denial as root: see tests/fakes/sysfs.py (`enforce_denials`).
"""

from __future__ import annotations

import time

import pytest
from fakes.sysfs import FakeHwmon, bounded, enforce_denials, make_fifo

from npmpi.meters import hwmon
from npmpi.meters.base import MeterError, MeterFault, make_meter
from npmpi.meters.hwmon import HwmonMeter


def opened(spec: str) -> HwmonMeter:
    meter = make_meter(spec)
    assert isinstance(meter, HwmonMeter)
    meter.open()
    return meter


def watts(meter: HwmonMeter) -> float:
    (r,) = meter.read(0.0)
    return r.power_w


@pytest.fixture
def tree(tmp_path) -> FakeHwmon:
    t = FakeHwmon(tmp_path)
    t.add("acpitz", temps_mc=(27800,))
    t.add("coretemp", temps_mc=(45000, 44000))
    return t


def test_registry_builds_without_io():
    meter = make_meter("hwmon:/nonexistent,name=x")
    assert isinstance(meter, HwmonMeter)
    assert meter.quantities == ("power_w",) and not meter.streaming


def test_one_input_in_microwatts(tree):
    tree.add("power_meter", power_uw={1: 125_500_000})
    meter = opened(f"hwmon:{tree.root}")
    before = time.time()
    (r,) = meter.read(0.0)
    assert r.power_w == pytest.approx(125.5)
    assert before <= r.time_unix_s <= time.time()
    assert meter.natural_interval_s == 1.0  # no update_interval: the default


def test_channels_are_summed_and_follow_changes(tree):
    dev = tree.add("ina3221", power_uw={1: 1_000_000, 2: 2_500_000, 3: 500_000})
    meter = opened(f"hwmon:{tree.root}")
    assert watts(meter) == pytest.approx(4.0)
    dev.set_power_uw(2, 10_000_000)
    assert watts(meter) == pytest.approx(11.5)


def test_acpi_power_meter_average_and_its_interval(tree):
    tree.add("power_meter", average_uw={1: 312_000_000}, average_interval_ms=2000)
    meter = opened(f"hwmon:{tree.root}")
    assert watts(meter) == pytest.approx(312.0)
    assert meter.natural_interval_s == 2.0
    assert meter.describe()["natural_interval_s"] == 2.0


def test_update_interval_sets_the_natural_interval(tree):
    tree.add("power_meter", power_uw={1: 5_000_000}, update_interval_ms=250)
    assert opened(f"hwmon:{tree.root}").natural_interval_s == 0.25


def test_use_average_prefers_average(tree):
    tree.add("amdgpu", power_uw={1: 90_000_000}, average_uw={1: 80_000_000})
    assert watts(opened(f"hwmon:{tree.root}")) == pytest.approx(90.0)
    assert watts(opened(f"hwmon:{tree.root},use=average")) == pytest.approx(80.0)


def test_legacy_attributes_in_device_directory(tree):
    tree.add("power_meter", average_uw={1: 200_000_000}, legacy=True)
    meter = opened(f"hwmon:{tree.root}")
    assert watts(meter) == pytest.approx(200.0)
    assert meter.describe()["files"] == [str(tree.root / "hwmon2" / "device" / "power1_average")]


def test_several_devices_need_a_name(tree):
    tree.add("power_meter", average_uw={1: 300_000_000})
    tree.add("amdgpu", average_uw={1: 45_000_000})
    with pytest.raises(MeterError) as info:
        opened(f"hwmon:{tree.root}")
    text = str(info.value)
    assert "hwmon2 (power_meter: power1_average)" in text and "hwmon3 (amdgpu: power1_average)" in text
    assert "name=" in text
    assert watts(opened(f"hwmon:{tree.root},name=amdgpu")) == pytest.approx(45.0)


def test_same_name_on_two_devices_is_summed(tree):
    tree.add("power_meter", average_uw={1: 100_000_000})
    tree.add("power_meter", average_uw={1: 150_000_000})
    assert watts(opened(f"hwmon:{tree.root},name=power_meter")) == pytest.approx(250.0)


def test_no_power_files_lists_what_was_found(tree):
    with pytest.raises(MeterError) as info:
        opened(f"hwmon:{tree.root}")
    text = str(info.value)
    assert "no power sensor" in text
    assert "hwmon0 (acpitz: temp1_input)" in text and "hwmon1 (coretemp: temp1_input, temp2_input)" in text


def test_unknown_name_lists_what_was_found(tree):
    with pytest.raises(MeterError, match=r"no hwmon device named 'nct6775'.*hwmon1 \(coretemp"):
        opened(f"hwmon:{tree.root},name=nct6775")


def test_missing_root_and_bad_use(tmp_path):
    with pytest.raises(MeterError, match="no hwmon directory"):
        opened(f"hwmon:{tmp_path / 'nope'}")
    with pytest.raises(MeterError, match="use="):
        make_meter("hwmon:/x,use=peak")


def test_faults_while_reading(tree):
    dev = tree.add("power_meter", power_uw={1: 5_000_000})
    meter = opened(f"hwmon:{tree.root}")
    dev.set("power1_input", "N/A")
    with pytest.raises(MeterFault, match="cannot read"):
        meter.read(0.0)
    dev.set("power1_input", -5)
    with pytest.raises(MeterFault, match="negative"):
        meter.read(0.0)
    dev.remove("power1_input")
    with pytest.raises(MeterFault, match="disappeared"):
        meter.read(0.0)
    meter.close()
    with pytest.raises(MeterFault, match="not open"):
        meter.read(0.0)


def test_permission_denied_at_open_and_revoked_mid_run(tree, monkeypatch):
    dev = tree.add("power_meter", power_uw={1: 5_000_000})
    enforce_denials(monkeypatch, hwmon, tree)
    tree.deny(dev.path("power1_input"))
    with pytest.raises(MeterError, match=r"permission denied .*power1_input"):
        opened(f"hwmon:{tree.root}")
    tree.allow(dev.path("power1_input"))
    meter = opened(f"hwmon:{tree.root}")
    assert watts(meter) == pytest.approx(5.0)
    tree.deny(dev.path("power1_input"))
    with pytest.raises(MeterFault, match=r"permission .* revoked"):
        meter.read(0.0)
    tree.allow(dev.path("power1_input"))
    meter.close()
    meter.open()  # resumes once readable again
    assert watts(meter) == pytest.approx(5.0)


@pytest.mark.parametrize("use", ["input", "average"])
def test_an_average_file_is_labelled_averaged_over_its_own_interval_whatever_use_says(tree, use):
    """ACPI power_meter's usual layout, power1_average only: read with the default use=input it was
    stored as instant (averaging_s 0); with use=average as averaged over the refresh period (0.25 s
    here), not over power1_average_interval (milliseconds in the hwmon ABI: 2 s)."""
    tree.add("power_meter", average_uw={1: 312_000_000}, average_interval_ms=2000, update_interval_ms=250)
    d = opened(f"hwmon:{tree.root},use={use}").describe()
    assert (d["averaging"], d["averaging_s"]) == ("fixed", 2.0)
    assert d["averaging_s_source"] == "powerM_average_interval"


def test_an_average_file_without_its_interval_is_averaged_over_the_refresh_period_and_says_so(tree):
    tree.add("power_meter", average_uw={1: 312_000_000}, update_interval_ms=500)
    d = opened(f"hwmon:{tree.root}").describe()
    assert (d["averaging"], d["averaging_s"]) == ("fixed", 0.5)
    assert d["averaging_s_source"].startswith("assumed")


def test_input_files_stay_instant(tree):
    tree.add("amdgpu", power_uw={1: 90_000_000}, average_uw={1: 80_000_000}, average_interval_ms=100)
    d = opened(f"hwmon:{tree.root}").describe()
    assert (d["averaging"], d["averaging_s"]) == ("instant", 0.0) and "averaging_s_source" not in d
    assert opened(f"hwmon:{tree.root},use=average").describe()["averaging_s"] == 0.1


def test_fifos_are_never_waited_on(tmp_path):
    """A FIFO as a device's name: the device is named '?' and, chosen by name=, not found; a FIFO in a
    power file's place mid-run is a fault, and the file back makes the meter read again."""
    t = FakeHwmon(tmp_path)
    device = t.add("power_meter", power_uw={1: 12_000_000})
    make_fifo(device.path("name"))
    meter = make_meter(f"hwmon:{t.root}")
    bounded(meter.open, device.path("name"))
    assert watts(meter) == 12.0
    with pytest.raises(
        MeterError, match=r"no hwmon device named 'power_meter' .* found: hwmon0 \(\?: power1_input"
    ):
        bounded(make_meter(f"hwmon:{t.root},name=power_meter").open, device.path("name"))
    make_fifo(device.path("power1_input"))
    with pytest.raises(MeterFault, match=r"power1_input is not a regular file but a FIFO \(named pipe\)"):
        bounded(lambda: meter.read(0.0), device.path("power1_input"))
    device.set_power_uw(1, 13_000_000)
    assert watts(meter) == 13.0
