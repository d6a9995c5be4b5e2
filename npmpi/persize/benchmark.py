"""The benchmark as a function of a communicator, in mpi4py's style: `sweep(comm, opts)`.

Every rank of `comm` calls it; ranks 0 and the layout's reflector (or, with `opts.pairs`, every
pair) measure, the others wait asleep, and every rank gets rank 0's outcome back: the measured
rows, how the sweep ended and why. Nothing else happens: no power ranks, files, signal handlers,
console output or exit codes — `python -m npmpi` (npmpi/cli.py, npmpi/run/recording.py) wraps the
same Transmitter and reflectors with all of those. Any communicator works, including a `Dup` or a
`Split` of the world, so tests can run sweeps in-process under `mpirun -np 2 python -m pytest`.
"""

from __future__ import annotations

from collections.abc import Callable

from npmpi.core.config import Options
from npmpi.core.errors import DataMismatch, LinkLost, UsageError
from npmpi.core.layout import (
    ROLE_REFLECTOR,
    ROLE_TRANSMITTER,
    Layout,
    LayoutError,
    compute_layout,
    with_pairs,
)
from npmpi.core.messages import StopFlag
from npmpi.core.startup import collective_check
from npmpi.persize.kernels import Kernel, get_kernels
from npmpi.persize.links import open_pair_link
from npmpi.persize.reflector import reflect, wait_quietly
from npmpi.persize.transmitter import SweepOutcome, Transmitter, schedule_for
from npmpi.runfile.format import SizeResult


def layout_of(comm, pairs: int | str = 1) -> Layout:
    """The roles of `comm`'s ranks without power ranks: nodes found by host name (collective)."""
    from mpi4py import MPI

    host = MPI.Get_processor_name()
    hosts = comm.allgather(host)
    try:
        return with_pairs(compute_layout(hosts, hosts, power=False), pairs)
    except LayoutError as exc:
        raise UsageError(str(exc)) from None


def sweep(
    comm,
    opts: Options,
    kernel: Kernel | None = None,
    on_row: Callable[[int, SizeResult], None] | None = None,
) -> SweepOutcome:
    """Run the sweep `opts` describes on `comm` (collective); every rank returns rank 0's outcome.

    `kernel` defaults to `get_kernels(opts.kernel)`; `on_row(index, row)` is called on rank 0 as
    each size completes. A failed data check ends the sweep as the outcome `failed` with the
    message (every rank returns it, the rows before it kept); anything else raised on a rank
    raises there only, as in any MPI program."""
    layout = layout_of(comm, opts.pairs)
    kernel = kernel if kernel is not None else get_kernels(opts.kernel)
    link, problem = open_pair_link(comm, opts, layout.pairs)  # the protocol's link (MPI: the comm)
    collective_check(comm, problem)
    stop = StopFlag()
    rank = comm.Get_rank()
    outcome = None
    if rank == 0:
        rows: list[SizeResult] = []

        def keep(index: int, row: SizeResult) -> None:
            rows.append(row)
            if on_row is not None:
                on_row(index, row)

        transmitter = Transmitter(comm, layout, opts, kernel, stop, keep, link)
        try:
            outcome = transmitter.sweep(schedule_for(opts))
        except (DataMismatch, LinkLost) as exc:  # both sides left their loops: the others wait
            outcome = SweepOutcome(status="failed", message=str(exc), exit_code=1, rows=rows)
        transmitter.release(outcome.exit_code)
    elif layout.roles[rank] in (ROLE_REFLECTOR, ROLE_TRANSMITTER):
        reflect(comm, layout, opts, kernel, stop, link)
    else:
        wait_quietly(comm, stop)
    if link is not None:
        link.close()
    return comm.bcast(outcome, root=0)


__all__ = ["SweepOutcome", "layout_of", "sweep"]
