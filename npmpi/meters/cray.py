"""`cray`: node energy of HPE Cray EX (and XC) nodes from /sys/cray/pm_counters, readable by users.

The node's power controller scans the blade about ten times a second (`raw_scan_hz`) and
publishes in /sys/cray/pm_counters one file per counter: `energy` and `power` for the whole node,
and where present `cpu_energy`, `memory_energy`, `accel0_energy` ... `accel3_energy` (with their
`_power`). Each holds one line `VALUE UNIT TIMESTAMP us`, e.g. `12044825101 J 7810213855886 us`:
joules or watts, then the controller's own time stamp in microseconds. Beside them: `freshness`,
a free-running counter that moves at each update (about 10 Hz); `generation`, which moves when a
power cap changes; `startup`, which moves when the controller restarts; `version`; `raw_scan_hz`.

HPE ("User Access to Compute Node Power Data") documents `freshness` as the counter that moves
at each update; reading it before and after the values, and the values again when it moved in
between (an update landed in the middle), is how EPCC's pm_mpi_lib (github.com/cresta-eu/pm_mpi_lib)
reads them, and how this meter does. A change of `startup` (the controller
restarted: its energy counter starts again) or of `generation` (a power cap changed) is a
MeterFault: the power rank records it, reopens the meter, and the energy counter's segment starts
again from the new reference. A counter that goes back without either is a fault too.

One meter is one channel: the node (default), or `cpu`, `memory`, `accelN`. The node's counter
includes the others, and npmpi adds a node's channels: measure the node, or its parts, not both.
Power is the energy counter's difference over the span between its own time stamps (microseconds
at the source, free of the host's scheduling), where that span agrees with the host's clock; else
over the host's span. The first read after every open only takes the reference.

A reading carries the controller's time of its update, put on the host's wall clock
(`ControllerClock`): at open the meter watches the energy file until an update lands, which
bounds the offset between the two clocks to a few milliseconds; every read after that narrows the
bounds again (an update it sees was made before the read, one the previous read did not see was
made after it), so the offset follows a drift, and a read the bounds cannot hold (a clock stepped)
starts them again. A reading is therefore stamped where the counter was, however late the host
read it; only a reading whose time stamp is not believed (see above) is stamped on receipt.

A counter that does not move while it is read gives no sample (the controller's time stamps may
advance with a frozen energy value), and one still for STUCK_AFTER_S is a fault, as for `rapl`
(npmpi.meters.base.StillCounter).

Spec: `cray[:CHANNEL,root=/sys/cray/pm_counters]`.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from npmpi.meters import sysfs
from npmpi.meters.base import NAN, Meter, MeterError, MeterFault, MeterSpec, Reading, StillCounter

DEFAULT_ROOT = "/sys/cray/pm_counters"
CHANNEL = re.compile(r"^(node|cpu|memory|accel\d?)$")
# one counter file: VALUE UNIT TIMESTAMP us
COUNTER_LINE = re.compile(r"^(\d+) ([A-Za-z]+) (\d+) us$")
DEFAULT_SCAN_HZ = 10.0
# reads of one snapshot before giving up: freshness moves about every 100 ms, so a second try
# almost always lands between two updates
MAX_TRIES = 5
# the counter's time stamp is believed when its span agrees with the host's to within this
# (one update period plus the host's scheduling)
STAMP_AGREEMENT_S = 0.25
# the most one node can draw: a counter jump above this is a reset or garbage, not energy
DEFAULT_MAX_W = 20000.0
MAX_LINE_CHARS = 200
# at open, the energy file is read every POLL_S for up to this many update periods (at most
# CALIBRATE_MAX_S) to see updates land: the moment one does bounds the controller's clock offset,
# and the reads go on until the bounds are CALIBRATE_WIDTH_S wide (a loaded host's polls are late)
CALIBRATE_PERIODS = 2.5
CALIBRATE_MAX_S = 2.5
CALIBRATE_WIDTH_S = 0.005
POLL_S = 0.002
# how fast the controller's and the host's clocks may drift apart (crystals and NTP's slewing are
# tens of ppm); a read further than STEP_S outside the bounds means a clock stepped
MAX_DRIFT = 1e-4
STEP_S = 0.25


@dataclass(frozen=True)
class Snapshot:
    """One consistent read of the counters (freshness unchanged across it), with the host's clocks
    around the read of the energy file (wall: time.time(); host_t: the monotonic clock)."""

    freshness: int
    energy_j: int
    stamp_us: int
    generation: int | None
    startup: int | None
    host_t: float
    wall_before: float = NAN
    wall_after: float = NAN


@dataclass
class ControllerClock:
    """The controller's clock on the host's wall clock: offset = host time - controller time lies in
    [lo, hi]. A read that sees a time stamp was made after that update (hi); a read that did not see
    it yet, before it (lo). The bounds widen by MAX_DRIFT as time passes and narrow at every
    observation; an observation further than STEP_S outside them restarts them (`steps`), one that
    disagrees by less (the controller published late once) moves them to itself."""

    lo: float = -math.inf
    hi: float = math.inf
    at: float = NAN  # host time of the last observation
    steps: int = 0

    def observe(self, stamp_s: float, seen_by: float, not_before: float = -math.inf) -> None:
        """An update stamped `stamp_s` (controller seconds) was visible at host time `seen_by` and not
        yet at `not_before` (-inf: unknown)."""
        new_lo, new_hi = not_before - stamp_s, seen_by - stamp_s
        if math.isfinite(self.at):
            grow = MAX_DRIFT * max(seen_by - self.at, 0.0)
            self.lo, self.hi = self.lo - grow, self.hi + grow
        self.at = seen_by
        if new_hi < self.lo - STEP_S or new_lo > self.hi + STEP_S:
            self.lo, self.hi = new_lo, new_hi
            self.steps += 1
        elif new_hi < self.lo:
            self.lo = self.hi = new_hi
        elif new_lo > self.hi:
            self.lo = self.hi = new_lo
        else:
            self.lo, self.hi = max(self.lo, new_lo), min(self.hi, new_hi)

    @property
    def known(self) -> bool:
        return math.isfinite(self.lo) and math.isfinite(self.hi)

    @property
    def width_s(self) -> float:
        return self.hi - self.lo

    def host_time(self, stamp_s: float) -> float:
        """The host's wall-clock time of a controller time stamp (the middle of the bounds)."""
        return stamp_s + 0.5 * (self.lo + self.hi)


def parse_counter(text: str, unit: str, where: Path) -> tuple[int, int]:
    """(value, time stamp µs) of a `VALUE UNIT TIMESTAMP us` line; ValueError naming the file."""
    line = text.strip()
    m = COUNTER_LINE.match(line)
    if not m:
        raise ValueError(f"{where} holds {line[:60]!r}, not 'VALUE {unit} TIMESTAMP us'")
    if m.group(2) != unit:
        raise ValueError(f"{where} is in {m.group(2)!r}, expected {unit!r}")
    return int(m.group(1)), int(m.group(3))


def parse_plain(text: str, where: Path) -> int:
    """A plain counter (freshness, generation, startup, version, raw_scan_hz): its first number."""
    word = text.strip().split(" ", 1)[0] if text.strip() else ""
    if not word.isdigit():
        raise ValueError(f"{where} holds {text.strip()[:60]!r}, not a number")
    return int(word)


def channel_files(channel: str) -> tuple[str, str]:
    """(energy file, power file) of a channel name."""
    if channel == "node":
        return "energy", "power"
    return f"{channel}_energy", f"{channel}_power"


class CrayMeter(Meter):
    """One pm_counters energy counter (node, cpu, memory or an accelerator), read on demand."""

    kind = "cray"
    parameters = ("root", "max_w")
    natural_interval_s = 1.0 / DEFAULT_SCAN_HZ
    quantities = ("power_w", "energy_j")
    averaging = "previous"
    energy_from_counter = True
    energy_resolution_j = 1.0  # the counter counts whole joules
    power_resolution_w = 0.0

    def __init__(
        self,
        spec: MeterSpec,
        monotonic: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(spec)
        self.channel = (spec.target or "node").strip().lower()
        if not CHANNEL.match(self.channel):
            raise MeterError.about(
                spec.text,
                f"unknown pm_counters channel {spec.target!r}; choose node, cpu, memory or accel0..accel3",
            )
        self.root = Path(spec.params.get("root") or DEFAULT_ROOT)
        self.max_w = spec.number("max_w", DEFAULT_MAX_W)
        if self.max_w <= 0:
            raise MeterError.about(spec.text, "max_w must be positive")
        self._monotonic = monotonic
        self._wall = wall
        self.energy_file, self.power_file = channel_files(self.channel)
        self.version: int | None = None
        self.scan_hz = DEFAULT_SCAN_HZ
        self._ref: Snapshot | None = None
        self._last: Snapshot | None = None  # the previous read's snapshot (the clock's lower bound)
        self._opened = False
        self._energy_j = 0.0
        self._still = StillCounter(f"the energy counter {self.root}/{self.energy_file}")
        self.clock = ControllerClock()
        self.opened_offset_s = NAN  # the clock offset found at the last open, and its uncertainty
        self.opened_width_s = NAN
        self.retries = 0  # snapshots read again because freshness moved during the read
        self.host_spans = 0  # readings whose span came from the host's clock (stamp not believed)
        self.receipt_stamps = 0  # readings stamped when read (the controller's time not usable)

    # ------------------------------------------------------------------ reading the files

    def _text(self, name: str) -> str:
        return sysfs.read_text(self.root / name, MAX_LINE_CHARS)

    def _optional(self, name: str) -> int | None:
        path = self.root / name
        if not path.exists():
            return None
        return parse_plain(self._text(name), path)

    def _counter(self) -> tuple[int, int, float, float]:
        """(joules, stamp µs) of the energy file, and the host's wall clock before and after its read."""
        before = self._wall()
        energy, stamp = parse_counter(self._text(self.energy_file), "J", self.root / self.energy_file)
        return energy, stamp, before, self._wall()

    def _snapshot(self) -> Snapshot:
        """A consistent read: freshness before and after; again when it moved (OSError, ValueError)."""
        for _ in range(MAX_TRIES):
            before = parse_plain(self._text("freshness"), self.root / "freshness")
            host_t = self._monotonic()
            energy, stamp, wall_before, wall_after = self._counter()
            generation = self._optional("generation")
            startup = self._optional("startup")
            after = parse_plain(self._text("freshness"), self.root / "freshness")
            if after == before:
                return Snapshot(before, energy, stamp, generation, startup, host_t, wall_before, wall_after)
            self.retries += 1
        raise MeterFault(
            f"{self.root}/freshness moved during each of {MAX_TRIES} reads: the counters never held "
            "still long enough for one consistent snapshot"
        )

    def _observe(self, stamp_us: int, wall_after: float) -> None:
        """Narrow the clock's bounds with a read that saw `stamp_us` by `wall_after` (see ControllerClock)."""
        last = self._last
        new = last is None or stamp_us != last.stamp_us
        if new:
            not_before = last.wall_before if last is not None and stamp_us > last.stamp_us else -math.inf
            self.clock.observe(stamp_us / 1e6, wall_after, not_before)

    def _calibrate(self, snap: Snapshot) -> None:
        """Read the energy file every POLL_S until updates have landed that bound the clock offset to
        CALIBRATE_WIDTH_S (the reads just before and after one bound it to about POLL_S on an idle
        host), for at most CALIBRATE_PERIODS update periods."""
        self.clock = ControllerClock()
        self._last = None
        self._observe(snap.stamp_us, snap.wall_after)
        self._last = snap
        deadline = time.monotonic() + min(CALIBRATE_PERIODS / self.scan_hz, CALIBRATE_MAX_S)
        while time.monotonic() < deadline:
            time.sleep(POLL_S)
            energy, stamp, wall_before, wall_after = self._counter()
            self._observe(stamp, wall_after)
            moved = stamp != self._last.stamp_us
            self._last = Snapshot(snap.freshness, energy, stamp, None, None, NAN, wall_before, wall_after)
            if moved and self.clock.known and self.clock.width_s <= CALIBRATE_WIDTH_S:
                break
        self.opened_offset_s = 0.5 * (self.clock.lo + self.clock.hi) if self.clock.known else NAN
        self.opened_width_s = self.clock.width_s if self.clock.known else NAN

    # ------------------------------------------------------------------ the Meter interface

    def open(self) -> None:
        self._opened = False
        if not (self.root / "freshness").exists():
            raise MeterError.about(
                self.spec.text,
                f"no {self.root}/freshness: this is not an HPE Cray EX or XC "
                "compute node (pm_counters exist only there), or root= names the wrong directory",
            )
        if not (self.root / self.energy_file).exists():
            present = sorted(p.name for p in self.root.glob("*energy"))
            raise MeterError.about(
                self.spec.text,
                f"no {self.root}/{self.energy_file} on this node "
                f"(its energy counters: {', '.join(present) or 'none'})",
            )
        try:
            self.version = self._optional("version")
            hz = self._optional("raw_scan_hz")
            if hz:
                self.scan_hz = float(hz)
                self.natural_interval_s = 1.0 / self.scan_hz
            self._ref = None
            # the files parse (garbage is refused at open, not at the first sample); the clock's offset
            self._calibrate(self._snapshot())
        except PermissionError:
            raise MeterError.about(
                self.spec.text,
                f"permission denied reading {self.root}: pm_counters are "
                "world-readable on Cray EX; ask the site why they are not here",
            ) from None
        except (OSError, ValueError, MeterFault) as exc:
            raise MeterError.about(self.spec.text, f"cannot read {self.root}: {exc}") from None
        self.longest_call_s = min(CALIBRATE_PERIODS / self.scan_hz, CALIBRATE_MAX_S)
        self._energy_j = 0.0
        self._opened = True

    def read(self, timeout_s: float) -> list[Reading]:
        if not self._opened:
            raise MeterFault("the pm_counters meter is not open")
        try:
            snap = self._snapshot()
        except (OSError, ValueError) as exc:
            raise MeterFault(f"cannot read {self.root}: {exc}") from None
        self._observe(snap.stamp_us, snap.wall_after)
        self._last = snap
        ref = self._ref
        if ref is None:  # the first read after open: the reference, no power yet
            self._ref = snap
            self._still.restart(snap.host_t)
            return []
        self._check_same_segment(ref, snap)
        delta_j = snap.energy_j - ref.energy_j
        # no update since the reference (read faster than the controller scans), or a counter that has
        # not moved while the time stamps did: no sample, the reference stays; a fault once stuck
        advanced = " while its time stamps advanced" if snap.stamp_us != ref.stamp_us else ""
        if not self._still.moved(delta_j, snap.host_t, advanced or " (nor have its time stamps)"):
            return []
        span_s, believed = self._span_s(ref, snap)
        if delta_j < 0:
            raise MeterFault(
                f"{self.root}/{self.energy_file} went back from {ref.energy_j} to {snap.energy_j} J with "
                "no controller restart: a counter reset or a corrupt value; no sample"
            )
        if delta_j > self.max_w * (span_s + 1.0 / self.scan_hz) + 1:
            raise MeterFault(
                f"{self.root}/{self.energy_file} jumped by {delta_j} J in {span_s:.3g} s, more than "
                f"{self.max_w:g} W allow: a counter reset or a corrupt value; no sample"
            )
        self._ref = snap
        self._energy_j += delta_j
        power_w = delta_j / span_s if span_s > 0 else math.nan
        return [self._stamped(snap, power_w, believed)]

    def _stamped(self, snap: Snapshot, power_w: float, believed: bool) -> Reading:
        """The reading at the controller's time of its update on the host's clock, where its stamp is
        believed and the clock known; else at its receipt (counted in receipt_stamps)."""
        if believed and self.clock.known:
            t = self.clock.host_time(snap.stamp_us / 1e6)
            return Reading(time_unix_s=t, power_w=power_w, energy_j=self._energy_j, reading_time_unix_s=t)
        self.receipt_stamps += 1
        return Reading(time_unix_s=snap.wall_after, power_w=power_w, energy_j=self._energy_j)

    def _check_same_segment(self, ref: Snapshot, snap: Snapshot) -> None:
        """MeterFault when the controller restarted or a power cap changed since the reference."""
        if snap.startup != ref.startup:
            raise MeterFault(
                f"the node's power controller restarted ({self.root}/startup {ref.startup} -> "
                f"{snap.startup}): its energy counter started again; the energy segment ends here"
            )
        if snap.generation != ref.generation:
            raise MeterFault(
                f"a power cap changed ({self.root}/generation {ref.generation} -> {snap.generation}): "
                "the energy segment ends here"
            )

    def _span_s(self, ref: Snapshot, snap: Snapshot) -> tuple[float, bool]:
        """(span, True) of the counter's own time stamps where they agree with the host's clock, else
        (the host's span, False)."""
        host_s = snap.host_t - ref.host_t
        stamp_s = (snap.stamp_us - ref.stamp_us) / 1e6
        if stamp_s > 0 and abs(stamp_s - host_s) <= STAMP_AGREEMENT_S + 1.0 / self.scan_hz:
            return stamp_s, True
        self.host_spans += 1
        return host_s, False

    def close(self) -> None:
        self._opened = False
        self._ref = None
        self._last = None

    def counters(self) -> dict[str, int]:
        width_us = round(self.clock.width_s * 1e6) if self.clock.known else -1
        return {
            "freshness_retries": self.retries,
            "host_clock_spans": self.host_spans,
            "receipt_stamps": self.receipt_stamps,
            "controller_clock_steps": self.clock.steps,
            "controller_clock_width_us": width_us,
        }

    def description(self) -> str:
        return f"HPE Cray pm_counters {self.root}/{self.energy_file} ({self.channel})"

    def describe(self) -> dict[str, object]:
        d = super().describe()
        d.update(
            {
                "root": str(self.root),
                "channel": self.channel,
                "energy_file": self.energy_file,
                "pm_counters_version": -1 if self.version is None else self.version,
                "raw_scan_hz": self.scan_hz,
                "max_w": self.max_w,
                "extra_sample_fields": ["reading_time_unix_s"],
                "time_stamps": "the controller's time stamp of each update on the host's wall clock "
                "(offset bounded at open and at every read), else the read's end",
                # host time - controller time found at open, and the width of its bounds (NaN: no update
                # landed while the meter watched)
                "controller_clock_offset_s": self.opened_offset_s,
                "controller_clock_width_s": self.opened_width_s,
            }
        )
        return d
