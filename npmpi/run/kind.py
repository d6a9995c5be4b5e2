"""The run as a benchmark kind: the ping-pong sweep of one pair, or of several with --pairs.

Its measuring groups are its pairs (rank 0 and a rank on another node when there is one, npmpi/core/
layout.py); a pair's ranks check their kernel, the largest message, their memory and huge pages; every
rank opens its protocol's link (npmpi/persize/links.py) before the collective check; rank 0 records the
sweep (npmpi/run/recording.py) while the other pair ranks answer it (npmpi/persize/reflector.py).
"""

from __future__ import annotations

import socket

from npmpi.commands.agreement import free_memory_if_short
from npmpi.core.config import Options
from npmpi.core.errors import UsageError
from npmpi.core.layout import ROLE_TRANSMITTER, Layout, LayoutError, with_pairs
from npmpi.kinds.kind import Kind


class RunKind(Kind):
    """`python -m npmpi [OPTIONS]`: NetPIPE's sweep, every mode and protocol."""

    name = ""
    file_kind = "run"
    member_role = ROLE_TRANSMITTER  # and the reflectors: /layout/role says which

    def parse(self, argv: list[str]) -> Options:
        from npmpi.run.options import parse_options

        return parse_options(argv)

    def before_mpi(self, opts: Options) -> None:
        """What the run's protocol sets up before MPI starts (rma: Open MPI's declining osc/ucx kept
        quiet on a node without an RDMA device)."""
        from npmpi.protocols import protocol_named

        protocol_named(opts.protocol).before_mpi()

    def groups(self, layout: Layout, opts: Options) -> Layout:
        try:
            return with_pairs(layout, opts.pairs)
        except LayoutError as exc:
            raise UsageError(str(exc)) from None

    def member_problem(self, MPI, opts: Options, agreed) -> str | None:
        """A pair rank's kernel, largest message, buffers' memory and huge pages."""
        from npmpi.core.buffers import huge_pages_problem
        from npmpi.persize.kernels import get_kernels

        agreed.kernel = get_kernels(opts.kernel)  # NpmpiError: the problem (npmpi.kinds.command)
        return (
            _message_problem(MPI, opts, agreed.kernel.max_message_bytes)
            or _memory_problem(opts.pool_bytes)
            or huge_pages_problem(opts.huge_pages)
        )

    def prepare(self, MPI, comm, opts: Options, agreed) -> str | None:
        """Every rank opens its pair's link of the run's protocol (collective)."""
        from npmpi.persize.links import open_pair_link

        agreed.link, problem = open_pair_link(comm, opts, agreed.roles.layout.pairs)
        return problem

    def settled(self, MPI, comm, opts: Options, agreed) -> None:
        agreed.link_settings = comm.gather(agreed.link.settings() if agreed.link else None, root=0)

    def record(self, MPI, comm, opts: Options, argv: list[str], agreed, stop) -> int:
        """Rank 0 as the first pair's transmitter: the sweep recorded into the run file."""
        from npmpi.run.recording import Recording, RunSetup

        layout = agreed.roles.layout
        setup = RunSetup(
            MPI=MPI,
            comm=comm,
            opts=opts,
            argv=argv,
            layout=layout,
            kernel=agreed.kernel,
            output=agreed.output,
            stop=stop,
            power_nodes=[agreed.gathered_power[r] for r in layout.power_ranks],
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

    def serve(self, MPI, comm, opts: Options, agreed, stop) -> int:
        """A reflector, or a rank of another pair (--pairs)."""
        from npmpi.persize.reflector import reflect

        try:
            return reflect(comm, agreed.roles.layout, opts, agreed.kernel, stop, agreed.link)
        finally:
            agreed.link.close()


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


KIND = RunKind()
