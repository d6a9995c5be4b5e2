"""A map's pairs: one size measured between two members in a round, and every member's command loop.

Rank 0 commands a round (npmpi/map/recording.py): each paired member gets CMD_MAP_ROUND (size, peer,
and a word saying both directions and the trials: the map's, or fewer for a suspect measured again
within its budget, npmpi/map/confirm.py), fills its buffers and says it is ready (SYNC_TAG); once
all are, rank 0 sends each the go (1, or 0 when a stop request abandons the round), which is the
round's common start. Within a pair the lower rank transmits: it drives its reflector with steps on
MAP_PAIR_TAG (untimed runs: first contact, the probe, the warm-up; then each trial, echoed so both
sides start it together; then the end, to which the reflector answers with its data check), and
reports to rank 0 (RESULT_TAG, TIMES_TAG: the trials' times and both ranks' run-queue waits during
each, the reflector's sent with its data check; npmpi/persize/cputime.py; then COND_TAG: both sides'
conditions, below). With both directions (a
stream map), the higher rank then transmits to the lower the same way and reports too. Each report
carries the time from the go to the end of that transmitter's work: the pair's own window within the
round. Members wait for commands asleep (a non-blocking receive tested every POLL_S), never spinning
a core, so a member with a bye or whose pair has finished adds no load to its node.

The conditions (npmpi/persize/span.py CondReading: core frequency, throttling, NIC bytes): each side
reads them around its part's trials, never inside a timed loop. The transmitter starts its reading
before its first trial, laps after each trial (its timer has stopped; the reflector waits for the
next step) and stops after the last; the reflector starts when the first trial's step arrives, laps
when each later step arrives and stops at the end, all before it answers the step (the
transmitter's timer starts after the echo). The reflector sends its figures after its data check
(MAP_PAIR_TAG, pickled); the transmitter reports both sides' to rank 0 after its times (COND_TAG,
pickled, sent without blocking: a member that then reflects for its peer is not held up by rank 0
collecting another pair).
"""

from __future__ import annotations

import os
import re
import time

import numpy as np

from npmpi.core.config import Options
from npmpi.core.messages import (
    CMD_BASELINE,
    CMD_MAP_ROUND,
    CMD_STOP,
    COND_TAG,
    CTRL_TAG,
    MAP_PAIR_TAG,
    RESULT_TAG,
    TIMES_TAG,
    StopFlag,
)
from npmpi.core.schedule import netpipe_repeats
from npmpi.persize.cputime import runq_wait_ns, waited_s
from npmpi.persize.driver import member_ready
from npmpi.persize.kernels import Kernel
from npmpi.persize.messageloop import MessageLoop, Patterns, warmup_iterations
from npmpi.persize.span import CondReading, is_side, not_measured
from npmpi.power.baseline import take_part
from npmpi.protocols.mpi.link import MpiLink

POLL_S = 0.002
PROBE_FRACTION = 0.1  # the probe doubles its chunk of iterations until one takes this much of --target-time
PROBE_MAX_ITERATIONS = 1 << 20
MAX_ITERATIONS = 1_000_000_000
STEP_END, STEP_RUN, STEP_TRIAL = 0, 1, 2
RESULT_FIELDS = 5  # iterations, untimed iterations, data check passed on both sides, signal seen,
# nanoseconds from the round's go to the end of this transmitter's work (the pair's own window)
TIMES_ROWS = 3  # TIMES_TAG's float64[3, trials]: each trial's loop time, the transmitter's and the
# reflector's run-queue wait during it (s; NaN where not run or not known)
NO_TRIAL = "unknown, because no trial ran (a stop came first)"


def round_word(both: bool, trials: int = 0) -> int:
    """CMD_MAP_ROUND's last field: bit 0 both directions, the bits above the trials (0: the map's)."""
    return int(both) | (trials << 1)


def read_round_word(word: int) -> tuple[bool, int]:
    """(both directions, trials or 0 for the map's) from CMD_MAP_ROUND's last field."""
    return bool(word & 1), word >> 1


def fault_trial_delay_s(rank: int, peer: int) -> float:
    """Fault injection for the test suite: NPMPI_FAULT_MAP_TRIAL_DELAY=RANK:SECONDS[:PEER] makes that
    rank, as a reflector (of PEER only, when given), start each trial SECONDS late: its pairs read
    slow, measured again too."""
    value = os.environ.get("NPMPI_FAULT_MAP_TRIAL_DELAY", "")
    m = re.fullmatch(r"([0-9]{1,6}):([0-9]{1,3}(?:\.[0-9]{1,6})?)(?::([0-9]{1,6}))?", value, re.ASCII)
    if m is None or int(m.group(1)) != rank or (m.group(3) is not None and int(m.group(3)) != peer):
        return 0.0
    return float(m.group(2))


def wait_for(comm, buf, source: int, tag: int) -> None:
    """Receive into `buf`, asleep between tests of a non-blocking receive (signal handlers run)."""
    req = comm.Irecv(buf, source, tag)
    while not req.Test():
        time.sleep(POLL_S)


def iterations_for(opts: Options, size: int, message_s: float) -> int:
    """Iterations per trial by NetPIPE 3.7's nrepeat rule, with tlast this size's own time per message
    (the probe's), so NetPIPE's size factor b/(b-inc+1) is 1; a stream's iterations are windows."""
    repeats = netpipe_repeats(opts.target_time_s, size, 1, message_s, opts.trials, MAX_ITERATIONS)
    return -(-repeats // opts.messages_per_iteration)


class PairSide:
    """One member's buffers and patterns: a loop as transmitter and one as reflector, made when needed."""

    def __init__(self, opts: Options, kernel: Kernel) -> None:
        self.opts = opts
        self.kernel = kernel
        self.patterns = Patterns(opts.largest_message_bytes)
        self._loops: dict[bool, MessageLoop] = {}
        self.trials = opts.trials  # this round's: fewer for a suspect measured again within its budget

    def loop(self, transmitter: bool) -> MessageLoop:
        if transmitter not in self._loops:
            self._loops[transmitter] = MessageLoop(self.opts, self.kernel, transmitter=transmitter)
        return self._loops[transmitter]

    def prepare(self, comm, size: int, peer: int, both: bool = False, trials: int = 0) -> None:
        """Fill this size's buffers with this rank's pattern (the lower rank of a pair transmits; with
        both directions each side transmits once and reflects once); `trials` this round's (0: the
        map's)."""
        me = comm.Get_rank()
        self.trials = trials or self.opts.trials
        for transmitter in (True, False) if both else (me < peer,):
            self.loop(transmitter).set_size(size, self.patterns, me)


class _Stepper:
    """The transmitter's side of the pair's steps; `stop.timing` is set inside a timed loop."""

    def __init__(self, comm, peer: int, loop: MessageLoop, stop: StopFlag) -> None:
        self.comm, self.peer, self.loop, self.stop = comm, peer, loop, stop
        self.link = MpiLink(comm, peer)  # the map measures MPI send/receive only
        self.step = np.zeros(2, dtype=np.int64)
        self.waited_s = float("nan")  # the run-queue wait during the last trial's loop

    def run(self, kind: int, n: int) -> float:
        self.step[:] = (kind, n)
        self.comm.Send(self.step, self.peer, MAP_PAIR_TAG)
        if kind == STEP_TRIAL:
            self.comm.Recv(self.step, self.peer, MAP_PAIR_TAG)
        before = runq_wait_ns() if kind == STEP_TRIAL else -1
        with self.stop.timed():
            elapsed = self.loop.run(self.link, n)
        if kind == STEP_TRIAL:
            self.waited_s = waited_s(before, runq_wait_ns())
        return elapsed


def transmit(comm, peer: int, side: PairSide, size: int, stop: StopFlag, since: float | None = None):
    """The transmitter's round: first contact, probe, iterations, warm-up, trials (until a stop), end.

    Returns (int64[RESULT_FIELDS] result, float64[TIMES_ROWS, side.trials] the trials' times and
    both sides' run-queue waits, NaN where not run or not known, both sides' conditions: COND_TAG's
    report); the result's last field is the time from `since` (time.monotonic() at the round's go)
    to the end. The iterations per trial are the map's rule's whatever the round's trials."""
    opts = side.opts
    loop = side.loop(True)
    steps = _Stepper(comm, peer, loop, stop)
    unit = opts.mode_value.factors(opts.window).one_way_factor
    steps.run(STEP_RUN, 1)  # first contact: a transport may set up its connection here
    untimed, n = 1, 1
    while True:
        elapsed = steps.run(STEP_RUN, n)
        untimed += n
        if elapsed >= PROBE_FRACTION * opts.target_time_s or n >= PROBE_MAX_ITERATIONS:
            break
        n *= 2
    iterations = iterations_for(opts, size, elapsed / (n * unit))
    warm = warmup_iterations(iterations)
    steps.run(STEP_RUN, warm)
    untimed += warm
    last = warm
    times = np.full((TIMES_ROWS, side.trials), np.nan)
    reading = None
    for k in range(side.trials):
        if stop:
            break
        if reading is None:  # before the first trial's step: the reflector waits for it
            reading = CondReading()
        times[0, k] = reading.lap(steps.run(STEP_TRIAL, iterations))
        times[1, k] = steps.waited_s
        last = iterations
    own = reading.stop() if reading is not None else no_trial()
    steps.step[:] = (STEP_END, last)
    comm.Send(steps.step, peer, MAP_PAIR_TAG)
    check = np.zeros(2 + side.trials, dtype=np.int64)
    comm.Recv(check, peer, MAP_PAIR_TAG)
    cond = report(own, comm.recv(source=peer, tag=MAP_PAIR_TAG))
    times[2] = np.where(check[2:] >= 0, check[2:] / 1e9, np.nan)
    ok = loop.received_ok(side.patterns, peer, 0, last) and bool(check[0])
    signal = int(stop.signum or 0) or int(check[1])
    elapsed_ns = int(1e9 * (time.monotonic() - since)) if since is not None else 0
    return np.array([iterations, untimed, int(ok), signal, elapsed_ns], dtype=np.int64), times, cond


def no_trial() -> tuple[np.ndarray, dict]:
    """A side whose part ran no trial: NaN, and a text marked `no_trial` (the file keeps the rank's
    text of its measured pairs rather than this)."""
    values, text = not_measured(NO_TRIAL)
    return values, {**text, "no_trial": True}


def report(own: tuple[np.ndarray, dict], theirs) -> tuple[list[list[float]], list[dict]]:
    """COND_TAG's report: ([transmitter's, reflector's] COND_DATASETS values, [their texts]); the
    reflector's, when malformed, is unknown."""
    if not is_side(theirs):
        theirs = not_measured("unknown, because the reflector's conditions did not arrive intact")
    return [list(map(float, own[0])), list(map(float, theirs[0]))], [own[1], theirs[1]]


def reflect(comm, peer: int, side: PairSide, stop: StopFlag) -> None:
    """The reflector's round: follow the transmitter's steps, answer the end with the data check and
    its run-queue wait (ns, -1 unknown) during each trial, then send its conditions."""
    loop = side.loop(False)
    link = MpiLink(comm, peer)  # the map measures MPI send/receive only
    step = np.zeros(2, dtype=np.int64)
    answer = np.full(2 + side.trials, -1, dtype=np.int64)
    trial = 0
    delay_s = fault_trial_delay_s(comm.Get_rank(), peer)
    reading = None
    while True:
        comm.Recv(step, peer, MAP_PAIR_TAG)
        kind, n = int(step[0]), int(step[1])
        if kind == STEP_END:
            if reading is not None:
                reading.lap()  # after the last trial
            own = reading.stop() if reading is not None else no_trial()
            answer[:2] = (int(loop.received_ok(side.patterns, peer, 0, n)), int(stop.signum or 0))
            comm.Send(answer, peer, MAP_PAIR_TAG)
            comm.send((list(map(float, own[0])), own[1]), peer, MAP_PAIR_TAG)
            return
        if kind != STEP_TRIAL:
            loop.run(link, n)
            continue
        if reading is None:  # before the echo: the transmitter's timer starts after it
            reading = CondReading()
        else:
            reading.lap()  # after the previous trial
        before = runq_wait_ns()  # before the echo: the transmitter's timer starts after it
        comm.Send(step, peer, MAP_PAIR_TAG)
        if delay_s:
            time.sleep(delay_s)
        loop.run(link, n)
        after = runq_wait_ns()
        if trial < side.trials and before >= 0 and after >= before:
            answer[2 + trial] = after - before
        trial += 1


def serve_map(comm, side: PairSide, stop: StopFlag) -> int:
    """A member other than rank 0: rounds, idle baselines and the stop, until rank 0 says stop."""
    ctrl = np.zeros(4, dtype=np.int64)
    sync = np.zeros(1, dtype=np.int64)
    me = comm.Get_rank()
    while True:
        wait_for(comm, ctrl, 0, CTRL_TAG)
        cmd = int(ctrl[0])
        if cmd == CMD_STOP:
            return int(ctrl[1])
        if cmd == CMD_BASELINE:
            code = take_part(comm, ctrl, node_stat=False)
            if code is not None:
                return code
            continue
        if cmd != CMD_MAP_ROUND:
            raise RuntimeError(f"rank {me} got command {cmd} from rank 0, not a map's")
        size, peer = int(ctrl[1]), int(ctrl[2])
        both, trials = read_round_word(int(ctrl[3]))
        side.prepare(comm, size, peer, both, trials)
        if not member_ready(comm, sync):  # the round's start; everyone is ready within moments
            continue
        measure_pair(comm, peer, side, size, stop, both, time.monotonic())


def measure_pair(
    comm, peer: int, side: PairSide, size: int, stop: StopFlag, both: bool, since: float
) -> None:
    """A member's part of its pair's round (not rank 0's): transmit to the peer when lower, reflect
    when higher; with both directions, then the other part. Each transmission is reported to rank 0
    (the conditions without blocking, their sends completed before the member waits for commands)."""
    sent = []
    for transmitter in (comm.Get_rank() < peer, comm.Get_rank() > peer)[: 2 if both else 1]:
        if transmitter:
            result, times, cond = transmit(comm, peer, side, size, stop, since=since)
            comm.Send(result, 0, RESULT_TAG)
            comm.Send(times, 0, TIMES_TAG)
            sent.append(comm.isend(cond, 0, COND_TAG))
        else:
            reflect(comm, peer, side, stop)
    for req in sent:
        while not req.Test():
            time.sleep(POLL_S)


def receive_report(comm, source: int) -> tuple[list[list[float]], list[dict]]:
    """A transmitter's COND_TAG report (rank 0's side), asleep between probes; anything malformed
    read as unknown on both sides."""
    while not comm.Iprobe(source=source, tag=COND_TAG):
        time.sleep(POLL_S)
    got = comm.recv(source=source, tag=COND_TAG)
    try:
        values, texts = got
        ok = len(values) == len(texts) == 2 and all(is_side(x) for x in zip(values, texts, strict=True))
    except (TypeError, ValueError):
        ok = False
    if not ok:
        bad = not_measured("unknown, because the transmitter's report of the conditions was malformed")
        return [list(bad[0])] * 2, [bad[1]] * 2
    return got
