"""The `perf` meter: the sysfs PMU description (fake trees), the real perf_event_open system call on
this kernel, the refusals, and the cross-check against `perf stat` where a host has RAPL."""

from __future__ import annotations

import errno
import os
import shutil
import struct
import subprocess
import threading
import time
from pathlib import Path

import pytest
from fakes.perf_pmu import RAPL_SCALE, rapl_tree, software_clock_tree

from npmpi.meters import perf
from npmpi.meters.base import MeterError, MeterFault, make_meter, parse_meter_spec
from npmpi.meters.perf import PerfMeter

REAL_PMU = Path(perf.DEFAULT_ROOT)


def test_spec_and_unknown_events():
    meter = make_meter("perf")
    assert isinstance(meter, PerfMeter) and meter.domains == ("pkg",)
    assert make_meter("perf:events=pkg+ram").domains == ("pkg", "ram")
    with pytest.raises(MeterError, match="unknown RAPL event 'dram'; choose among pkg, ram, psys"):
        make_meter("perf:events=pkg+dram")


def test_the_kernels_rapl_description_is_read(tmp_path):
    root = rapl_tree(tmp_path / "power", pmu_type=35, cpumask="0,28", domains=("pkg", "ram", "psys"))
    assert perf.read_event(root, "pkg") == perf.PmuEvent("energy-pkg", 35, 0x02, float(RAPL_SCALE), "Joules")
    assert perf.read_event(root, "psys").config == 0x05
    assert perf.parse_cpumask("0,28\n") == [0, 28] and perf.parse_cpumask("0-2,8") == [0, 1, 2, 8]
    (root / "format" / "event").write_text("config:8-15\n")  # a term placed elsewhere in config
    assert perf.read_event(root, "ram").config == 0x0300
    old = rapl_tree(tmp_path / "old", old_kernel=True)
    assert (old / "events" / "energy-pkg").read_bytes() == b"event=0x02"
    assert perf.read_event(old, "pkg") == perf.PmuEvent("energy-pkg", 35, 0x02, float(RAPL_SCALE), "Joules")


def test_one_event_per_domain_and_package_summed_with_its_scale(tmp_path):
    root = rapl_tree(tmp_path / "power", cpumask="0,28", domains=("pkg", "ram"))
    opened: list[tuple[int, int, int]] = []
    counts = {}

    def fake_open(pmu_type, config, cpu):
        r, w = os.pipe()
        opened.append((pmu_type, config, cpu))
        counts[r] = w
        return r

    t = [10.0]
    meter = PerfMeter(parse_meter_spec(f"perf:events=pkg+ram,root={root}"), lambda: t[0], fake_open)
    meter.open()
    assert opened == [(35, 2, 0), (35, 2, 28), (35, 3, 0), (35, 3, 28)]
    one_joule = 2**32  # counts of 2^-32 J

    def publish(per_fd):
        for (fd, _), value in zip(meter._fds, per_fd, strict=True):
            os.write(counts[fd], struct.pack("<Q", value))

    publish([0, 0, 0, 0])
    assert meter.read(0.0) == []
    t[0] += 0.5
    publish([30 * one_joule, 20 * one_joule, 5 * one_joule, 5 * one_joule])
    (r,) = meter.read(0.0)
    assert r.energy_j == pytest.approx(60.0) and r.power_w == pytest.approx(120.0)
    t[0] += 0.5
    publish([30 * one_joule, 20 * one_joule, 5 * one_joule, 4 * one_joule])
    with pytest.raises(MeterFault, match="went back"):
        meter.read(0.0)
    meter.close()
    assert meter.describe()["cpus"] == [0, 28]


def test_real_system_call_counts_a_kernel_counter(tmp_path):
    """The reading path end to end through this kernel: the software cpu-clock event, described under
    the power PMU's names, counts 1e9 ns per second per CPU, so the 'power' is 1 per CPU counted."""
    root = software_clock_tree(tmp_path / "power", cpumask="0,1")
    meter = make_meter(f"perf:root={root}")
    try:
        meter.open()
    except MeterError as exc:  # the call itself is refused (a container's seccomp): say so
        pytest.skip(f"perf_event_open refused here: {exc}")
    assert meter.read(0.0) == []
    time.sleep(0.2)
    (r,) = meter.read(0.0)
    meter.close()
    assert r.power_w == pytest.approx(2.0, rel=0.1)
    assert r.energy_j == pytest.approx(0.4, rel=0.3)


def test_refusal_on_this_machine_names_what_is_missing():
    if REAL_PMU.exists():
        pytest.skip(f"this host has {REAL_PMU}")
    with pytest.raises(MeterError, match=r"no perf power PMU \(/sys/bus/event_source/devices/power\)"):
        make_meter("perf").open()


def test_the_kernel_refusing_an_unknown_pmu(tmp_path):
    root = rapl_tree(tmp_path / "power", pmu_type=12345)
    with pytest.raises(MeterError, match="refused to count power/energy-pkg/ on CPU 0: no PMU of type 12345"):
        make_meter(f"perf:root={root}").open()


def test_permission_refusal_names_the_paranoid_level_and_capability(tmp_path):
    root = rapl_tree(tmp_path / "power")

    def refuse(pmu_type, config, cpu):
        raise OSError(errno.EACCES, "Permission denied")

    meter = PerfMeter(parse_meter_spec(f"perf:root={root}"), open_event=refuse)
    level = perf.paranoid_level()
    with pytest.raises(MeterError) as info:
        meter.open()
    message = str(info.value)
    assert f"(perf_event_paranoid is {level} here)" in message
    assert "perf_event_paranoid <= 0 or CAP_PERFMON" in message and "\n" not in message


def test_missing_event_lists_what_the_pmu_counts(tmp_path):
    root = rapl_tree(tmp_path / "power", domains=("pkg",))
    with pytest.raises(MeterError, match=r"energy-ram is missing \(this PMU counts: energy-pkg\)"):
        make_meter(f"perf:events=ram,root={root}").open()


def test_cross_check_against_perf_stat():
    """Where the host has RAPL and allows system-wide events: the meter's joules over a second agree
    with `perf stat -a -e power/energy-pkg/` over the same second to 5 %."""
    if shutil.which("perf") is None:
        pytest.skip("no perf command on this host")
    if not REAL_PMU.exists():
        pytest.skip(f"no {REAL_PMU} on this host (no RAPL PMU: a virtual machine or a CPU without RAPL)")
    meter = make_meter("perf")
    try:
        meter.open()
    except MeterError as exc:
        pytest.skip(str(exc))
    result = {}

    def stat():
        result["out"] = subprocess.run(
            ["perf", "stat", "-a", "-x,", "-e", "power/energy-pkg/", "sleep", "1"],
            capture_output=True,
            text=True,
            timeout=30,
        ).stderr

    meter.read(0.0)
    worker = threading.Thread(target=stat)
    worker.start()
    worker.join()
    (r,) = meter.read(0.0)
    meter.close()
    joules = float(result["out"].strip().splitlines()[-1].split(",")[0])
    assert r.energy_j == pytest.approx(joules, rel=0.05)
