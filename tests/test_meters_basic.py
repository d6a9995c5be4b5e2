"""The registry, spec parsing, and the `estimate` and `replay` meters against files they read."""

from __future__ import annotations

import time

import numpy as np
import pytest

from npmpi.meters import (
    LABEL_ESTIMATED,
    LABEL_SIMULATED,
    MeterError,
    MeterFault,
    known_meters,
    make_meter,
    parse_meter_spec,
)


def test_spec_parsing():
    s = parse_meter_spec("wattsup:/dev/ttyUSB0,baud=19200")
    assert (s.kind, s.target, s.params) == ("wattsup", "/dev/ttyUSB0", {"baud": "19200"})
    s = parse_meter_spec("estimate:idle_w=40,max_w=120")
    assert s.target is None and s.number("idle_w", 0) == 40.0
    assert parse_meter_spec("RAPL").kind == "rapl"


@pytest.mark.parametrize(
    "text,fragment",
    [
        ("", "empty"),
        (
            "geiger",
            "unknown meter 'geiger'; known meters: auto, cray, estimate, hwmon, ipmi, nvml, perf, rapl, "
            "redfish, rep",
        ),
        ("replay:a.csv,b.csv", "more than one positional"),
    ],
)
def test_bad_specs(text, fragment):
    with pytest.raises(MeterError) as e:
        parse_meter_spec(text)
    assert fragment in str(e.value)


def test_every_documented_meter_is_registered():
    assert known_meters() == [
        "auto",
        "cray",
        "estimate",
        "hwmon",
        "ipmi",
        "nvml",
        "perf",
        "rapl",
        "redfish",
        "replay",
        "snmp",
        "wattsup",
    ]


def write_stat(path, busy, idle):
    # user nice system idle iowait irq softirq steal guest guest_nice
    path.write_text(f"cpu  {busy} 0 0 {idle} 0 0 0 0 0 0\ncpu0 1 2 3 4\n")


def test_estimate_hand_computed(tmp_path):
    stat = tmp_path / "stat"
    write_stat(stat, busy=1000, idle=1000)
    m = make_meter(f"estimate:{stat},idle_w=40,max_w=140")
    assert m.label == LABEL_ESTIMATED and m.describe()["label"] == "estimated"
    m.open()
    write_stat(stat, busy=1075, idle=1025)  # 75 busy of 100 ticks: 75 % load
    (r,) = m.read(0)
    assert r.power_w == pytest.approx(40 + 100 * 0.75)
    assert abs(r.time_unix_s - time.time()) < 5
    assert m.read(0) == []  # no tick elapsed: no new reading
    write_stat(stat, busy=10, idle=10)
    with pytest.raises(MeterFault, match="backwards"):
        m.read(0)


def test_estimate_bad_params(tmp_path):
    with pytest.raises(MeterError, match="idle_w <= max_w"):
        make_meter("estimate:idle_w=200,max_w=100")
    with pytest.raises(MeterError, match="not a number"):
        make_meter("estimate:idle_w=lots")
    with pytest.raises(MeterError, match="cannot read CPU times"):
        make_meter(f"estimate:{tmp_path / 'missing'}").open()


def test_replay_interpolates_and_loops(tmp_path, monkeypatch):
    trace = tmp_path / "t.csv"
    trace.write_text("time_s,power_w\n0,100\n1,200\n2,100\n")
    m = make_meter(f"replay:{trace}")
    assert m.label == LABEL_SIMULATED
    clock = [1000.0]
    monkeypatch.setattr(time, "time", lambda: clock[0])
    m.open()
    assert m.describe()["natural_interval_s"] == 1.0
    for elapsed, watts in [(0.5, 150.0), (1.0, 200.0), (1.5, 150.0), (2.5, 150.0), (3.0, 200.0)]:
        clock[0] = 1000.0 + elapsed
        (r,) = m.read(0)
        assert r.power_w == pytest.approx(watts), elapsed
        assert r.time_unix_s == clock[0]
    m2 = make_meter(f"replay:{trace},loop=0,scale=2")
    m2.open()
    clock[0] += 100
    assert m2.read(0)[0].power_w == pytest.approx(200.0)  # holds the last value, doubled


@pytest.mark.parametrize(
    "content,fragment",
    [
        ("a,b\n1,2\n", "power_w"),
        ("time_s,power_w\n0,1\n", "at least 2 samples"),
        ("time_s,power_w\n0,1\n0,2\n", "increasing"),
        ("time_s,power_w\n0,x\n1,2\n", "non-numeric"),
        ("power_w\n1\n2\n", "no time_s"),
    ],
)
def test_replay_bad_traces(tmp_path, content, fragment):
    trace = tmp_path / "t.csv"
    trace.write_text(content)
    with pytest.raises(MeterError) as e:
        make_meter(f"replay:{trace}").open()
    assert fragment in str(e.value)


def test_replay_needs_an_existing_file(tmp_path):
    with pytest.raises(MeterError, match="needs a file"):
        make_meter("replay").open()
    with pytest.raises(MeterError, match="does not exist"):
        make_meter(f"replay:{tmp_path / 'nope.csv'}").open()


def test_replay_from_a_run_file(tmp_path):
    from npmpi.runfile import RunWriter

    w = RunWriter(tmp_path / "r.h5", {}, {"host": ["a"]}, 1)
    w.create_power({}, [{"host": "a"}], [[{"kind": "estimate", "label": "estimated"}]])
    t = np.array([10.0, 11.0, 12.0])
    w.append_samples(
        0,
        0,
        {
            "time_unix_s": t,
            "power_w": np.array([50.0, 60.0, 70.0]),
            "energy_j": t * np.nan,
            "volts": t * np.nan,
            "amps": t * np.nan,
        },
    )
    w.finish("complete")
    m = make_meter(f"replay:{tmp_path / 'r.h5'},node=0,channel=0")
    m.open()
    assert 50.0 <= m.read(0)[0].power_w <= 70.0
    with pytest.raises(MeterError, match="no power node 3"):
        make_meter(f"replay:{tmp_path / 'r.h5'},node=3").open()
