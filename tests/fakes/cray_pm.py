"""A fake HPE Cray EX /sys/cray/pm_counters directory in a temporary directory.

Laid out and written as HPE documents it ("User Access to Compute Node Power Data", docs-csm):
counter files hold one line `VALUE UNIT TIMESTAMP us` (`12044825101 J 7810213855886 us`), energy in
whole joules and power in whole watts, all stamped with the controller's microsecond clock at its
last scan; `freshness` is a plain number that moves at every scan (about 10 Hz, `raw_scan_hz`),
`generation` moves when a power cap changes, `startup` when the controller restarts (its energy
counters start again from 0); `version`, `raw_scan_hz`, `power_cap` (`0 W`: no cap). A scan writes
every value, then moves freshness, each file replaced at once as a sysfs read sees it.

`scan(seconds)` is one controller update; `Scanner` runs them at 10 Hz in a thread for runs under
mpirun. `restart_controller()` and `change_power_cap()` change startup and generation.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

START_STAMP_US = 7810213855886  # the controller's clock is not the host's (HPE's example value)


def write_line(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text + "\n")
    os.replace(tmp, path)


class FakePmCounters:
    """The counter files of one node; `watts` gives each channel's power (node includes the parts)."""

    def __init__(self, root: Path, accels: int = 4, scan_hz: int = 10) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.parts = ["cpu", "memory", *(f"accel{i}" for i in range(accels))]
        self.watts = {"cpu": 180.0, "memory": 40.0, **{f"accel{i}": 90.0 for i in range(accels)}}
        self.energy_j = {name: 0.0 for name in ["node", *self.parts]}
        self.energy_j["node"] = 12044825101.0  # a long-running node's counter
        self.base_w = 40.0  # the node's power outside its parts (fans, NIC, board)
        self.stamp_us = START_STAMP_US
        self.freshness = 1234
        self.generation = 7
        self.startup = 1699990000123456
        self.scan_hz = scan_hz
        write_line(self.root / "version", "2")
        write_line(self.root / "raw_scan_hz", str(scan_hz))
        write_line(self.root / "power_cap", "0 W")
        for name in self.parts:
            if name.startswith("accel"):
                write_line(self.root / f"{name}_power_cap", "0 W")
        self._write(publish=True)

    def node_w(self) -> float:
        return self.base_w + sum(self.watts.values())

    def _write(self, publish: bool) -> None:
        for name in ["node", *self.parts]:
            stem = "" if name == "node" else f"{name}_"
            watts = self.node_w() if name == "node" else self.watts[name]
            write_line(self.root / f"{stem}energy", f"{int(self.energy_j[name])} J {self.stamp_us} us")
            write_line(self.root / f"{stem}power", f"{round(watts)} W {self.stamp_us} us")
        write_line(self.root / "generation", str(self.generation))
        write_line(self.root / "startup", str(self.startup))
        if publish:
            self.freshness += 1
            write_line(self.root / "freshness", str(self.freshness))

    def scan(self, seconds: float | None = None) -> None:
        """One controller update after `seconds` (default one scan period): energies, stamps, freshness."""
        dt = 1.0 / self.scan_hz if seconds is None else seconds
        self.stamp_us += round(dt * 1e6)
        self.energy_j["node"] += self.node_w() * dt
        for name in self.parts:
            self.energy_j[name] += self.watts[name] * dt
        self._write(publish=True)

    def scan_values_only(self, seconds: float) -> None:
        """The first half of an update: values written, freshness not yet moved (a read in between)."""
        self.stamp_us += round(seconds * 1e6)
        self.energy_j["node"] += self.node_w() * seconds
        self._write(publish=False)

    def publish(self) -> None:
        self.freshness += 1
        write_line(self.root / "freshness", str(self.freshness))

    def restart_controller(self) -> None:
        """The controller restarted: startup moves, its energy counters start again from 0."""
        self.startup += 86_400_000_000
        for name in self.energy_j:
            self.energy_j[name] = 0.0
        self._write(publish=True)

    def change_power_cap(self, watts: int) -> None:
        self.generation += 1
        write_line(self.root / "power_cap", f"{watts} W")
        self._write(publish=True)


class Scanner(threading.Thread):
    """Scans a fake tree at its rate until stopped; keeps (host wall clock, node joules) of each scan."""

    def __init__(self, tree: FakePmCounters) -> None:
        super().__init__(daemon=True)
        self.tree = tree
        self.stop_event = threading.Event()
        self.lock = threading.Lock()

    def run(self) -> None:
        period = 1.0 / self.tree.scan_hz
        while not self.stop_event.wait(period):
            with self.lock:
                self.tree.scan(period)

    def stop(self) -> None:
        self.stop_event.set()
        self.join(timeout=5)
