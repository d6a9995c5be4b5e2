"""A core's frequency settings and state from Linux sysfs: cpufreq, boost/turbo, cpuidle, thermal
throttle counters, RAPL power limits; and Slurm's requested `--cpu-freq`.

Paths (under the root prefix, npmpi/conditions/paths.py):
  sys/devices/system/cpu/cpuN/cpufreq/{scaling_cur_freq, scaling_governor, scaling_{min,max}_freq,
      cpuinfo_{min,max}_freq, energy_performance_preference}       (kHz)
  sys/devices/system/cpu/cpufreq/boost                              (1: boost allowed; acpi-cpufreq, amd)
  sys/devices/system/cpu/intel_pstate/no_turbo                      (1: turbo off)
  sys/devices/system/cpu/cpuN/cpuidle/stateK/{name, disable}        (disable 0: the state is enabled)
  sys/devices/system/cpu/cpuN/thermal_throttle/{core,package}_throttle_count
  sys/class/powercap/*/constraint_K_{name, power_limit_uw}          (RAPL power limits)
Each one missing or unreadable is left out of the settings (or None), never guessed. A current
frequency outside what any core runs at (FREQ_MIN_HZ to FREQ_MAX_HZ) and a throttle counter beyond a
64-bit count, or rising faster than THROTTLE_MAX_RATE, are unknown with the reason (`refused`), never
stored as figures.
"""

from __future__ import annotations

import os

from npmpi.conditions.paths import Root

CPU = "sys/devices/system/cpu"
SLURM_ENV = "SLURM_CPU_FREQ_REQ"
MAX_IDLE_STATES = 32
MAX_ZONES = 64
FREQ_MIN_HZ, FREQ_MAX_HZ = 1e6, 1e10  # no core runs below 1 MHz or above 10 GHz
THROTTLE_MAX_RATE = 1e6  # events per second: a thermal throttle counter never rises faster
COUNT_MAX = (1 << 64) - 1  # the kernel's counters are at most 64 bits


def pinned_cpu() -> int:
    """The core this thread is bound to, -1 when it may run on several."""
    try:
        allowed = os.sched_getaffinity(0)
    except (AttributeError, OSError):
        allowed = set()
    return next(iter(allowed)) if len(allowed) == 1 else -1


def rank_cpu(stat: str = "/proc/thread-self/stat") -> int:
    """The core this thread runs on: its only one when bound to one, else the one it last ran on
    (field 39 of the thread's own stat: never under the root prefix, it is this process's); -1 when
    neither says."""
    pinned = pinned_cpu()
    if pinned >= 0:
        return pinned
    text = Root("/").text(stat, 2048)
    if text and ")" in text:
        fields = text.rsplit(")", 1)[1].split()
        try:
            return int(fields[36])  # field 39 of the whole line: the 37th after the name
        except (IndexError, ValueError):
            return -1
    return -1


def freq_refused(hz: float, what: str) -> str:
    """Why a frequency of `hz` read from `what` is not a core's ('' when it may be)."""
    if FREQ_MIN_HZ <= hz <= FREQ_MAX_HZ:
        return ""
    return (
        f"{what} read {hz / 1e9:.3g} GHz, outside any core's {FREQ_MIN_HZ / 1e6:g} MHz to "
        f"{FREQ_MAX_HZ / 1e9:g} GHz: unknown"
    )


def read_cur_freq(root: Root, cpu: int) -> tuple[float | None, str]:
    """cpufreq's current frequency of `cpu` (scaling_cur_freq, kHz) in Hz, None when not given or
    refused; and why refused ('' otherwise)."""
    if cpu < 0:
        return None, ""
    khz = root.integer(f"{CPU}/cpu{cpu}/cpufreq/scaling_cur_freq")
    if khz is None or khz <= 0:
        return None, ""
    hz = float(min(khz, 10**300)) * 1e3  # a 5,000-digit text must not overflow a float
    why = freq_refused(hz, f"cpu{cpu}'s scaling_cur_freq")
    return (None, why) if why else (hz, "")


def cur_freq_hz(root: Root, cpu: int) -> float | None:
    """cpufreq's current frequency of `cpu` in Hz, None when not given or outside a core's range."""
    return read_cur_freq(root, cpu)[0]


def throttle_refused(before: int | None, after: int | None, elapsed_s: float, what: str) -> str:
    """Why a throttle counter's rise from `before` to `after` over `elapsed_s` seconds is no count
    of events ('' when it may be): a read beyond a 64-bit counter, or a rise faster than
    THROTTLE_MAX_RATE (over at least one second)."""
    if before is None or after is None:
        return ""
    if max(before, after) > COUNT_MAX:
        return f"{what} read {float(min(max(before, after), 10**300)):.3g}, beyond a 64-bit counter: unknown"
    limit = THROTTLE_MAX_RATE * max(elapsed_s, 1.0)
    if after - before > limit:
        return (
            f"{what} rose by {float(after - before):.3g} in {elapsed_s:.3g} s, more than "
            f"{THROTTLE_MAX_RATE:g} events/s: unknown"
        )
    return ""


def throttle_counts(root: Root, cpu: int) -> tuple[int | None, int | None]:
    """The core's and its package's thermal throttle counters (events since boot), None each when absent."""
    if cpu < 0:
        return None, None
    base = f"{CPU}/cpu{cpu}/thermal_throttle"
    return root.integer(f"{base}/core_throttle_count"), root.integer(f"{base}/package_throttle_count")


def _khz_as_hz(root: Root, rel: str) -> float | None:
    khz = root.integer(rel)
    return float(khz) * 1e3 if khz is not None else None


def idle_states(root: Root, cpu: int) -> list[dict]:
    """The core's cpuidle states: name and whether enabled (disable 0), in the kernel's order."""
    base = f"{CPU}/cpu{cpu}/cpuidle"
    names = [n for n in root.listdir(base) if n.startswith("state") and n[5:].isdigit()]
    out = []
    for name in sorted(names, key=lambda n: int(n[5:]))[:MAX_IDLE_STATES]:
        disable = root.integer(f"{base}/{name}/disable")
        enabled = None if disable is None else disable == 0
        out.append({"state": name, "name": root.text(f"{base}/{name}/name", 64), "enabled": enabled})
    return out


def rapl_limits_w(root: Root) -> dict:
    """Each powercap zone's power limits in W by constraint name (long_term, short_term), where readable."""
    out: dict = {}
    base = root.path("sys/class/powercap")
    for zone in root.listdir(base)[:MAX_ZONES]:
        limits = {}
        for k in range(8):
            uw = root.integer(base / zone / f"constraint_{k}_power_limit_uw")
            if uw is None:
                continue
            name = root.text(base / zone / f"constraint_{k}_name", 64) or f"constraint_{k}"
            limits[name] = uw / 1e6
        if limits:
            out[root.text(base / zone / "name", 64) or zone] = limits
    return out


def settings(root: Root, cpu: int) -> dict:
    """The frequency settings of the node and of the rank's core that a run may find changed: each
    key present only when the system gives it (frequencies in Hz)."""
    out: dict = {"cpu": cpu}
    if cpu >= 0:
        base = f"{CPU}/cpu{cpu}/cpufreq"
        out["governor"] = root.text(f"{base}/scaling_governor", 64)
        for key in ("scaling_min_freq", "scaling_max_freq", "cpuinfo_min_freq", "cpuinfo_max_freq"):
            out[f"{key}_hz"] = _khz_as_hz(root, f"{base}/{key}")
        out["energy_performance_preference"] = root.text(f"{base}/energy_performance_preference", 64)
        out["idle_states"] = idle_states(root, cpu)
    boost = root.integer(f"{CPU}/cpufreq/boost")
    no_turbo = root.integer(f"{CPU}/intel_pstate/no_turbo")
    out["boost"] = None if boost is None else boost == 1
    out["intel_pstate_no_turbo"] = None if no_turbo is None else no_turbo == 1
    out["rapl_power_limits_w"] = rapl_limits_w(root)
    out["slurm_cpu_freq_req"] = os.environ.get(SLURM_ENV) or None
    return {k: v for k, v in out.items() if v not in (None, [], {})}
