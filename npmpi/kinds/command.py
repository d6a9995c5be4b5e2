"""The command sequence of every benchmark kind, written once: roles, measuring groups, the agreement.

`kind_command(kind).run(argv)` is `python -m npmpi [KIND] …` on every rank (npmpi/commands/sequence.py
gives the steps' guarantees): the kind's options parsed; nodes and power ranks found; the kind's
measuring groups chosen; each rank's problems checked (a measuring rank's by the kind, a power rank's
meters, the fabric's devices, the thread level), rank 0's output reserved, one collective check; each
measuring group given its own communicator (`Agreed.group_comm`, which power and idle ranks never
join); then rank 0 records, the other members serve the kind, the power ranks sample, the rest wait.
"""

from __future__ import annotations

from typing import Any

from npmpi.commands.agreement import Agreed, settle
from npmpi.commands.sequence import MpiCommand
from npmpi.core.errors import NpmpiError, UsageError
from npmpi.core.layout import ROLE_POWER


def kind_command(kind) -> MpiCommand:
    """The MpiCommand of a kind (npmpi/kinds/kind.py)."""
    return MpiCommand(
        parse=kind.parse,
        thread_level=kind.thread_level,
        agree=lambda MPI, comm, opts: agree(kind, MPI, comm, opts),
        record=lambda MPI, comm, opts, argv, agreed, stop: _record(kind, MPI, comm, opts, argv, agreed, stop),
        serve=lambda MPI, comm, opts, agreed, stop: serve(kind, MPI, comm, opts, agreed, stop),
        before_mpi=kind.before_mpi,
        stop_signals=kind.stop_signals,
        who=kind.who,
    )


def power_problem(roles, common) -> str | None:
    """A power rank's meters opened, and the fabric's devices on the rank that samples them; the
    problem, if any (None on the other ranks)."""
    from npmpi.power.nodemeters import open_power_rank

    problem = None
    if roles.role == ROLE_POWER:
        problem = open_power_rank(roles, common.meter_optional, common.sample_interval_s)
    if problem is None and roles.rank == roles.fabric_rank:
        from npmpi.power.fabric import open_fabric

        problem = open_fabric(roles, common.fabric_meters, common.meter_optional, common.sample_interval_s)
    return problem


def agree(kind, MPI, comm, opts: Any) -> Agreed:
    """The checks every rank agrees on before anything is written; UsageError on every rank if one fails."""
    from npmpi.kinds.roles import discover_roles
    from npmpi.power.fabric import fabric_rank

    common = kind.common(opts)
    words = None if kind.name == "" else kind.words  # the run keeps compute_layout's pair
    agreed = Agreed(roles=discover_roles(MPI, comm, list(common.meters), words))
    roles = agreed.roles
    roles.layout = kind.groups(roles.layout, opts)
    roles.fabric_rank = fabric_rank(roles.layout, common.fabric_meters, common.fabric_rank)
    problem = None
    if roles.layout.group_of(roles.rank) is not None:
        try:
            problem = kind.member_problem(MPI, opts, agreed)
        except NpmpiError as exc:
            problem = str(exc)
    problem = problem or power_problem(roles, common)
    prepared = kind.prepare(MPI, comm, opts, agreed)
    settle(MPI, comm, common, agreed, problem or prepared, lambda: kind.prepare_output(opts, agreed))
    agreed.group_comm = group_communicator(MPI, comm, roles.layout)
    kind.settled(MPI, comm, opts, agreed)
    return agreed


def group_communicator(MPI, comm, layout):
    """This rank's measuring group's own communicator (its ranks in world-rank order), None on a
    rank that does not measure. Collective over `comm`: every rank calls it. Groups are disjoint."""
    seen: set[int] = set()
    for group in layout.groups:
        if seen & set(group):
            raise UsageError("internal: measuring groups overlap")  # a kind's bug, said on every rank
        seen |= set(group)
    index = layout.group_of(comm.Get_rank())
    sub = comm.Split(MPI.UNDEFINED if index is None else index, comm.Get_rank())
    return None if sub == MPI.COMM_NULL else sub


def _record(kind, MPI, comm, opts, argv, agreed, stop) -> int | None:
    """Rank 0 records (it always measures: node_layout never makes it a power rank)."""
    if comm.Get_rank() != 0:
        return None
    return kind.record(MPI, comm, opts, argv, agreed, stop)


def serve(kind, MPI, comm, opts, agreed, stop) -> int:
    """Every rank but rank 0: a member serves the kind, a power rank samples, any other rank waits."""
    from npmpi.persize.reflector import wait_quietly
    from npmpi.power.rank import power_rank_main

    roles = agreed.roles
    if roles.layout.group_of(roles.rank) is not None:
        return kind.serve(MPI, comm, opts, agreed, stop)
    if roles.role == ROLE_POWER:
        return power_rank_main(comm, roles.samplers, stop)
    return wait_quietly(comm, stop)
