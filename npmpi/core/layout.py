"""Which rank does what: the measuring groups (a ping-pong's pair(s), a map's members, a collective's
ranks), the power rank of each node, idle ranks.

`node_layout` numbers the nodes and picks each node's power rank, for every kind of benchmark;
a kind then chooses its measuring groups among the other ranks (npmpi/kinds/kind.py): the run's
pair is `compute_layout`'s, the map's members are npmpi/map/kind.py's."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

ROLE_TRANSMITTER = "transmitter"
ROLE_REFLECTOR = "reflector"
ROLE_POWER = "power"
ROLE_IDLE = "idle"


@dataclass(frozen=True)
class Layout:
    """Roles of all ranks; rank 0 always measures and writes the file.

    `groups` are the measuring groups: ranks that measure together, each group with its own
    communicator that power and idle ranks never join (npmpi/kinds/command.py). A run's groups are
    its pairs (the first is `pair`, rank 0 the transmitter); a kind with no pair leaves `pair` None."""

    hosts: tuple[str, ...]  # per rank
    node_of_rank: tuple[int, ...]  # node index per rank, nodes numbered by first rank
    roles: tuple[str, ...]  # per rank
    pair: tuple[int, int] | None = None
    power_ranks: tuple[int, ...] = field(default=())  # one per node, in node order
    pairs: tuple[tuple[int, int], ...] = field(default=())  # every measured pair; pairs[0] == pair
    groups: tuple[tuple[int, ...], ...] = field(default=())  # the measuring groups (default: the pairs)

    def __post_init__(self) -> None:
        if not self.pairs and self.pair is not None:
            object.__setattr__(self, "pairs", (self.pair,))
        if not self.groups:
            object.__setattr__(self, "groups", tuple(tuple(p) for p in self.pairs))

    @property
    def members(self) -> tuple[int, ...]:
        """Every measuring rank, in rank order."""
        return tuple(sorted({r for group in self.groups for r in group}))

    @property
    def capable(self) -> list[int]:
        """The ranks that may measure: every rank but the power ranks."""
        return [r for r in range(self.world_size) if r not in self.power_ranks]

    def group_of(self, rank: int) -> int | None:
        """The index of the measuring group `rank` belongs to, None for a rank that does not measure."""
        return next((i for i, group in enumerate(self.groups) if rank in group), None)

    @property
    def world_size(self) -> int:
        return len(self.roles)

    @property
    def node_count(self) -> int:
        return max(self.node_of_rank) + 1

    @property
    def pair_crosses_nodes(self) -> bool:
        if self.pair is None:
            return False
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


@dataclass(frozen=True)
class Words:
    """How a kind names its measurement in the layout's errors: 'a ping-pong needs 2 ranks', 'run
    e.g. mpirun -np 3 python -m npmpi …'."""

    needs: str = "a ping-pong needs 2 ranks"
    takes_part: str = "take part in the ping-pong"
    command: str = "python -m npmpi …"
    least: int = 2  # measuring ranks needed


PING_PONG = Words()


def node_layout(
    node_keys: list[str],
    hosts: list[str],
    power: bool,
    threaded: Sequence[bool] | None = None,
    words: Words = PING_PONG,
) -> Layout:
    """Nodes and power ranks, every other rank idle: each rank's node key (shared-memory domain)
    and host name. Nodes are numbered in order of their lowest rank. With power, each node's power
    rank is the highest rank that got at least MPI_THREAD_FUNNELED (`threaded`, per rank), else its
    highest rank. LayoutError, in the kind's `words`, when fewer than `words.least` ranks are left
    to measure or rank 0 would have to sample power."""
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
                f"({hosts[0]}) has only 1 rank, which must {words.takes_part}; "
                f"run e.g. mpirun -np {2 * len(nodes) if len(nodes) > 1 else 3} "
                f"--map-by node {words.command.removesuffix(' …')} … so that every node has 2 ranks"
            )
    free = [r for r in range(size) if roles[r] == ROLE_IDLE]
    if len(free) < words.least:
        need = words.least + (len(nodes) if power else 0)
        given = (
            f"{len(nodes)} node{'s' if len(nodes) != 1 else ''}, {size} rank{'s' if size != 1 else ''} given"
        )
        why = words.needs + (" and power needs one extra rank per node" if power else "")
        raise LayoutError(f"{why}: {given}; run e.g. mpirun -np {need} {words.command}")
    return Layout(
        hosts=tuple(hosts),
        node_of_rank=tuple(node_of_rank),
        roles=tuple(roles),
        power_ranks=tuple(power_ranks),
    )


def compute_layout(
    node_keys: list[str], hosts: list[str], power: bool, threaded: Sequence[bool] | None = None
) -> Layout:
    """The run's layout: `node_layout`, then the pair: rank 0 and the lowest free rank on another
    node when there is one (so the network is measured), else the lowest free rank on node 0."""
    return with_first_pair(node_layout(node_keys, hosts, power, threaded))


def with_first_pair(layout: Layout) -> Layout:
    """The layout with the run's one pair (see compute_layout)."""
    node_of_rank = layout.node_of_rank
    free = [r for r in range(layout.world_size) if layout.roles[r] == ROLE_IDLE]
    other_node = [r for r in free if node_of_rank[r] != node_of_rank[0]]
    peer = other_node[0] if other_node else next(r for r in free if r != 0)
    roles = list(layout.roles)
    roles[0] = ROLE_TRANSMITTER
    roles[peer] = ROLE_REFLECTOR
    return replace(layout, roles=tuple(roles), pair=(0, peer), pairs=((0, peer),), groups=((0, peer),))


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
    return replace(layout, roles=tuple(roles), pair=chosen[0], pairs=chosen, groups=chosen)
