"""Synthetic Linux sysfs trees in a temporary directory: powercap (RAPL) and hwmon.

Laid out as the kernel does: `class/powercap` and `class/hwmon` hold symlinks to the device
directories under `devices/`, RAPL subzones live inside their package zone and are linked from the
class directory too, old hwmon drivers keep their attributes in `hwmonN/device/`. Values are plain
decimal text with a newline, like sysfs attributes.

A FIFO in a tree: `make_fifo(path)` puts one in a file's place; `bounded(call, fifo)` runs a call that
must not wait on it, and fails (after opening a writer on it to end the wait) if it does.

Permission denial: `deny(path)` sets mode 0, which stops everyone but root. Tests running as root
(`os.geteuid() == 0`) also call `enforce_denials(monkeypatch, module, tree)`, which makes the
meter module's one file-reading function raise PermissionError (EACCES) for denied files.
"""

from __future__ import annotations

import errno
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

import pytest

DEFAULT_MAX_RANGE_UJ = 262143328850  # the value recent Intel packages report (2^32 units of 61 µJ)


def write_attr(path: Path, value: object) -> None:
    """Write a sysfs-style attribute: the value and a newline, replaced at once as sysfs reads are."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(f"{value}\n")
    os.replace(tmp, path)


class _Denials:
    """Files made unreadable; see enforce_denials for root."""

    def __init__(self) -> None:
        self.denied: set[Path] = set()

    def deny(self, path: Path) -> None:
        """chmod 0 a file (and remember it, for root)."""
        os.chmod(path, 0)
        self.denied.add(Path(path).resolve())

    def allow(self, path: Path) -> None:
        """Give read access back."""
        os.chmod(path, 0o444)
        self.denied.discard(Path(path).resolve())


def enforce_denials(monkeypatch: pytest.MonkeyPatch, module: ModuleType, tree: _Denials) -> None:
    """As root (whom mode 0 does not stop), make the meters' sysfs reads (npmpi.meters.sysfs, which
    `module` reads through) fail with EACCES on denied files."""
    if os.geteuid() != 0:
        return
    from npmpi.meters import sysfs

    assert module.sysfs is sysfs
    original = sysfs.read_text

    def guarded(path: Path, max_chars: int = -1) -> str:
        if Path(path).resolve() in tree.denied:
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))
        return original(path, max_chars)

    monkeypatch.setattr(sysfs, "read_text", guarded)


def bounded(call, fifo: Path, seconds: float = 10.0):
    """call() in a thread: its result, or its exception raised here; a failure if it has not returned
    within `seconds` (then a writer opened on `fifo` ends the read it waits in, so no thread is left)."""
    out: list = []

    def run() -> None:
        try:
            out.append(("value", call()))
        except BaseException as exc:
            out.append(("raised", exc))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        thread.join(5)
        pytest.fail(f"waited more than {seconds:g} s on the FIFO {fifo}")
    how, value = out[0]
    if how == "raised":
        raise value
    return value


def make_fifo(path: Path) -> None:
    path.unlink()
    os.mkfifo(path)


# --- powercap ------------------------------------------------------------------------------------


@dataclass
class RaplZone:
    """One powercap zone: its device directory, class symlink and counter."""

    directory: Path
    link: Path
    name: str
    max_range_uj: int

    @property
    def energy_file(self) -> Path:
        return self.directory / "energy_uj"

    @property
    def energy_uj(self) -> int:
        return int(self.energy_file.read_text())

    def set_energy_uj(self, value: int) -> None:
        """Set the counter to a raw value."""
        write_attr(self.energy_file, value)

    def advance_j(self, joules: float) -> int:
        """Add energy as the hardware does, wrapping at max_energy_range_uj; returns the wrap count."""
        total = self.energy_uj + round(joules * 1e6)
        wraps, value = divmod(total, self.max_range_uj)
        self.set_energy_uj(value)
        return wraps

    def reset(self, value: int = 0) -> None:
        """A counter reset (e.g. a package re-initialised): the value jumps back."""
        self.set_energy_uj(value)


class FakePowercap(_Denials):
    """A /sys/class/powercap tree with intel-rapl zones; the meter's target is `root`."""

    def __init__(
        self,
        base: Path,
        packages: int = 1,
        subzones: tuple[str, ...] = ("core", "uncore"),
        dram: bool = False,
        psys: bool = False,
        mmio: bool = False,
        max_range_uj: int = DEFAULT_MAX_RANGE_UJ,
        energy_uj: int = 1_000_000,
        max_power_uw: int | None = None,
    ) -> None:
        super().__init__()
        self.base = base
        self.max_power_uw = max_power_uw  # constraint_0_max_power_uw of every zone (absent when None)
        self.root = base / "class" / "powercap"
        self.root.mkdir(parents=True)
        control = base / "devices" / "virtual" / "powercap" / "intel-rapl"
        write_attr(control / "enabled", 1)
        (self.root / "intel-rapl").symlink_to(control)
        self.zones: list[RaplZone] = []
        for p in range(packages):
            package = self._zone(control / f"intel-rapl:{p}", f"package-{p}", max_range_uj, energy_uj)
            names = list(subzones) + (["dram"] if dram else [])
            for j, sub in enumerate(names):
                self._zone(package.directory / f"intel-rapl:{p}:{j}", sub, max_range_uj, energy_uj)
        if psys:
            self._zone(control / f"intel-rapl:{packages}", "psys", max_range_uj, energy_uj)
        if mmio:
            # the same package counter again through MMIO (recent client parts): must not be summed
            mmio_control = base / "devices" / "virtual" / "powercap" / "intel-rapl-mmio"
            write_attr(mmio_control / "enabled", 0)
            (self.root / "intel-rapl-mmio").symlink_to(mmio_control)
            zone_dir = mmio_control / "intel-rapl-mmio:0"
            for attr, value in (
                ("name", "package-0"),
                ("energy_uj", energy_uj),
                ("max_energy_range_uj", max_range_uj),
            ):
                write_attr(zone_dir / attr, value)
            (self.root / "intel-rapl-mmio:0").symlink_to(zone_dir)

    def _zone(self, directory: Path, name: str, max_range_uj: int, energy_uj: int) -> RaplZone:
        write_attr(directory / "name", name)
        write_attr(directory / "energy_uj", energy_uj)
        write_attr(directory / "max_energy_range_uj", max_range_uj)
        write_attr(directory / "enabled", 1)
        write_attr(directory / "constraint_0_name", "long_term")
        write_attr(directory / "constraint_0_power_limit_uw", 65_000_000)
        if self.max_power_uw is not None:
            write_attr(directory / "constraint_0_max_power_uw", self.max_power_uw)
        link = self.root / directory.name
        link.symlink_to(directory)
        zone = RaplZone(directory=directory, link=link, name=name, max_range_uj=max_range_uj)
        self.zones.append(zone)
        return zone

    def zone(self, key: str) -> RaplZone:
        """A zone by directory name (intel-rapl:0:1) or zone name (package-0, dram)."""
        for z in self.zones:
            if key in (z.directory.name, z.name):
                return z
        raise KeyError(key)

    def set_max_range(self, key: str, text: str) -> None:
        """Overwrite a zone's max_energy_range_uj file with any text (e.g. garbage)."""
        write_attr(self.zone(key).directory / "max_energy_range_uj", text)


# --- hwmon ---------------------------------------------------------------------------------------


@dataclass
class HwmonDevice:
    """One hwmon device: `directory` is hwmonN, `attributes` where its sensor files are."""

    directory: Path
    attributes: Path
    name: str
    link: Path

    def path(self, attr: str) -> Path:
        return self.attributes / attr

    def set(self, attr: str, value: object) -> None:
        """Write any attribute (e.g. power1_input in µW, or garbage text)."""
        write_attr(self.attributes / attr, value)

    def set_power_uw(self, channel: int, microwatts: int, kind: str = "input") -> None:
        """Set powerN_input or powerN_average."""
        self.set(f"power{channel}_{kind}", microwatts)

    def remove(self, attr: str) -> None:
        """Delete an attribute, as when a driver is unbound."""
        (self.attributes / attr).unlink()


@dataclass
class FakeHwmon(_Denials):
    """A /sys/class/hwmon tree; add devices with add()."""

    base: Path
    devices: list[HwmonDevice] = field(default_factory=list)

    def __post_init__(self) -> None:
        super().__init__()
        self.root = self.base / "class" / "hwmon"
        self.root.mkdir(parents=True)

    def add(
        self,
        name: str,
        power_uw: dict[int, int] | None = None,
        average_uw: dict[int, int] | None = None,
        update_interval_ms: int | None = None,
        average_interval_ms: int | None = None,
        temps_mc: tuple[int, ...] = (),
        labels: dict[int, str] | None = None,
        legacy: bool = False,
    ) -> HwmonDevice:
        """A device named `name` with power inputs/averages in µW per channel, temperatures in m°C."""
        n = len(self.devices)
        parent = self.base / "devices" / "platform" / f"{name}.{n}"
        directory = parent / "hwmon" / f"hwmon{n}"
        directory.mkdir(parents=True)
        (directory / "power").mkdir()  # the runtime-PM directory every device has: not a sensor
        (directory / "device").symlink_to(parent)
        attributes = parent if legacy else directory
        write_attr(attributes / "name", name)
        for ch, uw in (power_uw or {}).items():
            write_attr(attributes / f"power{ch}_input", uw)
        for ch, uw in (average_uw or {}).items():
            write_attr(attributes / f"power{ch}_average", uw)
            if average_interval_ms is not None:
                write_attr(attributes / f"power{ch}_average_interval", average_interval_ms)
        for ch, text in (labels or {}).items():
            write_attr(attributes / f"power{ch}_label", text)
        for i, mc in enumerate(temps_mc, start=1):
            write_attr(attributes / f"temp{i}_input", mc)
        if update_interval_ms is not None:
            write_attr(attributes / "update_interval", update_interval_ms)
        link = self.root / f"hwmon{n}"
        link.symlink_to(directory)
        device = HwmonDevice(directory=directory, attributes=attributes, name=name, link=link)
        self.devices.append(device)
        return device
