"""Which rank does what in a job: nodes discovered (the shared-memory domains), each node's meters
asked for, the layout computed (npmpi/core/layout.py), and what each rank learned on the way."""

from __future__ import annotations

from dataclasses import dataclass, field

from npmpi.core.errors import UsageError
from npmpi.core.layout import Layout, LayoutError, Words, compute_layout, node_layout


@dataclass
class Roles:
    """What this rank learned while roles were assigned."""

    layout: Layout
    rank: int
    host: str
    meter_specs: list  # this node's spec values (npmpi.meters.MeterSpec)
    samplers: list = field(default_factory=list)  # a power rank's ChannelSamplers, not started
    power_info: dict | None = None  # a power rank's specs, channel descriptions, skipped meters
    fabric_rank: int | None = None  # the power rank sampling the --fabric-meter devices (npmpi.power.fabric)
    meter_problem: str | None = None  # why this node's NPMPI_METERS does not parse (its power rank says it)

    @property
    def role(self) -> str:
        return self.layout.roles[self.rank]


def discover_roles(MPI, comm, default_specs, words: Words | None = None) -> Roles:
    """Group ranks by node and compute the layout; power is on when any node has a meter, and a
    node's power rank is one that got MPI_THREAD_FUNNELED when one did (npmpi.commands.threadlevel).
    Without `words`, the run's layout (its first pair chosen); with them, a kind's: nodes and power
    ranks only, its errors in the kind's words (the kind then chooses its measuring groups)."""
    from npmpi.meters import MeterError
    from npmpi.power.sampler import node_meter_specs

    rank = comm.Get_rank()
    host = MPI.Get_processor_name()
    node_comm = comm.Split_type(MPI.COMM_TYPE_SHARED, key=rank)
    node_key = f"{host}#{node_comm.allreduce(rank, op=MPI.MIN)}"
    node_comm.Free()
    try:
        my_specs, problem = node_meter_specs(default_specs), None
    except MeterError as exc:  # a node that asks for power gets its power rank, which reports this
        my_specs, problem = [], str(exc)
    threaded = MPI.Query_thread() >= MPI.THREAD_FUNNELED
    gathered = comm.allgather((node_key, host, bool(my_specs) or problem is not None, threaded))
    keys, hosts, wants_power, threaded_ranks = zip(*gathered, strict=True)
    try:
        if words is None:
            layout = compute_layout(list(keys), list(hosts), any(wants_power), threaded_ranks)
        else:
            layout = node_layout(list(keys), list(hosts), any(wants_power), threaded_ranks, words)
    except LayoutError as exc:
        raise UsageError(str(exc)) from None
    return Roles(layout=layout, rank=rank, host=host, meter_specs=my_specs, meter_problem=problem)
