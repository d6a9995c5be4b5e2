"""Which rank does what: the ping-pong pair(s), the power rank of each node, idle ranks."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

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
    pairs: tuple[tuple[int, int], ...] = field(default=())  # every measured pair; pairs[0] == pair

    def __post_init__(self) -> None:
        if not self.pairs:
            object.__setattr__(self, "pairs", (self.pair,))

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

    @property
    def pairs_crossing_nodes(self) -> int:
        return sum(self.node_of_rank[a] != self.node_of_rank[b] for a, b in self.pairs)

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


def _power_rank(ranks: list[int], threaded: Sequence[bool] | None) -> int:
    """A node's power rank: its highest rank but 0 that got a thread level for meter threads, else
    its highest rank (the thread level was asked for before roles were known: threadlevel.py)."""
    able = [r for r in ranks if r != 0 and threaded is not None and threaded[r]]
    return able[-1] if able else ranks[-1]


def compute_layout(
    node_keys: list[str], hosts: list[str], power: bool, threaded: Sequence[bool] | None = None
) -> Layout:
    """Assign roles from each rank's node key (shared-memory domain) and host name.

    Nodes are numbered in order of their lowest rank. With power, each node's power rank is the
    highest rank that got at least MPI_THREAD_FUNNELED (`threaded`, per rank), else its highest
    rank. The pair is rank 0 and the lowest free rank on another node when there
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
            power_ranks.append(_power_rank(ranks, threaded))
            roles[power_ranks[-1]] = ROLE_POWER
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


def pair_ranks(
    capable: Sequence[int], node_of_rank: Sequence[int], count: int
) -> tuple[tuple[int, int], ...]:
    """NetPIPE 5's pairs: pair i is capable[i] with capable[n-1-i], the transmitter first.

    `capable` (the ranks that may measure) is first ordered by node, then by rank, so the two
    halves lie on different nodes whenever the ranks allow it; a pair still left within one node
    then swaps its reflector with another pair's when that puts both across nodes. The first
    `count` pairs are taken.
    """
    order = sorted(capable, key=lambda r: (node_of_rank[r], r))
    n = len(order)
    if not 1 <= count <= n // 2:
        raise ValueError(f"{count} pairs need {2 * count} ranks, {n} given")
    pairs = [[order[i], order[n - 1 - i]] for i in range(count)]
    node = node_of_rank
    for i, (a, b) in enumerate(pairs):
        if node[a] != node[b]:
            continue
        for j, (c, d) in enumerate(pairs):
            if j != i and node[a] != node[d] and node[c] != node[b]:
                pairs[i][1], pairs[j][1] = d, b
                break
    return tuple((a, b) for a, b in pairs)


def with_pairs(layout: Layout, pairs: int | str) -> Layout:
    """The layout with `pairs` pairs ("all": as many as the non-power ranks make); 1 keeps it as is."""
    if pairs == 1:
        return layout
    capable = [r for r in range(layout.world_size) if layout.roles[r] != ROLE_POWER]
    count = len(capable) // 2 if pairs == "all" else int(pairs)
    if count > len(capable) // 2 or count < 1:
        power = len(layout.power_ranks)
        extra = f" plus {power} power rank{'s' if power != 1 else ''}" if power else ""
        raise LayoutError(
            f"--pairs {pairs} needs {2 * count if count >= 1 else 2} ranks that take part in the "
            f"measurement{extra}, but {len(capable)} of the {layout.world_size} ranks can: run e.g. "
            f"mpirun -np {2 * max(count, 1) + power} python -m npmpi --pairs {pairs} …"
        )
    if count == 1:
        return layout  # one pair: the usual choice (rank 0 and a rank on another node)
    chosen = pair_ranks(capable, layout.node_of_rank, count)
    roles = [ROLE_POWER if r in layout.power_ranks else ROLE_IDLE for r in range(layout.world_size)]
    for a, b in chosen:
        roles[a], roles[b] = ROLE_TRANSMITTER, ROLE_REFLECTOR
    return replace(layout, roles=tuple(roles), pair=chosen[0], pairs=chosen)
