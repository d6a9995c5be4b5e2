"""The per-size driver: one size's sequence between rank 0 and the other measuring ranks, written once
for the run's pair, its several pairs (--pairs), a group kind's members (npmpi/kinds/group.py) and
the start of a map's round (npmpi/map/recording.py: its command per member, ready, go).

    rank 0                                   each other member
    CMD_SIZE (size, iterations, trials)  ->  its buffers
    (a group kind) <- prepared (1), or could  sends its word (and a failure's reason), waits
                      not (3) and why ......  for the go: 1 the untimed warm-up, 0 leave the size
    per trial:  <- ready (1) ................ sends ready, waits for the go
                go (1: run, 0: abandon,       runs its trial (timed on its own clock)
                    2: done, --precision) ->  or leaves its trials for the report
    after the trials: <- its data check and the stop signal it saw (RESULT_TAG),
                      <- its trial times, if it times (TIMES_TAG), <- its CPU time (CPU_TAG),
                      <- its conditions (COND_TAG: frequency, throttling, NIC bytes; persize/span.py)

Rank 0 waits for every member's ready before each trial, so all start together and a stop request
(looked at there) never leaves a member blocked: the go is 0 and every member leaves the size. Each
wait is announced to the stall watchdog first (`Progress.at`: which rank rank 0 waits for, during
what; npmpi/persize/watchdog.py). Nothing here runs inside a timed loop.

A map's round takes only the start (each member its own command, every member ready, the go):
its pairs then run on their own, each with its own probe, iterations and trials driven by the pair's
lower rank (npmpi/map/pair.py), and report when done. A go per trial from rank 0, as here, would
start every pair's trial together, gating the round's pairs by the slowest one and putting rank 0's
messages into every trial of every pair: a different measurement (docs/architecture.md).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from npmpi.core.messages import (
    CMD_SIZE,
    CMD_STOP,
    CPU_TAG,
    CTRL_TAG,
    RESULT_TAG,
    SYNC_TAG,
    TIMES_TAG,
    StopFlag,
)
from npmpi.persize import cputime, span
from npmpi.persize.watchdog import READY, RESULTS, Progress

GO_RUN, GO_ABANDON, GO_DONE = 1, 0, 2  # a go's values: run the trial, leave the size, end its trials
# a group kind's member after preparing a size's buffers, before any collective: PREPARED, or
# UNPREPARED followed by its reason (UTF-8, zero-padded to REASON_BYTES) on SYNC_TAG
PREPARED, UNPREPARED = 1, 3
REASON_BYTES = 256


@dataclass
class Reports:
    """What the other members reported after a size."""

    wrong: list[int] = field(default_factory=list)  # members whose received data or result was wrong
    signal: int = 0  # the first stop signal a member saw during the size (0: none)
    times: dict[int, list[float]] = field(default_factory=dict)  # a timing member's trial times
    cpu: list[np.ndarray] = field(default_factory=list)  # each member's CPU figures, in member order
    cond: list[tuple[list[float], dict]] = field(default_factory=list)  # each member's conditions


class SizeDriver:
    """Rank 0's side of the sequence with `members` (every other measuring rank); `timers` are the
    members that send their trial times."""

    def __init__(
        self, comm, members: list[int], timers: list[int], progress: Progress, stop: StopFlag
    ) -> None:
        self.comm, self.members, self.timers, self.progress, self.stop = comm, members, timers, progress, stop
        self.ctrl = np.zeros(4, dtype=np.int64)
        self.sync = np.zeros(1, dtype=np.int64)
        self.result = np.zeros(2, dtype=np.int64)

    def command(self, cmd: int, a: int = 0, b: int = 0, c: int = 0) -> None:
        """One command on CTRL_TAG to every member (CMD_SIZE: size, iterations, trials | integrity << 32)."""
        self.ctrl[:] = (cmd, a, b, c)
        for rank in self.members:
            self.comm.Send(self.ctrl, rank, CTRL_TAG)

    def release(self, exit_code: int, abandon: bool, others: list[int]) -> None:
        """The end: every member's go 0 when they wait for one (`abandon`: rank 0 left a size between
        trials), then CMD_STOP with the exit code to every member and to the `others` (idle ranks)."""
        if abandon:
            self.go(0)
        self.command(CMD_STOP, exit_code)
        for rank in others:
            self.comm.Send(self.ctrl, rank, CTRL_TAG)

    def start_size(self, size: int, iterations: int, trials: int, integrity: bool = False) -> None:
        self.command(CMD_SIZE, size, iterations, trials | (int(integrity) << 32))

    def command_to(self, rank: int, cmd: int, a: int = 0, b: int = 0, c: int = 0) -> None:
        """One command on CTRL_TAG to one rank (a map's round: each member its own peer)."""
        self.ctrl[:] = (cmd, a, b, c)
        self.comm.Send(self.ctrl, rank, CTRL_TAG)

    def go(self, value: int, ranks: list[int] | None = None) -> None:
        """Every member's (or `ranks`') go for the next trial or round: 1 run it, 0 leave it."""
        self.sync[0] = value
        for rank in self.members if ranks is None else ranks:
            self.comm.Send(self.sync, rank, SYNC_TAG)

    def ready_then_go(
        self,
        ranks: list[int],
        announce: Callable[[int], Any],
        receive: Callable[..., Any] | None = None,
        before_go: Callable[[], Any] | None = None,
        done: bool = False,
        unprepared: Callable[[int], Any] | None = None,
        refused: bool = False,
    ) -> bool:
        """Every rank's ready, each wait announced first (`announce(rank)`, for the stall watchdog) and
        received by `receive(comm, buf, rank, tag)` (default a blocking Recv; the map's sleeps between
        tests); then `before_go()` and the go to all of them: 1, or 0 when a stop came meanwhile
        (without `before_go`), a rank's word was UNPREPARED (`unprepared(rank)` takes its reason) or
        rank 0 itself could not prepare (`refused`); `done`: the go 2, every member ends its trials.
        True when they go."""
        for rank in ranks:  # everyone is ready: the previous trial or round ended everywhere
            announce(rank)
            if receive is None:
                self.comm.Recv(self.sync, rank, SYNC_TAG)
            else:
                receive(self.comm, self.sync, rank, SYNC_TAG)
            if self.sync[0] == UNPREPARED and unprepared is not None:
                unprepared(rank)
                refused = True
        going = not self.stop and not refused
        if going and before_go is not None:
            before_go()
        self.go((GO_DONE if done else GO_RUN) if going else GO_ABANDON, ranks)
        return going

    def prepared(self, announce: Callable[[int], Any], own: bool = True) -> tuple[bool, dict[int, str]]:
        """A group kind's size, once rank 0 has prepared its own buffers (`own`: it could): every
        member's word (member_prepared), then the go, 1 when all prepared and no stop came, else 0
        (every member leaves the size: none is left inside a collective). Whether they go, and the
        reason of each member that could not prepare (a small message each way per member and size)."""
        reasons: dict[int, str] = {}
        text = np.zeros(REASON_BYTES, dtype=np.uint8)

        def reason(rank: int) -> None:
            self.comm.Recv(text, rank, SYNC_TAG)
            reasons[rank] = bytes(text).rstrip(b"\0").decode("utf-8", "replace")

        going = self.ready_then_go(self.members, announce, unprepared=reason, refused=not own)
        return going, reasons

    def trials(
        self,
        size: int,
        iterations: int,
        trials: int,
        watched: int,
        run_trial: Callable[[], Any],
        enough: Callable[[list[Any]], bool] | None = None,
    ) -> list[Any] | None:
        """Each trial: every member ready, then the go, then rank 0's own `run_trial()` (the watchdog
        watching rank `watched` meanwhile); their results, or None when a stop abandoned the size.
        With `enough` (--precision) `trials` is the most: after each trial before the last,
        `enough(results)` true ends them (every member's next ready answered with the go 2, done)."""
        out: list[Any] = []
        for t in range(trials):
            if not self.ready_then_go(
                self.members, lambda rank: self.progress.at(size, READY, rank, iterations)
            ):
                return None
            self.progress.at(size, t, watched, iterations)
            out.append(run_trial())
            if enough is not None and t + 1 < trials and enough(out):
                announce = lambda rank: self.progress.at(size, READY, rank, iterations)  # noqa: E731
                return out if self.ready_then_go(self.members, announce, done=True) else None
        return out

    def reports(self, size: int, iterations: int, trials: int) -> Reports:
        """Every member's data check and stop signal, the timers' trial times and everyone's CPU time."""
        rep = Reports()
        for rank in self.members:
            self.progress.at(size, RESULTS, rank, iterations)  # a slower member may still be in its trial
            self.comm.Recv(self.result, rank, RESULT_TAG)
            if not self.result[0]:
                rep.wrong.append(rank)
            rep.signal = rep.signal or int(self.result[1])
        buf = np.zeros(trials, dtype=np.float64)  # the trials that ran (fewer than commanded: --precision)
        for rank in self.timers:
            self.comm.Recv(buf, rank, TIMES_TAG)
            rep.times[rank] = buf.tolist()
        rep.cpu = cputime.receive(self.comm, self.members, CPU_TAG)
        rep.cond = span.receive(self.comm, self.members)
        return rep


def member_ready(comm, sync: np.ndarray | None = None) -> bool:
    """A member's ready to rank 0, then its go: True to run the trial or round, False to leave it."""
    sync = np.zeros(1, dtype=np.int64) if sync is None else sync
    sync[0] = 1
    comm.Send(sync, 0, SYNC_TAG)
    comm.Recv(sync, 0, SYNC_TAG)
    return bool(sync[0])


def member_prepared(comm, failure: str | None) -> bool:
    """A group kind's member, its buffers for the size prepared (`failure` None) or not (`failure`
    says why: sent, cut to REASON_BYTES): its word to rank 0, then the go. True to go on with the
    size, False to leave it (a stop, or a member that could not prepare it)."""
    sync = np.array([PREPARED if failure is None else UNPREPARED], dtype=np.int64)
    comm.Send(sync, 0, SYNC_TAG)
    if failure is not None:
        text = np.zeros(REASON_BYTES, dtype=np.uint8)
        raw = failure.encode("utf-8", "replace")[:REASON_BYTES]
        text[: len(raw)] = np.frombuffer(raw, dtype=np.uint8)
        comm.Send(text, 0, SYNC_TAG)
    comm.Recv(sync, 0, SYNC_TAG)
    return int(sync[0]) == GO_RUN


def member_trials(comm, trials: int, run_trial: Callable[[], Any]) -> list[Any] | None:
    """A member's trials, at most `trials`: ready, the go, `run_trial()`; their results, or None when
    rank 0 said leave (the go 0); the go 2 ends them early."""
    sync = np.zeros(1, dtype=np.int64)
    out = []
    for _ in range(trials):
        sync[0] = 1
        comm.Send(sync, 0, SYNC_TAG)
        comm.Recv(sync, 0, SYNC_TAG)
        if sync[0] == GO_ABANDON:
            return None
        if sync[0] == GO_DONE:  # rank 0 has enough trials (--precision): `trials` was the most
            break
        out.append(run_trial())
    return out


def member_report(
    comm, ok: bool, stop: StopFlag, times: list[float] | None, figures: span.SpanFigures
) -> None:
    """A member's report after its trials: data check and stop signal, its times if it times, its CPU
    time and conditions."""
    comm.Send(np.array([int(ok), int(stop.signum or 0)], dtype=np.int64), 0, RESULT_TAG)
    if times is not None:
        comm.Send(np.asarray(times, dtype=np.float64), 0, TIMES_TAG)
    comm.Send(figures.cpu, 0, CPU_TAG)
    span.send(comm, figures)
