"""Entry point of `python -m npmpi`: options, rank roles, the checks every rank agrees on, dispatch.

Guarantees: bad usage prints one line on rank 0 and every rank exits 2 without creating a file;
a stop signal (Ctrl-C, SIGTERM from Slurm) ends the current trial, marks the file interrupted and
releases every rank; an error on any rank ends the whole job with one message, never leaving a
rank blocked (the job's plumbing: npmpi/core/job.py; rank 0's recording: npmpi/commands/recording.py).
"""

from __future__ import annotations

import os
import signal
import socket
import sys

from npmpi.commands.agreement import Agreed, settle
from npmpi.commands.options import parse_options
from npmpi.core.config import Options
from npmpi.core.errors import NpmpiError, UsageError
from npmpi.core.job import (
    abort,
    describe,
    error_line,
    install_signal_handlers,
    parse_or_exit_status,
    say,
)


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
    # Until the stop handlers are installed (once MPI runs), Ctrl-C ends a rank as SIGTERM does,
    # without a KeyboardInterrupt traceback from the middle of an import (srun forwards Ctrl-C).
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    opts = parse_or_exit_status(parse_options, argv)
    if isinstance(opts, int):
        return opts

    from npmpi.commands.threadlevel import requested_level
    from npmpi.core.job import load_mpi
    from npmpi.power.rank import node_meter_specs

    MPI = load_mpi(requested_level(opts.thread_level, bool(node_meter_specs(list(opts.meters)))))
    if MPI is None:
        return 2
    return _run(MPI, MPI.COMM_WORLD, opts, argv)


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
    try:
        avail = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        return None
    need = 2 * pool
    if need > 0.8 * avail:
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


def _run(MPI, comm, opts: Options, argv: list[str]) -> int:
    from npmpi.core.layout import ROLE_POWER, ROLE_REFLECTOR, ROLE_TRANSMITTER
    from npmpi.core.protocol import StopFlag
    from npmpi.power.rank import power_rank_main
    from npmpi.sweep.reflector import reflect, wait_quietly

    rank = comm.Get_rank()
    stop = StopFlag()
    install_signal_handlers(stop, writer_rank=rank == 0)
    try:
        agreed = _agree(MPI, comm, opts)
    except UsageError as exc:
        if rank == 0:
            say(error_line(str(exc)), sys.stderr)
        return 2
    except BaseException as exc:  # any rank's surprise (a meter's open, start-up) ends the whole job
        abort(comm, f"rank {rank} ({MPI.Get_processor_name()}) while starting: {describe(exc)}", 1)
        return 1
    layout, role = agreed.roles.layout, agreed.roles.role
    if role == ROLE_TRANSMITTER and rank == 0:
        return _record(MPI, comm, opts, argv, agreed, stop)
    if agreed.reservation is not None:  # only rank 0 as the transmitter writes a file
        from npmpi.core.outpath import release

        release(agreed.reservation)
    try:
        if role in (ROLE_REFLECTOR, ROLE_TRANSMITTER):  # a transmitter other than rank 0: --pairs
            code = reflect(comm, layout, opts, agreed.kernel, stop, agreed.link)
            agreed.link.close()
            return code
        if role == ROLE_POWER:
            return power_rank_main(comm, agreed.roles.samplers, stop)
        return wait_quietly(comm, stop)
    except BaseException as exc:
        abort(comm, f"rank {rank} ({MPI.Get_processor_name()}): {describe(exc)}", 1)
        return 1


def _record(MPI, comm, opts: Options, argv: list[str], agreed: Agreed, stop) -> int:
    """Rank 0 as the first pair's transmitter: the sweep recorded into the run file."""
    from npmpi.commands.recording import Recording, RunSetup

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
        # a stop signal's abandon timer must not outlive the run: at exit it would end rank 0 with
        # SIGALRM (exit 142, "Alarm clock") after the file was closed
        signal.setitimer(signal.ITIMER_REAL, 0)
