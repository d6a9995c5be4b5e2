"""Nodes that are one machine: power ranks on network-namespace hosts or containers of one kernel
each read that machine's whole power, so it must not be summed once per node.

Each node records its kernel's boot_id (and the installation's machine-id, format 1.6); nodes with
one boot_id are one machine. Its power counts once in the job's, from the first of its nodes; a
notice names them. Simulated power (a replayed trace per node) is no reading of the machine: such
nodes are still summed, with the same notice.
"""

from __future__ import annotations

LABEL_SIMULATED = "simulated"


def machine_of(node_attrs: list[dict], labels: list[list[str]]) -> list[int]:
    """For each node, the first node of its machine (itself unless another shares its boot_id and
    their power is not all simulated)."""
    dropped, _ = shared_machines(node_attrs, labels)
    first: dict[str, int] = {}
    out = []
    for i, attrs in enumerate(node_attrs):
        boot = str(attrs.get("boot_id", "") or "").strip()
        k = first.setdefault(boot, i) if boot else i
        out.append(k if i in dropped else i)
    return out


def shared_machines(node_attrs: list[dict], labels: list[list[str]]) -> tuple[set[int], list[str]]:
    """(indices of the nodes left out of the job's sum, notices) from each node's attributes and its
    channels' labels."""
    groups: dict[str, list[int]] = {}
    for i, attrs in enumerate(node_attrs):
        boot = str(attrs.get("boot_id", "") or "").strip()
        if boot:
            groups.setdefault(boot, []).append(i)
    dropped: set[int] = set()
    notices = []
    for boot, members in groups.items():
        if len(members) < 2:
            continue
        names = ", ".join(f"node {i} ({node_attrs[i].get('host', '?')})" for i in members)
        if all(lab == LABEL_SIMULATED for i in members for lab in labels[i]):
            notices.append(
                f"{names} are one machine (kernel boot_id {boot[:8]}…): their power is simulated, "
                "so it is summed as given"
            )
            continue
        dropped.update(members[1:])
        notices.append(
            f"{names} are one machine (kernel boot_id {boot[:8]}…: network namespaces or containers "
            f"of one host): each reads that machine's power, so the job's power counts it once "
            f"(node {members[0]}), not {len(members)} times"
        )
    return dropped, notices
