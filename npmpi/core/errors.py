"""The project's own exceptions: each carries a message a user can act on."""

from __future__ import annotations


class NpmpiError(Exception):
    """Base class: an error npmpi explains in one line, without a traceback."""

    exit_code = 1


class UsageError(NpmpiError):
    """Bad options, bad rank count, an output that may not be written: exit status 2."""

    exit_code = 2


class KernelUnavailable(NpmpiError):
    """The requested timing kernel cannot be used (e.g. the C kernel was not built)."""

    exit_code = 2


class DataMismatch(NpmpiError):
    """Received data differ from what was sent."""


class PrepareFailed(NpmpiError):
    """A rank could not prepare a size's buffers (out of memory, a kind's step failing there): the run
    fails, every size completed before it kept, every rank released."""


class RankStalled(NpmpiError):
    """A rank stopped answering where rank 0 waits for it outside the sweep's steps (an idle
    baseline, the end of the job): it cannot be released, only the job aborted."""

    def __init__(self, message: str, bound_s: float) -> None:
        super().__init__(message)
        self.bound_s = bound_s  # the bound that ran out (the file's stall_bound_s)


class RunFileError(NpmpiError):
    """A run file is missing, unreadable, of another format or of a newer version."""


class Interrupted(NpmpiError):
    """The run was stopped by a signal (Ctrl-C, SIGTERM from Slurm at the time limit)."""

    def __init__(self, signum: int, name: str) -> None:
        super().__init__(f"interrupted by {name}")
        self.signum = signum
        self.exit_code = 128 + signum


class RunFileWriteError(NpmpiError):
    """The run file could not be written (disk full, I/O error): the run stops, the file is failed."""


class RunFileGone(NpmpiError):
    """The run file's path no longer leads to the file written (its directory was moved or removed
    during the run): the message says where the data is, or that it is lost."""


class LinkError(UsageError):
    """A protocol's link between a pair's ranks could not be opened before the sweep (a port that
    cannot be bound, a peer that never connects): exit status 2, nothing measured."""


class LinkLost(NpmpiError):
    """A protocol's link broke during the sweep (a connection reset): the run fails, every size
    completed before it kept."""


class HelpRequested(Exception):
    """--help or --version was given; the text is to be printed by rank 0 only."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text
