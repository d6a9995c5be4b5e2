"""A kind from outside npmpi (NPMPI_KINDS, an entry point) checked when it is loaded and guarded while
it runs: any failure of its own code is one line naming it, never a traceback nor a silent exit.

`not_a_kind(name, target, obj)` says what a registration names instead of a kind (a class, a
function, a number, None: the registry refuses it); `OutsideKind` wraps the kind so that a method of
its start-up that raises (or calls sys.exit) says which kind and which method: before MPI (`parse`,
`thread_level`, `before_mpi`) as a usage error (one line on rank 0, exit 2 on every rank:
npmpi.core.startup), once MPI runs (`groups`, `prepare`, `prepare_output`, …) as an error that ends the
job with one line (npmpi/commands/sequence.py). Its recording and serving keep their own end (a file
closed with its status: npmpi/commands/filerecording.py), and a stop signal's exception is never
renamed.
"""

from __future__ import annotations

from typing import Any

from npmpi.core.config import THREAD_LEVELS
from npmpi.core.errors import HelpRequested, NpmpiError, UsageError

BEFORE_MPI = ("parse", "thread_level", "before_mpi")
STARTING = ("common", "groups", "member_problem", "prepare", "prepare_output", "settled")


class KindFailed(NpmpiError):
    """An outside kind's method failed once MPI runs: the job ends with this one line."""


def not_a_kind(name: str, target: str, obj: Any) -> str | None:
    """None when `obj` is a kind (an instance of npmpi.kinds.kind.Kind), else what it is instead."""
    from npmpi.kinds.kind import Kind

    if isinstance(obj, Kind):
        return None
    if isinstance(obj, type):
        what = f"the class {obj.__name__}, not a kind: register an instance of it (KIND = {obj.__name__}())"
    else:
        what = f"{type(obj).__name__} {obj!r:.60}, not a kind (an instance of npmpi.kinds.kind.Kind)"
    return f"kind {name!r}: {target} is {what}"


def failure(name: str, method: str, exc: BaseException) -> str:
    """The one line's words for an outside kind's method that failed."""
    if isinstance(exc, SystemExit):
        code = f"SystemExit {exc.code!r:.40}"
        return f"kind {name!r}: its {method}() ended the process ({code}) instead of returning"
    return f"kind {name!r}: its {method}() failed: {type(exc).__name__}: {exc}"


class OutsideKind:
    """A kind from outside npmpi, its start-up's methods guarded (every other attribute is the kind's)."""

    def __init__(self, name: str, kind) -> None:
        self._name, self._kind = name, kind

    def __getattr__(self, attr: str):
        try:
            value = getattr(self._kind, attr)
        except Exception as exc:  # a property of the kind's that raises
            if isinstance(exc, AttributeError):
                raise
            raise UsageError(failure(self._name, attr, exc)) from None
        if attr in BEFORE_MPI or attr in STARTING:
            return self._guarded(attr, value)
        return value

    def _guarded(self, method: str, function):
        error = UsageError if method in BEFORE_MPI else KindFailed

        def call(*args, **kwargs):
            try:
                result = function(*args, **kwargs)
            except (NpmpiError, HelpRequested):
                raise  # the kind's own one line (bad usage, --help)
            except BaseException as exc:
                raise error(failure(self._name, method, exc)) from None
            if method == "thread_level" and result not in THREAD_LEVELS:
                raise UsageError(
                    f"kind {self._name!r}: its thread_level() gave {result!r:.40}, not an MPI thread "
                    f"level ({', '.join(THREAD_LEVELS)})"
                )
            return result

        return call

    def who(self, rank: int, host: str) -> str:
        """How the one line names a rank; the default words when the kind's own fail (this is
        called while a failure is being reported)."""
        try:
            text = self._kind.who(rank, host)
            if isinstance(text, str):
                return text
        except Exception:
            pass
        return f"rank {rank} ({host})"
