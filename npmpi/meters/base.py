"""The meter interface, readings, errors and the registry of backends.

Life of a meter on a power rank: `make_meter(spec)` builds it (no I/O), `open()` acquires the
device and raises MeterError with an actionable reason if it cannot, `describe()` gives the
attributes stored in the run file, `read()` returns the readings available now, `close()` releases.

Two kinds of backends:
- polled (RAPL, hwmon, NVML, IPMI, estimate, replay): `read()` takes one reading now and
  returns it (a list of one); counters are turned into power from the previous reading.
- streaming (Watts Up?): `read()` waits at most `timeout_s` for the device and returns every
  complete record that arrived (possibly none).

`read()` raises MeterFault when the device misbehaves (unplugged, garbage, stalled, a counter that
jumps backwards, permission revoked); the power rank records the fault with its time and later
calls `open()` again to resume.
"""

from __future__ import annotations

import importlib
import math
import re
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import ClassVar

from npmpi.core.errors import NpmpiError
from npmpi.core.units import NUMBER_GRAMMAR, parse_whole
from npmpi.core.units import parse_number as parse_number

LABEL_MEASURED = "measured"  # a real instrument's reading
LABEL_ESTIMATED = "estimated"  # a model's guess (e.g. from CPU utilisation)
LABEL_SIMULATED = "simulated"  # replayed or synthetic: never a measurement of this run
LABELS = (LABEL_MEASURED, LABEL_ESTIMATED, LABEL_SIMULATED)
AVERAGING_INSTANT = "instant"
AVERAGING_PREVIOUS = "previous"
AVERAGING_FIXED = "fixed"

NAN = math.nan

# spec keys that would carry a secret inline (password, SNMP community or keys): refused by the parser
# before any message could echo the spec (npmpi/meters/credentials.py says where secrets go instead)
INLINE_SECRET_KEYS = (
    "password",
    "passwd",
    "pass",
    "community",
    "auth_key",
    "priv_key",
    "authkey",
    "privkey",
    "secret",
    "token",
)


METER_OPTION = "--meter"  # the option a spec comes from unless the caller names another


class MeterError(NpmpiError):
    """A meter cannot be used at all (missing device, dependency, permission): says what to do.

    It carries the spec as its message may show it (`spec`: the spec's text, or only its kind while
    a secret may be in it; None when the message is about no spec) and the words after it (`detail`);
    whoever knows which option the spec came from shows it with that option's name (`under`):
    `--meter SPEC: ...` by default, `--fabric-meter SPEC: ...` for a fabric meter."""

    exit_code = 2

    def __init__(self, detail: str, spec: str | None = None) -> None:
        super().__init__(detail, spec)  # both in args: a copy (pickle, copy) keeps the spec
        self.detail = detail
        self.spec = spec

    @classmethod
    def about(cls, spec: str, detail: str) -> MeterError:
        """The error of the spec shown as `spec` ('' for a spec shown not at all: `detail` then
        follows the option's name, e.g. 'is empty')."""
        return cls(detail, spec)

    def under(self, option: str) -> str:
        """The message with the option the spec was given with: `OPTION SPEC: detail`."""
        if self.spec is None:
            return self.detail
        return f"{option} {self.spec}: {self.detail}" if self.spec else f"{option} {self.detail}"

    def __str__(self) -> str:
        return self.under(METER_OPTION)


def spec_error(spec: str):
    """A function making the MeterError of `spec` from the words after it (for helpers that take an
    exception class, e.g. npmpi.core.inputfiles.read_regular_file)."""
    return lambda detail: MeterError(detail, spec)


class MeterFault(Exception):
    """A meter misbehaved during the run; sampling may resume when the device comes back."""


# A counting domain (a CPU package, a node) always draws some power: a counter that stays still
# this long while it is read is stuck, not measuring 0 W.
STUCK_AFTER_S = 2.0


@dataclass
class StillCounter:
    """When an energy counter last moved. A read that finds it still gives no sample (its span goes
    on from the last movement, so the power is right when the counter moves again, and a stuck
    counter never becomes 0 W); still for longer than `after_s` is a MeterFault."""

    label: str  # what the messages call it: "the energy counter of intel-rapl:0 (package-0)"
    after_s: float = STUCK_AFTER_S
    last_change_t: float = 0.0  # the meter's monotonic clock

    def restart(self, now_t: float) -> None:
        """A new reference (open, or the first read after it): the counter counts as just moved."""
        self.last_change_t = now_t

    def moved(self, delta: float, now_t: float, while_: str = "") -> bool:
        """True when the counter moved (`delta` != 0: a sample may be made; the watch restarts), False
        while it is still; MeterFault once still for longer than `after_s` (`while_`: what else was
        seen meanwhile, e.g. ' while its time stamps advanced')."""
        if delta:
            self.last_change_t = now_t
            return True
        still_s = now_t - self.last_change_t
        if still_s > self.after_s:
            raise MeterFault(
                f"{self.label} has not moved for {still_s:.1f} s{while_}: the domain is not counting "
                "(a stuck counter is not 0 W; no sample)"
            )
        return False


@dataclass(frozen=True)
class Reading:
    """One sample, stamped with the host's wall clock (seconds since the epoch) when it was read, or
    where the meter can tell, when the device made it (a Redfish ReadingTime, a Cray controller's time
    stamp put on the host's clock)."""

    time_unix_s: float
    power_w: float
    energy_j: float = NAN  # cumulative energy since the meter was opened, where the meter gives it
    volts: float = NAN
    amps: float = NAN
    # records that arrived together, spaced one meter interval apart (newest at receipt); NaN elsewhere
    time_spaced_unix_s: float = NAN
    # a network meter's request: sent and answered (time_unix_s is their middle); NaN elsewhere
    request_start_unix_s: float = NAN
    request_end_unix_s: float = NAN
    # the time the device gave its reading (Redfish ReadingTime; cray: the controller stamp on the host clock)
    reading_time_unix_s: float = NAN


@dataclass(frozen=True)
class MeterSpec:
    """A parsed `--meter` value."""

    kind: str
    target: str | None = None  # the positional argument: device, path, file, GPU index
    params: dict[str, str] = field(default_factory=dict)
    text: str = ""

    def number(self, key: str, default: float, lo: float = 0.0, hi: float = 1e9) -> float:
        """A numeric parameter in [lo, hi] (npmpi.core.units' one grammar), or MeterError naming the spec."""
        if key not in self.params:
            return default
        try:
            value = parse_number(self.params[key])
        except ValueError:
            raise MeterError.about(self.text, f"{key}={self.params[key]!r} is not {NUMBER_GRAMMAR}") from None
        if not lo <= value <= hi:
            raise MeterError.about(self.text, f"{key}={self.params[key]} is not from {lo:g} to {hi:g}")
        return value


class Meter(ABC):
    """One channel of a node's meter set."""

    kind: ClassVar[str] = ""
    label: ClassVar[str] = LABEL_MEASURED
    streaming: ClassVar[bool] = False
    # the key=value parameters the backend's spec accepts: any other is a usage error naming these
    parameters: ClassVar[tuple[str, ...]] = ()
    # class defaults that a backend may refine per instance (e.g. from the device's update interval)
    natural_interval_s: float = 1.0
    # the longest interval between reads the device allows (e.g. a counter that must not wrap twice)
    max_interval_s: float = math.inf
    # the longest a call into the device may block (open or read): a sampling loop is not stalled then
    longest_call_s: float = 0.0
    quantities: tuple[str, ...] = ("power_w",)
    # How a reading relates to time (docs/meters.md, "What a reading covers"): AVERAGING_INSTANT, the
    # value when read; AVERAGING_PREVIOUS, the average since the previous reading (counter or tick
    # differences); AVERAGING_FIXED, the average over the `averaging_s` before the reading.
    averaging: str = "instant"
    averaging_s: float = 0.0
    # energy_j is a cumulative counter fine enough to give a window's energy (restarts at 0 on reopen)
    energy_from_counter: bool = False
    power_resolution_w: float = 0.0  # smallest step of power_w (0: finer than anything that matters)
    energy_resolution_j: float = 0.0  # smallest step of energy_j

    def __init__(self, spec: MeterSpec) -> None:
        self.spec = spec

    @abstractmethod
    def open(self) -> None:
        """Acquire the device; MeterError with the reason and the remedy if impossible."""

    @abstractmethod
    def read(self, timeout_s: float) -> list[Reading]:
        """Readings available now (see the module docstring); MeterFault on misbehaviour."""

    def close(self) -> None:  # noqa: B027 - optional for backends with nothing to release
        """Release the device (idempotent)."""

    def counters(self) -> dict[str, int]:
        """Running counts stored as channel attributes at every collection (e.g. packets, bytes)."""
        return {}

    def description(self) -> str:
        """Model, device path or other identification for the run file."""
        return self.spec.text or self.kind

    def describe(self) -> dict[str, object]:
        """Attributes stored in the run file for this channel."""
        return {
            "kind": self.kind,
            "spec": self.spec.text,
            "description": self.description(),
            "label": self.label,
            "natural_interval_s": self.natural_interval_s,
            "longest_call_s": self.longest_call_s,
            "quantities": list(self.quantities),
            "averaging": self.averaging,
            "averaging_s": self.averaging_s,
            "energy_from_counter": self.energy_from_counter,
            "power_resolution_w": self.power_resolution_w,
            "energy_resolution_j": self.energy_resolution_j,
        }


# in the order `--meter`'s help lists them (node-level first, the estimate and replay last)
_REGISTRY: dict[str, str] = {
    # not a meter: the best meters that open on each node, chosen by the power rank (meters/auto.py)
    "auto": "npmpi.meters.auto:AutoSpec",
    "cray": "npmpi.meters.cray:CrayMeter",
    "rapl": "npmpi.meters.rapl:RaplMeter",
    "perf": "npmpi.meters.perf:PerfMeter",
    "wattsup": "npmpi.meters.wattsup:WattsUpMeter",
    "hwmon": "npmpi.meters.hwmon:HwmonMeter",
    "nvml": "npmpi.meters.nvml:NvmlMeter",
    "ipmi": "npmpi.meters.ipmi:IpmiMeter",
    "redfish": "npmpi.meters.redfish:RedfishMeter",
    "snmp": "npmpi.meters.snmp:SnmpMeter",
    "estimate": "npmpi.meters.estimate:EstimateMeter",
    "replay": "npmpi.meters.replay:ReplayMeter",
}
_KIND_NOTES = {"auto": "the best that opens on each node"}


def host_and_port(
    target: str | None, spec_text: str, default_port: int, device: str, kind: str
) -> tuple[str, int]:
    """(host, port) of a network meter's HOST, HOST:PORT or [IPV6]:PORT (`device`: whose address,
    for the error: "the BMC's"); MeterError if absent or malformed."""
    text = target or ""  # not stripped: a port of " 1" or "1 " is not a number
    if not text:
        raise MeterError.about(spec_text, f"give {device} address: {kind}:HOST[:PORT]")
    host, port_text = text, ""
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        port_text = rest[1:] if rest.startswith(":") else rest
    elif text.count(":") == 1:
        host, _, port_text = text.partition(":")
    if "@" in text:  # USER[:PASSWORD]@HOST: never shown (a password may follow the user)
        raise MeterError.about(
            kind,
            "the address holds '@' (a USER:PASSWORD@HOST form?): give HOST[:PORT] only; "
            "credentials come from the environment or a credentials= file (docs/meters.md, Credentials)",
        )
    try:
        port = parse_whole(port_text) if port_text else default_port
    except ValueError:
        port = -1
    if not host or port == -1:
        raise MeterError.about(spec_text, f"{text!r} is not HOST[:PORT] (PORT in ASCII digits)")
    if not 0 < port < 65536:
        raise MeterError.about(spec_text, f"port {port} is not between 1 and 65535")
    return host, port


def known_meters() -> list[str]:
    return sorted(_REGISTRY)


def kinds_text() -> str:
    """The registry's kinds for a help text, in its order: 'auto (the best that ...), cray, ...'."""
    return ", ".join(f"{k} ({_KIND_NOTES[k]})" if k in _KIND_NOTES else k for k in _REGISTRY)


_KIND_RE = re.compile(r"[a-z0-9_-]{1,40}", re.ASCII)
# USER:PASSWORD@HOST or USER@HOST as a spec's positional argument (not a path, which has a '/')
_USERINFO_RE = re.compile(r"[^/@]*:[^/@]*@|[^/@:]*@[^/]*$")


def parse_meter_spec(text: str) -> MeterSpec:
    """Parse `KIND[:ARG,key=value,...]`; MeterError lists the known kinds for an unknown one.

    Until every key is known to be one of the backend's parameters (none of which holds a secret),
    no message shows the spec: only the kind and a key's name, never a value."""
    raw = text.strip()
    if not raw:
        raise MeterError.about("", "is empty: give a meter, e.g. estimate")
    kind, _, rest = text.lstrip().partition(":")  # values keep their spaces: ' 1' is not a number
    kind = kind.strip().lower()
    if not _KIND_RE.fullmatch(kind):
        known = ", ".join(known_meters())
        raise MeterError.about("", f"holds an unknown meter (not shown); known meters: {known}")
    items = [item for item in rest.split(",") if item.strip()] if rest else []
    for item in items:
        key, eq, _value = item.partition("=")
        if eq and key.strip().lower() in INLINE_SECRET_KEYS:
            raise inline_secret_error(kind, key.strip())
    if kind not in _REGISTRY:
        raise MeterError.about(kind, f"unknown meter {kind!r}; known meters: {', '.join(known_meters())}")
    target = None
    params: dict[str, str] = {}
    known = known_parameters(kind)
    for item in items:
        if "=" in item:
            key, _, value = item.partition("=")
            key = key.strip()
            if known is not None and key not in known:  # its value is never shown: it may be a secret
                raise MeterError.about(
                    kind,
                    f"unknown parameter {key!r} for {kind} (its value is not shown); "
                    f"known parameters: {', '.join(known) or 'none'}",
                )
            if key in params:  # the later would silently win: say so (values not shown)
                raise MeterError.about(kind, f"{key}= is given twice (values not shown): give it once")
            params[key] = value
        elif target is None:
            target = item
        else:
            raise MeterError.about(kind, "more than one positional argument (values not shown)")
    if target is not None and _USERINFO_RE.match(target):
        raise MeterError.about(
            kind,
            "the argument looks like USER:PASSWORD@HOST (not shown): give HOST[:PORT] only; credentials "
            "come from the environment or a credentials= file (docs/meters.md, Credentials)",
        )
    return MeterSpec(kind=kind, target=target, params=params, text=raw)


def check_meter_spec(text: str) -> MeterSpec:
    """Parse a spec and build its backend (no I/O), so that every check of its values, numbers
    included, is made before any MPI work; a backend that cannot be loaded is left to fail (or be
    skipped with --meter-optional) when opened."""
    spec = parse_meter_spec(text)
    module_name, _, class_name = _REGISTRY[spec.kind].partition(":")
    try:
        cls = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError):
        return spec
    cls(spec)
    return spec


def inline_secret_error(kind: str, key: str) -> MeterError:
    """The usage error for a secret given inline in a spec: says where it goes, never shows its value."""
    return MeterError.about(
        kind,
        f"{key}= may not be given on the command line (it would be visible in `ps`, the "
        f"shell history, the job records and the run file); put it in an environment variable (the meter's "
        f"default, or one named with {key}_env=VARNAME) or in a file named by credentials=PATH "
        f"(`{key}=...` lines, mode 0600: `chmod 600 PATH`); docs/meters.md, Credentials",
    )


def known_parameters(kind: str) -> tuple[str, ...] | None:
    """The parameters backend `kind` declares; None if it cannot be loaded (it fails with its reason when
    opened)."""
    module_name, _, class_name = _REGISTRY[kind].partition(":")
    try:
        return tuple(getattr(importlib.import_module(module_name), class_name).parameters)
    except (ImportError, AttributeError):
        return None


def make_meter(spec: MeterSpec | str) -> Meter:
    """Build the backend for a spec; a missing optional dependency fails here, with its reason."""
    if isinstance(spec, str):
        spec = parse_meter_spec(spec)
    module_name, _, class_name = _REGISTRY[spec.kind].partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise MeterError.about(spec.kind, f"backend {spec.kind!r} cannot be loaded ({exc})") from None
    cls = getattr(module, class_name)
    return cls(spec)
