"""`estimate`: node power estimated from CPU utilisation in /proc/stat (works anywhere).

power = idle_w + (max_w - idle_w) x utilisation, utilisation from the aggregate `cpu` line of
/proc/stat between two reads. This is a model, not a measurement: it is always stored and plotted
as *estimated*. Spec: `estimate[:idle_w=40,max_w=120,stat=/proc/stat]`.
"""

from __future__ import annotations

import os
import stat
import time

from npmpi.meters.base import LABEL_ESTIMATED, Meter, MeterError, MeterFault, Reading

DEFAULT_IDLE_W = 40.0
DEFAULT_MAX_W = 120.0


def read_cpu_ticks(path: str) -> tuple[int, int]:
    """(busy, total) jiffies of the aggregate cpu line."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)  # a FIFO must not block
    with open(fd, errors="replace") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ValueError(f"{path} is not a regular file like /proc/stat")
        line = f.readline(4096)
    fields = line.split()
    if not fields or fields[0] != "cpu" or len(fields) < 5:
        raise ValueError(f"unexpected first line in {path}: {line[:60]!r}")
    values = [int(x) for x in fields[1:]]
    # user nice system idle iowait irq softirq steal guest guest_nice; guest time is already in user
    idle = values[3] + (values[4] if len(values) > 4 else 0)
    total = sum(values[:8])
    return total - idle, total


class EstimateMeter(Meter):
    kind = "estimate"
    parameters = ("idle_w", "max_w", "stat")  # the key=value parameters its spec accepts
    label = LABEL_ESTIMATED
    natural_interval_s = 0.1
    averaging = "previous"  # utilisation from the CPU ticks since the previous read

    def __init__(self, spec) -> None:
        super().__init__(spec)
        self.idle_w = spec.number("idle_w", DEFAULT_IDLE_W, hi=1e6)
        self.max_w = spec.number("max_w", DEFAULT_MAX_W, hi=1e6)
        self.stat_path = spec.params.get("stat", spec.target or "/proc/stat")
        if not 0 <= self.idle_w <= self.max_w:
            raise MeterError.about(spec.text, f"need 0 <= idle_w <= max_w (got {self.idle_w}, {self.max_w})")
        self._last: tuple[int, int] | None = None

    def open(self) -> None:
        try:
            self._last = read_cpu_ticks(self.stat_path)
        except (OSError, ValueError) as exc:
            raise MeterError.about(
                self.spec.text, f"cannot read CPU times from {self.stat_path} ({exc})"
            ) from None

    def read(self, timeout_s: float) -> list[Reading]:
        now = time.time()
        try:
            busy, total = read_cpu_ticks(self.stat_path)
        except (OSError, ValueError) as exc:
            raise MeterFault(f"cannot read {self.stat_path}: {exc}") from None
        if self._last is None:
            self._last = (busy, total)
            return []
        d_busy, d_total = busy - self._last[0], total - self._last[1]
        if d_total < 0 or d_busy < 0:
            self._last = (busy, total)
            raise MeterFault(f"CPU tick counters in {self.stat_path} went backwards")
        if d_total == 0:
            return []  # no tick elapsed since the last read: nothing new to say
        self._last = (busy, total)
        utilisation = min(max(d_busy / d_total, 0.0), 1.0)
        return [Reading(now, self.idle_w + (self.max_w - self.idle_w) * utilisation)]

    def description(self) -> str:
        return (
            f"CPU-utilisation model ({self.stat_path}): {self.idle_w:g} W idle to {self.max_w:g} W full load"
        )

    def describe(self) -> dict[str, object]:
        d = super().describe()
        d.update({"estimate_idle_w": self.idle_w, "estimate_max_w": self.max_w})
        # one clock tick of one CPU in a read every natural interval: the model's smallest power step
        ticks = (os.cpu_count() or 1) * os.sysconf("SC_CLK_TCK") * self.natural_interval_s
        d["power_resolution_w"] = (self.max_w - self.idle_w) / ticks if ticks > 0 else 0.0
        return d
