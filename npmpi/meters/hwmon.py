"""`hwmon`: power sensors of Linux hwmon (ACPI power meters on servers, some boards and SoCs).

A hwmon device `/sys/class/hwmon/hwmonN` names itself in `name` and reports power in microwatts in
`powerM_input` (instantaneous) or `powerM_average` (averaged over `powerM_average_interval` ms);
`update_interval` (ms) says how often the chip refreshes. Older drivers keep these files in
`hwmonN/device/`. The meter sums the power channels of the chosen device(s).

Spec: `hwmon[:ROOT,name=power_meter,use=input]`: ROOT defaults to /sys/class/hwmon; `name=` picks
devices by their name file (needed when several devices report power); `use=average` prefers the
averaged files where a channel has both.
"""

from __future__ import annotations

import contextlib
import re
import time
from dataclasses import dataclass
from pathlib import Path

from npmpi.meters import sysfs
from npmpi.meters.base import Meter, MeterError, MeterFault, MeterSpec, Reading

DEFAULT_ROOT = "/sys/class/hwmon"
POWER_FILE = re.compile(r"^power(\d+)_(input|average)$")
USES = ("input", "average")


def _read_int(path: Path) -> int:
    return int(sysfs.read_text(path, 4096).strip())


def _numeric_key(path: Path) -> list[int]:
    return [int(x) for x in re.findall(r"\d+", path.name)]


@dataclass
class HwmonDevice:
    """A hwmon device: its directory, name and the directory holding its attributes."""

    directory: Path
    name: str
    attributes: Path
    files: list[str]

    def power_files(self, use: str) -> list[Path]:
        """One file per power channel: `use` (input or average) where a channel has both."""
        channels: dict[int, dict[str, str]] = {}
        for f in self.files:
            m = POWER_FILE.match(f)
            if m:
                channels.setdefault(int(m.group(1)), {})[m.group(2)] = f
        other = "average" if use == "input" else "input"
        return [self.attributes / (kinds.get(use) or kinds[other]) for _, kinds in sorted(channels.items())]

    def summary(self) -> str:
        shown = [f for f in self.files if re.match(r"^(power|energy|temp|in|curr|fan)\d+_", f)]
        return f"{self.directory.name} ({self.name}: {', '.join(shown[:6]) or 'no sensor files'})"


def _list(directory: Path) -> list[str]:
    try:
        return sorted(p.name for p in directory.iterdir() if p.is_file())
    except OSError:
        return []


def scan(root: Path) -> list[HwmonDevice]:
    """Every hwmon device under root, with its name and attribute files."""
    devices = []
    for directory in sorted(root.glob("hwmon*"), key=_numeric_key):
        attributes, files = directory, _list(directory)
        if not any(POWER_FILE.match(f) for f in files):
            legacy = _list(directory / "device")  # drivers before Linux 5.x kept attributes here
            if any(POWER_FILE.match(f) for f in legacy):
                attributes, files = directory / "device", legacy
        name = "?"
        for candidate in (attributes / "name", directory / "name"):
            try:
                name = sysfs.read_text(candidate, 4096).strip()
                break
            except OSError:
                continue
        devices.append(HwmonDevice(directory=directory, name=name, attributes=attributes, files=files))
    return devices


class HwmonMeter(Meter):
    """Sum of hwmon power channels, read on demand."""

    kind = "hwmon"
    parameters = ("name", "use")  # the key=value parameters its spec accepts
    natural_interval_s = 1.0
    quantities = ("power_w",)

    def __init__(self, spec: MeterSpec) -> None:
        super().__init__(spec)
        self.root = Path(spec.target or DEFAULT_ROOT)
        self.name = spec.params.get("name")
        self.use = spec.params.get("use", "input")
        if self.use not in USES:
            raise MeterError.about(spec.text, f"use={self.use!r}: choose input or average")
        self.devices: list[HwmonDevice] = []
        self.files: list[Path] = []
        self.natural_interval_s = type(self).natural_interval_s
        self.averaging_source = ""
        self._opened = False

    def open(self) -> None:
        self._opened = False
        if not self.root.is_dir():
            raise MeterError.about(self.spec.text, f"no hwmon directory {self.root}")
        found = scan(self.root)
        listing = "; ".join(d.summary() for d in found) or "no hwmon devices"
        candidates = [d for d in found if self.name is None or d.name == self.name]
        if self.name is not None and not candidates:
            raise MeterError.about(
                self.spec.text, f"no hwmon device named {self.name!r} in {self.root}; found: {listing}"
            )
        with_power = [d for d in candidates if d.power_files(self.use)]
        if not with_power:
            raise MeterError.about(
                self.spec.text,
                f"no power sensor (power*_input or power*_average) in "
                f"{self.root}{' for name=' + self.name if self.name else ''}; found: {listing}",
            )
        names = sorted({d.name for d in with_power})
        if len(names) > 1:
            raise MeterError.about(
                self.spec.text,
                f"several hwmon devices report power and summing them may count "
                f"twice: {'; '.join(d.summary() for d in with_power)}. Choose one, e.g. "
                f"hwmon:name={names[0]}",
            )
        files = [f for d in with_power for f in d.power_files(self.use)]
        for f in files:
            try:
                _read_int(f)
            except PermissionError:
                raise MeterError.about(
                    self.spec.text,
                    f"permission denied reading {f}: run as root or have an "
                    f"administrator make it readable (e.g. a udev rule running `chmod a+r` on it)",
                ) from None
            except (OSError, ValueError) as exc:
                raise MeterError.about(self.spec.text, f"cannot read {f}: {exc}") from None
        self.devices = with_power
        self.files = files
        self.natural_interval_s = self._update_interval_s()
        self.averaging, self.averaging_s, self.averaging_source = self._averaging_of_files()
        self._opened = True

    def _averaging_of_files(self) -> tuple[str, float, str]:
        """(averaging, averaging_s, whence) of the files read, whichever `use=` asked for: instant for
        `_input` files; for `_average` files (all an ACPI power meter may have) the mean over their
        `_average_interval` (milliseconds, the longest of them), else over the refresh period."""
        intervals_ms, averaged = [], False
        for d in self.devices:
            for f in d.power_files(self.use):
                if not f.name.endswith("_average"):
                    continue
                averaged = True
                with contextlib.suppress(OSError, ValueError):
                    if (
                        f.name + "_interval" in d.files
                        and (ms := _read_int(d.attributes / (f.name + "_interval"))) > 0
                    ):
                        intervals_ms.append(ms)
        if not averaged:
            return "instant", 0.0, ""
        if intervals_ms:
            return "fixed", max(intervals_ms) / 1000.0, "powerM_average_interval"
        return "fixed", self.natural_interval_s, "assumed: no powerM_average_interval, the refresh period"

    def _update_interval_s(self) -> float:
        """The chips' refresh period: update_interval, else the averaging interval, else 1 s."""
        periods_ms = []
        for d in self.devices:
            averaged = [f.name + "_interval" for f in d.power_files(self.use) if f.name.endswith("_average")]
            for n in ["update_interval", *averaged]:
                if n not in d.files:
                    continue
                try:
                    value = _read_int(d.attributes / n)
                except (OSError, ValueError):
                    continue
                if value > 0:
                    periods_ms.append(value)
                    break
        return max(periods_ms) / 1000.0 if periods_ms else type(self).natural_interval_s

    def read(self, timeout_s: float) -> list[Reading]:
        if not self._opened:
            raise MeterFault("the hwmon meter is not open")
        total_uw = 0
        for f in self.files:
            try:
                value = _read_int(f)
            except PermissionError:
                raise MeterFault(f"permission to read {f} was revoked") from None
            except FileNotFoundError:
                raise MeterFault(f"{f} disappeared (device unbound or driver unloaded)") from None
            except (OSError, ValueError) as exc:
                raise MeterFault(f"cannot read {f}: {exc}") from None
            if value < 0:
                raise MeterFault(f"{f} reports a negative power ({value} µW)")
            total_uw += value
        return [Reading(time_unix_s=time.time(), power_w=total_uw / 1e6)]

    def close(self) -> None:
        self._opened = False

    def description(self) -> str:
        if not self.devices:
            return f"hwmon power sensors in {self.root}"
        where = ", ".join(f"{d.directory.name} ({d.name})" for d in self.devices)
        return f"hwmon power sensors {', '.join(f.name for f in self.files)} of {where}"

    def describe(self) -> dict[str, object]:
        d = super().describe()
        d.update({"root": str(self.root), "files": [str(f) for f in self.files], "use": self.use})
        d["power_resolution_w"] = 1e-6  # microwatts
        if self.averaging_source:  # power*_average files: the mean over the sensor's averaging interval
            d["averaging_s_source"] = self.averaging_source
        return d
