"""The Watts Up? meter against an emulator speaking the real protocol on a pseudo-terminal."""

from __future__ import annotations

import itertools
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import serial
from fakes.wattsup_emulator import HEADER_PACKET, WattsUpEmulator

from npmpi.meters import wattsup
from npmpi.meters.base import MeterError, MeterFault, Reading, make_meter, parse_meter_spec
from npmpi.meters.wattsup import PacketBuffer, WattsUpMeter, parse_header, parse_record

FIELDS = wattsup.DEFAULT_FIELDS
# A record as the meter sends it: 123.4 W, 120.0 V, 1028 mA, 5.6 Wh, then the other 14 fields.
RECORD = b"#d,-,18,1234,1200,1028,56,1,2,3,1300,1210,1100,1000,1190,900,99,100,0,600,1234;"


class Clock:
    """A monotonic clock the test can move forward (the meter's stall detection reads it)."""

    def __init__(self) -> None:
        self.offset_s = 0.0

    def __call__(self) -> float:
        return time.monotonic() + self.offset_s


@pytest.fixture
def emulators():
    made: list[WattsUpEmulator] = []

    def make(trace=100.0, **kw) -> WattsUpEmulator:
        kw.setdefault("time_scale", 0.02)  # a "1 s" record every 20 ms
        emu = WattsUpEmulator(trace, **kw).start()
        made.append(emu)
        return emu

    yield make
    for emu in made:
        emu.close()


@pytest.fixture
def meters():
    opened: list[WattsUpMeter] = []

    def make(spec: str, **kw) -> WattsUpMeter:
        meter = WattsUpMeter(parse_meter_spec(spec), **kw) if kw else make_meter(spec)
        assert isinstance(meter, WattsUpMeter)
        opened.append(meter)
        return meter

    yield make
    for meter in opened:
        meter.close()


def collect(meter: WattsUpMeter, count: int, timeout_s: float = 5.0) -> list[Reading]:
    """The first `count` readings (each read blocks on the port; a late read may bring more)."""
    out: list[Reading] = []
    deadline = time.monotonic() + timeout_s
    while len(out) < count:
        assert time.monotonic() < deadline, f"only {len(out)} of {count} readings in {timeout_s} s"
        out += meter.read(0.5)
    return out[:count]


def wait_received(emu: WattsUpEmulator, expected: bytes, timeout_s: float = 2.0) -> bytes:
    deadline = time.monotonic() + timeout_s
    while bytes(emu.received) != expected and time.monotonic() < deadline:
        time.sleep(0.005)
    return bytes(emu.received)


# --- the protocol, without a device ------------------------------------------------------------


def test_parse_record_hand_computed_values():
    body = RECORD[1:-1].decode()
    values = parse_record(body, FIELDS)
    assert values["W"] == 1234 and values["V"] == 1200 and values["A"] == 1028 and values["WH"] == 56
    assert values["PF"] == 99 and values["VA"] == 1234


def test_parse_record_underscore_is_missing():
    body = "d,-,18,1234,_,_," + ",".join(["0"] * 15)
    values = parse_record(body, FIELDS)
    assert values["W"] == 1234
    assert math.isnan(values["V"]) and math.isnan(values["A"])


@pytest.mark.parametrize(
    "body",
    [
        "d,-,18,1234,1200",  # fewer fields than announced
        "d,-,17," + ",".join(["1"] * 17),  # a count that does not match the header
        "d,-,18,12x4," + ",".join(["1"] * 17),  # not a number
        "d,-,18,nan," + ",".join(["1"] * 17),  # not finite
        "d,-,x," + ",".join(["1"] * 18),
    ],
)
def test_parse_record_rejects_malformed(body):
    with pytest.raises(ValueError):
        parse_record(body, FIELDS)


def test_parse_header():
    assert parse_header(HEADER_PACKET[1:-1].decode()) == FIELDS
    with pytest.raises(ValueError):
        parse_header("h,-,3,W,V")


def test_packet_buffer_split_merged_and_garbage():
    buf = PacketBuffer()
    assert buf.feed(b"\r\n#d,-,18,1") == []
    assert buf.feed(b"2;junk#h,x;") == ["d,-,18,12", "h,x"]
    assert buf.feed(b"#a;#b") == ["a"]
    assert buf.feed(b";") == ["b"]
    assert buf.dropped_bytes == len(b"\r\n") + len(b"junk")


def test_packet_buffer_drops_a_packet_cut_by_a_new_one():
    buf = PacketBuffer()
    assert buf.feed(b"#d,-,18,1,2#v,1;") == ["v,1"]
    assert buf.dropped_bytes == len(b"#d,-,18,1,2")


def test_packet_buffer_drops_an_endless_packet():
    buf = PacketBuffer(max_packet_bytes=16)
    assert buf.feed(b"#" + b"x" * 40) == []
    assert buf.feed(b";#ok;") == ["ok"]


def test_spec_validation_and_registry():
    meter = make_meter("wattsup:/dev/ttyUSB3,baud=19200,interval=2")
    assert isinstance(meter, WattsUpMeter)
    assert (meter.device, meter.baud, meter.interval_s) == ("/dev/ttyUSB3", 19200, 2)
    assert meter.describe()["natural_interval_s"] == 2.0
    assert meter.streaming
    for bad in ("interval=0.5", "interval=1.5", "baud=-3", "baud=fast"):
        with pytest.raises(MeterError):
            make_meter(f"wattsup:/dev/ttyUSB0,{bad}")


# --- a real pty through pyserial ------------------------------------------------------------------


def test_open_and_close_send_the_exact_commands(emulators, meters):
    emu = emulators()
    meter = meters(f"wattsup:{emu.path}")
    meter.open()
    assert wait_received(emu, b"#H,R,0;#V,R,0;#L,W,3,E,,1;") == b"#H,R,0;#V,R,0;#L,W,3,E,,1;"
    meter.close()
    assert wait_received(emu, b"#H,R,0;#V,R,0;#L,W,3,E,,1;#L,R,0;").endswith(b"#L,R,0;")
    assert emu.commands == ["H,R,0", "V,R,0", "L,W,3,E,,1", "L,R,0"]


def test_interval_goes_into_the_start_command(emulators, meters):
    emu = emulators()
    meters(f"wattsup:{emu.path},interval=3").open()
    assert wait_received(emu, b"#H,R,0;#V,R,0;#L,W,3,E,,3;").endswith(b"#L,W,3,E,,3;")
    assert emu.interval_s == 3


def test_injected_record_gives_hand_computed_reading(emulators, meters):
    emu = emulators(stall_after=0)  # stalled from the start: only injected records arrive
    meter = meters(f"wattsup:{emu.path}")
    meter.open()
    before = time.time()
    emu.inject(RECORD)
    (r,) = collect(meter, 1)
    after = time.time()
    assert r.power_w == pytest.approx(123.4)
    assert r.volts == pytest.approx(120.0)
    assert r.amps == pytest.approx(1.028)
    assert r.energy_j == 0.0  # the first watt-hour value is the zero of energy
    assert before <= r.time_unix_s <= after  # stamped on the host at receipt


def test_streamed_trace_values(emulators, meters):
    emu = emulators([123.4, 150.0, 99.9], volts=230.0)
    meter = meters(f"wattsup:{emu.path}")
    meter.open()
    readings = collect(meter, 4)
    assert [r.power_w for r in readings] == pytest.approx([123.4, 150.0, 99.9, 99.9])
    assert all(r.volts == pytest.approx(230.0) for r in readings)
    # amps: mA rounded by the meter, W / V
    assert [r.amps for r in readings] == pytest.approx([0.537, 0.652, 0.434, 0.434])
    stamps = [r.time_unix_s for r in readings]
    assert stamps == sorted(stamps)


def test_energy_from_watt_hours(emulators, meters):
    # 360 W for one second is 0.1 Wh: the counter's tenths step once per record, 360 J each
    emu = emulators(360.0)
    meter = meters(f"wattsup:{emu.path}")
    meter.open()
    readings = collect(meter, 4)
    assert [r.energy_j for r in readings] == pytest.approx([0.0, 360.0, 720.0, 1080.0])


def test_records_split_across_writes(emulators, meters):
    emu = emulators([111.1, 222.2], split_bytes=3)
    meter = meters(f"wattsup:{emu.path}")
    meter.open()
    readings = collect(meter, 3)
    assert [r.power_w for r in readings] == pytest.approx([111.1, 222.2, 222.2])


def test_several_records_in_one_write(emulators, meters):
    emu = emulators([10.0, 20.0, 30.0, 40.0, 50.0, 60.0], merge=3)
    meter = meters(f"wattsup:{emu.path}")
    meter.open()
    readings = collect(meter, 6)
    assert [r.power_w for r in readings] == pytest.approx([10.0, 20.0, 30.0, 40.0, 50.0, 60.0])
    spaced = [r.time_spaced_unix_s for r in readings]
    assert all(b > a for a, b in itertools.pairwise(spaced))  # spaced, not equal
    received = [r.time_unix_s for r in readings]
    assert received == sorted(received)
    # three records per write: each group shares its time of receipt; its newest is stamped then
    assert received[0] == received[1] == received[2] and received[3] == received[4] == received[5]
    assert spaced[2] == received[2] and spaced[5] == received[5]
    assert all(spaced[k] < received[k] for k in (0, 1, 3, 4))  # the older ones earlier
    assert meter.counters() == {"packets_good": 6, "packets_malformed": 0, "bytes_dropped": 0}


def test_garbage_between_packets_is_ignored(emulators, meters):
    emu = emulators([75.5, 80.0], garbage=b"\r\n\x00\xffnoise ,;,")
    meter = meters(f"wattsup:{emu.path}")
    meter.open()
    readings = collect(meter, 2)
    assert [r.power_w for r in readings] == pytest.approx([75.5, 80.0])


def test_unselected_fields_are_nan(emulators, meters):
    emu = emulators(42.0, unselected={"V", "A", "WH"})
    meter = meters(f"wattsup:{emu.path}")
    meter.open()
    (r,) = collect(meter, 1)[:1]
    assert r.power_w == pytest.approx(42.0)
    assert math.isnan(r.volts) and math.isnan(r.amps) and math.isnan(r.energy_j)


def test_watt_hours_going_back_is_a_fault(emulators, meters):
    emu = emulators(stall_after=0)
    meter = meters(f"wattsup:{emu.path}")
    meter.open()
    emu.inject(RECORD)
    collect(meter, 1)
    emu.inject(RECORD.replace(b",56,", b",12,"))
    with pytest.raises(MeterFault, match=r"watt-hour counter .* went back"):
        collect(meter, 1)


def test_malformed_record_is_a_fault_after_the_good_ones(emulators, meters):
    emu = emulators(stall_after=0)
    meter = meters(f"wattsup:{emu.path}")
    meter.open()
    emu.inject(RECORD + b"#d,-,18,12x4,1,2;")
    first = collect(meter, 1)
    assert first[0].power_w == pytest.approx(123.4)  # the good record is not lost
    with pytest.raises(MeterFault, match=r"garbage .*non-numeric|garbage .*fields"):
        meter.read(0.1)


def test_stall_is_a_fault_after_three_intervals(emulators, meters):
    emu = emulators(50.0)
    clock = Clock()
    meter = meters(f"wattsup:{emu.path}", monotonic=clock)
    meter.open()
    collect(meter, 2)
    emu.stall()
    time.sleep(0.05)
    meter.read(0.0)  # drain what was already on its way
    assert meter.read(0.05) == []  # a quiet moment is not yet a stall
    clock.offset_s += 3.5
    with pytest.raises(MeterFault, match=r"no record .* for 3\.[0-9] s"):
        meter.read(0.05)


def test_wrong_baud_hint_when_only_noise_arrives(emulators, meters):
    emu = emulators(stall_after=0)
    clock = Clock()
    meter = meters(f"wattsup:{emu.path}", monotonic=clock)
    meter.open()
    emu.inject(b"\x13\x88\xfe\x00garbled" * 10)
    time.sleep(0.05)
    meter.read(0.05)
    clock.offset_s += 4
    with pytest.raises(MeterFault, match="not packets: check baud"):
        meter.read(0.05)


def test_read_blocks_on_the_port_without_spinning(emulators, meters):
    emu = emulators(stall_after=0)
    meter = meters(f"wattsup:{emu.path}")
    meter.open()
    wall, cpu = time.monotonic(), time.process_time()
    assert meter.read(0.4) == []
    wall, cpu = time.monotonic() - wall, time.process_time() - cpu
    assert 0.35 <= wall < 1.0
    assert cpu < 0.1, f"read used {cpu:.3f} s of CPU while waiting {wall:.3f} s"


def test_unplug_is_a_fault_and_open_resumes_when_the_device_returns(emulators, meters, tmp_path):
    by_id = tmp_path / "usb-Watts_Up_PRO-if00-port0"  # a stable name, like /dev/serial/by-id
    first = emulators([100.0])
    by_id.symlink_to(first.path)
    meter = meters(f"wattsup:{by_id}")
    meter.open()
    collect(meter, 2)
    first.unplug()
    with pytest.raises(MeterFault, match="disconnected"):
        collect(meter, 1)
    meter.close()
    # the cable is back: a new port behind the same name
    second = emulators([200.0])
    by_id.unlink()
    by_id.symlink_to(second.path)
    meter.open()
    readings = collect(meter, 2)
    assert [r.power_w for r in readings] == pytest.approx([200.0, 200.0])
    assert readings[0].energy_j == 0.0  # energy counts again from the new open


def test_unplug_mid_record(emulators, meters):
    emu = emulators(stall_after=0)
    meter = meters(f"wattsup:{emu.path}")
    meter.open()
    emu.inject(RECORD[:20])
    assert meter.read(0.05) == []  # half a record: nothing yet
    emu.unplug()
    with pytest.raises(MeterFault, match="disconnected"):
        meter.read(0.5)


def test_unplug_after_some_records(emulators, meters):
    emu = emulators([100.0], unplug_after=3)
    meter = meters(f"wattsup:{emu.path}")
    meter.open()
    readings: list[Reading] = []
    with pytest.raises(MeterFault, match="disconnected"):
        while True:
            readings += meter.read(0.5)
    assert len(readings) == 3


def test_no_answer_is_a_meter_error_naming_the_baud(emulators, meters, monkeypatch):
    monkeypatch.setattr(wattsup, "HEADER_TIMEOUT_S", 0.3)
    emu = emulators(answer_header=False)
    meter = meters(f"wattsup:{emu.path},baud=19200")
    t0 = time.monotonic()
    with pytest.raises(MeterError, match=r"no answer .* 19200 baud"):
        meter.open()
    assert time.monotonic() - t0 < 1.5


def test_missing_device_is_a_meter_error(meters, tmp_path):
    with pytest.raises(MeterError, match="no such device"):
        meters(f"wattsup:{tmp_path / 'ttyUSB9'}").open()


def test_default_device_none_found(meters, monkeypatch, tmp_path):
    monkeypatch.setattr(wattsup, "DEVICE_GLOB", str(tmp_path / "ttyUSB*"))
    with pytest.raises(MeterError, match=r"no device given and no .*ttyUSB\* found"):
        meters("wattsup").open()


def test_default_device_is_the_first_ttyusb(emulators, meters, monkeypatch, tmp_path):
    emu = emulators([55.0])
    (tmp_path / "ttyUSB0").symlink_to(emu.path)
    (tmp_path / "ttyUSB10").symlink_to("/nonexistent")
    monkeypatch.setattr(wattsup, "DEVICE_GLOB", str(tmp_path / "ttyUSB*"))
    meter = meters("wattsup")
    meter.open()
    assert meter.device == str(tmp_path / "ttyUSB0")
    assert collect(meter, 1)[0].power_w == pytest.approx(55.0)


def test_already_open_port_is_used_and_left_open(emulators, meters):
    emu = emulators([66.6])
    port = serial.Serial(emu.path, 115200, timeout=0)
    try:
        meter = meters("wattsup", port=port)
        meter.open()
        assert collect(meter, 1)[0].power_w == pytest.approx(66.6)
        assert meter.describe()["device"] == emu.path
        meter.close()
        assert port.is_open  # the caller's port: the meter does not close it
    finally:
        port.close()


def test_exclusive_port(emulators, meters):
    emu = emulators()
    meters(f"wattsup:{emu.path}").open()
    with pytest.raises(MeterError, match="in use"):
        meters(f"wattsup:{emu.path}").open()


def test_emulator_as_a_separate_process(meters, tmp_path):
    script = Path(__file__).resolve().parent / "fakes" / "wattsup_emulator.py"
    proc = subprocess.Popen(
        [sys.executable, str(script), "--trace", "100,200,300", "--time-scale", "0.02", "--duration", "20"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        path = proc.stdout.readline().strip()
        assert path.startswith("/dev/pts/") and os.path.exists(path)
        meter = meters(f"wattsup:{path}")
        meter.open()
        assert [r.power_w for r in collect(meter, 3)] == pytest.approx([100.0, 200.0, 300.0])
        meter.close()
    finally:
        proc.terminate()
        assert proc.wait(timeout=5) == 0
        proc.stdout.close()
