"""What every rank of a job agrees on before anything is written (a run, a map).

Each rank checks what it can (options, memory, kernel, meters, thread level); the power ranks'
meters and every rank's thread level are gathered on rank 0, which names, reserves and locks the
output file; then one collective check either lets every rank go on or gives every rank the same
UsageError (rank 0's reservation released), so a bad option never leaves a file or a hung rank.
"""

from __future__ import annotations

import datetime as _dt
import os
from dataclasses import dataclass, field
from typing import Any

from npmpi.core.errors import UsageError
from npmpi.core.layout import ROLE_POWER
from npmpi.core.startup import collective_check


@dataclass
class Agreed:
    """What the start-up checks found, on this rank (rank 0 also holds the gathered lists)."""

    roles: Any = None  # npmpi.kinds.roles.Roles
    kernel: Any = None  # npmpi.persize.kernels.Kernel on the ranks that measure
    gathered_power: list | None = None
    thread_levels: list | None = None
    output: str | None = None
    calibration: dict | None = None
    reservation: Any = None
    link: Any = None  # npmpi.core.protocol.Link of a measuring rank (the run's protocol)
    link_settings: list | None = None  # rank 0: every rank's Link.settings() (None: no link)
    group_comm: Any = None  # this rank's measuring group's communicator (npmpi.kinds.command)
    extra: dict = field(default_factory=dict)  # what a kind agreed on besides (the map's members, …)
    problem: str | None = field(default=None, repr=False)


def free_memory_if_short(need_bytes: float) -> float | None:
    """The bytes free on this host when `need_bytes` would take more than 80 % of them, else None
    (also when the system does not say): a run's or a map's buffers checked before any rank allocates."""
    try:
        avail = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        return None
    return avail if need_bytes > 0.8 * avail else None


def prepare_output(opts, agreed: Agreed, stem_prefix: str = "") -> str | None:
    """Rank 0: name (`-o`, else runs/npmpi-PREFIXSTAMP.h5), reserve and lock the output file and read
    the calibration file; the problem, if any."""
    from npmpi.commands.checks import default_output_name
    from npmpi.core.outpath import default_directory, reserve_output
    from npmpi.runfile.writecheck import RESERVED_BYTES, START_ROOM_BYTES

    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%d-%H%M%S")
    try:
        if opts.output is None:
            agreed.output = default_output_name(stem_prefix + stamp, default_directory())
        else:
            agreed.output = opts.output
        if opts.calibration is not None:
            from npmpi.power.calibration import load_calibration

            agreed.calibration = load_calibration(opts.calibration)
        if getattr(opts, "np_out", None) is not None:
            from npmpi.core.npout import check_np_out

            check_np_out(opts.np_out, opts.force, agreed.output)
        # disk space held back to close the file properly if the disk fills up during the run
        agreed.reservation = reserve_output(
            agreed.output, opts.force, ballast_bytes=RESERVED_BYTES, room_bytes=START_ROOM_BYTES
        )
    except UsageError as exc:
        return str(exc)
    return None


def settle(MPI, comm, opts, agreed: Agreed, problem: str | None, output=None) -> None:
    """Finish the agreement from this rank's `problem` (None: none): the thread level checked, the
    power ranks' meters and the thread levels gathered on rank 0, rank 0's output prepared
    (`output()`, its problem or None; default prepare_output's run file), and one collective check
    (UsageError on every rank if any rank has a problem)."""
    from npmpi.commands.threadlevel import level_problem

    roles = agreed.roles
    provided = MPI.Query_thread()
    runs_threads = roles.role == ROLE_POWER and bool(roles.samplers)
    if problem is None:
        problem = level_problem(provided, runs_threads, opts.thread_level)
    agreed.gathered_power = comm.gather(roles.power_info, root=0)
    agreed.thread_levels = comm.gather((provided, runs_threads), root=0)
    if comm.Get_rank() == 0 and problem is None:
        problem = output() if output is not None else prepare_output(opts, agreed)
    try:
        collective_check(comm, problem)
    except UsageError:
        from npmpi.core.outpath import release, remove_default_directory_if_unused

        if agreed.reservation is not None:
            release(agreed.reservation)
        if comm.Get_rank() == 0 and opts.output is None:
            remove_default_directory_if_unused()
        raise
