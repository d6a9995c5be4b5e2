"""`rapl`: CPU energy counters of Linux powercap (Intel RAPL; AMD too since Linux 5.8, same driver).

Each top-level zone `intel-rapl:N` of /sys/class/powercap is one package (socket) with a
cumulative `energy_uj` counter in microjoules; `intel-rapl:N:M` are its subzones (core, uncore,
dram). The meter sums the chosen domains (the packages by default), turns counter differences
into joules and power, and counts every wrap of a counter at `max_energy_range_uj`.

A counter can wrap between two reads without anyone seeing it if they are too far apart: at most
one wrap can be counted, so reads must come more often than max_energy_range_uj / power (about
22 minutes for 262 kJ at 200 W; a few minutes on older parts). The highest power a domain can
draw is `max_w`, or three times its largest `constraint_*_max_power_uw` where sysfs gives one. At open,
a counter that could wrap more than once in two sample intervals at that power shortens the
meter's interval to what is needed (`max_interval_s`), or is refused with MeterError when that is
below what a power rank can keep (MIN_INTERVAL_S). The meter refuses to guess: when the time since
the previous read would have allowed a second wrap, or when a counter goes back and the change
counted as a wrap disagrees with the domain's own recent readings (a reset), it raises MeterFault
and gives no sample. The first read after every open only takes the counters' reference (no
power from a span of microseconds); the next read gives the first power.

Spec: `rapl[:ROOT,domains=package,max_w=1000]` with ROOT the powercap directory and domains any of
`package`, `dram`, `psys`, `core`, `uncore` joined by `+` (e.g. `domains=package+dram`).
"""

from __future__ import annotations

import math
import re
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from npmpi.meters import sysfs
from npmpi.meters.base import NAN, Meter, MeterError, MeterFault, MeterSpec, Reading, StillCounter

DEFAULT_ROOT = "/sys/class/powercap"
TOP_ZONE = re.compile(r"^intel-rapl:(\d+)$")
SUB_ZONE = re.compile(r"^intel-rapl:(\d+):(\d+)$")
DOMAINS = ("package", "dram", "psys", "core", "uncore")
DEFAULT_DOMAINS = ("package",)
# A bound on one domain's power, used only to tell a wrap from a reset and to know when two reads
# are too far apart to count wraps: no CPU package or DRAM domain draws a kilowatt.
DEFAULT_MAX_W = 1000.0
# RAPL counters update about every millisecond; a read may see one update more than its time span.
UPDATE_SLACK_S = 0.01
# A domain's power limits cap it, but only on average: short-term limits allow more (PL2 is about
# twice PL1 on recent desktop parts, and max_power_uw is often PL1). The hard bound on its power is
# this many times its largest constraint_*_max_power_uw.
MAX_POWER_FACTOR = 3.0
# A wrap is believed only if the power it implies agrees with the domain's recent readings: at most
# the highest of the last HISTORY readings (of the last HISTORY_MAX_AGE_S) plus 10 % (at least 1 W).
# A counter reset just below the top of the range looks like a wrap; beyond this bound it is refused
# (a fault, no sample). A real wrap comes once in tens of minutes: refusing one at a genuine change
# of load costs one sample, believing a reset stores a wrong number.
HISTORY = 10
HISTORY_MAX_AGE_S = 30.0
WRAP_AGREEMENT = 0.10
WRAP_AGREEMENT_MIN_W = 1.0
# The shortest sample interval a power rank keeps (a Python thread waking on a busy node).
MIN_INTERVAL_S = 0.02

PERMISSION_HINT = (
    "energy_uj is readable by root only since Linux 5.10 (CVE-2020-8694, the Platypus side channel). "
    "Run as root, or have an administrator grant read access to a trusted group, e.g. "
    "`chgrp power /sys/class/powercap/intel-rapl:*/energy_uj && chmod g+r "
    "/sys/class/powercap/intel-rapl:*/energy_uj` (lost at reboot; to keep it, a udev rule "
    '`SUBSYSTEM=="powercap", ACTION=="add", RUN+="/bin/chgrp power /sys%p/energy_uj", '
    'RUN+="/bin/chmod g+r /sys%p/energy_uj"` in /etc/udev/rules.d/). See docs/meters.md'
)


def _read_uj(path: Path) -> int:
    text = sysfs.read_text(path).strip()
    value = int(text)  # ValueError on garbage
    if value < 0:
        raise ValueError(f"negative value {text!r}")
    return value


@dataclass
class Zone:
    """One powercap zone being summed, with its counter state."""

    directory: Path
    name: str
    max_range_uj: int | None  # None: max_energy_range_uj unreadable, wraps cannot be counted
    bound_w: float = DEFAULT_MAX_W  # the most this domain can draw (max_w, or from its power limits)
    last_uj: int = 0
    # when its counter last moved: a read finding it still gives no sample, a stuck one is a fault
    still: StillCounter = field(default_factory=lambda: StillCounter(""))
    recent: deque = field(default_factory=lambda: deque(maxlen=HISTORY))  # (monotonic t, watts)

    def recent_max_w(self, now_t: float) -> float | None:
        """The highest of the recent readings still young enough, None without any."""
        values = [w for t, w in self.recent if now_t - t <= HISTORY_MAX_AGE_S]
        return max(values) if values else None

    @property
    def label(self) -> str:
        return f"{self.directory.name} ({self.name})"

    @property
    def energy_file(self) -> Path:
        return self.directory / "energy_uj"


def _domain_of(zone_name: str) -> str:
    # zone names: package-0, dram, core, uncore, psys
    return zone_name.split("-", 1)[0]


def parse_domains(text: str | None, spec_text: str) -> tuple[str, ...]:
    """The `domains=` parameter as a tuple of domain names; MeterError for unknown or overlapping ones."""
    if not text:
        return DEFAULT_DOMAINS
    chosen = tuple(dict.fromkeys(t.strip().lower() for t in text.split("+") if t.strip()))
    unknown = [d for d in chosen if d not in DOMAINS]
    if unknown or not chosen:
        raise MeterError.about(
            spec_text,
            f"unknown RAPL domain {', '.join(unknown) or text!r}; "
            f"choose among {', '.join(DOMAINS)} joined by + (e.g. domains=package+dram)",
        )
    # psys is the whole platform and package holds core and uncore: summing them counts twice
    if "psys" in chosen and len(chosen) > 1:
        raise MeterError.about(spec_text, "psys already holds the other domains; use it alone")
    if "package" in chosen and ({"core", "uncore"} & set(chosen)):
        raise MeterError.about(spec_text, "core and uncore are parts of package; do not add them to it")
    return chosen


class RaplMeter(Meter):
    """Sum of RAPL energy counters, read on demand."""

    kind = "rapl"
    parameters = ("domains", "max_w")  # the key=value parameters its spec accepts
    natural_interval_s = 0.1
    quantities = ("power_w", "energy_j")
    averaging = "previous"  # power_w is the counter difference since the previous read
    energy_from_counter = True
    energy_resolution_j = 2.0**-16  # the usual RAPL energy status unit (15.3 µJ; sysfs shows µJ)

    def __init__(self, spec: MeterSpec, monotonic: Callable[[], float] = time.monotonic) -> None:
        super().__init__(spec)
        self.root = Path(spec.target or DEFAULT_ROOT)
        self.domains = parse_domains(spec.params.get("domains"), spec.text)
        self.max_w = spec.number("max_w", DEFAULT_MAX_W, hi=1e6)
        if self.max_w <= 0:
            raise MeterError.about(spec.text, "max_w must be positive")
        self._monotonic = monotonic
        self.zones: list[Zone] = []
        self._history: dict[str, deque] = {}  # each zone's recent powers, kept across reopenings
        self._energy_j = 0.0
        self._last_t = 0.0
        self._opened = False
        self._referenced = False

    def _found(self) -> list[tuple[Path, str]]:
        """(zone directory, name) for every RAPL zone and subzone under the root."""
        out = []
        for entry in sorted(self.root.iterdir(), key=lambda p: [int(x) for x in re.findall(r"\d+", p.name)]):
            if TOP_ZONE.match(entry.name) or SUB_ZONE.match(entry.name):
                try:
                    name = sysfs.read_text(entry / "name").strip()
                except OSError:
                    name = "?"
                out.append((entry, name))
        return out

    def open(self) -> None:
        self._opened = False
        if not self.root.is_dir():
            raise MeterError.about(
                self.spec.text,
                f"no powercap directory {self.root}: the kernel has no RAPL "
                "driver loaded (`modprobe intel_rapl_msr`) or the CPU does not offer RAPL "
                "(virtual machines usually do not)",
            )
        found = self._found()
        chosen = []
        for directory, name in found:
            domain = _domain_of(name)
            if domain not in self.domains:
                continue
            # packages and psys are top-level zones; dram, core and uncore are subzones of a package
            if domain in ("package", "psys") and not TOP_ZONE.match(directory.name):
                continue
            chosen.append((directory, name))
        if not chosen:
            seen = ", ".join(f"{d.name} ({n})" for d, n in found) or "no intel-rapl zones"
            raise MeterError.about(
                self.spec.text,
                f"no RAPL zone for domains={'+'.join(self.domains)} in {self.root}; found: {seen}",
            )
        now = self._monotonic()
        zones = []
        for directory, name in chosen:
            zone = Zone(
                directory=directory,
                name=name,
                max_range_uj=self._max_range(directory),
                bound_w=self._bound_w(directory),
                recent=self._history.setdefault(str(directory), deque(maxlen=HISTORY)),
            )
            try:
                zone.last_uj = _read_uj(zone.energy_file)
            except PermissionError:
                raise MeterError.about(
                    self.spec.text, f"permission denied reading {zone.energy_file}: " + PERMISSION_HINT
                ) from None
            except (OSError, ValueError) as exc:
                raise MeterError.about(self.spec.text, f"cannot read {zone.energy_file}: {exc}") from None
            zone.still = StillCounter(f"the energy counter of {zone.label}")
            zone.still.restart(now)
            zones.append(zone)
        self._check_wrap_periods(zones)
        self.zones = zones
        self._energy_j = 0.0
        self._last_t = now
        self._opened = True
        self._referenced = False  # the first read only takes the counters' reference

    def _check_wrap_periods(self, zones: list[Zone]) -> None:
        """Shorten the interval so no counter wraps twice in two intervals; MeterError if impossible."""
        needed = math.inf
        for zone in zones:
            if zone.max_range_uj is None:
                continue
            period_s = zone.max_range_uj / 1e6 / zone.bound_w
            if period_s / 2 < MIN_INTERVAL_S:
                raise MeterError.about(
                    self.spec.text,
                    f"the energy counter of {zone.label} wraps at "
                    f"max_energy_range_uj={zone.max_range_uj} µJ, as often as every {_secs(period_s)} at "
                    f"{zone.bound_w:g} W: counting its wraps needs a read every {_secs(period_s / 2)}, "
                    f"faster than the {_secs(MIN_INTERVAL_S)} a power rank can keep; this counter cannot "
                    "be measured (use another meter, or max_w= if the domain never draws that much)",
                )
            needed = min(needed, period_s / 2)
        self.max_interval_s = needed
        self.natural_interval_s = min(type(self).natural_interval_s, needed)

    def _bound_w(self, directory: Path) -> float:
        """max_w, or less where the zone's power limits say so (constraint_*_max_power_uw)."""
        limits = []
        for f in directory.glob("constraint_*_max_power_uw"):
            try:
                limits.append(_read_uj(f))
            except (OSError, ValueError):
                continue
        limits = [v for v in limits if v > 0]
        if not limits:
            return self.max_w
        return min(self.max_w, MAX_POWER_FACTOR * max(limits) / 1e6)

    @staticmethod
    def _max_range(directory: Path) -> int | None:
        try:
            value = _read_uj(directory / "max_energy_range_uj")
        except (OSError, ValueError):
            return None
        return value if value > 0 else None

    def _delta_uj(self, zone: Zone, value: int, dt_s: float, now_t: float) -> int:
        """Microjoules since the last read, counting a wrap; MeterFault when it cannot be known."""
        budget_uj = zone.bound_w * (dt_s + UPDATE_SLACK_S) * 1e6
        raw = value - zone.last_uj
        if raw >= 0:
            delta = raw
        elif zone.max_range_uj is None:
            raise MeterFault(
                f"the energy counter of {zone.label} went back from {zone.last_uj} to {value} µJ and its "
                "max_energy_range_uj is unreadable, so a wrap cannot be told from a reset"
            )
        else:
            delta = raw + zone.max_range_uj
            self._check_wrap(zone, value, delta, dt_s, budget_uj, now_t)
        if delta > budget_uj:
            raise MeterFault(
                f"the energy counter of {zone.label} jumped forward by {delta / 1e6:.4g} J in {_secs(dt_s)}, "
                f"more than its {zone.bound_w:g} W allow: a counter reset or a corrupt value"
            )
        if zone.max_range_uj is not None and delta + zone.max_range_uj <= budget_uj:
            period_s = zone.max_range_uj / 1e6 / zone.bound_w
            raise MeterFault(
                f"{_secs(dt_s)} since the last read of {zone.label} is longer than its shortest wrap "
                f"period ({_secs(period_s)} at {zone.bound_w:g} W): how often the counter wrapped is "
                "unknown; read more often"
            )
        return delta

    def _check_wrap(
        self, zone: Zone, value: int, delta: int, dt_s: float, budget_uj: float, now_t: float
    ) -> None:
        """MeterFault unless a backward step is a believable wrap (see HISTORY)."""
        implied_w = delta / 1e6 / max(dt_s, 1e-9)
        recent_w = zone.recent_max_w(now_t)
        limit_w = zone.bound_w
        why = f"more than the domain can draw ({zone.bound_w:g} W)"
        if recent_w is not None:
            agree_w = recent_w + max(WRAP_AGREEMENT * recent_w, WRAP_AGREEMENT_MIN_W)
            if agree_w < limit_w:
                limit_w = agree_w
                why = f"far from its recent readings (at most {recent_w:.4g} W)"
        if delta < 0 or delta > budget_uj or implied_w > limit_w:
            raise MeterFault(
                f"the energy counter of {zone.label} jumped back from {zone.last_uj} to {value} µJ: "
                f"a counter reset, not a wrap (as a wrap it would mean {implied_w:.4g} W, {why}); no sample"
            )

    def read(self, timeout_s: float) -> list[Reading]:
        if not self._opened:
            raise MeterFault("the RAPL meter is not open")
        now_t = self._monotonic()
        stamp = time.time()
        dt_s = now_t - self._last_t
        if not self._referenced:
            return self._take_reference(now_t)
        values = self._read_values()
        deltas = [
            self._delta_uj(zone, value, dt_s, now_t) for zone, value in zip(self.zones, values, strict=True)
        ]
        # a counter still for STUCK_AFTER_S is a MeterFault; when none moved, no sample (not 0 W): the
        # references stay, so the next sample's span starts where this one would have
        if not any([zone.still.moved(delta, now_t) for zone, delta in zip(self.zones, deltas, strict=True)]):
            return []
        # commit only once every zone gave a sound value, so a fault leaves no half-applied read
        for zone, value, delta in zip(self.zones, values, deltas, strict=True):
            zone.last_uj = value
            if dt_s > 0:
                zone.recent.append((now_t, delta / 1e6 / dt_s))
        joules = sum(deltas) / 1e6
        self._energy_j += joules
        self._last_t = now_t
        power_w = joules / dt_s if dt_s > 0 else NAN
        return [Reading(time_unix_s=stamp, power_w=power_w, energy_j=self._energy_j)]

    def _read_values(self) -> list[int]:
        values = []
        for zone in self.zones:
            try:
                values.append(_read_uj(zone.energy_file))
            except PermissionError:
                raise MeterFault(
                    f"permission to read {zone.energy_file} was revoked ({PERMISSION_HINT})"
                ) from None
            except (OSError, ValueError) as exc:
                raise MeterFault(f"cannot read {zone.energy_file}: {exc}") from None
        return values

    def _take_reference(self, now_t: float) -> list[Reading]:
        """The first read after open: the counters' values become the reference, no power yet."""
        for zone, value in zip(self.zones, self._read_values(), strict=True):
            zone.last_uj = value
            zone.still.restart(now_t)
        self._last_t = now_t
        self._referenced = True
        return []

    def close(self) -> None:
        self._opened = False

    def description(self) -> str:
        zones = ", ".join(z.label for z in self.zones) or f"domains={'+'.join(self.domains)}"
        blind = [z.directory.name for z in self.zones if z.max_range_uj is None]
        if blind:  # said where the choice of meter is shown (npmpi meters, the run file)
            zones += f"; max_energy_range_uj unreadable in {', '.join(blind)}: a wrap is refused, not counted"
        return f"RAPL energy counters in {self.root}: {zones}"

    def describe(self) -> dict[str, object]:
        d = super().describe()
        periods = [z.max_range_uj / 1e6 / z.bound_w for z in self.zones if z.max_range_uj]
        d.update(
            {
                "root": str(self.root),
                "domains": list(self.domains),
                "zones": [z.label for z in self.zones],
                "max_energy_range_uj": [z.max_range_uj if z.max_range_uj else -1 for z in self.zones],
                "max_w": self.max_w,
                # the most each zone can draw: max_w, or 3x its largest constraint_*_max_power_uw
                "zone_bound_w": [z.bound_w for z in self.zones],
                "max_interval_s": self.max_interval_s,
                # reads must come more often than this, or a second wrap could go unseen
                "shortest_wrap_period_s": min(periods) if periods else math.nan,
            }
        )
        return d


def _secs(seconds: float) -> str:
    """A duration readable at any scale: 0.0077 s as '7.7 ms', 262.1 s as '262 s'."""
    if seconds < 1:
        return f"{seconds * 1e3:.3g} ms"
    return f"{seconds:.3g} s"
