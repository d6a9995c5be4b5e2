#!/usr/bin/env python3
"""A Watts Up? PRO emulator speaking the meter's serial protocol on a pseudo-terminal.

The slave side of a pty (`os.openpty()`, raw mode) is what a USB serial port is to pyserial: the
meter under test opens `emulator.path` like /dev/ttyUSB0. The emulator answers `#H,R,0;` (header)
and `#V,R,0;` (version), streams `#d,-,18,…;` records after `#L,W,3,E,,<s>;` (or `…,E,0,<s>;`,
`…,E,1,<s>;`) and stops on `#L,R,0;`; `#C,W,18,<flags>;` chooses the logged fields (others go out as
`_`). Everything the meter sent is kept in `received`, to check the exact bytes.

Misbehaviour on demand: records split across writes, several records in one write, garbage bytes
between packets, unselected fields, a stall, an unplug (the master side closed mid-run), raw bytes
injected at any time. Power follows a trace: a constant, a list (one value per record) or a
function of the meter's time in seconds.

`time_scale` shrinks the real time between records (0.05: a 1 s interval every 50 ms) so tests stay
fast; record contents keep the interval the meter asked for.

Run as a program for tests that need a separate process (e.g. under mpirun); the first line of
stdout is the pty path:

    python tests/fakes/wattsup_emulator.py --trace 100,150,150 [--time-scale 1] [--symlink PATH]
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import select
import signal
import sys
import threading
import time
import tty
from collections.abc import Callable, Iterable, Sequence

HEADER_PACKET = b"#h,-,18,W,V,A,WH,Cost,WH/Mo,Cost/Mo,Wmax,Vmax,Amax,Wmin,Vmin,Amin,PF,DC,PC,Hz,VA;"
HEADER_NAMES = HEADER_PACKET.decode("ascii")[len("#h,-,18,") : -1]
FIELDS = tuple(HEADER_NAMES.split(","))
# model, memory, hardware major/minor, firmware major/minor, firmware timestamp, checksum
VERSION_PACKET = b"#v,-,8,1,65536,1,4,1,9,200810141452,170;"
COST_MILS_PER_KWH = 120

Trace = Callable[[float], float] | Sequence[float] | float


class WattsUpEmulator:
    """A fake Watts Up? PRO on a pty; use as a context manager or call start()/close()."""

    def __init__(
        self,
        trace: Trace = 100.0,
        *,
        volts: float = 120.0,
        power_factor: float = 1.0,
        time_scale: float = 1.0,
        cycle: bool = False,
        split_bytes: int = 0,
        split_pause_s: float = 0.002,
        merge: int = 1,
        garbage: bytes = b"",
        unselected: Iterable[str] = (),
        answer_header: bool = True,
        answer_version: bool = True,
        stall_after: int | None = None,
        unplug_after: int | None = None,
        wh_start: float = 0.0,
    ) -> None:
        self.trace = trace
        self.volts = volts
        self.power_factor = power_factor
        self.time_scale = time_scale
        self.cycle = cycle
        self.split_bytes = split_bytes
        self.split_pause_s = split_pause_s
        self.merge = max(1, merge)
        self.garbage = garbage
        self.unselected = set(unselected)
        self.answer_header = answer_header
        self.answer_version = answer_version
        self.stall_after = stall_after
        self.unplug_after = unplug_after
        self.wh = wh_start

        self.master, self.slave = os.openpty()
        tty.setraw(self.slave)
        # The emulator keeps its own slave descriptor open, as a USB adapter stays present while
        # programs open and close it: the master side never sees a hang-up between sessions.
        self.path = os.ttyname(self.slave)
        self.received = bytearray()
        self.commands: list[str] = []
        self.records_sent = 0
        self.interval_s: int | None = None  # set by the start command
        self.unplugged = False

        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._stalled = threading.Event()
        self._unplug_request = threading.Event()
        self._inbox = bytearray()
        self._pending: list[bytes] = []
        self._next_due: float | None = None
        self._extremes: dict[str, float] = {}
        self._thread = threading.Thread(target=self._run, name="wattsup-emulator", daemon=True)

    # --- life cycle ----------------------------------------------------------------------------

    def start(self) -> WattsUpEmulator:
        """Start answering on the pty."""
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop the emulator and release both sides of the pty."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=2)
        self._close_master()
        with contextlib.suppress(OSError):
            os.close(self.slave)

    def __enter__(self) -> WattsUpEmulator:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- misbehaviour on demand ----------------------------------------------------------------

    def unplug(self) -> None:
        """Pull the cable: close the master side; the meter's next read fails."""
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            # the emulator's thread closes the descriptor itself, so it never selects on a number
            # that another open() may already have reused
            self._unplug_request.set()
            self._thread.join(timeout=2)
        self._close_master()

    def _close_master(self) -> None:
        with self._lock:
            if not self.unplugged:
                self.unplugged = True
                os.close(self.master)

    def stall(self) -> None:
        """Stop sending records (commands are still read)."""
        self._stalled.set()

    def resume(self) -> None:
        """Send records again after a stall."""
        self._stalled.clear()
        if self._next_due is not None:
            self._next_due = time.monotonic()

    def inject(self, data: bytes) -> None:
        """Write raw bytes to the meter now (garbage, a malformed record, ...)."""
        self._write(data)

    def wait_for_records(self, count: int, timeout_s: float = 5.0) -> bool:
        """Wait until `count` records were sent in all; False on timeout."""
        deadline = time.monotonic() + timeout_s
        while self.records_sent < count:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.005)
        return True

    # --- the device ----------------------------------------------------------------------------

    def _write(self, data: bytes) -> None:
        with self._lock:
            if self.unplugged:
                return
            with contextlib.suppress(OSError):  # nobody listening: a real meter's bytes are lost too
                os.write(self.master, data)

    def _send(self, data: bytes) -> None:
        if self.split_bytes > 0:
            for i in range(0, len(data), self.split_bytes):
                self._write(data[i : i + self.split_bytes])
                time.sleep(self.split_pause_s)  # separate writes so the reader sees the pieces apart
        else:
            self._write(data)

    def _run(self) -> None:
        while not self._stop.is_set() and not self.unplugged:
            if self._unplug_request.is_set():
                self._close_master()
                return
            wait = 0.05
            if self._next_due is not None and not self._stalled.is_set():
                wait = max(0.0, min(wait, self._next_due - time.monotonic()))
            try:
                ready, _, _ = select.select([self.master], [], [], wait)
                data = os.read(self.master, 4096) if ready else b""
            except (OSError, ValueError):
                if self.unplugged:
                    return
                time.sleep(0.01)
                continue
            if data:
                self.received += data
                self._inbox += data
                self._handle_commands()
            if (
                self._next_due is not None
                and not self._stalled.is_set()
                and time.monotonic() >= self._next_due
            ):
                self._emit_record()
                assert self.interval_s is not None
                self._next_due += self.interval_s * self.time_scale

    def _handle_commands(self) -> None:
        while True:
            start = self._inbox.find(b"#")
            if start < 0:
                self._inbox.clear()
                return
            end = self._inbox.find(b";", start)
            if end < 0:
                del self._inbox[:start]
                return
            body = self._inbox[start + 1 : end].decode("ascii", "replace")
            del self._inbox[: end + 1]
            self.commands.append(body)
            self._command(body.split(","))

    def _command(self, parts: list[str]) -> None:
        head = parts[:2]
        if head == ["H", "R"]:
            if self.answer_header:
                self._send(HEADER_PACKET)
        elif head == ["V", "R"]:
            if self.answer_version:
                self._send(VERSION_PACKET)
        elif head == ["L", "W"] and len(parts) == 6 and parts[2] == "3" and parts[3] == "E":
            if parts[4] in ("", "0", "1") and parts[5].isdigit() and int(parts[5]) >= 1:
                self.interval_s = int(parts[5])
                self._next_due = time.monotonic() + self.interval_s * self.time_scale
        elif head == ["L", "R"]:
            self._next_due = None
            self._flush_pending()
        elif head == ["C", "W"] and len(parts) == 3 + len(FIELDS):
            self.unselected = {name for name, flag in zip(FIELDS, parts[3:], strict=True) if flag == "0"}

    def watts_at(self, k: int, t_s: float) -> float:
        """The trace's power for record k (0-based) at meter time t_s."""
        if callable(self.trace):
            return float(self.trace(t_s))
        if isinstance(self.trace, int | float):
            return float(self.trace)
        values = self.trace
        index = k % len(values) if self.cycle else min(k, len(values) - 1)
        return float(values[index])

    def record(self, k: int) -> bytes:
        """The bytes of data record k (advances the watt-hour counter)."""
        assert self.interval_s is not None
        t_s = (k + 1) * self.interval_s
        watts = self.watts_at(k, t_s)
        amps = watts / (self.volts * self.power_factor) if self.volts > 0 else 0.0
        self.wh += watts * self.interval_s / 3600.0
        now = {"W": watts, "V": self.volts, "A": amps}
        for name, value in now.items():
            self._extremes[name + "max"] = max(self._extremes.get(name + "max", -math.inf), value)
            self._extremes[name + "min"] = min(self._extremes.get(name + "min", math.inf), value)
        monthly_wh = watts * 24 * 30
        values = {
            "W": round(watts * 10),
            "V": round(self.volts * 10),
            "A": round(amps * 1000),
            "WH": round(self.wh * 10),
            "Cost": round(self.wh / 1000 * COST_MILS_PER_KWH),
            "WH/Mo": round(monthly_wh),
            "Cost/Mo": round(monthly_wh / 1000 * COST_MILS_PER_KWH),
            "Wmax": round(self._extremes["Wmax"] * 10),
            "Vmax": round(self._extremes["Vmax"] * 10),
            "Amax": round(self._extremes["Amax"] * 1000),
            "Wmin": round(self._extremes["Wmin"] * 10),
            "Vmin": round(self._extremes["Vmin"] * 10),
            "Amin": round(self._extremes["Amin"] * 1000),
            "PF": round(self.power_factor * 100),
            "DC": 100,
            "PC": 0,
            "Hz": 600,
            "VA": round(self.volts * amps * 10),
        }
        fields = ["_" if name in self.unselected else str(values[name]) for name in FIELDS]
        return ("#d,-,18," + ",".join(fields) + ";").encode("ascii")

    def _emit_record(self) -> None:
        k = self.records_sent
        if self.stall_after is not None and k >= self.stall_after:
            self._stalled.set()
            return
        if self.unplug_after is not None and k >= self.unplug_after:
            self._close_master()
            return
        self._pending.append(self.garbage + self.record(k))
        self.records_sent += 1
        if len(self._pending) >= self.merge:
            self._flush_pending()

    def _flush_pending(self) -> None:
        if self._pending:
            data, self._pending = b"".join(self._pending), []
            self._send(data)


def _parse_trace(args: argparse.Namespace) -> Trace:
    if args.trace_file:
        with open(args.trace_file) as f:
            return [float(line) for line in f if line.strip() and not line.startswith("#")]
    if args.square:
        low, high, period_s = (float(x) for x in args.square.split(","))
        return lambda t: high if (t % period_s) < period_s / 2 else low
    return [float(x) for x in args.trace.split(",")]


def main(argv: list[str] | None = None) -> int:
    """Run an emulator until SIGTERM, SIGINT or --duration; print the pty path first."""
    p = argparse.ArgumentParser(description="Watts Up? PRO emulator on a pseudo-terminal")
    p.add_argument("--trace", default="100", help="watts, one per record, comma-separated (last repeats)")
    p.add_argument("--trace-file", help="watts, one per line")
    p.add_argument("--square", help="LOW,HIGH,PERIOD_S: a square wave of meter time")
    p.add_argument("--cycle", action="store_true", help="repeat a listed trace instead of holding the last")
    p.add_argument("--volts", type=float, default=120.0)
    p.add_argument("--power-factor", type=float, default=1.0)
    p.add_argument("--time-scale", type=float, default=1.0, help="real seconds per meter second")
    p.add_argument("--split", type=int, default=0, help="write records in pieces of this many bytes")
    p.add_argument("--merge", type=int, default=1, help="write this many records at once")
    p.add_argument("--garbage", default="", help="bytes written before every record")
    p.add_argument("--unselected", default="", help="fields sent as _, comma-separated (e.g. V,A)")
    p.add_argument("--symlink", help="also make this path a symlink to the pty (like /dev/serial/by-id)")
    p.add_argument("--duration", type=float, default=0.0, help="stop after this many seconds (0: never)")
    args = p.parse_args(argv)

    emulator = WattsUpEmulator(
        _parse_trace(args),
        volts=args.volts,
        power_factor=args.power_factor,
        time_scale=args.time_scale,
        cycle=args.cycle,
        split_bytes=args.split,
        merge=args.merge,
        garbage=args.garbage.encode(),
        unselected=[x for x in args.unselected.split(",") if x],
    )
    done = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: done.set())
    if args.symlink:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(args.symlink)
        os.symlink(emulator.path, args.symlink)
    emulator.start()
    print(emulator.path, flush=True)
    try:
        done.wait(args.duration or None)
    finally:
        emulator.close()
        if args.symlink:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(args.symlink)
    return 0


if __name__ == "__main__":
    sys.exit(main())
