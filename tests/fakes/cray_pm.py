"""A fake HPE Cray EX /sys/cray/pm_counters directory in a temporary directory.

Laid out and written as HPE documents it ("User Access to Compute Node Power Data", docs-csm):
counter files hold one line `VALUE UNIT TIMESTAMP us` (`12044825101 J 7810213855886 us`), energy in
whole joules and power in whole watts, all stamped with the controller's microsecond clock at its
last scan; `freshness` is a plain number that moves at every scan (about 10 Hz, `raw_scan_hz`),
`generation` moves when a power cap changes, `startup` when the controller restarts (its energy
counters start again from 0); `version`, `raw_scan_hz`, `power_cap` (`0 W`: no cap). A scan writes
every value, then moves freshness, each file replaced at once as a sysfs read sees it.

`scan(seconds)` is one controller update; `Scanner` runs them at 10 Hz in a thread for runs under
mpirun. `restart_controller()` and `change_power_cap()` change startup and generation; `stuck`
makes scans move freshness and the time stamps but no counter (a stuck energy counter).

`LiveController` is a controller that the host's load cannot delay: a process of its own (started
as `python cray_pm.py ROOT T0`) updates the tree at 10 Hz on a fixed schedule with the node's power
a known square wave (`SquareWave`), each update stamped with the moment it was made (the
controller's clock is the host's wall clock shifted, as a real one is its own), so a reader's
energy over any span can be checked against the wave's exact integral.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
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
        self.stuck = False  # scans move freshness and the time stamps but no energy counter
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
        if not self.stuck:
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


@dataclass(frozen=True)
class SquareWave:
    """The node's power from host time t0: `low_w` for the first half of each period, `high_w` after."""

    t0: float
    low_w: float = 200.0
    high_w: float = 400.0
    period_s: float = 1.3  # not a divisor of 2 s: windows of 2 s start and end at different powers

    def energy_j(self, t: float) -> float:
        """The exact energy from t0 to host time t."""
        periods, into = divmod(t - self.t0, self.period_s)
        half = self.period_s / 2
        per_period = (self.low_w + self.high_w) * half
        within = self.low_w * min(into, half) + self.high_w * max(into - half, 0.0)
        return periods * per_period + within


def controller_stamp_us(t: float, t0: float) -> int:
    """The live controller's time stamp of host time t: its clock started at START_STAMP_US at t0."""
    return START_STAMP_US + round((t - t0) * 1e6)


class LiveController:
    """A process updating a FakePmCounters tree at `hz` with a SquareWave's power; stop() ends it."""

    def __init__(self, root: Path, hz: int = 10, wave: SquareWave | None = None) -> None:
        self.root = Path(root)
        self.wave = wave or SquareWave(time.time())
        self.hz = hz
        args = [str(self.root), repr(self.wave.t0), str(hz), repr(self.wave.low_w), repr(self.wave.high_w)]
        args.append(repr(self.wave.period_s))
        self.proc = subprocess.Popen([sys.executable, __file__, *args], stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        if self.proc.stdout.readline().strip() != "ready":  # the tree is written: a meter may open it
            self.stop()
            raise RuntimeError("the live pm_counters controller did not start")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


def _live(root: Path, wave: SquareWave, hz: int) -> None:
    """The controller process: the tree's updates on a fixed schedule from wave.t0, for ever."""
    tree = FakePmCounters(root, scan_hz=hz)
    e0 = tree.energy_j["node"]
    tree.stamp_us = controller_stamp_us(time.time(), wave.t0)
    tree._write(publish=True)
    print("ready", flush=True)
    k = math.floor((time.time() - wave.t0) * hz)
    while True:
        k += 1
        next_t = wave.t0 + k / hz
        time.sleep(max(next_t - time.time(), 0.0))
        now = time.time()  # the update is made now and stamped now, however late the schedule
        tree.stamp_us = controller_stamp_us(now, wave.t0)
        tree.energy_j["node"] = e0 + wave.energy_j(now)
        # the node's counter first, at once: the rest of the update follows as a real one would
        write_line(root / "energy", f"{int(tree.energy_j['node'])} J {tree.stamp_us} us")
        tree._write(publish=True)


if __name__ == "__main__":
    _root, _t0, _hz, _low, _high, _period = sys.argv[1:7]
    _wave = SquareWave(float(_t0), float(_low), float(_high), float(_period))
    _live(Path(_root), _wave, int(_hz))
