"""Entry point of `python -m npmpi`: options, rank roles, the checks every rank agrees on, dispatch.

Guarantees: bad usage prints one line on rank 0 and every rank exits 2 without creating a file;
a stop signal (Ctrl-C, SIGTERM from Slurm) ends the current trial, marks the file interrupted and
releases every rank; an error on any rank ends the whole job with one message, never leaving a
rank blocked (the job's plumbing: npmpi/core/job.py; rank 0's recording: npmpi/commands/recording.py).
"""

from __future__ import annotations

import socket
import sys

from npmpi.commands.agreement import Agreed, free_memory_if_short, settle
from npmpi.commands.options import parse_options
from npmpi.commands.sequence import MpiCommand, meters_thread_level
from npmpi.core.config import Options
from npmpi.core.errors import NpmpiError, UsageError


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; returns the process exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["calibrate"]:
        from npmpi.commands.calibrate import main as calibrate_main

        return calibrate_main(argv[1:])
    if argv[:1] == ["meters"]:  # no MPI: which meters work on this node
        from npmpi.commands.meters import main as meters_main

        return meters_main(argv[1:])
    if argv[:1] == ["map"]:
        from npmpi.map.run import main as map_main

        return map_main(argv[1:])
    command = MpiCommand(
        parse=parse_options,
        thread_level=meters_thread_level,
        agree=_agree,
        record=_record,
        serve=_serve,
        before_mpi=_before_mpi,
    )
    return command.run(argv)


def _before_mpi(opts: Options) -> None:
    """A one-sided run on a node without an RDMA device: Open MPI's declining osc/ucx kept quiet."""
    if opts.protocol == "rma":
        from npmpi.sweep.rmalink import quiet_declining_osc_ucx

        quiet_declining_osc_ucx()


def _message_problem(MPI, opts: Options, limit: int) -> str | None:
    """Whether the largest message (--upper plus perturbation) fits one call of this kernel and MPI."""
    if opts.largest_message_bytes <= limit:
        return None
    version = MPI.Get_version()
    return (
        f"--upper {opts.upper_bytes} B plus perturbation {opts.perturbation_bytes} B exceeds the "
        f"largest message this MPI can carry in one call ({limit} B = 2 GiB - 1; larger messages "
        f"need an MPI 4 library, this one is MPI {version[0]}.{version[1]}); lower --upper"
    )


def _memory_problem(pool: int) -> str | None:
    need = 2 * pool
    avail = free_memory_if_short(need)
    if avail is not None:
        return (
            f"buffers of {pool} B (send and receive) need {need / 2**30:.1f} GiB per rank but only "
            f"{avail / 2**30:.1f} GiB is free on {socket.gethostname()}; lower --upper (or --cache-pool)"
        )
    return None


def _local_problem(MPI, opts: Options, agreed: Agreed) -> str | None:
    """This rank's first problem with the options, its memory, kernel, huge pages, meters, thread level."""
    from npmpi.core.buffers import huge_pages_problem
    from npmpi.core.layout import ROLE_POWER, ROLE_REFLECTOR, ROLE_TRANSMITTER
    from npmpi.power.ranks import open_power_rank
    from npmpi.sweep.kernels import get_kernels

    roles = agreed.roles
    role = roles.role
    problem = None
    if role in (ROLE_TRANSMITTER, ROLE_REFLECTOR):
        try:
            agreed.kernel = get_kernels(opts.kernel)
        except NpmpiError as exc:
            problem = str(exc)
    if problem is None and agreed.kernel is not None:
        problem = _message_problem(MPI, opts, agreed.kernel.max_message_bytes)
    if problem is None and role in (ROLE_TRANSMITTER, ROLE_REFLECTOR):
        problem = _memory_problem(opts.pool_bytes)
    if problem is None and role in (ROLE_TRANSMITTER, ROLE_REFLECTOR):
        problem = huge_pages_problem(opts.huge_pages)
    if problem is None and role == ROLE_POWER:
        problem = open_power_rank(roles, opts.meter_optional, opts.sample_interval_s)
    if problem is None and roles.rank == roles.fabric_rank:
        from npmpi.power.fabric import open_fabric

        problem = open_fabric(roles, opts.fabric_meters, opts.meter_optional, opts.sample_interval_s)
    return problem


def _agree(MPI, comm, opts: Options) -> Agreed:
    """The checks every rank agrees on before anything is written; UsageError on every rank if one fails."""
    from npmpi.power.ranks import discover_roles

    agreed = Agreed(roles=discover_roles(MPI, comm, list(opts.meters)))
    roles = agreed.roles
    if opts.pairs != 1:
        from npmpi.core.layout import LayoutError, with_pairs

        try:
            roles.layout = with_pairs(roles.layout, opts.pairs)
        except LayoutError as exc:
            raise UsageError(str(exc)) from None
    from npmpi.power.fabric import fabric_rank

    roles.fabric_rank = fabric_rank(roles.layout, opts.fabric_meters, opts.fabric_rank)
    problem = _local_problem(MPI, opts, agreed)
    from npmpi.sweep.links import open_pair_link

    agreed.link, link_problem = open_pair_link(comm, opts, roles.layout.pairs)
    settle(MPI, comm, opts, agreed, problem or link_problem)
    agreed.link_settings = comm.gather(agreed.link.settings() if agreed.link else None, root=0)
    return agreed


def _serve(MPI, comm, opts: Options, agreed: Agreed, stop) -> int:
    """Every rank's role but rank 0's recording: a pair's side, a power rank, or an idle wait."""
    from npmpi.core.layout import ROLE_POWER, ROLE_REFLECTOR, ROLE_TRANSMITTER
    from npmpi.power.rank import power_rank_main
    from npmpi.sweep.reflector import reflect, wait_quietly

    if agreed.reservation is not None:  # only rank 0 as the transmitter writes a file
        from npmpi.core.outpath import release

        release(agreed.reservation)
    role = agreed.roles.role
    if role in (ROLE_REFLECTOR, ROLE_TRANSMITTER):  # a transmitter other than rank 0: --pairs
        try:
            return reflect(comm, agreed.roles.layout, opts, agreed.kernel, stop, agreed.link)
        finally:
            agreed.link.close()
    if role == ROLE_POWER:
        return power_rank_main(comm, agreed.roles.samplers, stop)
    return wait_quietly(comm, stop)


def _record(MPI, comm, opts: Options, argv: list[str], agreed: Agreed, stop) -> int | None:
    """Rank 0 as the first pair's transmitter: the sweep recorded into the run file (None on the
    other ranks)."""
    from npmpi.commands.recording import Recording, RunSetup
    from npmpi.core.layout import ROLE_TRANSMITTER

    if comm.Get_rank() != 0 or agreed.roles.role != ROLE_TRANSMITTER:
        return None
    layout = agreed.roles.layout
    power_nodes = [agreed.gathered_power[r] for r in layout.power_ranks]
    setup = RunSetup(
        MPI=MPI,
        comm=comm,
        opts=opts,
        argv=argv,
        layout=layout,
        kernel=agreed.kernel,
        output=agreed.output,
        stop=stop,
        power_nodes=power_nodes,
        calibration=agreed.calibration,
        thread_levels=agreed.thread_levels,
        reservation=agreed.reservation,
        link=agreed.link,
        link_settings=agreed.link_settings,
    )
    try:
        return Recording(setup).run()
    finally:
        agreed.link.close()
