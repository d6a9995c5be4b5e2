"""What each channel of a node measures, so that no energy is counted twice in the node's total.

npmpi sums a node's channels into the node's power. Two channels can hold the same energy: the same
meter given twice, `auto` choosing the meter another --meter gives too, or a part of the node (a CPU
package, a GPU, a pm_counters component) beside a meter of the whole node, which contains it.

- A spec given twice for one node (the same text, or `auto` twice) is refused before anything is
  opened: a usage error, exit status 2 (`refuse_doubled`).
- Every channel has a scope: `node` (the whole node: cray's node counter, ipmi, redfish, an ACPI
  power meter in hwmon, the estimate, a replayed trace), `supply` (a wall plug: a PDU outlet, a
  Watts Up?; a node with two power supplies has two) or `part` (rapl, perf, nvml, cray's cpu, memory
  and accelerators, other hwmon sensors), and names what it reads (`what`).
- The node's total (`mark_totals`) is its first measured whole-node channel (else its first
  whole-node channel) if it has one; else its wall plugs; else its parts. A channel reading what
  an earlier one of the total reads is left out of the total too. The others stay channels of the
  file, with `in_node_total` false and the reason.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from npmpi.meters.base import LABEL_MEASURED, Meter, MeterError, MeterSpec

SCOPE_NODE, SCOPE_SUPPLY, SCOPE_PART = "node", "supply", "part"
_RANK = (SCOPE_NODE, SCOPE_SUPPLY, SCOPE_PART)
_NAMES = {SCOPE_NODE: "whole-node", SCOPE_SUPPLY: "wall plug", SCOPE_PART: "part"}
WHOLE_NODE_HWMON = ("power_meter",)  # the ACPI power meter: the whole server's input power
# default positional arguments, so that `cray` and `cray:node` are one spec
_DEFAULT_TARGET = {"cray": "node", "nvml": "all"}
_PERF_DOMAINS = {"pkg": "package", "ram": "dram", "cores": "core"}  # perf's event names, as rapl's


def _same_spec_key(spec: MeterSpec) -> tuple:
    if spec.kind == "auto":
        return ("auto",)
    target = (spec.target or _DEFAULT_TARGET.get(spec.kind, "")).strip()
    params = tuple(sorted((k.strip(), v.strip()) for k, v in spec.params.items()))
    return (spec.kind, target.lower() if spec.kind in _DEFAULT_TARGET else target, params)


def refuse_doubled(specs) -> None:
    """MeterError (a usage error) if one of a node's specs is given twice (or `auto` twice)."""
    seen: dict[tuple, MeterSpec] = {}
    for spec in specs:
        key = _same_spec_key(spec)
        if key in seen:
            first = seen[key]
            also = "" if first.text == spec.text else f" (first as {first.text!r})"
            what = "auto is given twice" if key == ("auto",) else "this meter is given twice"
            raise MeterError.about(
                spec.text,
                f"{what}{also}: npmpi adds a node's channels, so the same energy would count twice; "
                "give each meter once",
            )
        seen[key] = spec


@dataclass(frozen=True)
class Scope:
    scope: str  # SCOPE_NODE, SCOPE_SUPPLY or SCOPE_PART
    what: str  # what it reads: channels reading the same thing count once


def _path(text: str | None, default: str) -> str:
    return os.path.realpath(text or default)


def scope_of(meter: Meter) -> Scope:
    """The channel's scope and what it reads (after open: an hwmon meter knows its devices then)."""
    kind, spec = meter.kind, meter.spec
    if kind == "cray":
        channel = str(getattr(meter, "channel", spec.target or "node"))
        where = _path(spec.params.get("root"), "/sys/cray/pm_counters")
        if channel == "node":
            return Scope(SCOPE_NODE, f"node:{where}")
        return Scope(SCOPE_PART, f"cray {channel}:{where}")
    if kind in ("rapl", "perf"):  # the same RAPL counters through powercap or perf_event
        given = spec.params.get("domains") if kind == "rapl" else spec.params.get("events") or spec.target
        given = given or "package"
        domains = sorted({_PERF_DOMAINS.get(d.strip(), d.strip()) for d in given.split("+")})
        return Scope(SCOPE_PART, f"cpu energy:{'+'.join(domains)}")
    if kind == "nvml":
        return Scope(SCOPE_PART, f"gpu:{(spec.target or 'all').strip().lower()}")
    if kind == "hwmon":
        names = sorted({d.name for d in getattr(meter, "devices", [])})
        if names and all(n in WHOLE_NODE_HWMON for n in names):
            return Scope(SCOPE_NODE, "node:hwmon power_meter")
        files = sorted(str(f) for f in getattr(meter, "files", []))
        return Scope(SCOPE_PART, f"hwmon:{','.join(files) or spec.text}")
    if kind in ("snmp", "wattsup"):
        return Scope(SCOPE_SUPPLY, f"{kind}:{spec.text}")
    return Scope(SCOPE_NODE, f"{kind}:{spec.text}")  # ipmi, redfish, estimate, replay: the whole node


def whole_node(meter: Meter) -> bool:
    return scope_of(meter).scope == SCOPE_NODE


def mark_totals(meters: list[Meter]) -> list[dict[str, object]]:
    """Per meter, the channel attributes saying whether it is in the node's total: `scope`,
    `in_node_total` and `node_total_note` (why not, '' when it is)."""
    scopes = [scope_of(m) for m in meters]
    top = min((_RANK.index(s.scope) for s in scopes), default=0)
    # the whole-node meter that is the total: the first measured one, else the first (an estimate)
    nodes = [m for m, s in zip(meters, scopes, strict=True) if s.scope == SCOPE_NODE]
    total = next((m for m in nodes if m.label == LABEL_MEASURED), nodes[0] if nodes else None)
    counted: dict[str, str] = {}  # what -> the spec counting it
    out = []
    for meter, s in zip(meters, scopes, strict=True):
        note = ""
        if _RANK.index(s.scope) > top:
            note = (
                f"a {_NAMES[s.scope]} inside the node, whose total comes from its {_NAMES[_RANK[top]]} meter"
            )
        elif total is not None and meter is not total:
            note = f"another whole-node meter: the node's total is {total.spec.text}'s"
        elif s.what in counted:
            note = f"reads what {counted[s.what]} reads: counted once"
        if not note:
            counted[s.what] = meter.spec.text
        out.append({"scope": s.scope, "in_node_total": not note, "node_total_note": note})
    return out
