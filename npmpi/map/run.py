"""`python -m npmpi map`: every pair of nodes measured, round by round, into one map file.

Launched like a run (mpirun/srun): the lowest rank of each node measures (every rank with
--per-rank), each node's highest rank samples its meters when --meter is given, other ranks wait
asleep. Every rank agrees on the options, the roles and the output before anything is written (as a
run does, npmpi/cli.py); rank 0 then records the map (npmpi/map/recording.py) while the other members
answer its rounds (npmpi/map/pair.py). Bad usage: one line, exit 2 everywhere; a stop signal ends the
current round, marks the file interrupted and releases every rank; an error on any rank ends the job
with one message.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass, replace

from npmpi.commands.agreement import Agreed, free_memory_if_short, settle
from npmpi.core.errors import NpmpiError, UsageError
from npmpi.core.layout import ROLE_IDLE, ROLE_POWER, Layout
from npmpi.map.options import MapOptions, parse_map_options

ROLE_MAP = "map"  # a map member's role in /layout/role


def main(argv: list[str]) -> int:
    """Run a map; returns the process exit status."""
    from npmpi.commands.sequence import MpiCommand, meters_thread_level

    command = MpiCommand(
        parse=parse_map_options,
        thread_level=lambda mopts: meters_thread_level(mopts.run),
        agree=_agree,
        record=_record,
        serve=_serve,
    )
    return command.run(argv)


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


@dataclass
class MapAgreed(Agreed):
    """What the start-up checks found, with the map's members and their names (/map/hosts)."""

    members: list[int] | None = None
    names: list[str] | None = None


def _local_problem(MPI, mopts: MapOptions, agreed: MapAgreed) -> str | None:
    from npmpi.power.ranks import open_power_rank
    from npmpi.sweep.kernels import get_kernels

    roles, rank = agreed.roles, agreed.roles.rank
    if rank in agreed.members:
        try:
            agreed.kernel = get_kernels(mopts.run.kernel)
        except NpmpiError as exc:
            return str(exc)
        return memory_problem(roles.layout, agreed.members, rank, mopts.sizes_bytes[-1])
    problem = None
    if roles.role == ROLE_POWER:
        problem = open_power_rank(roles, mopts.run.meter_optional, mopts.run.sample_interval_s)
    if problem is None and rank == roles.fabric_rank:
        from npmpi.power.fabric import open_fabric

        opts = mopts.run
        problem = open_fabric(roles, opts.fabric_meters, opts.meter_optional, opts.sample_interval_s)
    return problem


def _agree(MPI, comm, mopts: MapOptions) -> MapAgreed:
    """The checks every rank agrees on before anything is written; UsageError on every rank if one fails."""
    from npmpi.power.ranks import discover_roles

    opts = mopts.run
    try:
        agreed = MapAgreed(roles=discover_roles(MPI, comm, list(opts.meters)))
    except UsageError as exc:  # the layout's words are a sweep's: say them of a map
        text = str(exc).replace("a ping-pong needs 2 ranks", "a map needs 2 measuring ranks")
        raise UsageError(text.replace("python -m npmpi …", "python -m npmpi map --per-rank …")) from None
    agreed.roles.layout, agreed.members = map_layout(agreed.roles.layout, mopts.per_rank)
    agreed.names = member_names(agreed.roles.layout, agreed.members, mopts.per_rank)
    from npmpi.power.fabric import fabric_rank

    agreed.roles.fabric_rank = fabric_rank(agreed.roles.layout, opts.fabric_meters, opts.fabric_rank)
    settle(MPI, comm, opts, agreed, _local_problem(MPI, mopts, agreed), stem_prefix="map-")
    return agreed


def _record(MPI, comm, mopts: MapOptions, argv: list[str], agreed: MapAgreed, stop) -> int | None:
    """Rank 0 (always the first member: the lowest rank of node 0, never its power rank) records the
    map; None on the other ranks."""
    if comm.Get_rank() != 0:
        return None
    from npmpi.map.recording import record_map

    return record_map(MPI, comm, mopts, argv, agreed, stop)


def _serve(MPI, comm, mopts: MapOptions, agreed: MapAgreed, stop) -> int:
    """Every other rank's role: a member answering rounds, a power rank, or an idle wait."""
    from npmpi.map.pair import PairSide, serve_map
    from npmpi.power.rank import power_rank_main
    from npmpi.sweep.reflector import wait_quietly

    if comm.Get_rank() in agreed.members:
        return serve_map(comm, PairSide(mopts.run, agreed.kernel), stop)
    if agreed.roles.role == ROLE_POWER:
        return power_rank_main(comm, agreed.roles.samplers, stop)
    return wait_quietly(comm, stop)
