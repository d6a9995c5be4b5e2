"""`wattsup`: a Watts Up? PRO (or .net) power meter on a USB serial port, streaming one record a period.

The meter speaks ASCII packets `#…;`; bytes outside packets are ignored. `#H,R,0;` asks for the
header `#h,-,18,W,V,A,WH,…;` naming the 18 fields of a data record, `#V,R,0;` for the version,
`#L,W,3,E,,<s>;` starts external logging (one `#d,-,18,f1,…,f18;` record every <s> seconds, at
least 1) and `#L,R,0;` stops it. Watts, volts and watt-hours come in tenths, amps in milliamps; a
field the meter is not set to log arrives as `_` (read as NaN). A read from the port may hold part
of a record or several records: bytes are buffered until the closing `;`.

Spec: `wattsup[:DEVICE,baud=115200,interval=1]` (DEVICE defaults to the first /dev/ttyUSB*).
"""

from __future__ import annotations

import contextlib
import glob
import math
import re
import time
from collections.abc import Callable
from typing import Protocol

import serial

from npmpi.meters.base import NAN, Meter, MeterError, MeterFault, MeterSpec, Reading

DEFAULT_BAUD = 115200  # very old units talk at 19200: baud=19200
DEVICE_GLOB = "/dev/ttyUSB*"
HEADER_REQUEST = b"#H,R,0;"
VERSION_REQUEST = b"#V,R,0;"
STOP_LOGGING = b"#L,R,0;"
# What the meter answers to the header request: the names of the 18 fields of a data record.
DEFAULT_HEADER = "#h,-,18,W,V,A,WH,Cost,WH/Mo,Cost/Mo,Wmax,Vmax,Amax,Wmin,Vmin,Amin,PF,DC,PC,Hz,VA;"
MAX_PACKET_BYTES = 512  # a full record is under 150 bytes: longer means a lost `;`
STALL_INTERVALS = 3
HEADER_TIMEOUT_S = 2.0
VERSION_TIMEOUT_S = 1.0


def start_logging_command(interval_s: int) -> bytes:
    """The packet that starts external logging, one record every `interval_s` seconds."""
    return f"#L,W,3,E,,{interval_s};".encode("ascii")


class SerialLike(Protocol):
    """What the meter needs of a port: pyserial's `serial.Serial` or anything that behaves so."""

    timeout: float | None

    def read(self, size: int = 1) -> bytes: ...

    def write(self, data: bytes) -> int | None: ...

    @property
    def in_waiting(self) -> int: ...

    def close(self) -> None: ...


class PacketBuffer:
    """Reassembles `#…;` packets from arbitrary chunks of bytes; bytes outside packets are dropped."""

    def __init__(self, max_packet_bytes: int = MAX_PACKET_BYTES) -> None:
        self.max_packet_bytes = max_packet_bytes
        self.dropped_bytes = 0
        self._partial: bytearray | None = None  # None: between packets

    def feed(self, data: bytes) -> list[str]:
        """The bodies (without `#` and `;`) of the packets completed by `data`."""
        packets: list[str] = []
        i, n = 0, len(data)
        while i < n:
            if self._partial is None:
                start = data.find(b"#", i)
                if start < 0:
                    self.dropped_bytes += n - i
                    break
                self.dropped_bytes += start - i
                self._partial = bytearray()
                i = start + 1
                continue
            end = data.find(b";", i)
            restart = data.find(b"#", i)
            if restart >= 0 and (end < 0 or restart < end):
                # a new packet began before this one ended: the end of this one was lost
                self.dropped_bytes += len(self._partial) + 1 + restart - i
                self._partial = None
                i = restart
                continue
            if end < 0:
                self._partial += data[i:]
                if len(self._partial) > self.max_packet_bytes:
                    self.dropped_bytes += len(self._partial) + 1
                    self._partial = None
                break
            self._partial += data[i:end]
            packets.append(self._partial.decode("ascii", "replace"))
            self._partial = None
            i = end + 1
        return packets


def parse_header(body: str) -> tuple[str, ...]:
    """Field names from a header packet body `h,-,18,W,V,A,…`; ValueError if malformed."""
    parts = body.split(",")
    if len(parts) < 4 or parts[0] != "h" or not parts[2].isdigit() or int(parts[2]) != len(parts) - 3:
        raise ValueError(f"malformed header packet #{body};")
    return tuple(p.strip() for p in parts[3:])


def parse_record(body: str, fields: tuple[str, ...]) -> dict[str, float]:
    """Raw field values of a data packet body `d,-,18,…` by field name (`_` -> NaN); ValueError if bad."""
    parts = body.split(",")
    if len(parts) < 4 or parts[0] != "d" or not parts[2].isdigit():
        raise ValueError(f"malformed data record #{body};")
    count = int(parts[2])
    values = parts[3:]
    if count != len(values) or count != len(fields):
        raise ValueError(f"data record #{body}; has {len(values)} fields, expected {len(fields)}")
    out: dict[str, float] = {}
    for name, text in zip(fields, values, strict=True):
        text = text.strip()
        if text == "_":
            out[name] = NAN
            continue
        try:
            value = float(text)
        except ValueError:
            raise ValueError(f"data record #{body}; has a non-numeric {name} field {text!r}") from None
        if not math.isfinite(value):
            raise ValueError(f"data record #{body}; has a non-finite {name} field {text!r}")
        out[name] = value
    return out


# The fields of a record until the meter's own header has been read.
DEFAULT_FIELDS = parse_header(DEFAULT_HEADER[1:-1])


def _field(values: dict[str, float], name: str) -> float:
    for key, value in values.items():
        if key.lower() == name.lower():
            return value
    return NAN


def _natural_key(path: str) -> list[object]:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", path)]


def default_device() -> str:
    """The first /dev/ttyUSB* (in numeric order), or MeterError saying how to name one."""
    found = sorted(glob.glob(DEVICE_GLOB), key=_natural_key)
    if not found:
        raise MeterError.about(
            "wattsup",
            f"no device given and no {DEVICE_GLOB} found. Plug the Watts Up? in "
            "(its USB serial chip appears as /dev/ttyUSB0; `dmesg | tail` shows the name) or name "
            "the port: wattsup:/dev/ttyUSB0",
        )
    return found[0]


class WattsUpMeter(Meter):
    """A Watts Up? PRO streaming watts, volts, amps and watt-hours over its serial port."""

    kind = "wattsup"
    parameters = ("baud", "interval")  # the key=value parameters its spec accepts
    streaming = True
    natural_interval_s = 1.0
    quantities = ("power_w", "volts", "amps", "energy_j")
    power_resolution_w = 0.1  # watts arrive in tenths; energy_j moves in 360 J steps: not a counter to use

    def __init__(
        self,
        spec: MeterSpec,
        port: SerialLike | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(spec)
        baud = spec.number("baud", DEFAULT_BAUD, hi=4e6)
        if baud <= 0 or baud != int(baud):
            raise MeterError.about(spec.text, "baud must be a positive whole number (115200 or 19200)")
        interval = spec.number("interval", 1.0, hi=3600.0)
        if interval < 1 or interval != int(interval):
            raise MeterError.about(
                spec.text,
                f"interval={interval:g} s: the Watts Up? logs every whole number of seconds, at least 1",
            )
        self.baud = int(baud)
        self.interval_s = int(interval)
        self.natural_interval_s = float(self.interval_s)  # the device's period, not the class default
        self.longest_call_s = HEADER_TIMEOUT_S + VERSION_TIMEOUT_S  # open waits for both
        self.device: str | None = spec.target
        self._given_port = port  # an already-open port belongs to the caller: never closed here
        self._port: SerialLike | None = None
        self._monotonic = monotonic
        self._buffer = PacketBuffer()
        self._dropped_before = 0
        self._packets_good = 0
        self._packets_malformed = 0
        self._fields: tuple[str, ...] = DEFAULT_FIELDS
        self._version: str | None = None
        self._port_timeout: float | None = None
        self._last_record_t = 0.0
        self._last_stamp = 0.0
        self._wh0: float | None = None
        self._last_wh: float | None = None
        self._pending_fault: str | None = None

    # --- opening and closing -------------------------------------------------------------------

    def open(self) -> None:
        self.close()
        if self._given_port is not None:
            self._port = self._given_port
        else:
            if self.device is None:
                self.device = default_device()
            self._port = self._open_serial(self.device)
        where = self._where()
        self._dropped_before += self._buffer.dropped_bytes  # counts last the whole run
        self._buffer = PacketBuffer()
        self._fields = DEFAULT_FIELDS
        self._pending_fault = None
        self._wh0 = self._last_wh = None
        try:
            reset = getattr(self._port, "reset_input_buffer", None)
            if reset is not None:
                reset()  # drop records a previous session left streaming
            self._port.write(HEADER_REQUEST)
            header = self._await_packet("h", HEADER_TIMEOUT_S)
            if header is None:
                raise MeterError.about(
                    self.spec.text,
                    f"no answer from a Watts Up? on {where} at {self.baud} baud "
                    f"within {HEADER_TIMEOUT_S:g} s. Check the cable and that this is the meter's port; "
                    "very old units talk at 19200 baud (baud=19200)",
                )
            try:
                self._fields = parse_header(header)
            except ValueError as exc:
                raise MeterError.about(self.spec.text, f"{exc} from {where}") from None
            self._port.write(VERSION_REQUEST)
            version = self._await_packet("v", VERSION_TIMEOUT_S)  # optional: only for the description
            self._version = ",".join(version.split(",")[3:]) if version else None
            self._port.write(start_logging_command(self.interval_s))
        except (serial.SerialException, OSError) as exc:
            self.close()
            raise MeterError.about(self.spec.text, f"the Watts Up? on {where} failed: {exc}") from None
        except MeterError:
            self.close()
            raise
        self._last_record_t = self._monotonic()
        self._last_stamp = 0.0

    def _open_serial(self, device: str) -> serial.Serial:
        try:
            return serial.Serial(
                port=device,
                baudrate=self.baud,
                bytesize=serial.EIGHTBITS,
                parity=serial.PARITY_NONE,
                stopbits=serial.STOPBITS_ONE,
                timeout=0,
                exclusive=True,  # two readers would each get half the records
            )
        except serial.SerialException as exc:
            text = str(exc)
            if "Permission denied" in text or "Errno 13" in text:
                hint = (
                    "permission denied: add the user to the group that owns the port (usually dialout: "
                    "`sudo usermod -aG dialout $USER`, then log in again)"
                )
            elif "No such file" in text or "Errno 2" in text:
                hint = "no such device: is the meter plugged in? (`ls /dev/ttyUSB*`)"
            elif "lock" in text.lower():
                hint = "the port is in use by another program"
            else:
                hint = text
            raise MeterError.about(self.spec.text, f"cannot open {device}: {hint}") from None

    def _await_packet(self, kind: str, timeout_s: float) -> str | None:
        """The first packet of this kind within the timeout; others (stale records) are skipped."""
        assert self._port is not None
        deadline = self._monotonic() + timeout_s
        while True:
            left = deadline - self._monotonic()
            if left <= 0:
                return None
            for body in self._buffer.feed(self._read_chunk(min(left, 0.2))):
                if body.split(",", 1)[0] == kind:
                    return body

    def close(self) -> None:
        port, self._port = self._port, None
        if port is None:
            return
        with contextlib.suppress(serial.SerialException, OSError):  # already unplugged: nothing to stop
            port.write(STOP_LOGGING)  # leave the meter quiet for the next program
        if port is not self._given_port:
            with contextlib.suppress(serial.SerialException, OSError):
                port.close()
        self._port_timeout = None

    # --- reading -------------------------------------------------------------------------------

    def _read_chunk(self, timeout_s: float) -> bytes:
        """Block at most timeout_s for a first byte, then take whatever else has arrived."""
        assert self._port is not None
        timeout_s = max(0.0, timeout_s)
        if timeout_s != self._port_timeout:  # each change reconfigures the tty: only when needed
            self._port.timeout = timeout_s
            self._port_timeout = timeout_s
        data = self._port.read(1)
        if data:
            waiting = self._port.in_waiting
            if waiting:
                data += self._port.read(waiting)
        return data

    def read(self, timeout_s: float) -> list[Reading]:
        if self._port is None:
            raise MeterFault(f"the Watts Up? on {self._where()} is not open")
        if self._pending_fault is not None:
            message, self._pending_fault = self._pending_fault, None
            raise MeterFault(message)
        deadline = self._monotonic() + max(0.0, timeout_s)
        readings: list[Reading] = []
        while True:
            try:
                data = self._read_chunk(deadline - self._monotonic())
            except (serial.SerialException, OSError) as exc:
                raise MeterFault(f"the Watts Up? on {self._where()} was disconnected ({exc})") from None
            received_at = time.time()
            bodies = [b for b in self._buffer.feed(data) if b.startswith("d,")]
            fault = None
            values: list[dict[str, float]] = []
            for body in bodies:
                try:
                    values.append(parse_record(body, self._fields))
                    self._packets_good += 1
                except ValueError as exc:
                    self._packets_malformed += 1
                    fault = f"garbage from the Watts Up? on {self._where()}: {exc}"
                    break
            if values:
                new, wh_fault = self._to_readings(values, received_at)
                readings += new
                fault = fault or wh_fault
                self._last_record_t = self._monotonic()
            if fault is not None:
                if readings:  # hand over what was good now, report the fault on the next read
                    self._pending_fault = fault
                    return readings
                raise MeterFault(fault)
            if readings or self._monotonic() >= deadline:
                break
        silent_s = self._monotonic() - self._last_record_t
        if not readings and silent_s > STALL_INTERVALS * self.interval_s:
            extra = ""
            if self._buffer.dropped_bytes:
                extra = (
                    f"; {self._buffer.dropped_bytes} bytes arrived that were not packets: check baud= "
                    "(115200, very old units 19200)"
                )
            raise MeterFault(
                f"no record from the Watts Up? on {self._where()} for {silent_s:.1f} s "
                f"(one expected every {self.interval_s} s){extra}"
            )
        return readings

    def _to_readings(
        self, records: list[dict[str, float]], received_at: float
    ) -> tuple[list[Reading], str | None]:
        """Readings for parsed records, and a fault if the watt-hour counter went back."""
        out: list[Reading] = []
        n = len(records)
        for k, values in enumerate(records):
            # Records that arrive together left the meter one interval apart: stamp the newest at
            # receipt and space the others back, never before the previous stamp.
            stamp = received_at  # the spaced time; time_unix_s is always the time of receipt
            if k < n - 1:
                floor = self._last_stamp + (received_at - self._last_stamp) * (k + 1) / n
                stamp = max(received_at - (n - 1 - k) * self.interval_s, floor)
            wh = _field(values, "WH") / 10.0
            energy_j = NAN
            if not math.isnan(wh):
                if self._last_wh is not None and wh < self._last_wh:
                    return out, (
                        f"the watt-hour counter of the Watts Up? on {self._where()} went back from "
                        f"{self._last_wh:.1f} Wh to {wh:.1f} Wh: the meter was reset or lost power"
                    )
                if self._wh0 is None:
                    self._wh0 = wh
                self._last_wh = wh
                energy_j = (wh - self._wh0) * 3600.0
            self._last_stamp = stamp
            out.append(
                Reading(
                    time_unix_s=received_at,
                    time_spaced_unix_s=stamp,
                    power_w=_field(values, "W") / 10.0,
                    energy_j=energy_j,
                    volts=_field(values, "V") / 10.0,
                    amps=_field(values, "A") / 1000.0,
                )
            )
        return out, None

    # --- description ---------------------------------------------------------------------------

    def _where(self) -> str:
        if self._given_port is not None and self.device is None:
            return getattr(self._given_port, "port", None) or "the given port"
        return self.device or DEVICE_GLOB

    def description(self) -> str:
        text = f"Watts Up? on {self._where()} at {self.baud} baud, one record every {self.interval_s} s"
        if self._version:
            text += f" (version record {self._version})"
        return text

    def counters(self) -> dict[str, int]:
        """Records parsed, records refused as malformed, bytes outside packets, since the meter was built."""
        return {
            "packets_good": self._packets_good,
            "packets_malformed": self._packets_malformed,
            "bytes_dropped": self._dropped_before + self._buffer.dropped_bytes,
        }

    def describe(self) -> dict[str, object]:
        d = super().describe()
        d.update(
            {
                # records that arrive together are also given times one interval apart, newest at receipt
                "extra_sample_fields": ["time_spaced_unix_s"],
                **self.counters(),
                "device": self._where(),
                "baud": self.baud,
                "interval_s": self.interval_s,
                "fields": list(self._fields),
                "version_record": self._version or "",
                # watt-hours arrive in tenths: energy_j moves in steps of 360 J
                "energy_resolution_j": 360.0,
            }
        )
        return d
