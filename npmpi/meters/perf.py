"""`perf`: RAPL energy through the kernel's perf_event `power` PMU, where the site allows it.

The kernel (arch/x86/events/rapl.c) describes its RAPL PMU in sysfs, as every PMU
(Documentation/ABI/testing/sysfs-bus-event_source-devices-*): under
/sys/bus/event_source/devices/power, `type` is the number to give perf_event_open, `cpumask` one
CPU per package (or die), `format/event` where an event's code goes in `config` (`config:0-7`),
and `events/energy-pkg` (`event=0x02`), `energy-ram`, `energy-psys`, `energy-cores`, `energy-gpu`
each with `.scale` (2^-32 J per count: `2.3283064365386962890625e-10`) and `.unit` (`Joules`).
The counts are free-running 64-bit totals the kernel keeps for the 32-bit hardware counters (it
folds their wraps itself); the events only count system-wide (pid -1, one CPU), never per task.

Opening needs what system-wide perf events need: `kernel.perf_event_paranoid` at 0 or below, or
CAP_PERFMON (Linux 5.8+; CAP_SYS_ADMIN before). Unlike powercap's energy_uj (root only since
Linux 5.10), some sites allow this. The meter reads the description, opens one event per chosen
domain on each CPU of `cpumask`, and sums the counts times their scale into joules; the first read
after every open only takes the reference. Spec: `perf[:events=pkg+ram,root=DIR]`.
"""

from __future__ import annotations

import contextlib
import errno
import os
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from npmpi.core.perfevent import open_event
from npmpi.meters import sysfs
from npmpi.meters.base import NAN, Meter, MeterError, MeterFault, MeterSpec, Reading

DEFAULT_ROOT = "/sys/bus/event_source/devices/power"
PARANOID_FILE = "/proc/sys/kernel/perf_event_paranoid"
DOMAINS = ("pkg", "ram", "psys", "cores", "gpu")
DEFAULT_DOMAINS = ("pkg",)
PERMISSION_HINT = (
    "system-wide perf events need kernel.perf_event_paranoid <= 0 or CAP_PERFMON (CAP_SYS_ADMIN before "
    "Linux 5.8): an administrator runs `sysctl kernel.perf_event_paranoid=0` (or grants the capability "
    "to a trusted group's copy of python: `setcap cap_perfmon+ep`); see docs/meters.md, No root?"
)


@dataclass(frozen=True)
class PmuEvent:
    """One event as sysfs describes it."""

    name: str
    type: int
    config: int
    scale: float
    unit: str


def paranoid_level(path: str = PARANOID_FILE) -> str:
    try:
        return sysfs.read_text(Path(path), 20).strip() or "?"
    except OSError:
        return "?"


def parse_cpumask(text: str) -> list[int]:
    """`0`, `0,28`, `0-3,8`: the CPUs listed."""
    cpus: list[int] = []
    for part in text.strip().split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        cpus.extend(range(int(lo), int(hi or lo) + 1))
    return cpus


def _bits(format_text: str) -> list[tuple[int, int]]:
    """`config:0-7` (or `config:0-7,32-35`, `config:5`): the bit ranges of a term in config."""
    field, _, spans = format_text.strip().partition(":")
    if field != "config":
        raise ValueError(f"the term is placed in {field!r}; only config is supported")
    out = []
    for span in spans.split(","):
        lo, _, hi = span.partition("-")
        out.append((int(lo), int(hi or lo)))
    return out


def event_config(root: Path, text: str) -> int:
    """The config value of an event's `event=0x02[,term=value]` through the PMU's format/ files."""
    config = 0
    for term in text.strip().split(","):
        key, _, value = term.partition("=")
        number = int(value, 0) if value else 1
        for lo, hi in _bits(sysfs.read_text(root / "format" / key.strip(), 100)):
            width = hi - lo + 1
            config |= (number & ((1 << width) - 1)) << lo
            number >>= width
    return config


def read_event(root: Path, domain: str) -> PmuEvent:
    """The sysfs description of `energy-<domain>`; OSError or ValueError if absent or malformed."""
    name = f"energy-{domain}"
    events = root / "events"
    pmu_type = int(sysfs.read_text(root / "type", 20).strip())
    config = event_config(root, sysfs.read_text(events / name, 200))
    scale = float(sysfs.read_text(events / f"{name}.scale", 100).strip())
    unit = sysfs.read_text(events / f"{name}.unit", 100).strip()
    if unit != "Joules" or not scale > 0:
        raise ValueError(f"{events / name} counts {scale} {unit!r} per count, not Joules")
    return PmuEvent(name, pmu_type, config, scale, unit)


def perf_event_open(pmu_type: int, config: int, cpu: int) -> int:
    """A system-wide counter of `config` on CPU `cpu` (pid -1); OSError on refusal."""
    return open_event(pmu_type, config, pid=-1, cpu=cpu)


def refusal(spec_text: str, event: PmuEvent, cpu: int, exc: OSError) -> MeterError:
    """The kernel's refusal as one line: the paranoid level or capability when it is a permission."""
    what = f"the kernel refused to count power/{event.name}/ on CPU {cpu}"
    if exc.errno in (errno.EACCES, errno.EPERM):
        detail = f"{what} (perf_event_paranoid is {paranoid_level()} here): {PERMISSION_HINT}"
    elif exc.errno == errno.ENOENT:
        detail = f"{what}: no PMU of type {event.type} in this kernel (the power PMU is not loaded)"
    else:
        detail = f"{what}: {exc.strerror or exc}"
    return MeterError.about(spec_text, detail)


class PerfMeter(Meter):
    """Sum of RAPL energy counts through perf_event, one event per domain and package."""

    kind = "perf"
    parameters = ("events", "root")
    natural_interval_s = 0.1
    quantities = ("power_w", "energy_j")
    averaging = "previous"
    energy_from_counter = True
    energy_resolution_j = 2.0**-16  # the usual RAPL energy status unit, as for `rapl`

    def __init__(
        self,
        spec: MeterSpec,
        monotonic: Callable[[], float] = time.monotonic,
        open_event: Callable[[int, int, int], int] = perf_event_open,
    ) -> None:
        super().__init__(spec)
        self.root = Path(spec.params.get("root") or DEFAULT_ROOT)
        text = spec.params.get("events") or spec.target or "+".join(DEFAULT_DOMAINS)
        self.domains = tuple(dict.fromkeys(d.strip().lower() for d in text.split("+") if d.strip()))
        unknown = [d for d in self.domains if d not in DOMAINS]
        if unknown or not self.domains:
            raise MeterError.about(
                spec.text,
                f"unknown RAPL event {', '.join(unknown) or text!r}; choose among "
                f"{', '.join(DOMAINS)} joined by + (e.g. events=pkg+ram)",
            )
        self._monotonic = monotonic
        self._open_event = open_event
        self.events: list[PmuEvent] = []
        self.cpus: list[int] = []
        self._fds: list[tuple[int, float]] = []  # (fd, joules per count)
        self._last_counts: list[int] = []
        self._last_t = 0.0
        self._energy_j = 0.0
        self._referenced = False

    def _describe_pmu(self) -> None:
        if not (self.root / "type").exists():
            raise MeterError.about(
                self.spec.text,
                f"no perf power PMU ({self.root}): the kernel exposes no RAPL "
                "events here (not an Intel/AMD CPU with RAPL, a virtual machine, or a kernel without "
                "CONFIG_PERF_EVENTS_INTEL_RAPL / the rapl_perf module)",
            )
        try:
            self.cpus = parse_cpumask(sysfs.read_text(self.root / "cpumask", 4096))
            self.events = [read_event(self.root, d) for d in self.domains]
        except FileNotFoundError as exc:
            present = sorted(p.name for p in (self.root / "events").glob("energy-*") if "." not in p.name)
            raise MeterError.about(
                self.spec.text,
                f"{exc.filename} is missing (this PMU counts: {', '.join(present) or 'nothing'})",
            ) from None
        except (OSError, ValueError) as exc:
            raise MeterError.about(self.spec.text, f"cannot read the PMU in {self.root}: {exc}") from None
        if not self.cpus:
            raise MeterError.about(self.spec.text, f"{self.root}/cpumask lists no CPU")

    def open(self) -> None:
        self.close()
        self._describe_pmu()
        fds = []
        try:
            for event in self.events:
                for cpu in self.cpus:
                    try:
                        fds.append((self._open_event(event.type, event.config, cpu), event.scale))
                    except OSError as exc:
                        raise refusal(self.spec.text, event, cpu, exc) from None
        except MeterError:
            for fd, _ in fds:
                os.close(fd)
            raise
        self._fds = fds
        self._energy_j = 0.0
        self._referenced = False

    def _counts(self) -> list[int]:
        try:
            return [struct.unpack("<Q", os.read(fd, 8))[0] for fd, _ in self._fds]
        except (OSError, struct.error) as exc:
            raise MeterFault(f"cannot read a perf power counter: {exc}") from None

    def read(self, timeout_s: float) -> list[Reading]:
        if not self._fds:
            raise MeterFault("the perf meter is not open")
        now_t = self._monotonic()
        stamp = time.time()
        counts = self._counts()
        if not self._referenced:
            self._last_counts, self._last_t, self._referenced = counts, now_t, True
            return []
        deltas = [c - last for c, last in zip(counts, self._last_counts, strict=True)]
        if any(d < 0 for d in deltas):
            raise MeterFault("a perf power counter went back (the 64-bit total never does): no sample")
        joules = sum(d * scale for d, (_, scale) in zip(deltas, self._fds, strict=True))
        dt_s = now_t - self._last_t
        self._last_counts, self._last_t = counts, now_t
        self._energy_j += joules
        power_w = joules / dt_s if dt_s > 0 else NAN
        return [Reading(time_unix_s=stamp, power_w=power_w, energy_j=self._energy_j)]

    def close(self) -> None:
        for fd, _ in self._fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self._fds = []

    def description(self) -> str:
        names = "+".join(e.name for e in self.events) or "+".join(self.domains)
        return f"RAPL through perf_event ({self.root}): {names} on CPUs {','.join(map(str, self.cpus))}"

    def describe(self) -> dict[str, object]:
        d = super().describe()
        d.update(
            {
                "root": str(self.root),
                "events": [e.name for e in self.events],
                "event_type": self.events[0].type if self.events else -1,
                "event_config": [e.config for e in self.events],
                "event_scale": [e.scale for e in self.events],
                "cpus": list(self.cpus),
            }
        )
        return d
