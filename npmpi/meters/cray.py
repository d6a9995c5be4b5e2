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
from npmpi.meters.base import Meter, MeterError, MeterFault, MeterSpec, Reading

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


@dataclass(frozen=True)
class Snapshot:
    """One consistent read of the counters (freshness unchanged across it)."""

    freshness: int
    energy_j: int
    stamp_us: int
    generation: int | None
    startup: int | None
    host_t: float


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

    def __init__(self, spec: MeterSpec, monotonic: Callable[[], float] = time.monotonic) -> None:
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
        self.energy_file, self.power_file = channel_files(self.channel)
        self.version: int | None = None
        self.scan_hz = DEFAULT_SCAN_HZ
        self._ref: Snapshot | None = None
        self._opened = False
        self._energy_j = 0.0
        self.retries = 0  # snapshots read again because freshness moved during the read
        self.host_spans = 0  # readings whose span came from the host's clock (stamp not believed)

    # ------------------------------------------------------------------ reading the files

    def _text(self, name: str) -> str:
        return sysfs.read_text(self.root / name, MAX_LINE_CHARS)

    def _optional(self, name: str) -> int | None:
        path = self.root / name
        if not path.exists():
            return None
        return parse_plain(self._text(name), path)

    def _snapshot(self) -> Snapshot:
        """A consistent read: freshness before and after; again when it moved (OSError, ValueError)."""
        for _ in range(MAX_TRIES):
            before = parse_plain(self._text("freshness"), self.root / "freshness")
            host_t = self._monotonic()
            energy, stamp = parse_counter(self._text(self.energy_file), "J", self.root / self.energy_file)
            generation = self._optional("generation")
            startup = self._optional("startup")
            after = parse_plain(self._text("freshness"), self.root / "freshness")
            if after == before:
                return Snapshot(before, energy, stamp, generation, startup, host_t)
            self.retries += 1
        raise MeterFault(
            f"{self.root}/freshness moved during each of {MAX_TRIES} reads: the counters never held "
            "still long enough for one consistent snapshot"
        )

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
            self._ref = None
            self._snapshot()  # the files parse: refuse garbage at open, not at the first sample
        except PermissionError:
            raise MeterError.about(
                self.spec.text,
                f"permission denied reading {self.root}: pm_counters are "
                "world-readable on Cray EX; ask the site why they are not here",
            ) from None
        except (OSError, ValueError, MeterFault) as exc:
            raise MeterError.about(self.spec.text, f"cannot read {self.root}: {exc}") from None
        if hz:
            self.scan_hz = float(hz)
            self.natural_interval_s = 1.0 / self.scan_hz
        self._energy_j = 0.0
        self._opened = True

    def read(self, timeout_s: float) -> list[Reading]:
        if not self._opened:
            raise MeterFault("the pm_counters meter is not open")
        try:
            snap = self._snapshot()
        except (OSError, ValueError) as exc:
            raise MeterFault(f"cannot read {self.root}: {exc}") from None
        stamp = time.time()
        ref = self._ref
        if ref is None:  # the first read after open: the reference, no power yet
            self._ref = snap
            return []
        self._check_same_segment(ref, snap)
        if snap.stamp_us == ref.stamp_us and snap.energy_j == ref.energy_j:
            return []  # no update since the last read (read faster than the controller scans)
        span_s = self._span_s(ref, snap)
        delta_j = snap.energy_j - ref.energy_j
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
        return [Reading(time_unix_s=stamp, power_w=power_w, energy_j=self._energy_j)]

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

    def _span_s(self, ref: Snapshot, snap: Snapshot) -> float:
        """The counter's own span where it agrees with the host's, else the host's."""
        host_s = snap.host_t - ref.host_t
        stamp_s = (snap.stamp_us - ref.stamp_us) / 1e6
        if stamp_s > 0 and abs(stamp_s - host_s) <= STAMP_AGREEMENT_S + 1.0 / self.scan_hz:
            return stamp_s
        self.host_spans += 1
        return host_s

    def close(self) -> None:
        self._opened = False
        self._ref = None

    def counters(self) -> dict[str, int]:
        return {"freshness_retries": self.retries, "host_clock_spans": self.host_spans}

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
            }
        )
        return d
