"""The IPMI meter running a fake `ipmitool` (tests/fakes/bin) that prints the real tool's output."""

from __future__ import annotations

import os
import subprocess
import time

import pytest
from fakes import BIN

from npmpi.meters.base import MeterError, MeterFault, make_meter
from npmpi.meters.ipmi import IpmiMeter, ReadingError, parse_power_reading

# `ipmitool dcmi power reading` on a server, byte for byte (ipmitool 1.8.18)
REAL_OUTPUT = """
    Instantaneous power reading:                   188 Watts
    Minimum during sampling period:                 52 Watts
    Maximum during sampling period:                412 Watts
    Average power reading over sample period:      181 Watts
    IPMI timestamp:                           Thu Mar  7 10:21:03 2024
    Sampling period:                          00000001 Seconds.
    Power reading state is:                   activated

"""


@pytest.fixture
def ipmitool(monkeypatch, tmp_path):
    """The fake ipmitool first on PATH; returns a function setting its behaviour."""
    monkeypatch.setenv("PATH", f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    log = tmp_path / "ipmitool.log"
    monkeypatch.setenv("FAKE_IPMITOOL_LOG", str(log))
    monkeypatch.setenv("FAKE_IPMITOOL_STATE", str(tmp_path / "ipmitool.calls"))

    def configure(watts: str = "220", mode: str = "ok", sleep_s: float = 0.0) -> os.PathLike:
        monkeypatch.setenv("FAKE_IPMITOOL_WATTS", watts)
        monkeypatch.setenv("FAKE_IPMITOOL_MODE", mode)
        monkeypatch.setenv("FAKE_IPMITOOL_SLEEP_S", str(sleep_s))
        return log

    configure()
    return configure


def opened(spec: str = "ipmi") -> IpmiMeter:
    meter = make_meter(spec)
    assert isinstance(meter, IpmiMeter)
    meter.open()
    return meter


def test_parse_real_output():
    assert parse_power_reading(REAL_OUTPUT) == 188.0
    assert parse_power_reading("Instantaneous power reading: 97.5 Watts\n") == 97.5


@pytest.mark.parametrize(
    "text",
    [
        "",
        "  Current Power:                   49 Watts\n",  # another tool's format
        "    Instantaneous power reading:   lots Watts\n",
        REAL_OUTPUT.replace("activated", "deactivated"),
    ],
)
def test_parse_rejects(text):
    with pytest.raises(ReadingError):
        parse_power_reading(text)


def test_registry_and_params():
    meter = make_meter("ipmi:cmd=/opt/ipmitool -I lanplus -H bmc1 -U admin -P secret,timeout=2")
    assert isinstance(meter, IpmiMeter)
    assert meter.argv == ["/opt/ipmitool", "-I", "lanplus", "-H", "bmc1", "-U", "admin", "-P", "secret"]
    assert meter.timeout_s == 2.0 and meter.natural_interval_s == 1.0
    assert "secret" not in meter.description() and "secret" not in str(meter.describe())
    with pytest.raises(MeterError, match="timeout"):
        make_meter("ipmi:timeout=0")


def test_reads_the_instantaneous_power_with_the_exact_arguments(ipmitool):
    log = ipmitool(watts="220,231,219")
    meter = opened()
    before = time.time()
    readings = [meter.read(0.0)[0] for _ in range(3)]
    assert [r.power_w for r in readings] == [231.0, 219.0, 219.0]  # open() took the first value
    assert before <= readings[0].time_unix_s <= time.time()
    assert log.read_text().splitlines() == ["dcmi power reading"] * 4


def test_cmd_with_interface_options(ipmitool):
    log = ipmitool(watts="300")
    meter = opened(f"ipmi:cmd={BIN / 'ipmitool'} -I lanplus -H bmc1 -U admin -E")
    assert meter.read(0.0)[0].power_w == 300.0
    assert log.read_text().splitlines()[-1] == "-I lanplus -H bmc1 -U admin -E dcmi power reading"


def test_missing_ipmitool_says_how_to_install(ipmitool, tmp_path):
    with pytest.raises(MeterError) as info:
        opened(f"ipmi:cmd={tmp_path / 'no-ipmitool'}")
    text = str(info.value)
    assert "apt-get install ipmitool" in text and "/dev/ipmi0" in text and "root" in text


@pytest.mark.parametrize(
    ("mode", "words"),
    [
        ("no-device", "Unable to get DCMI information|Could not open device"),
        ("permission", "modprobe ipmi_devintf"),
        ("unsupported", "Invalid command"),
        ("garbage", "may not support DCMI"),
        ("empty", "no 'Instantaneous power reading'"),
        ("deactivated", "deactivated"),
    ],
)
def test_failures_at_open_are_meter_errors(ipmitool, mode, words):
    ipmitool(mode=mode)
    with pytest.raises(MeterError, match=words):
        opened()


def test_failures_while_running_are_faults_and_reopen_resumes(ipmitool):
    ipmitool(watts="150")
    meter = opened()
    for mode, words in [
        ("permission", "status 1: .*Unable to get DCMI information"),
        ("garbage", "no 'Instantaneous power reading'"),
        ("deactivated", "deactivated"),
    ]:
        ipmitool(watts="150", mode=mode)
        with pytest.raises(MeterFault, match=words):
            meter.read(0.0)
    meter.close()
    with pytest.raises(MeterFault, match="not open"):
        meter.read(0.0)
    ipmitool(watts="155")
    meter.open()
    assert meter.read(0.0)[0].power_w == 155.0


def test_slow_bmc_times_out(ipmitool):
    ipmitool(watts="150")
    meter = opened("ipmi:timeout=0.5")
    ipmitool(watts="150", sleep_s=3)
    t0 = time.monotonic()
    with pytest.raises(MeterFault, match=r"within 0.5 s"):
        meter.read(0.0)
    assert time.monotonic() - t0 < 2.5
    with pytest.raises(MeterError, match=r"no answer in 0.5 s"):
        opened("ipmi:timeout=0.5")


def test_the_whole_stderr_is_kept_bounded(ipmitool):
    from npmpi.meters.ipmi import MAX_STDERR_CHARS, stderr_text

    ipmitool(mode="no-device")
    with pytest.raises(MeterError) as err:
        opened()
    # the first line (why) and the last (what failed) both reach the user
    assert "Could not open device at /dev/ipmi0" in str(err.value)
    assert "Unable to get DCMI information" in str(err.value)
    long = subprocess.CompletedProcess([], 1, "", "first line\n" + "x" * 5000 + "\nlast line\n")
    text = stderr_text(long)
    assert len(text) < MAX_STDERR_CHARS + 60 and text.startswith("first line") and text.endswith("last line")
