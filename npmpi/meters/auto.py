"""`--meter auto`: on each node, the best meter that opens there, and why the others were not used.

Tried in order, the first that opens is the node's meter:
1. node-level meters, which see the whole node: `cray` (HPE Cray EX pm_counters), `ipmi` (when the
   node has a local BMC interface, /dev/ipmi0, or auto:ipmi=yes), `redfish` (when auto:redfish=HOST
   names the BMC);
2. package-level meters: `rapl`, then `perf` (the same counters through perf_event);
3. `hwmon` power sensors.
NVIDIA GPUs (`nvml`) are added as extra channels when the chosen meter does not already see them
(a node-level meter includes the GPUs: npmpi adds a node's channels, so they would count twice).
When nothing measured opens, `estimate` (a model of CPU utilisation, labelled estimated).

The choice, with each kind's outcome and reason, is stored in the run file (the node's
`meter_auto` attribute) and printed once at the start. Spec:
`auto[:cray_root=DIR,rapl_root=DIR,perf_root=DIR,hwmon_root=DIR,redfish=HOST,ipmi=yes|no]`; the
roots point the kinds at other trees (tests, containers that mount sysfs elsewhere).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from npmpi.meters.base import Meter, MeterError, MeterFault, MeterSpec, Reading
from npmpi.meters.scope import scope_of, whole_node
from npmpi.meters.survey import KIND_INFO, try_kind

NODE_LEVEL = ("cray", "ipmi", "redfish")
ORDER = ("cray", "ipmi", "redfish", "rapl", "perf", "hwmon")
IPMI_DEVICES = ("/dev/ipmi0", "/dev/ipmi/0", "/dev/ipmidev/0")
CHOSEN, EXTRA, NOT_OPENED, NOT_TRIED = "chosen", "extra", "does not open", "not tried"
GIVEN = "given"  # the meter auto would choose is given with its own --meter: that one is kept
IPMI_YES, IPMI_NO = ("yes", "true", "1"), ("no", "false", "0")


class AutoSpec(Meter):
    """Not a meter: `auto` declares its parameters here; the power rank replaces it by `choose`."""

    kind = "auto"
    parameters = ("cray_root", "rapl_root", "perf_root", "hwmon_root", "redfish", "ipmi")

    def __init__(self, spec: MeterSpec) -> None:
        super().__init__(spec)
        for key in self.parameters[:-1]:
            if key in spec.params and not spec.params[key].strip():
                what = "the BMC's address" if key == "redfish" else "a directory"
                raise MeterError.about(spec.text, f"{key}= is empty: give {what}, or leave {key} out")
        wanted = spec.params.get("ipmi")
        if wanted is not None and wanted.strip().lower() not in (*IPMI_YES, *IPMI_NO):
            raise MeterError.about(spec.text, f"ipmi={wanted!r}: give ipmi=yes or ipmi=no")

    def open(self) -> None:
        raise MeterError.about(
            self.spec.text,
            "auto chooses a node's own meters; it cannot be a fabric meter or part of another meter",
        )

    def read(self, timeout_s: float) -> list[Reading]:
        raise MeterFault("auto is not a meter")


@dataclass
class Step:
    kind: str
    spec: str
    outcome: str  # CHOSEN, EXTRA, GIVEN, NOT_OPENED, NOT_TRIED
    reason: str = ""


@dataclass
class AutoChoice:
    """The meters auto opened on this node, and every kind's outcome."""

    spec: str
    meters: list[Meter] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)

    def record(self) -> dict:
        """What the run file stores (JSON in the node's `meter_auto` attribute)."""
        return {
            "spec": self.spec,
            "chosen": [m.spec.text for m in self.meters],
            "steps": [vars(s) for s in self.steps],
        }

    def summary(self) -> str:
        """One line: what was chosen, and why the others were not."""
        used = [f"{s.spec} ({s.outcome})" for s in self.steps if s.outcome in (CHOSEN, EXTRA, GIVEN)]
        others = [f"{s.kind}: {s.reason}" for s in self.steps if s.outcome not in (CHOSEN, EXTRA, GIVEN)]
        return f"--meter {self.spec} chose {', '.join(used) or 'nothing'}; not used: " + "; ".join(others)


def kind_specs(spec: MeterSpec) -> dict[str, str]:
    """The spec auto tries for each kind whose tree or address the auto spec names."""
    p = spec.params
    out = {}
    if p.get("cray_root"):
        out["cray"] = f"cray:root={p['cray_root']}"
    if p.get("rapl_root"):
        out["rapl"] = f"rapl:{p['rapl_root']}"
    if p.get("perf_root"):
        out["perf"] = f"perf:root={p['perf_root']}"
    if p.get("hwmon_root"):
        out["hwmon"] = f"hwmon:{p['hwmon_root']}"
    if p.get("redfish"):
        out["redfish"] = f"redfish:{p['redfish']}"
    return out


def _not_configured(kind: str, spec: MeterSpec) -> str:
    """Why a node-level network meter is not tried, or '' when it is configured."""
    if kind == "redfish" and not spec.params.get("redfish"):
        return "not configured (name the BMC: --meter auto:redfish=HOST, credentials in the environment)"
    if kind == "ipmi":
        wanted = spec.params.get("ipmi", "").strip().lower()
        if wanted in IPMI_NO:
            return "not wanted (ipmi=no)"
        if wanted not in IPMI_YES and not any(Path(d).exists() for d in IPMI_DEVICES):
            return (
                "not configured: no local BMC interface (/dev/ipmi0; modprobe ipmi_devintf ipmi_si, "
                "or ipmi=yes)"
            )
    return ""


def choose(spec: MeterSpec, given: tuple[str, ...] = (), given_meters: tuple[Meter, ...] = ()) -> AutoChoice:
    """Open this node's best meters (see the module docstring); MeterError only if none opens at all.
    `given`: kinds the node also has from other --meter specs (auto then leaves the GPUs to them);
    `given_meters`: those meters, open: where auto's choice reads what one of them reads, auto keeps
    that one instead (counted once) and looks no further."""
    specs = kind_specs(spec)
    choice = AutoChoice(spec.text)
    chosen: Meter | None = None
    for kind in ORDER:
        text = specs.get(kind, kind)
        if chosen is not None:
            choice.steps.append(Step(kind, text, NOT_TRIED, f"{chosen.kind} was chosen before it"))
            continue
        why = _not_configured(kind, spec)
        if why:
            choice.steps.append(Step(kind, text, NOT_TRIED, why))
            continue
        finding, meter = try_kind(kind, specs.get(kind))
        if meter is None:
            choice.steps.append(Step(kind, text, NOT_OPENED, finding.reason))
            continue
        same = _same_as_given(meter, given_meters)
        if same is not None:
            meter.close()
            chosen = same
            choice.steps.append(Step(kind, same.spec.text, GIVEN, "given with its own --meter: counted once"))
            continue
        chosen = meter
        choice.meters.append(meter)
        choice.steps.append(Step(kind, text, CHOSEN, KIND_INFO[kind][1]))
    _add_gpus(choice, chosen, "nvml" in given)
    if chosen is None:
        finding, meter = try_kind("estimate")
        if meter is None:
            raise MeterError.about(spec.text, f"no meter opens on this node: {choice.summary()}")
        choice.meters.insert(0, meter)
        choice.steps.append(
            Step("estimate", "estimate", CHOSEN, "nothing measured opens here: ESTIMATED power")
        )
    else:
        choice.steps.append(Step("estimate", "estimate", NOT_TRIED, f"{chosen.kind} measures this node"))
    return choice


def _same_as_given(meter: Meter, given_meters: tuple[Meter, ...]) -> Meter | None:
    """The given meter reading what `meter` reads, or None."""
    what = scope_of(meter).what
    return next((g for g in given_meters if scope_of(g).what == what), None)


def _add_gpus(choice: AutoChoice, chosen: Meter | None, given: bool) -> None:
    if given:
        choice.steps.append(Step("nvml", "nvml", NOT_TRIED, "given with its own --meter"))
        return
    if chosen is not None and whole_node(chosen):  # an ACPI power meter (hwmon) too
        choice.steps.append(
            Step("nvml", "nvml", NOT_TRIED, f"{chosen.kind} measures the whole node, its GPUs included")
        )
        return
    finding, meter = try_kind("nvml")
    if meter is None:
        choice.steps.append(Step("nvml", "nvml", NOT_OPENED, finding.reason))
        return
    choice.meters.append(meter)
    choice.steps.append(Step("nvml", "nvml", EXTRA, "the GPUs, which the chosen meter does not see"))


def record_json(choices: list[AutoChoice]) -> str:
    return json.dumps([c.record() for c in choices])
