"""Which rank does what: the ping-pong pair, the power rank of each node, idle ranks."""

from __future__ import annotations

from dataclasses import dataclass, field

ROLE_TRANSMITTER = "transmitter"
ROLE_REFLECTOR = "reflector"
ROLE_POWER = "power"
ROLE_IDLE = "idle"


@dataclass(frozen=True)
class Layout:
    """Roles of all ranks; rank 0 is always the transmitter and the file's writer."""

    hosts: tuple[str, ...]  # per rank
    node_of_rank: tuple[int, ...]  # node index per rank, nodes numbered by first rank
    roles: tuple[str, ...]  # per rank
    pair: tuple[int, int]
    power_ranks: tuple[int, ...] = field(default=())  # one per node, in node order

    @property
    def world_size(self) -> int:
        return len(self.roles)

    @property
    def node_count(self) -> int:
        return max(self.node_of_rank) + 1

    @property
    def pair_crosses_nodes(self) -> bool:
        a, b = self.pair
        return self.node_of_rank[a] != self.node_of_rank[b]

    def describe(self) -> list[str]:
        """Lines for the console header: one per node."""
        lines = []
        for node in range(self.node_count):
            ranks = [r for r in range(self.world_size) if self.node_of_rank[r] == node]
            host = self.hosts[ranks[0]]
            parts = [f"{r}:{self.roles[r]}" for r in ranks]
            lines.append(f"node {node} ({host}): " + ", ".join(parts))
        return lines


class LayoutError(ValueError):
    """Too few ranks for the requested roles; the message says how many are needed."""


def compute_layout(node_keys: list[str], hosts: list[str], power: bool) -> Layout:
    """Assign roles from each rank's node key (shared-memory domain) and host name.

    Nodes are numbered in order of their lowest rank. With power, each node's highest rank
    samples its meters. The pair is rank 0 and the lowest free rank on another node when there
    is one (so the network is measured), else the lowest free rank on node 0.
    """
    size = len(node_keys)
    if len(hosts) != size:
        raise ValueError("node_keys and hosts differ in length")
    node_index: dict[str, int] = {}
    node_of_rank = []
    for key in node_keys:
        node_of_rank.append(node_index.setdefault(key, len(node_index)))
    nodes = [[r for r in range(size) if node_of_rank[r] == n] for n in range(len(node_index))]

    roles = [ROLE_IDLE] * size
    power_ranks: list[int] = []
    if power:
        for ranks in nodes:
            power_ranks.append(ranks[-1])
            roles[ranks[-1]] = ROLE_POWER
        if roles[0] == ROLE_POWER:
            raise LayoutError(
                "power needs one extra rank per node: node 0 "
                f"({hosts[0]}) has only 1 rank, which must take part in the ping-pong; "
                f"run e.g. mpirun -np {2 * len(nodes) if len(nodes) > 1 else 3} "
                "--map-by node python -m npmpi … so that every node has 2 ranks"
            )
    free = [r for r in range(size) if roles[r] == ROLE_IDLE]
    if len(free) < 2:
        need = 2 + (len(nodes) if power else 0)
        given = (
            f"{len(nodes)} node{'s' if len(nodes) != 1 else ''}, {size} rank{'s' if size != 1 else ''} given"
        )
        why = "a ping-pong needs 2 ranks" + (" and power needs one extra rank per node" if power else "")
        raise LayoutError(f"{why}: {given}; run e.g. mpirun -np {need} python -m npmpi …")
    other_node = [r for r in free if node_of_rank[r] != node_of_rank[0]]
    peer = other_node[0] if other_node else next(r for r in free if r != 0)
    roles[0] = ROLE_TRANSMITTER
    roles[peer] = ROLE_REFLECTOR
    return Layout(
        hosts=tuple(hosts),
        node_of_rank=tuple(node_of_rank),
        roles=tuple(roles),
        pair=(0, peer),
        power_ranks=tuple(power_ranks),
    )
