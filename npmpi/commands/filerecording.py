"""What rank 0's recording of a run and of a map share: the power collector, the clock, and the end
whatever ends it (npmpi/run/recording.py's `Recording`, npmpi/map/recording.py's `MapRecording`).

The end is the user's guarantee: a failure or a stop closes the file as `failed` or `interrupted`
with every completed size or round in it (and the samples taken up to then when the protocol is
quiet), says in one line where they are, then releases the other ranks, or aborts the job when
they cannot be released (a rank inside a timed loop, a power rank lost).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import os
import platform
import signal
import sys
import time
from abc import ABC, abstractmethod
from typing import Any

from npmpi.core.abort import abort, describe, error_line, say
from npmpi.core.ending import await_ends, end_bound_s
from npmpi.core.errors import NpmpiError, RankStalled, RunFileGone
from npmpi.core.slurmcontext import context_attrs


def now_utc() -> str:
    """The time stamp of the file's attributes (created, finished)."""
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def power_collector(comm, layout, power_nodes: list[dict], stall_timeout_s: float = 0.0):
    """Rank 0's side of the power ranks (npmpi.power.rank.PowerCollector), the fabric's channels
    with their node's; None when no node measures power. `stall_timeout_s` bounds rank 0's wait for
    a rank other than a power rank at the end of an idle baseline (0: no bound)."""
    if not layout.power_ranks:
        return None
    from npmpi.power.fabric import fabric_info
    from npmpi.power.rank import PowerCollector

    fabric = fabric_info(power_nodes)
    collector = PowerCollector(
        comm,
        list(layout.power_ranks),
        [p["channels"] for p in power_nodes],
        (fabric[0], fabric[1]["channels"]) if fabric else None,
    )
    collector.stall = (end_bound_s(stall_timeout_s), list(layout.hosts))
    return collector


def job_attrs(MPI, argv: list[str], layout, clock, kind: str) -> dict[str, Any]:
    """The root attributes every kind's file has: the kind, the command, the job, the software and
    the clock (docs/file-format.md)."""
    import h5py
    import mpi4py
    import numpy

    from npmpi import __version__

    version = MPI.Get_version()
    return {
        "npmpi_version": __version__,
        "created_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "kind": kind,
        "command_line": " ".join(["python", "-m", "npmpi", *argv]),
        "argv": list(argv) if argv else "",
        "world_size": layout.world_size,
        "node_count": layout.node_count,
        "mpi_library_version": MPI.Get_library_version().replace("\x00", "").strip(),
        "mpi_standard_version": f"{version[0]}.{version[1]}",
        "mpi4py_version": mpi4py.__version__,
        "numpy_version": numpy.__version__,
        "h5py_version": h5py.__version__,
        "hdf5_version": h5py.version.hdf5_version,
        "python_version": platform.python_version(),
        "platform": platform.platform(),
        **context_attrs(os.environ),
        "clock_name": clock.name,
        "clock_resolution_s": clock.resolution_s,
        "clock_smallest_step_s": clock.smallest_step_s,
        "clock_read_cost_s": clock.read_cost_s,
    }


def layout_rows(layout, thread_levels: list[tuple[int, bool]]) -> dict[str, list]:
    """The per-rank rows of the file's layout table."""
    from npmpi.commands.threadlevel import level_name

    return {
        "host": list(layout.hosts),
        "node_index": list(layout.node_of_rank),
        "role": list(layout.roles),
        "thread_level": [level_name(provided) for provided, _ in thread_levels],
    }


class FileRecording(ABC):
    """Rank 0 from its file's creation to its close. A subclass sets `comm`, `collector`, `output`,
    `reservation` (the file's temporary until the writer takes it), `writer` once the file exists,
    and gives `_record` (the whole recording: its exit status) and the hooks below."""

    FILE = "run"  # the file's name in messages: "the run file could not be closed"

    comm = collector = output = reservation = writer = layout = None
    stall_timeout_s = 0.0  # --stall-timeout: bounds the wait for every rank's end (0: none)

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.released = False  # the other ranks were told to exit
        self.ended = False  # and each of them reported its end

    @abstractmethod
    def _record(self) -> int:
        """The whole recording, from the file's creation: the exit status."""

    @abstractmethod
    def _quiet(self) -> bool:
        """Whether no rank is inside the measuring protocol now (so the power ranks may be asked for
        their last samples)."""

    @abstractmethod
    def _release(self, code: int) -> bool:
        """Release the other ranks with exit status `code`; whether they could be."""

    @abstractmethod
    def _kept(self) -> str:
        """What the file keeps, for the error line: '; 12 completed sizes are in run.h5'."""

    def run(self) -> int:
        """Record; on any failure close the file with its status and end every rank."""
        try:
            return self._record()
        except BaseException as exc:
            return self._end_after(exc)
        finally:
            # a stop signal's abandon timer must not outlive the recording: at exit it would end
            # rank 0 with SIGALRM (exit 142, "Alarm clock") after the file was closed
            signal.setitimer(signal.ITIMER_REAL, 0)

    def _end_after(self, exc: BaseException) -> int:
        """Close the file as interrupted or failed, keeping what was measured; release or abort the job."""
        status = (
            "interrupted" if isinstance(exc, KeyboardInterrupt) or getattr(exc, "signum", None) else "failed"
        )
        message = describe(exc)
        if isinstance(exc, NpmpiError):
            code = getattr(exc, "exit_code", 1)
        else:
            code = 130 if status == "interrupted" else 1
        message += self._close_after(exc, status, message)
        kept = self._kept() if self.writer is not None and not isinstance(exc, RunFileGone) else ""
        if not isinstance(exc, (NpmpiError, KeyboardInterrupt, OSError)):
            message = f"internal error, please report: {message}"
        released = False
        if not isinstance(exc, RankStalled):  # a rank that stopped answering cannot be released
            try:
                released = self._release_all(code)
            except RankStalled as late:
                kept += f"; at the end, {late}"
            except Exception:
                released = False
        if released and not (self.collector is not None and self.collector.lost):
            say(error_line(message + kept), sys.stderr)
            return code
        abort(self.comm, message + kept, code)
        return code

    def _release_all(self, code: int) -> bool:
        """Release the other ranks (once) and wait, bounded by --stall-timeout, for each to report
        its end before MPI_Finalize (npmpi.core.ending.await_ends; RankStalled naming one that does
        not); False when they cannot be released (a rank inside a timed loop)."""
        if self.ended:
            return True
        if not self.released:
            if not self._release(code):
                return False
            self.released = True
            self._after_release()
        lost = set(self.collector.lost) if self.collector is not None else set()
        power = list(self.collector.power_ranks) if self.collector is not None else []
        bound = end_bound_s(self.stall_timeout_s)
        bounds = {}
        for rank in range(1, self.comm.Get_size()):
            if rank in power and rank not in lost:  # a power rank stops its meters' threads first
                bounds[rank] = max(bound, self.collector.lost_after_s(power.index(rank))) if bound else 0.0
            elif rank not in lost:
                bounds[rank] = bound
        await_ends(self.comm, bounds, list(self.layout.hosts), f"the end of the {self.FILE}")
        self.ended = True
        return True

    def stalled(self, message: str, bound_s: float) -> None:
        """The stall watchdog's end (npmpi/persize/watchdog.py; its thread, the lock held): the file
        closed `failed` with the reason and every completed size or round, one line, every rank ended
        (MPI_Abort: a stopped process never reaches MPI_Finalize)."""
        extra = ""
        try:
            elapsed = time.monotonic() - self.started
            self.writer.finish(
                "failed", message, stall_bound_s=bound_s, elapsed_s=elapsed, finished_utc=now_utc()
            )
        except Exception as exc:
            extra = f" (and the {self.FILE} file could not be closed: {exc})"
        abort(self.comm, message + extra + self._kept(), 1, settle_s=0.3)

    def _after_release(self) -> None:  # noqa: B027  (a hook: nothing by default)
        """Rank 0's part of what its released partners do before they report their end (a run's
        protocol link: an rma window is freed by both sides of the pair together)."""

    def _watched(self):
        """The stall watchdog's Progress of the protocol in progress (its lock, `armed`), or None."""
        return None

    @abstractmethod
    def mark_file(self, message: str) -> None:
        """Mark the file interrupted at once (a stop signal; mpirun may kill the job any moment)."""

    def abandon(self, signum: int, name: str, final: bool) -> None:
        """A stop signal while rank 0's main thread is inside the C kernel's timed loop, from the
        signal thread (npmpi.core.signals.watch_signals_in_a_thread): mark the file interrupted, then
        (`final`) close it interrupted and end the job as the Python kernel's abandon does. Only
        while the protocol is armed: the main thread is not in the file, and cannot enter it while
        this holds the lock (the stall watchdog's rule, npmpi/persize/watchdog.py)."""
        progress = self._watched()
        if progress is None or self.writer is None:
            return
        with progress.lock:
            if not progress.armed:
                return
            if not final:
                self.mark_file(f"{name} received; the run was stopping")
                return
            message, extra = f"interrupted by {name} (the trial in progress was abandoned)", ""
            try:
                elapsed = time.monotonic() - self.started
                self.writer.finish("interrupted", message, elapsed_s=elapsed, finished_utc=now_utc())
            except Exception as exc:
                extra = f" (and the {self.FILE} file could not be closed: {exc})"
            abort(self.comm, message + extra + self._kept(), 128 + signum)

    def _close_after(self, exc: BaseException, status: str, message: str) -> str:
        """Keep the samples taken up to the failure and close the file; returns what to add to the message."""
        writer, collector = self.writer, self.collector
        quiet = self._quiet() and not self.released
        if collector is not None and writer is not None and quiet and collector.writer is not None:
            with contextlib.suppress(Exception):  # keep the samples taken up to the failure
                collector.collect()
        if writer is not None:
            try:
                bound = {"stall_bound_s": exc.bound_s} if isinstance(exc, RankStalled) else {}
                writer.finish(status, message, elapsed_s=time.monotonic() - self.started, **bound)
            except Exception as werr:
                if werr is not exc:
                    return f" (and the {self.FILE} file could not be closed: {werr})"
        elif self.reservation is not None:
            from npmpi.core.outpath import release

            release(self.reservation)
        return ""
