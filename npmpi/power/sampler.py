"""A power rank's sampling: one thread per meter channel (`ChannelSampler`) sleeps (or blocks on its
device) between samples, stamps each reading with the host's wall clock and buffers it, reopens a
meter that failed, and ticks a heartbeat each loop; the node's meters opened from --meter or
NPMPI_METERS (npmpi/power/rank.py sends the buffers to rank 0 when it asks)."""

from __future__ import annotations

import os
import sys
import threading
import time
from dataclasses import dataclass, field

from npmpi.core.safetext import printable
from npmpi.meters.base import (
    METER_OPTION,
    Meter,
    MeterError,
    MeterFault,
    MeterSpec,
    Reading,
    make_meter,
    parse_meter_spec,
)
from npmpi.meters.scope import refuse_doubled
from npmpi.runfile.faults import FaultLog, FaultRecord
from npmpi.runfile.format import OPEN_EPOCH

REOPEN_AFTER_S = 2.0
STALL_INTERVALS = 5
METERS_ENV = "NPMPI_METERS"


def node_meter_specs(default_specs) -> list[MeterSpec]:
    """This node's meter specs: NPMPI_METERS (';'-separated, set per node, so parsed here, where it is
    seen) or --meter's values (parsed by the command line); MeterError naming NPMPI_METERS for a spec
    of it that does not parse."""
    override = os.environ.get(METERS_ENV)
    if override is None or not override.strip():
        return list(default_specs)
    try:
        specs = [parse_meter_spec(text) for text in override.split(";") if text.strip()]
        refuse_doubled(specs)  # the same energy would count twice
    except MeterError as exc:
        raise MeterError(exc.under(METERS_ENV)) from None
    return specs


@dataclass
class ChannelBuffer:
    """Readings, faults (new or counted again) and heartbeat ticks gathered since rank 0 last asked."""

    readings: list[Reading] = field(default_factory=list)
    epochs: list[int] = field(default_factory=list)  # per reading: which opening of the meter took it
    faults: list[FaultRecord] = field(default_factory=list)
    ticks: list[float] = field(default_factory=list)  # wall-clock time of every pass of the sampling loop
    counters: dict[str, int] = field(default_factory=dict)  # the meter's counts as of the last read


class ChannelSampler(threading.Thread):
    """Samples one meter at its interval; records faults once and reopens the device to resume."""

    def __init__(self, meter: Meter, interval_s: float, node_label: str) -> None:
        super().__init__(daemon=True, name=f"npmpi-meter-{meter.kind}")
        self.meter = meter
        self.interval_s = interval_s
        self.node_label = node_label
        self.stop_event = threading.Event()
        self._lock = threading.Lock()
        self._buffer = ChannelBuffer()
        self._faults = FaultLog()
        self._broken = False
        self._stalled = False
        self._last_good = time.monotonic()
        self._epoch = 0  # 0 for the opening before sampling, +1 at each reopening after a fault

    def _fault(self, message: str) -> None:
        """Record a fault; print it the first time only (repeats are counted in the run file)."""
        with self._lock:
            new = self._faults.record(message, time.time())
        if new:
            print(
                printable(f"npmpi: meter {self.meter.spec.text} on {self.node_label}: {message}"),
                file=sys.stderr,
                flush=True,
            )

    def _keep(self, readings: list[Reading]) -> None:
        """Buffer readings with the meter's counters as of them, so a batch's counts match its samples."""
        counters = self.meter.counters()
        with self._lock:
            self._buffer.readings.extend(readings)
            self._buffer.epochs.extend([self._epoch] * len(readings))
            if counters:
                self._buffer.counters = counters

    def _tick(self) -> None:
        with self._lock:
            self._buffer.ticks.append(time.time())

    def _wait(self, seconds: float) -> None:
        """Sleep (waking for stop), ticking at least every half second: a waiting loop is alive."""
        end = time.monotonic() + seconds
        while not self.stop_event.is_set():
            left = end - time.monotonic()
            if left <= 0:
                return
            self.stop_event.wait(min(left, 0.5))
            if end - time.monotonic() > 0:  # still waiting: the loop's next pass will tick itself
                self._tick()

    def _sample_once(self) -> None:
        self._tick()
        if self._broken:
            try:
                self.meter.open()
            except (MeterError, MeterFault, OSError) as exc:
                del exc  # still gone: try again later, the fault was recorded once
                self._wait(REOPEN_AFTER_S)
                return
            self._broken = False
            self._epoch += 1
            self._last_good = time.monotonic()
            self._fault("meter is back; sampling resumed")
        try:
            readings = self.meter.read(self.interval_s if self.meter.streaming else 0.0)
        except MeterFault as exc:
            self._keep([])
            self._broken = True
            self.meter.close()
            self._fault(f"{exc} (sampling resumes when the device answers again)")
            return
        except Exception as exc:
            self._keep([])
            self._broken = True
            self.meter.close()
            self._fault(f"unexpected error {type(exc).__name__}: {exc}")
            return
        now = time.monotonic()
        self._keep(readings)
        if readings:
            self._last_good = now
            if self._stalled:
                self._stalled = False
                self._fault("readings resumed after a stall")
        elif not self._stalled and now - self._last_good > STALL_INTERVALS * max(
            self.interval_s, self.meter.natural_interval_s
        ):
            self._stalled = True
            self._fault(f"no reading for {STALL_INTERVALS} sample intervals: the meter has stalled")

    def run(self) -> None:
        next_t = time.monotonic()
        while not self.stop_event.is_set():
            self._sample_once()
            if not self.meter.streaming:
                next_t += self.interval_s
                delay = next_t - time.monotonic()
                if delay < 0:  # fell behind (a slow device): do not try to catch up in a burst
                    next_t = time.monotonic()
                    delay = 0
                self._wait(delay)

    def describe(self) -> dict[str, object]:
        """The channel's attributes for the run file: the meter's, the sample interval, and the
        per-sample datasets beyond SAMPLE_FIELDS (every channel's open_epoch, the meter's own)."""
        d = self.meter.describe()
        d["sample_interval_s"] = self.interval_s
        d["extra_sample_fields"] = [*(d.get("extra_sample_fields") or []), OPEN_EPOCH]
        return d

    def drain(self) -> ChannelBuffer:
        """What was gathered since the last drain (faults: the new ones and those counted again)."""
        with self._lock:
            out, self._buffer = self._buffer, ChannelBuffer()
            out.faults = self._faults.drain()
        return out

    def stop(self) -> None:
        self.stop_event.set()
        self.join(timeout=max(2.0, 2 * self.interval_s))
        self.meter.close()


def open_meters(
    specs: list[MeterSpec], optional: bool, option: str = METER_OPTION
) -> tuple[list[Meter], list[str]]:
    """Build and open meters from their spec values; MeterError unless optional (then the reasons are
    returned, each naming the `option` its spec was given with)."""
    meters, skipped = [], []
    for spec in specs:
        try:
            meter = make_meter(spec)
            meter.open()
        except MeterError as exc:
            if not optional:
                raise
            skipped.append(exc.under(option))
            continue
        meters.append(meter)
    return meters, skipped


def sample_interval_for(meter: Meter, requested_s: float | None) -> float:
    """--sample-interval, or the meter's natural period (never faster than a streaming meter sends)."""
    natural = float(meter.describe().get("natural_interval_s") or meter.natural_interval_s)
    if requested_s is None:
        return natural
    if meter.streaming:
        return max(requested_s, natural)
    return min(requested_s, meter.max_interval_s)  # a counter that must be read this often
