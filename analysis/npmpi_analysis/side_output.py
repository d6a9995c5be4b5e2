"""One output made and written by a second process while this one makes the others: a large map's
CSV beside its JSON (a 1,024-node map's CSV is 350 MB of 18 million numbers written as text, 8 s
of one core, and so is its JSON).

The second process is a fork of this one once the analysis is done, so it shares the analysis'
arrays without copying them; it writes its file as every output is written (outfiles.write_with:
a temporary name, then a rename) and hands back only what went wrong, as text. `join` raises that error
here (a UsageError or OutputError, as if the output had been written in this process) or, when the
process ended without a word (killed), an OutputError naming the file. Where fork is missing or
only one CPU may be used, `side_output` gives None and the caller writes the output itself.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from npmpi.core.errors import NpmpiError, UsageError
from npmpi_analysis.outfiles import OutputError, write_with


class SideOutput:
    """`path` written by `fill(f)` (f: the file, open for writing bytes) in a forked process;
    `join()` waits and raises its error."""

    def __init__(self, path: Path, fill: Callable[[BinaryIO], object], force: bool):
        ctx = multiprocessing.get_context("fork")
        self.path = Path(path)
        self._joined = False
        self._said, told = ctx.Pipe(duplex=False)
        self._process = ctx.Process(target=_write, args=(told, self.path, fill, force), daemon=True)
        # SIGTERM blocked across the fork: one sent to the new process before it can act on it
        # (Python clears a new process' pending signals) waits, and `_write` lets it in
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
        try:
            self._process.start()
        except OSError:  # no fork (memory): the caller writes the output itself
            self._said.close()
            raise
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
            told.close()

    def stop(self) -> None:
        """Stop the process (SIGTERM: an npmpi-analyze process ends its output cleanly) and wait
        for it; its file is not written, its temporary file removed."""
        if self._process.is_alive() and self._process.pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self._process.pid, signal.SIGTERM)
        self.join(say_error=False)

    def join(self, say_error: bool = True) -> None:
        """Wait for the output to be written; raise what went wrong (when `say_error`). Once."""
        if self._joined:
            return
        self._joined = True
        temp, said = None, None
        try:
            said = self._said.recv()
            if isinstance(said, Path):  # the temporary file's name, then what happened
                temp, said = said, None
                said = self._said.recv()
        except EOFError:
            said = None
        finally:
            self._said.close()
        self._process.join()
        if said is None and temp is not None:  # killed while writing: its temporary file goes
            temp.unlink(missing_ok=True)
        if not say_error:
            return
        if said is None:
            raise OutputError(
                f"cannot write {self.path}: the process writing it ended with exit status "
                f"{self._process.exitcode} before it was written"
            )
        if isinstance(said, tuple):  # (usage, message): the error as this process would raise it
            usage, message = said
            raise UsageError(message) if usage else OutputError(message)


def side_output(path: Path, fill: Callable[[BinaryIO], object], force: bool) -> SideOutput | None:
    """A SideOutput writing `path`, or None where a second process cannot run beside this one."""
    if "fork" not in multiprocessing.get_all_start_methods() or _cpus() < 2:
        return None
    try:
        return SideOutput(path, fill, force)
    except OSError:
        return None


def _cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _write(told, path: Path, fill: Callable[[BinaryIO], object], force: bool) -> None:
    """In the forked process: write the output, then say "done" or the error (a second stop
    signal, as the parent's after the job's, is ignored: this process says one thing and ends)."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
    said: object = (False, f"cannot write {path}: interrupted")
    with contextlib.suppress(BaseException):  # a signal inside the handlers below: `said` as it is
        try:
            write_with(path, fill, force, on_temp=told.send)
            said = "done"
        except NpmpiError as exc:
            said = (isinstance(exc, UsageError), str(exc))
        except MemoryError:
            said = (False, f"cannot write {path}: out of memory while making it")
        except BaseException as exc:
            said = (False, f"cannot write {path}: {type(exc).__name__}: {exc}")
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    with contextlib.suppress(Exception):
        told.send(said)
        told.close()
