"""A fake perf_event PMU description (/sys/bus/event_source/devices/power) in a temporary directory.

Written as the kernel's RAPL PMU (arch/x86/events/rapl.c) shows itself, one attribute a file with a
newline: `type` (the PMU's number for perf_event_open), `cpumask` (one CPU per package),
`format/event` (`config:0-7`), `events/energy-pkg` (`event=0x02`), `energy-ram` (`event=0x03`),
`energy-psys` (`event=0x05`), each with `.scale` (`2.3283064365386962890625e-10`, 2^-32 J) and
`.unit` (`Joules`). `software_clock_tree` describes instead the kernel's software cpu-clock event
(type 1, config 0, nanoseconds) under the same names, so the meter's reading path can count a real
kernel counter on a machine without RAPL.
"""

from __future__ import annotations

from pathlib import Path

RAPL_SCALE = "2.3283064365386962890625e-10"
RAPL_CODES = {"cores": 0x01, "pkg": 0x02, "ram": 0x03, "gpu": 0x04, "psys": 0x05}


def write(path: Path, text: str, end: str = "\n") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + end)


def rapl_tree(
    root: Path, pmu_type: int = 35, cpumask: str = "0", domains=("pkg", "ram"), old_kernel: bool = False
) -> Path:
    """The kernel's RAPL PMU description. The first RAPL PMU (arch/x86/kernel/cpu/perf_event_intel_rapl.c)
    printed the event strings (`event=0x02`, the scale, the unit) without a newline (rapl_sysfs_show:
    "%s"); `old_kernel` writes them so. Later kernels end them with one."""
    end = "" if old_kernel else "\n"
    write(root / "type", str(pmu_type))
    write(root / "cpumask", cpumask)
    write(root / "format" / "event", "config:0-7")
    for d in domains:
        write(root / "events" / f"energy-{d}", f"event=0x{RAPL_CODES[d]:02x}", end)
        write(root / "events" / f"energy-{d}.scale", RAPL_SCALE, end)
        write(root / "events" / f"energy-{d}.unit", "Joules", end)
    return root


def software_clock_tree(root: Path, cpumask: str = "0") -> Path:
    """energy-pkg described as the software cpu-clock event: 1e-9 'J' a count, one 'W' per CPU."""
    rapl_tree(root, pmu_type=1, cpumask=cpumask, domains=("pkg",))
    write(root / "events" / "energy-pkg", "event=0x00")
    write(root / "events" / "energy-pkg.scale", "1e-9")
    return root
