"""`replay`: replays a recorded power trace in real time (tests, demos, simulated nodes).

Spec: `replay:FILE[,loop=1,scale=1.0,interval=S]`. FILE is a CSV with a header naming a time
column (`time_s`, relative seconds, or `time_unix_s`) and a `power_w` column, or an npmpi run file
(`.h5`) whose node and channel are chosen with `node=I,channel=J`. The value at (now - open time)
is linearly interpolated; past the end the trace loops (loop=1, default) or holds its last value.
Always stored and plotted as *simulated*.
"""

from __future__ import annotations

import csv
import io
import time
from pathlib import Path

import numpy as np

from npmpi.meters.base import LABEL_SIMULATED, Meter, MeterError, Reading, spec_error

MAX_TRACE_BYTES = 64 << 20  # a CSV trace of about a million samples


def load_trace(spec) -> tuple[np.ndarray, np.ndarray]:
    """(relative seconds, watts) from a CSV or a run file; MeterError says what is wrong."""
    if not spec.target:
        raise MeterError.about(spec.text, "replay needs a file, e.g. replay:trace.csv")
    path = Path(spec.target)
    if not path.exists():
        raise MeterError.about(spec.text, f"trace file {path} does not exist")
    if path.suffix in (".h5", ".hdf5"):
        from npmpi.core.errors import RunFileError
        from npmpi.runfile.reader import load_run

        try:
            run = load_run(path)
        except RunFileError as exc:
            raise MeterError.about(spec.text, f"{exc}") from None
        node, channel = int(spec.number("node", 0, hi=1e6)), int(spec.number("channel", 0, hi=1e6))
        try:
            ch = run.power[node].channels[channel]
        except IndexError:
            raise MeterError.about(spec.text, f"{path} has no power node {node} channel {channel}") from None
        t, w = ch.time_unix_s, ch.power_w
    else:
        from npmpi.core.inputfiles import read_regular_file

        data = read_regular_file(str(path), f"trace file {path}", spec_error(spec.text), MAX_TRACE_BYTES)
        try:
            rows = list(csv.DictReader(io.StringIO(data.decode("utf-8"), newline="")))
        except (csv.Error, UnicodeDecodeError) as exc:
            raise MeterError.about(spec.text, f"cannot read {path} ({exc})") from None
        if not rows or "power_w" not in rows[0]:
            raise MeterError.about(spec.text, f"{path} needs a header with power_w and time_s columns")
        tcol = "time_s" if "time_s" in rows[0] else "time_unix_s" if "time_unix_s" in rows[0] else None
        if tcol is None:
            raise MeterError.about(spec.text, f"{path} has no time_s (or time_unix_s) column")
        try:
            t = np.array([float(r[tcol]) for r in rows])
            w = np.array([float(r["power_w"]) for r in rows])
        except (TypeError, ValueError) as exc:
            raise MeterError.about(spec.text, f"{path} holds a non-numeric value ({exc})") from None
    ok = np.isfinite(t) & np.isfinite(w)
    t, w = t[ok], w[ok]
    if len(t) < 2 or np.any(np.diff(t) <= 0):
        raise MeterError.about(spec.text, f"{path} needs at least 2 samples in increasing time order")
    return t - t[0], w


class ReplayMeter(Meter):
    kind = "replay"
    parameters = ("loop", "scale", "interval", "node", "channel")  # the key=value parameters its spec accepts
    label = LABEL_SIMULATED
    natural_interval_s = 1.0

    def __init__(self, spec) -> None:
        super().__init__(spec)
        spec.number("node", 0, hi=1e6), spec.number("channel", 0, hi=1e6)  # checked now, used at open
        self.loop = spec.number("loop", 1.0, hi=1.0) != 0
        self.scale = spec.number("scale", 1.0)
        self._t = np.zeros(0)
        self._w = np.zeros(0)
        self._start = 0.0
        self._interval = spec.number("interval", 0.0, hi=3600.0)

    def open(self) -> None:
        self._t, self._w = load_trace(self.spec)
        self._start = time.time()
        if self._interval <= 0:
            self._interval = float(np.median(np.diff(self._t)))

    @property
    def sample_interval_s(self) -> float:
        return self._interval

    def read(self, timeout_s: float) -> list[Reading]:
        now = time.time()
        elapsed = now - self._start
        span = self._t[-1]
        if self.loop and span > 0:
            elapsed = elapsed % span
        return [Reading(now, float(np.interp(elapsed, self._t, self._w)) * self.scale)]

    def describe(self) -> dict[str, object]:
        d = super().describe()
        d["natural_interval_s"] = self._interval or self.natural_interval_s
        d["description"] = f"replay of {self.spec.target} (x{self.scale:g}, loop={int(self.loop)})"
        return d
