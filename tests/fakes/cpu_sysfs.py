"""Fake trees of the conditions' readers (npmpi/conditions/) under one root prefix, laid out as Linux
does: `sys/devices/system/cpu/cpuN/{cpufreq,cpuidle,thermal_throttle}`, the node's `cpufreq/boost`
and `intel_pstate/no_turbo`, `sys/class/powercap/*/constraint_*`, `sys/class/net/*/statistics`,
`sys/class/infiniband/*/ports/*/counters{,_ext}`, and `proc/sys/kernel/perf_event_paranoid`.
Values in the kernel's units (kHz, bytes, 4-octet words), one attribute a file with a newline.
"""

from __future__ import annotations

import contextlib
import os
import threading
from pathlib import Path

from fakes.sysfs import write_attr

CPU = "sys/devices/system/cpu"


class ConditionsTree:
    """A root prefix holding the files the conditions' readers open; `deny(path)` as the meters' trees
    (fakes.sysfs.enforce_denials takes it)."""

    def __init__(self, root: Path) -> None:
        self.denied: set[Path] = set()
        self.root = root
        write_attr(root / "proc/sys/kernel/perf_event_paranoid", 2)

    def cpu(
        self,
        n: int,
        cur_khz: int | None = 2_400_000,
        governor: str = "performance",
        idle=(("POLL", 0), ("C1", 0), ("C6", 1)),
        throttle: tuple[int, int] | None = (0, 0),
    ) -> ConditionsTree:
        """Core n: cpufreq (current, governor, limits, EPP), idle states (name, disable), throttling."""
        base = self.root / CPU / f"cpu{n}"
        if cur_khz is not None:
            self.set_freq(n, cur_khz)
        for name, value in (
            ("scaling_governor", governor),
            ("scaling_min_freq", 800_000),
            ("scaling_max_freq", 3_500_000),
            ("cpuinfo_min_freq", 800_000),
            ("cpuinfo_max_freq", 3_500_000),
            ("energy_performance_preference", "balance_performance"),
        ):
            write_attr(base / "cpufreq" / name, value)
        for k, (name, disable) in enumerate(idle):
            write_attr(base / "cpuidle" / f"state{k}" / "name", name)
            write_attr(base / "cpuidle" / f"state{k}" / "disable", disable)
        if throttle is not None:
            self.set_throttle(n, *throttle)
        return self

    def deny(self, path: Path) -> None:
        """chmod 0 a file (and remember it, for root)."""
        os.chmod(path, 0)
        self.denied.add(Path(path).resolve())

    def set_freq(self, n: int, khz: int) -> None:
        write_attr(self.root / CPU / f"cpu{n}" / "cpufreq" / "scaling_cur_freq", khz)

    def set_throttle(self, n: int, core: int, package: int) -> None:
        base = self.root / CPU / f"cpu{n}" / "thermal_throttle"
        write_attr(base / "core_throttle_count", core)
        write_attr(base / "package_throttle_count", package)

    def node(
        self, boost: int | None = 1, no_turbo: int | None = 0, rapl_w: float | None = 150.0
    ) -> ConditionsTree:
        """The node's boost (acpi-cpufreq), intel_pstate's no_turbo and a RAPL package limit."""
        if boost is not None:
            write_attr(self.root / CPU / "cpufreq" / "boost", boost)
        if no_turbo is not None:
            write_attr(self.root / CPU / "intel_pstate" / "no_turbo", no_turbo)
        if rapl_w is not None:
            zone = self.root / "sys/class/powercap/intel-rapl:0"
            write_attr(zone / "name", "package-0")
            write_attr(zone / "constraint_0_name", "long_term")
            write_attr(zone / "constraint_0_power_limit_uw", int(rapl_w * 1e6))
            write_attr(zone / "constraint_1_name", "short_term")
            write_attr(zone / "constraint_1_power_limit_uw", int(rapl_w * 1.2e6))
        return self

    def net(
        self,
        name: str,
        tx: int = 0,
        rx: int = 0,
        kind: int = 1,
        state: str = "up",
        extra: str = "",
        speed_mbit: int | None = None,
    ) -> None:
        """An interface: type (1 Ethernet, 772 loopback, 32 IPoIB), operstate, byte counters; `extra`
        a subdirectory that marks it (`bridge`, `bonding`); `speed_mbit` a device behind it (its
        `device` directory) and its `speed`."""
        base = self.root / "sys/class/net" / name
        write_attr(base / "type", kind)
        write_attr(base / "operstate", state)
        self.set_net(name, tx, rx)
        if extra:
            (base / extra).mkdir(parents=True, exist_ok=True)
        if speed_mbit is not None:
            (base / "device").mkdir(parents=True, exist_ok=True)
            write_attr(base / "speed", speed_mbit)

    def set_net(self, name: str, tx: int, rx: int) -> None:
        base = self.root / "sys/class/net" / name / "statistics"
        write_attr(base / "tx_bytes", tx)
        write_attr(base / "rx_bytes", rx)

    def ib(
        self,
        dev: str,
        port: int,
        xmit_words: int,
        rcv_words: int,
        extended: bool = False,
        legacy: bool = False,
        rate: str | None = None,
    ) -> None:
        """An InfiniBand port's data counters (4-octet words) in `counters/port_*_data`: 64-bit (the
        kernel's since 4.5 on an HCA with extended counters), or with `legacy` the 32-bit PMA counters,
        which stop at 2^32-1; with `extended` also older OFED's `counters_ext/port_*_data_64`; `rate`
        the port's `rate` ('100 Gb/sec (4X EDR)')."""
        base = self.root / "sys/class/infiniband" / dev / "ports" / str(port)
        if rate is not None:
            write_attr(base / "rate", rate)
        ceiling = (1 << 32) - 1 if legacy else 1 << 64
        write_attr(base / "counters" / "port_xmit_data", min(xmit_words, ceiling))
        write_attr(base / "counters" / "port_rcv_data", min(rcv_words, ceiling))
        if extended:
            write_attr(base / "counters_ext" / "port_xmit_data_64", xmit_words)
            write_attr(base / "counters_ext" / "port_rcv_data_64", rcv_words)


@contextlib.contextmanager
def moving(tree: ConditionsTree, cores, khz=(2_000_000, 2_400_000), period_s: float = 0.005):
    """While inside: every `period_s`, each of `cores` switches between the frequencies `khz` and
    its core throttle counter rises by one (another process reading the tree, a map's ranks, sees a
    frequency that moves and a core that throttles, as a governor and a hot package would do)."""
    stop = threading.Event()

    def run() -> None:
        k = 0
        while not stop.is_set():
            k += 1
            for n in cores:
                tree.set_freq(n, khz[k % len(khz)])
                tree.set_throttle(n, k, 0)
            stop.wait(period_s)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield tree
    finally:
        stop.set()
        thread.join()


def unreadable(path: Path) -> None:
    """`path` made a directory: reading it fails for any user, root too (chmod does not stop root)."""
    if path.exists():
        path.unlink()
    path.mkdir(parents=True)
