"""What every meter kind can do on this node: whether it opens, what it would measure, and when it
does not, the exact reason and the fix. Used by `python -m npmpi meters` and by `--meter auto`.

A kind is tried by building and opening its default spec (sysfs trees, libraries and commands on
this node); kinds that need an address, a device or a file the node cannot guess (a Watts Up? port,
a PDU, a BMC's Redfish service, a trace) are not tried, and say what to give. Opening is what a
power rank does at the start of a run, nothing more: no sample is taken.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from npmpi.meters.base import Meter, MeterError, known_meters, make_meter, parse_meter_spec

# kind: (level, what it measures, how: counter or power)
KIND_INFO = {
    "cray": ("node", "the node's energy counter of an HPE Cray EX/XC node (pm_counters)", "counter"),
    "ipmi": ("node", "the whole node's power from its BMC (DCMI power reading)", "power"),
    "redfish": ("node", "the chassis's power or energy from its BMC's Redfish service", "power or counter"),
    "rapl": ("package", "CPU package energy counters (powercap)", "counter"),
    "perf": ("package", "CPU package energy counters through perf_event", "counter"),
    "hwmon": ("sensor", "hwmon power sensors (ACPI power meters, boards)", "power"),
    "nvml": ("gpu", "NVIDIA GPUs' power or energy (NVML)", "power or counter"),
    "estimate": ("model", "node power estimated from CPU utilisation (labelled estimated)", "power"),
    "wattsup": ("device", "the wall power of what is plugged into a Watts Up? PRO", "power"),
    "snmp": ("device", "PDU outlets or switches over SNMP", "power"),
    "replay": ("simulated", "a recorded power trace replayed (labelled simulated)", "power"),
}
# the order of the table: auto's order (node-level first), then the meters a node cannot find alone
SURVEY_ORDER = (
    "cray",
    "ipmi",
    "redfish",
    "rapl",
    "perf",
    "hwmon",
    "nvml",
    "estimate",
    "wattsup",
    "snmp",
    "replay",
)
# kinds a node cannot find by itself: what to give instead of trying
NEEDS_TARGET = {
    "wattsup": "needs the meter's serial port: --meter wattsup:/dev/ttyUSB0 (read access: group dialout)",
    "snmp": "needs the PDU's address and outlet: --meter snmp:HOST,profile=...,outlet=N "
    "(community or SNMPv3 keys in NPMPI_SNMP_COMMUNITY / NPMPI_SNMP_USER, NPMPI_SNMP_AUTH_KEY, "
    "NPMPI_SNMP_PRIV_KEY)",
    "redfish": "needs the BMC's address: --meter redfish:HOST (or --meter auto:redfish=HOST), with "
    "NPMPI_REDFISH_USER and NPMPI_REDFISH_PASSWORD in the environment",
    "replay": "needs a recorded trace: --meter replay:FILE (simulated, never a measurement)",
}
# kind: (fix when permission is the reason, fix otherwise)
FIXES = {
    "cray": (
        "pm_counters are world-readable on Cray EX: ask the site",
        "none here: pm_counters exist only on HPE Cray EX/XC compute nodes",
    ),
    "ipmi": (
        "read access to /dev/ipmi0 (an administrator: `chgrp ipmi /dev/ipmi0; chmod g+rw /dev/ipmi0`, or a "
        'udev rule KERNEL=="ipmi*", GROUP="ipmi", MODE="0660")',
        "apt install ipmitool (dnf install ipmitool); modprobe ipmi_devintf ipmi_si for the local BMC",
    ),
    "rapl": (
        "an administrator grants a group read access: `chgrp power /sys/class/powercap/intel-rapl:*/energy_uj"
        " && chmod g+r ...`, kept across reboots by a udev rule (docs/meters.md, No root?)",
        "modprobe intel_rapl_msr (Intel; AMD needs Linux 5.8+); virtual machines have no RAPL",
    ),
    "perf": (
        "an administrator sets `sysctl kernel.perf_event_paranoid=0`, or grants CAP_PERFMON",
        "a kernel with the RAPL perf PMU (CONFIG_PERF_EVENTS_INTEL_RAPL); virtual machines have none",
    ),
    "hwmon": (
        "read access to /sys/class/hwmon/*/power*",
        "modprobe acpi_power_meter (servers with an ACPI power meter); most machines have no power sensor",
    ),
    "nvml": (
        "read access to /dev/nvidia*",
        "pip install nvidia-ml-py and an NVIDIA driver; nodes without NVIDIA GPUs have nothing to read",
    ),
    "estimate": ("read access to /proc/stat", "a Linux /proc"),
}

NOT_A_FILE_FIX = (
    "a file of the tree was replaced by something else (never read: it could block); put the real "
    "file back, or point the meter (root=, auto:*_root=) at the real tree"
)


@dataclass
class Finding:
    """One kind on this node."""

    kind: str
    spec: str
    opens: bool
    tried: bool
    level: str
    measures: str
    how: str
    label: str = ""
    channels: list[str] = field(default_factory=list)  # what it could measure here, one channel a meter
    quantities: list[str] = field(default_factory=list)
    interval_s: float | None = None
    description: str = ""
    reason: str = ""
    fix: str = ""

    def as_dict(self) -> dict:
        return asdict(self)


def _reason(spec: str, exc: MeterError) -> str:
    """The error's words after the spec when it names the one tried, else its whole message."""
    return exc.detail if exc.spec == spec else str(exc)


def fix_for(kind: str, reason: str) -> str:
    permission, other = FIXES.get(kind, ("", ""))
    if kind == "perf":  # the level decides it as soon as the PMU is there: say what it is here
        from npmpi.meters.perf import paranoid_level

        level = f" (perf_event_paranoid is {paranoid_level()} here)"
        permission, other = permission + level, other + level
    lowered = reason.lower()
    if "not a regular file" in lowered:  # a FIFO, a device or a directory where a sysfs file should be
        return NOT_A_FILE_FIX
    if "permission" in lowered or "paranoid" in lowered or "refused" in lowered:
        return permission
    return other


def channels_of(meter: Meter) -> list[str]:
    """The channels a kind offers on this node: pm_counters' energy counters, else the meter itself."""
    if meter.kind == "cray":
        root = getattr(meter, "root", None)
        names = sorted(p.name for p in root.glob("*energy")) if root is not None else []
        parts = [n.removesuffix("_energy") for n in names if n != "energy"]
        return (["node"] if "energy" in names else []) + parts
    return [meter.description()]


def try_kind(kind: str, spec: str | None = None) -> tuple[Finding, Meter | None]:
    """Build and open one kind (its default spec, or `spec`); the finding and the open meter (or None)."""
    level, measures, how = KIND_INFO.get(kind, ("other", kind, "power"))
    text = spec or kind
    finding = Finding(kind, text, False, False, level, measures, how)
    if spec is None and kind in NEEDS_TARGET:
        finding.reason = "not tried: it cannot be found from the node alone"
        finding.fix = NEEDS_TARGET[kind]
        return finding, None
    finding.tried = True
    try:
        meter = make_meter(parse_meter_spec(text))
        meter.open()
    except MeterError as exc:
        finding.reason = _reason(text, exc)
        finding.fix = fix_for(kind, finding.reason)
        return finding, None
    except Exception as exc:  # a backend's unexpected failure is still one line, not a traceback
        finding.reason = f"unexpected {type(exc).__name__}: {exc}"
        return finding, None
    d = meter.describe()
    finding.opens = True
    finding.label = str(d.get("label", ""))
    finding.quantities = [str(q) for q in d.get("quantities", [])]
    finding.channels = channels_of(meter)
    finding.interval_s = float(d.get("natural_interval_s") or meter.natural_interval_s)
    finding.description = str(d.get("description", ""))
    return finding, meter


def survey(specs: dict[str, str] | None = None) -> list[Finding]:
    """Every registered kind on this node (`specs`: the spec to try for a kind instead of its default)."""
    out = []
    kinds = [k for k in known_meters() if k != "auto"]
    for kind in sorted(
        kinds, key=lambda k: SURVEY_ORDER.index(k) if k in SURVEY_ORDER else len(SURVEY_ORDER)
    ):
        finding, meter = try_kind(kind, (specs or {}).get(kind))
        if meter is not None:
            meter.close()
        out.append(finding)
    return out


def table(findings: list[Finding], chosen: str = "") -> str:
    """The human table of `python -m npmpi meters`."""
    lines = [f"{'meter':<9} {'opens':<5} {'level':<9} {'reading':<8} what / why not"]
    for f in findings:
        if f.opens:
            every = f"every {f.interval_s:g} s" if f.interval_s else ""
            lines.append(
                f"{f.kind:<9} {'yes':<5} {f.level:<9} {f.how.split()[0]:<8} {f.measures}; {every}"
                + (f" [{f.label}]" if f.label and f.label != "measured" else "")
            )
            lines.append(f"{'':<34}{f.description}")
        else:
            lines.append(f"{f.kind:<9} {'no':<5} {f.level:<9} {f.how.split()[0]:<8} {f.measures}")
            lines.append(f"{'':<34}why not: {f.reason}")
            if f.fix:
                lines.append(f"{'':<34}fix: {f.fix}")
    if chosen:
        lines.append(f"--meter auto would use: {chosen}")
    return "\n".join(lines)
