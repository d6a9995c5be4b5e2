"""A group kind: every measuring rank in one group, a step they all take together, per size.

The per-size sequence (rank 0 commands, every member ready, the go, the timed trials, each member's
results and times) is written here once; a group kind supplies only its step (`GroupStep`: what one
iteration does on each member, through the group's own communicator) and its bytes per iteration.

Per size: rank 0 sends CMD_SIZE (size, iterations, trials) on CTRL_TAG to every other member; every
member sets its buffers and runs the untimed warm-up; before each trial every other member tells
rank 0 it is ready (SYNC_TAG) and waits for its go (1: run, 0: abandon the size), so a stop request
never leaves a member blocked in the step; every member times its own trials; after the size each
sends rank 0 its data check and stop signal (RESULT_TAG), its trial times (TIMES_TAG) and its CPU
time (CPU_TAG). A trial's time is the slowest member's (the operation is done when every rank is);
every member's own times are kept (/pingpong/member_trial_s). Rank 0's stall watchdog follows each
wait (npmpi/sweep/watchdog.py); idle baselines and the stop are answered between sizes.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from npmpi.core.errors import DataMismatch
from npmpi.core.protocol import (
    CMD_BASELINE,
    CMD_SIZE,
    CMD_STOP,
    CPU_TAG,
    CTRL_TAG,
    RESULT_TAG,
    SYNC_TAG,
    TIMES_TAG,
    StopFlag,
)
from npmpi.runfile.format import SizeResult
from npmpi.sweep import cputime
from npmpi.sweep.messageloop import warmup_iterations
from npmpi.sweep.watchdog import READY, RESULTS, WARMUP, Progress

MAX_ITERATIONS = 1_000_000_000
PROBE_ITERATIONS = 20  # the first size's iterations come from this many untimed-then-timed steps


class GroupStep:
    """What a group kind's members do: one instance per member, built by the kind."""

    verifies = True  # whether check() compares the results (the rows' data_verified)

    def set_size(self, size: int) -> None:
        """Prepare the buffers of `size` bytes (untimed)."""
        raise NotImplementedError

    def run(self, iterations: int) -> float:
        """`iterations` steps through the group's communicator; the seconds they took on this rank."""
        raise NotImplementedError

    def check(self) -> bool:
        """Whether the last step's results are right (after the trials, untimed)."""
        return True


@dataclass
class GroupOutcome:
    """How the sizes ended, for the file's status and the exit code."""

    status: str = "complete"
    message: str = ""
    exit_code: int = 0
    stopped_early: str = ""
    rows: list[SizeResult] = field(default_factory=list)


class GroupCoordinator:
    """Rank 0's side: commands every size, starts every trial, gathers the members' times."""

    def __init__(self, comm, members: list[int], step: GroupStep, opts, stop: StopFlag, on_row) -> None:
        self.comm, self.step, self.opts, self.stop, self.on_row = comm, step, opts, stop, on_row
        self.members = list(members)
        self.others = [r for r in self.members if r != 0]
        self.idle = [r for r in range(comm.Get_size()) if r not in self.members]
        self.progress = Progress(opts.trials)
        self.state = "between"  # "trials" while the members wait for a go: release() abandons the size
        self.ctrl = np.zeros(4, dtype=np.int64)
        self.sync = np.zeros(1, dtype=np.int64)
        stop.transmitter = self

    def _go(self, value: int) -> None:
        self.sync[0] = value
        for rank in self.others:
            self.comm.Send(self.sync, rank, SYNC_TAG)

    def _iterations(self, prev_s: float) -> int:
        """Iterations for a trial of about --target-time from the last size's best time per step (as
        NetPIPE's rule: sizes that grow by steps take at most a few times longer), at least the
        number of trials (NetPIPE's floor)."""
        if self.opts.repeats is not None:
            return self.opts.repeats
        return int(min(max(self.opts.target_time_s / max(prev_s, 1e-6), self.opts.trials), MAX_ITERATIONS))

    def run(self) -> GroupOutcome:
        """Every size until done or stopped."""
        outcome = GroupOutcome()
        prev_s = 0.0
        for index, size in enumerate(self.opts.sizes_bytes):
            if self.stop:
                break
            iterations = PROBE_ITERATIONS if prev_s == 0.0 else self._iterations(prev_s)
            row = self.measure_size(size, iterations)
            if row is None:
                break
            outcome.rows.append(row)
            self.on_row(index, row)
            prev_s = min(row.trial_s) / iterations
        if self.stop:
            outcome.status = "interrupted"
            outcome.message = f"{self.stop.name} received; stopped after {len(outcome.rows)} sizes"
            outcome.exit_code = 128 + int(self.stop.signum or 0)
        return outcome

    def measure_size(self, size: int, iterations: int) -> SizeResult | None:
        """All trials of one size; None when a stop request abandoned it."""
        opts, progress = self.opts, self.progress
        warm = warmup_iterations(iterations)
        progress.at(size, WARMUP, self.others[0] if self.others else 0, warm)
        self.ctrl[:] = (CMD_SIZE, size, iterations, opts.trials)
        for rank in self.others:
            self.comm.Send(self.ctrl, rank, CTRL_TAG)
        self.step.set_size(size)
        with self.stop.timed():
            self.step.run(warm)
        self.state = "trials"
        own, starts, ends = [], [], []
        span = cputime.CpuSpan()
        for t in range(opts.trials):
            for rank in self.others:
                progress.at(size, READY, rank, iterations)
                self.comm.Recv(self.sync, rank, SYNC_TAG)
            if self.stop:
                self._go(0)
                self.state = "between"
                return None
            self._go(1)
            progress.at(size, t, self.others[0] if self.others else 0, iterations)
            starts.append(time.time())
            with self.stop.timed():
                own.append(self.step.run(iterations))
            ends.append(time.time())
        own_cpu = span.stop()
        return self._results(size, iterations, warm, own, starts, ends, own_cpu)

    def _results(self, size, iterations, warm, own, starts, ends, own_cpu) -> SizeResult:
        """Every member's check, times and CPU after the trials; DataMismatch on a wrong result."""
        bad = [] if self.step.check() else ["rank 0"]
        result = np.zeros(2, dtype=np.int64)
        times = {0: own}
        buf = np.zeros(self.opts.trials, dtype=np.float64)
        signal = 0
        for rank in self.others:
            self.progress.at(size, RESULTS, rank, iterations)
            self.comm.Recv(result, rank, RESULT_TAG)
            if not result[0]:
                bad.append(f"rank {rank}")
            signal = signal or int(result[1])
            self.comm.Recv(buf, rank, TIMES_TAG)
            times[rank] = buf.tolist()
        cpu = cputime.row_fields(self.members, [own_cpu, *cputime.receive(self.comm, self.others, CPU_TAG)])
        self.state = "between"
        if signal and not self.stop:
            self.stop.set(signal, f"signal {signal} on a member rank")
        if bad:
            raise DataMismatch(
                f"result check failed at message size {size} B on {', '.join(bad)}; the run file keeps "
                "every size before this one"
            )
        member_times = [times[r] for r in self.members]
        slowest = np.max(np.array(member_times), axis=0).tolist()
        return SizeResult(
            size,
            iterations,
            warm,
            slowest,
            starts,
            ends,
            self.step.verifies,
            member_trial_s=member_times,
            **cpu,
        )

    def release(self, exit_code: int) -> bool:
        """Tell every other rank to exit; False while the members are in a step (only an abort ends it)."""
        if self.stop.timing:
            return False
        if self.state == "trials":
            self._go(0)
        self.ctrl[:] = (CMD_STOP, exit_code, 0, 0)
        for rank in self.others + self.idle:
            self.comm.Send(self.ctrl, rank, CTRL_TAG)
        self.state = "between"
        return True


def serve_group(comm, step: GroupStep, stop: StopFlag) -> int:
    """A member other than rank 0: each size's trials as rank 0 commands them, the idle baselines,
    until the stop; returns the exit code rank 0 sends."""
    from npmpi.power.baseline import take_part

    ctrl = np.zeros(4, dtype=np.int64)
    sync = np.zeros(1, dtype=np.int64)
    result = np.zeros(2, dtype=np.int64)
    while True:
        comm.Recv(ctrl, 0, CTRL_TAG)
        cmd, size, iterations, trials = (int(x) for x in ctrl)
        if cmd == CMD_STOP:
            return size  # the exit code travels in the size field
        if cmd == CMD_BASELINE:
            code = take_part(comm, ctrl, node_stat=False)
            if code is not None:
                return code
            continue
        step.set_size(size)
        step.run(warmup_iterations(iterations))
        times = np.full(trials, np.nan)
        span = cputime.CpuSpan()
        abandoned = False
        for t in range(trials):
            sync[0] = 1
            comm.Send(sync, 0, SYNC_TAG)
            comm.Recv(sync, 0, SYNC_TAG)
            if sync[0] == 0:
                abandoned = True
                break
            times[t] = step.run(iterations)
        cpu = span.stop()
        if abandoned:
            continue
        result[0] = int(step.check())
        result[1] = int(stop.signum or 0)
        comm.Send(result, 0, RESULT_TAG)
        comm.Send(times, 0, TIMES_TAG)
        comm.Send(cpu, 0, CPU_TAG)
