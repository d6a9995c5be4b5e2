"""A power rank's meters opened (its node's specs, `auto` resolved) and the machine it runs on."""

from __future__ import annotations

import os


def open_power_rank(roles, meter_optional: bool, sample_interval_s: float | None) -> str | None:
    """On a power rank: open the node's meters and prepare their samplers; the problem, if any."""
    from npmpi.meters import MeterError
    from npmpi.meters.scope import mark_totals
    from npmpi.power.sampler import METERS_ENV, ChannelSampler, sample_interval_for

    node_label = f"node {roles.layout.node_of_rank[roles.rank]} ({roles.host})"
    if os.environ.get("NPMPI_FAULT_RAISE_OPEN"):  # fault injection for the test suite
        raise RuntimeError(f"fault injected while opening the meters of {node_label}")
    if roles.meter_problem is not None:
        return f"{node_label}: {roles.meter_problem}"
    try:
        if not roles.meter_specs:
            raise MeterError(f"{node_label} has no meter: give --meter, or set {METERS_ENV} on every node")
        meters, skipped, auto = _open_node_meters(roles.meter_specs, meter_optional)
    except MeterError as exc:
        return f"{node_label}: {exc}"
    roles.samplers = [
        ChannelSampler(m, sample_interval_for(m, sample_interval_s), node_label) for m in meters
    ]
    descs = [s.describe() for s in roles.samplers]
    for desc, mark in zip(descs, mark_totals(meters), strict=True):  # nothing counted twice
        desc.update(mark)
    texts = [spec.text for spec in roles.meter_specs]
    roles.power_info = {"specs": texts, "channels": descs, "skipped": skipped, **machine_ids()}
    if auto:  # --meter auto: what it chose and why (npmpi.meters.auto)
        roles.power_info["auto"] = [c.record() for c in auto]
        roles.power_info["auto_summary"] = "; ".join(c.summary() for c in auto)
    return None


def _open_node_meters(specs: list, meter_optional: bool):
    """The node's meters: `auto` specs replaced by the meters they choose here; (meters, skipped, choices)."""
    from npmpi.meters.auto import choose
    from npmpi.power.sampler import open_meters

    others = [s for s in specs if s.kind != "auto"]
    meters, skipped = open_meters(others, meter_optional)
    given = tuple(s.kind for s in others)
    choices = [choose(s, given, tuple(meters)) for s in specs if s.kind == "auto"]
    for c in choices:
        meters.extend(c.meters)
    return meters, skipped, choices


BOOT_ID_FILE = "/proc/sys/kernel/random/boot_id"
MACHINE_ID_FILE = "/etc/machine-id"


def machine_ids(boot_id_file: str = BOOT_ID_FILE, machine_id_file: str = MACHINE_ID_FILE) -> dict[str, str]:
    """This host's kernel boot (boot_id: one per running kernel, shared by containers and network
    namespaces on it) and installation (machine-id); '' where unreadable. Two nodes with one boot_id
    are one machine: each meter of theirs reads that machine's power."""
    out = {}
    for key, path in (("boot_id", boot_id_file), ("machine_id", machine_id_file)):
        try:
            with open(path, encoding="ascii", errors="replace") as f:
                out[key] = f.read(128).strip()
        except OSError:
            out[key] = ""
    return out
