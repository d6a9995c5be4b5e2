"""The ranks rank 0 commands: a pair's reflector, the ranks of the other pairs, the ranks with no role.

Each waits for rank 0's commands (npmpi/core/messages.py) between sizes in one loop, serve_commands;
the per-size trials of a reflector and of a pair member differ (who starts a trial, who times it).
"""

from __future__ import annotations

import os
import re
import time

import numpy as np

from npmpi.core.config import Options
from npmpi.core.errors import LinkLost
from npmpi.core.layout import Layout
from npmpi.core.messages import (
    CMD_BASELINE,
    CMD_PROBE,
    CMD_STOP,
    CTRL_TAG,
    StopFlag,
)
from npmpi.core.protocol import Link
from npmpi.persize.driver import member_report, member_trials
from npmpi.persize.kernels import Kernel
from npmpi.persize.messageloop import MessageLoop, Patterns, probe_chunks, warmup_iterations
from npmpi.persize.span import TrialSpan
from npmpi.power.baseline import take_part
from npmpi.protocols.mpi.link import MpiLink

IDLE_POLL_S = 0.05


def _fault_size(name: str) -> int | None:
    """Fault injection for the test suite: NPMPI_FAULT_<NAME>=SIZE acts at that message size."""
    value = os.environ.get(f"NPMPI_FAULT_{name}")
    return int(value) if value and re.fullmatch(r"[0-9]{1,15}", value, re.ASCII) else None


def serve_commands(
    comm, source: int, link: Link, loop: MessageLoop, patterns: Patterns, measure, outlive_link: bool
) -> int:
    """The command loop of a pair's ranks other than rank 0: stop, idle baselines and probes are
    answered here, each size's trials by `measure(size, iterations, trials, integrity)`; returns
    the exit code rank 0 sends at the end (`source`: the rank that commands, `link`: the protocol's
    link to the partner). With `outlive_link` (rank 0's partner) a link that breaks is closed and
    the loop waits on: rank 0 sees the break too and ends the run, failed, with every size kept."""
    me = comm.Get_rank()
    ctrl = np.zeros(4, dtype=np.int64)
    while True:
        comm.Recv(ctrl, source, CTRL_TAG)
        cmd, size, iterations, packed = (int(x) for x in ctrl)
        if cmd == CMD_STOP:
            return size  # the exit code travels in the size field
        if cmd == CMD_BASELINE:  # an idle baseline: wait without spinning until it ends
            code = take_part(comm, ctrl, node_stat=False)
            if code is not None:
                return code
            continue
        loop.set_size(size, patterns, me)
        try:
            if cmd == CMD_PROBE:
                chunk, chunks = probe_chunks(iterations)
                for _ in range(chunks):
                    loop.run(link, chunk)
                continue
            measure(size, iterations, packed & 0xFFFFFFFF, bool(packed >> 32))
        except LinkLost:
            if not outlive_link:
                raise
            link.close()


def reflect(
    comm, layout: Layout, opts: Options, kernel: Kernel, stop: StopFlag, link: Link | None = None
) -> int:
    """A pair rank other than rank 0 (the reflector of rank 0's pair, or either rank of another pair
    with --pairs): rank 0 commands every size and starts every trial (npmpi/persize/driver.py); another
    pair's transmitter times its trials and sends the times to rank 0 after each size. Returns the exit
    code rank 0 sends at the end (`link`: the protocol's link to the partner, opened before the sweep;
    default MPI's)."""
    corrupt_at, raise_at = _fault_size("CORRUPT_SIZE"), _fault_size("RAISE_SIZE")
    reset_at = _fault_size("LINK_RESET_SIZE")
    me = comm.Get_rank()
    pair = next(p for p in layout.pairs if me in p)
    transmitter = me == pair[0]
    peer = pair[1] if transmitter else pair[0]
    link = link if link is not None else MpiLink(comm, peer)
    patterns = Patterns(opts.largest_message_bytes)
    loop = MessageLoop(opts, kernel, transmitter=transmitter)

    def trial(iterations: int, integrity: bool) -> tuple[float, bool]:
        link.before_trial()
        if not integrity:
            return loop.run(link, iterations), True
        total, ok = 0.0, True
        for k in range(iterations):
            loop.clear_received(k, 1)
            total += loop.run(link, 1, k)
            ok &= loop.received_ok(patterns, peer, k, 1)
        return total, ok

    def measure(size: int, iterations: int, trials: int, integrity: bool) -> None:
        faulty = not transmitter  # the fault injections act on a reflector
        if faulty and size == raise_at:
            raise RuntimeError(f"fault injected at {size} B (NPMPI_FAULT_RAISE_SIZE)")
        loop.run(link, warmup_iterations(iterations))
        if faulty and size == reset_at:
            link.reset()
        if faulty and size == corrupt_at:
            loop.corrupt(after_trials=False)
        span = TrialSpan()  # this rank's CPU and conditions over the trials, sent after the result
        done = member_trials(comm, trials, lambda: span.lap(trial(iterations, integrity)))
        figures = span.stop()
        if done is None:  # rank 0 abandoned the size
            return
        if faulty and size == corrupt_at:
            loop.corrupt(after_trials=True)
        ok = all(good for _, good in done) and loop.received_ok(patterns, peer, 0, iterations)
        times = [t for t, _ in done] if transmitter else None
        member_report(comm, ok, stop, times, figures)

    return serve_commands(comm, 0, link, loop, patterns, measure, outlive_link=peer == 0)


def wait_quietly(comm, stop: StopFlag) -> int:
    """Ranks with no role: wait for rank 0's stop without spinning a core in a blocking MPI call
    (taking part in the idle baselines on the way)."""
    ctrl = np.zeros(4, dtype=np.int64)
    while True:
        req = comm.Irecv(ctrl, 0, CTRL_TAG)
        while not req.Test():
            time.sleep(IDLE_POLL_S)
        if int(ctrl[0]) != CMD_BASELINE:
            return int(ctrl[1])
        code = take_part(comm, ctrl, node_stat=False)
        if code is not None:
            return code
