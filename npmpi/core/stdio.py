"""Standard output that fails in one line: a full disk (`> /dev/full`), a closed descriptor (`>&-`).

Python reports a failed write to stdout as a traceback, or at exit as "Exception ignored ...",
and sets sys.stdout to None when descriptor 1 was closed before it started. `guarded_stdio` wraps
a command: a write or flush that fails raises StdoutError ("cannot write to standard output: No
space left on device"), which the command reports as its one error line, exit status 1. A broken
pipe (`| head`) stays a BrokenPipeError: the reader has what it wanted. A closed descriptor 0, 1 or
2 is first given /dev/null, so that no file the command opens takes its number and receives what
is printed. stderr that cannot be written is given up silently: there is nowhere left to say so.
"""

from __future__ import annotations

import contextlib
import errno
import os
import sys

from npmpi.core.errors import NpmpiError


class StdoutError(NpmpiError):
    """Standard output could not be written (a full disk, a closed descriptor): exit status 1."""


def _stdout_error(exc: OSError) -> BaseException:
    if isinstance(exc, BrokenPipeError) or exc.errno == errno.EPIPE:
        return exc
    return StdoutError(f"cannot write to standard output: {exc.strerror or exc}")


class _Stdout:
    """sys.stdout, whose failed writes raise StdoutError (BrokenPipeError for a closed pipe)."""

    def __init__(self, stream) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except OSError as exc:
            raise _stdout_error(exc) from None

    def flush(self) -> None:
        try:
            self._stream.flush()
        except OSError as exc:
            raise _stdout_error(exc) from None

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


class _ClosedStdout:
    """sys.stdout when descriptor 1 was closed at start: every write is a StdoutError."""

    encoding = "utf-8"
    errors = "strict"

    def write(self, text: str) -> int:
        if not text:
            return 0
        raise StdoutError("cannot write to standard output: it was closed when the command started")

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False

    def fileno(self) -> int:
        return 1  # /dev/null since _fill_closed


class _Stderr:
    """sys.stderr, whose failed writes are dropped: an error line has nowhere else to go."""

    def __init__(self, stream) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        with contextlib.suppress(OSError, ValueError):
            return self._stream.write(text)
        return len(text)

    def flush(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            self._stream.flush()

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


def _fill_closed() -> None:
    """/dev/null on each of descriptors 0, 1 and 2 that is closed."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            null = os.open(os.devnull, os.O_RDWR)
            if null != fd:
                os.dup2(null, fd)
                os.close(null)


def silence_stdout() -> None:
    """Send what is left of stdout (its buffer too) to /dev/null: exit does not fail again."""
    with contextlib.suppress(OSError):
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 1)
        os.close(null)


@contextlib.contextmanager
def guarded_stdio():
    """Within: sys.stdout raises StdoutError when it cannot be written, sys.stderr never raises.
    On leaving, stdout is flushed (its failure raised as StdoutError) and both streams restored."""
    out, err = sys.stdout, sys.stderr
    _fill_closed()
    sys.stdout = _ClosedStdout() if out is None else _Stdout(out)
    sys.stderr = _Stderr(err if err is not None else open(os.devnull, "w"))  # noqa: SIM115
    try:
        yield
        sys.stdout.flush()
    finally:
        sys.stdout, sys.stderr = out, err


def run_guarded(main, prog: str) -> int:
    """`main()`'s exit status, with a failure to write stdout reported in one line (exit status 1)
    instead of a traceback; argparse's SystemExit (--version) is flushed and reported the same way."""
    try:
        with guarded_stdio():
            try:
                status = main()
            except SystemExit as done:
                status = done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
    except StdoutError as exc:
        silence_stdout()
        _error_line(prog, str(exc))
        return 1
    except BrokenPipeError:
        silence_stdout()
        return 1
    return status


def _error_line(prog: str, message: str) -> None:
    with contextlib.suppress(OSError, ValueError, AttributeError):
        print(f"{prog}: error: {message}", file=sys.stderr, flush=True)
