"""Fabric meters (`--fabric-meter`): devices that belong to no node — a switch, a PDU feeding several
nodes — sampled by one power rank alongside its node's meters.

Any registered meter kind can be a fabric meter. The fabric rank (`--fabric-rank`, default the
first node's power rank) opens them after its node's meters and runs one sampler thread per
channel, exactly as for a node channel: same fault log, heartbeat, baselines and clock. Its batch
to rank 0 holds its node's channels first, then the fabric's; rank 0 (npmpi.power.rank.PowerCollector)
stores the fabric's under /power/fabric/channel{k} (docs/file-format.md). Fabric meters need power
ranks: with no node meter at all the run is refused (docs/power.md says why).
"""

from __future__ import annotations

from npmpi.core.errors import UsageError

FABRIC_OPTION = "--fabric-meter"


def fabric_rank(layout, fabric_meters, requested: int | None) -> int | None:
    """The power rank that samples the fabric meters (None without any); UsageError when there is
    no power rank at all or `requested` (--fabric-rank) is not one. Every rank computes the same."""
    if not fabric_meters:
        return None
    power_ranks = list(layout.power_ranks)
    if not power_ranks:
        raise UsageError(
            f"{FABRIC_OPTION} needs the power ranks that --meter creates, and no node has a meter: add "
            "a node meter (e.g. --meter ipmi, or --meter estimate: a CPU-load model, labelled estimated) "
            "or set NPMPI_METERS on the nodes; the fabric's energy per bit is reported beside the nodes'"
        )
    if requested is None:
        return power_ranks[0]
    if requested not in power_ranks:
        names = ", ".join(f"{r} (node {layout.node_of_rank[r]})" for r in power_ranks)
        raise UsageError(
            f"--fabric-rank {requested} is not a power rank; the power ranks of this job are: {names}"
        )
    return requested


def open_fabric(roles, specs, optional: bool, sample_interval_s: float | None) -> str | None:
    """On the fabric rank: open the fabric meters (`specs`: --fabric-meter's values), add their samplers
    after the node's and describe them in `roles.power_info["fabric"]`; the problem (one line), if any."""
    from npmpi.meters import MeterError
    from npmpi.power.sampler import ChannelSampler, open_meters, sample_interval_for

    label = f"the fabric (sampled by rank {roles.rank} on {roles.host})"
    try:
        meters, skipped = open_meters(list(specs), optional, FABRIC_OPTION)
    except MeterError as exc:
        return f"{label}: {exc.under(FABRIC_OPTION)}"
    samplers = [ChannelSampler(m, sample_interval_for(m, sample_interval_s), label) for m in meters]
    channels = []
    for s in samplers:
        d = s.describe()
        d["sampled_by_rank"] = roles.rank
        channels.append(d)
    roles.samplers = [*roles.samplers, *samplers]
    if roles.power_info is None:
        from npmpi.power.nodemeters import machine_ids

        roles.power_info = {"specs": [], "channels": [], "skipped": [], **machine_ids()}
    roles.power_info["fabric"] = {
        "specs": [spec.text for spec in specs],
        "channels": channels,
        "skipped": skipped,
        "rank": roles.rank,
    }
    return None


def fabric_info(power_nodes: list[dict]) -> tuple[int, dict] | None:
    """(node index, fabric description) of the node whose power rank samples the fabric, or None."""
    for node, info in enumerate(power_nodes):
        if info and info.get("fabric") is not None:
            return node, info["fabric"]
    return None


def fabric_group_attrs(node: int, info: dict, host: str) -> dict:
    """The attributes of /power/fabric: who samples it, its specs, what was skipped and why."""
    return {
        "power_rank": int(info["rank"]),
        "node_index": node,
        "host": host,
        "meter_specs": list(info["specs"]),
        "meters_skipped": list(info["skipped"]) or "",
    }
