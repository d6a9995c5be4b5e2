"""The map as a benchmark kind (`python -m npmpi map`): every pair of nodes measured, round by round,
into one map file.

Launched like a run (mpirun/srun): the lowest rank of each node measures (every rank with
--per-rank), each node's highest rank samples its meters when --meter is given, other ranks wait
asleep. Every rank agrees on the options, the roles and the output before anything is written (the
sequence of every kind, npmpi/kinds/command.py); rank 0 then records the map (npmpi/map/recording.py)
while the other members answer its rounds (npmpi/map/pair.py). Bad usage, and a map whose planned
file would not fit the output's disk (npmpi/map/plan.py): one line, exit 2 everywhere; a stop signal
ends the current round, marks the file interrupted and releases every rank; --max-minutes ends the
map the same way between rounds, with exit status 0; an error on any rank ends the job with one
message.
"""

from __future__ import annotations

import socket
from dataclasses import replace

from npmpi.commands.agreement import free_memory_if_short
from npmpi.core.errors import UsageError
from npmpi.core.layout import ROLE_IDLE, ROLE_POWER, Layout, Words
from npmpi.kinds.kind import Kind
from npmpi.map.options import MapOptions, parse_map_options

ROLE_MAP = "map"  # a map member's role in /layout/role


def map_members(layout: Layout, per_rank: bool) -> list[int]:
    """The ranks that measure, in rank order: every rank but the power ranks with per_rank, else
    the lowest such rank of each node."""
    capable = [r for r in range(layout.world_size) if layout.roles[r] != ROLE_POWER]
    if per_rank:
        return capable
    first: dict[int, int] = {}
    for r in capable:
        first.setdefault(layout.node_of_rank[r], r)
    return sorted(first.values())


def map_layout(layout: Layout, per_rank: bool) -> tuple[Layout, list[int]]:
    """The layout with the map's roles (members `map`, power ranks, the rest idle) and the members;
    UsageError when a node has no member or there are fewer than two."""
    members = map_members(layout, per_rank)
    nodes = layout.node_count
    have = {layout.node_of_rank[r] for r in members}
    missing = [n for n in range(nodes) if n not in have]
    if missing:
        host = layout.hosts[layout.node_of_rank.index(missing[0])]
        raise UsageError(
            f"node {missing[0]} ({host}) has only its power rank, none to measure: give every node 2 ranks "
            f"with --meter, e.g. mpirun -np {2 * nodes} --map-by node python -m npmpi map --meter …"
        )
    if len(members) < 2:
        raise UsageError(
            f"a map needs 2 measuring ranks, {len(members)} found ({nodes} node(s), {layout.world_size} "
            "ranks): run one rank per node on 2 or more nodes (mpirun --map-by node), or add --per-rank "
            "to map every rank of one host"
        )
    roles = tuple(
        ROLE_MAP if r in members else (ROLE_POWER if r in layout.power_ranks else ROLE_IDLE)
        for r in range(layout.world_size)
    )
    pair = (members[0], members[1])
    return replace(layout, roles=roles, pair=pair, pairs=(pair,)), members


def member_names(layout: Layout, members: list[int], per_rank: bool) -> list[str]:
    """/map/hosts: each member's host, or `host:rank` with --per-rank."""
    return [f"{layout.hosts[r]}:{r}" if per_rank else layout.hosts[r] for r in members]


def memory_problem(layout: Layout, members: list[int], rank: int, largest: int) -> str | None:
    """Whether this node lacks the memory for its members' buffers (about 3 of the largest size each)."""
    here = sum(layout.node_of_rank[m] == layout.node_of_rank[rank] for m in members)
    need = 3 * largest * here
    avail = free_memory_if_short(need)
    if avail is not None:
        return (
            f"the map's buffers need {need / 2**30:.1f} GiB on {socket.gethostname()} ({here} measuring "
            f"ranks) but only {avail / 2**30:.1f} GiB is free; give smaller --sizes"
        )
    return None


def sample_problem(mopts: MapOptions, hosts: list[str]) -> None:
    """--pairs sample:K beyond the members, or a --topology that does not match the map's hosts:
    UsageError (on every rank: they all see the same layout)."""
    n = len(hosts)
    if mopts.sample_k > n - 1:
        raise UsageError(
            f"--pairs sample:{mopts.sample_k}: this map has {n} members, so each has only {n - 1} others; "
            f"give K from 1 to {n - 1}"
        )
    if not mopts.topology:
        return
    known, here = dict(mopts.topology), set(hosts)
    unknown = [h for h in known if h not in here]
    if unknown:
        raise UsageError(
            f"--topology: host {unknown[0]} is not in this map (its hosts: {', '.join(sorted(here)[:8])}"
            f"{' …' if len(here) > 8 else ''}); give a line for each host of the map and no other"
        )
    missing = [h for h in hosts if h not in known]
    if missing:
        raise UsageError(f"--topology: host {missing[0]} of this map has no 'host switch' line")


class MapKind(Kind):
    """`python -m npmpi map`: every pair of nodes (or ranks) measured, round by round."""

    name = "map"
    file_kind = "map"
    member_role = ROLE_MAP
    stem_prefix = "map-"
    words = Words(
        needs="a map needs 2 measuring ranks",
        takes_part="take part in the ping-pong",
        command="python -m npmpi map --per-rank …",
    )

    def parse(self, argv: list[str]) -> MapOptions:
        return parse_map_options(argv)

    def common(self, mopts: MapOptions):
        return mopts.run

    def groups(self, layout: Layout, mopts: MapOptions) -> Layout:
        """One group: the members, whose rounds pair them two by two (npmpi/map/schedule.py)."""
        mapped, members = map_layout(layout, mopts.per_rank)
        sample_problem(mopts, [layout.hosts[r] for r in members])
        return replace(mapped, groups=(tuple(members),))

    def member_problem(self, MPI, mopts: MapOptions, agreed) -> str | None:
        from npmpi.persize.kernels import get_kernels

        agreed.kernel = get_kernels(mopts.run.kernel)  # NpmpiError: the problem (npmpi.kinds.command)
        layout = agreed.roles.layout
        return memory_problem(layout, list(layout.members), agreed.roles.rank, mopts.sizes_bytes[-1])

    def prepare_output(self, mopts: MapOptions, agreed) -> str | None:
        """Rank 0: the output reserved as every kind's, then the map's plan (npmpi/map/plan.py) made
        and the map refused when its file would not fit the output's disk."""
        from npmpi.map.plan import disk_problem, make_plan
        from npmpi.map.schedule import map_rounds

        problem = super().prepare_output(mopts, agreed)
        if problem is not None:
            return problem
        layout = agreed.roles.layout
        power_nodes = [agreed.gathered_power[r] for r in layout.power_ranks]
        members = list(layout.groups[0])
        rounds = map_rounds(mopts, len(members), [layout.hosts[r] for r in members])
        plan = make_plan(mopts, len(members), power_nodes, rounds)
        agreed.extra["plan"], agreed.extra["rounds"] = plan, rounds
        if mopts.resume is not None:
            from npmpi.map.recording import resume_attrs
            from npmpi.map.resume import resume_problem

            names = member_names(layout, members, mopts.per_rank)
            found = resume_problem(
                mopts.resume, str(agreed.output), resume_attrs(mopts), names, mopts.sizes_bytes, rounds
            )
            if isinstance(found, str):
                return found
            agreed.extra["resume"] = found
        return disk_problem(agreed.output, plan)

    def settled(self, MPI, comm, mopts: MapOptions, agreed) -> None:
        layout = agreed.roles.layout
        agreed.extra["members"] = list(layout.members)
        agreed.extra["names"] = member_names(layout, list(layout.members), mopts.per_rank)

    def record(self, MPI, comm, mopts: MapOptions, argv: list[str], agreed, stop) -> int:
        """Rank 0 (always the first member: the lowest rank of node 0, never its power rank)."""
        from npmpi.map.recording import record_map

        return record_map(MPI, comm, mopts, argv, agreed, stop)

    def serve(self, MPI, comm, mopts: MapOptions, agreed, stop) -> int:
        """A member answering rank 0's rounds."""
        from npmpi.map.pair import PairSide, serve_map

        return serve_map(comm, PairSide(mopts.run, agreed.kernel), stop)


KIND = MapKind()
