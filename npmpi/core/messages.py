"""The messages between ranks: every MPI tag, the commands sent on the control tag, and the stop state.

Rank 0 drives the job: it sends a command as four int64 (command, argument, iterations, packed
trials and integrity flag) on CTRL_TAG to each rank in turn; a pair's reflector, the other pairs'
ranks, the power ranks and ranks with no role each answer the commands they know.
docs/architecture.md has the table of who sends what when. csrc/cutil.h defines DATA_TAG and
ACK_TAG too: change them in both places.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

# tags
DATA_TAG = 1  # the timed messages (npmpi.persize.kernels, csrc/cutil.h)
ACK_TAG = 2  # a stream's acknowledgement after each window (npmpi.persize.kernels, csrc/cutil.h)
CTRL_TAG = 10  # rank 0's commands: every rank listens here between sizes
SYNC_TAG = 11  # a trial's start (1) or the size abandoned (0) (npmpi.persize.transmitter)
RESULT_TAG = 12  # after a size: (data check passed, signal seen) (npmpi.persize.transmitter)
CLOCK_TAG = 13  # clock-offset pings (npmpi.power.clocksync)
POWER_DATA_TAG = 14  # a power rank's batch of samples, pickled (npmpi.power.rank)
TIMES_TAG = 15  # a secondary pair transmitter's trial times (npmpi.persize.transmitter)
BASELINE_TAG = 16  # after an idle baseline: (CPU seconds, node utilisation or NaN) (npmpi.power.baseline)
MAP_PAIR_TAG = 17  # within a map's pair: the transmitter's steps, the reflector's data check (npmpi.map.pair)
CPU_TAG = 18  # after a size: a pair rank's CPU user, system and wall seconds (npmpi.persize.cputime)
LINK_TAG = 19  # a pair's link set-up: addresses, ports, outcomes (npmpi.protocols.tcp.link)
LOAD_DONE_TAG = 20  # calibrate: a load rank's load is over (npmpi.calibrate.loadstall)
END_TAG = 21  # a rank's role is over, before MPI_Finalize (npmpi.core.ending.report_end)
COND_TAG = 22  # after a size's CPU time: the rank's conditions, pickled (npmpi.persize.span)

# commands (the first field on CTRL_TAG)
CMD_STOP = 0  # exit; the exit code travels in the second field
CMD_SIZE = 1  # measure one message size: size, iterations, trials | integrity << 32
CMD_PROBE = 2  # untimed round trips to estimate the time of one at this size
CMD_FLUSH = 3  # a power rank sends its samples; second field: ms until the next flush
CMD_CLOCK = 4  # a power rank answers that many clock pings
CMD_BASELINE = 5  # an idle baseline's start or end (second field: the phase)
CMD_MAP_ROUND = 6  # a map's round: one size with one peer (size, peer's rank, round_word) (npmpi.map.pair)


class StopFlag:
    """The stop state of one rank: set by the signal handlers, looked at between trials.

    On rank 0 the recording declares `transmitter` (where rank 0 is in the protocol) and
    `mark_file` (marks the run file interrupted at once) for the handlers to use; `timing` says
    that this rank is inside a timed loop (`timed()`), which only an abort can end.
    """

    __slots__ = ("abandon", "mark_file", "name", "signum", "timing", "transmitter")

    def __init__(self) -> None:
        self.signum: int | None = None
        self.name = ""
        self.transmitter: Any = None  # npmpi.persize.transmitter.Transmitter while rank 0 sweeps
        self.mark_file: Callable[[str], None] | None = None
        # (signum, name, final): a stop signal's mark (False) or abandon (True) of the trial in progress
        # from npmpi.core.signals' signal thread, while this rank's main thread is inside the C kernel
        self.abandon: Callable[[int, str, bool], None] | None = None
        self.timing = False

    @contextmanager
    def timed(self) -> Iterator[None]:
        """The timed phase: a loop its peer is inside too. An exception leaves `timing` set on
        purpose: the peer is still in its loop, so only an abort can end the job."""
        self.timing = True
        yield
        self.timing = False

    def mark_interrupted(self, outcome, said: str) -> None:
        """An outcome that a stop signal ended: status `interrupted`, message "SIGNAL received" and
        `said`, exit code 128 + the signal's number."""
        outcome.status = "interrupted"
        outcome.message = f"{self.name} received{said}"
        outcome.exit_code = 128 + int(self.signum or 0)

    def set(self, signum: int, name: str) -> None:
        """Record the first stop signal."""
        self.signum, self.name = signum, name

    def __bool__(self) -> bool:
        return self.signum is not None
