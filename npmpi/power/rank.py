"""Power ranks: one per node samples that node's meters without disturbing the ping-pong.

On a power rank, one thread per meter channel sleeps (or blocks on its device) between samples,
stamps each reading with the host's wall clock and buffers it. The main thread makes every MPI
call: it waits for rank 0's commands with a non-blocking receive checked every few milliseconds
(asleep in between, so no core spins), and sends its buffer only when rank 0 asks — between
message sizes, never while a trial is timed.

Rank 0's side (`PowerCollector`) asks every power rank at once, receives their batches, and
appends them to the run file with the node's faults. Each batch also carries every sampling
loop's heartbeat ticks: rank 0 turns a pause in them into a recorded `gap` fault
(npmpi.runfile.faults), and the meter's running counters (e.g. a Watts Up?'s packets) into channel
attributes.
"""

from __future__ import annotations

import math
import sys
import time

import numpy as np

from npmpi.core.messages import CMD_BASELINE, CMD_CLOCK, CMD_FLUSH, CMD_STOP, CTRL_TAG, POWER_DATA_TAG
from npmpi.core.safetext import printable
from npmpi.meters.base import (
    Reading,
)
from npmpi.power.baseline import take_part
from npmpi.power.clocksync import ClockOffset, answer_pings, measure_offset
from npmpi.power.sampler import ChannelSampler
from npmpi.runfile.faults import GAP_MIN_S, KIND_GAP, FaultRecord, Heartbeat
from npmpi.runfile.format import EXTRA_SAMPLE_FIELDS, FABRIC_GROUP, OPEN_EPOCH, SAMPLE_FIELDS, power_group

COMMAND_POLL_S = 0.01
# A power rank that has not answered rank 0 for this long (at least LOST_AFTER_MIN_S, else this many
# times the span after which its silence is first reported) is given up on: rank 0 goes on without
# its node's power, recorded as a gap to the end, and ends the job with MPI_Abort once the file is
# closed (a stopped process never reaches MPI_Finalize, where the others would wait for it).
LOST_AFTER_MIN_S = 10.0
LOST_AFTER_PATIENCES = 5
LOST_AFTER_MAX_S = 600.0  # however slow the meters (a --sample-interval of an hour)
LOST_FAULT_ID = 2**31 - 1  # the fault row of a lost power rank's gap, updated in place to the end


def _pack(readings: list[Reading], epochs: list[int]) -> dict[str, np.ndarray]:
    out = {
        name: np.array([getattr(r, name) for r in readings], dtype=np.float64)
        for name in (*SAMPLE_FIELDS, *EXTRA_SAMPLE_FIELDS)
        if name != OPEN_EPOCH  # the sampler's, not the meter's
    }
    out[OPEN_EPOCH] = np.array(epochs, dtype=np.float64)
    return out


def power_rank_main(comm, samplers: list[ChannelSampler], stop) -> int:
    """The power rank's main thread: answer rank 0's commands until it says stop."""
    for s in samplers:
        s.start()
    ctrl = np.zeros(4, dtype=np.int64)
    quiet_s = 0.0
    try:
        while True:
            req = comm.Irecv(ctrl, 0, CTRL_TAG)
            # Rank 0 said how long the next message size should take: sleep through half of it in one
            # go, then check every few milliseconds, so few wake-ups fall inside timed trials.
            if quiet_s > 0 and not req.Test():
                time.sleep(quiet_s)
            while not req.Test():
                time.sleep(COMMAND_POLL_S)
            cmd = int(ctrl[0])
            quiet_s = 0.0
            if cmd == CMD_FLUSH:
                batch = []
                for s in samplers:
                    buf = s.drain()
                    ticks = np.asarray(buf.ticks, dtype=np.float64)
                    batch.append((_pack(buf.readings, buf.epochs), buf.faults, ticks, buf.counters))
                comm.send(batch, 0, POWER_DATA_TAG)
                quiet_s = 0.5 * int(ctrl[1]) / 1000.0
            elif cmd == CMD_CLOCK:
                answer_pings(comm, int(ctrl[1]))
            elif cmd == CMD_BASELINE:  # an idle baseline: report this process's CPU and the node's
                code = take_part(comm, ctrl, node_stat=True)
                if code is not None:
                    return code
            else:  # CMD_STOP: the exit code travels in the second field
                return int(ctrl[1])
    finally:
        for s in samplers:
            s.stop()


class PowerCollector:
    """Rank 0's side: clock offsets, batches of samples into the run file, the baseline."""

    def __init__(self, comm, power_ranks: list[int], channel_attrs: list[list[dict]], fabric=None) -> None:
        self.comm = comm
        self.power_ranks = power_ranks
        self.channel_attrs = channel_attrs
        # (node index, channel descriptions) of the fabric meters its power rank samples after its
        # node's channels (npmpi.power.fabric), or None
        self.fabric = fabric
        self.ctrl = np.zeros(4, dtype=np.int64)
        self.samples_total = 0
        self.faults_total = 0  # distinct faults and gaps
        self.fault_events_total = 0  # every occurrence, repeats included
        self._fault_counts: dict[tuple[int | str, int, int], int] = {}  # count so far of each sampler's fault
        self.writer = None
        self.kept: dict[tuple[int, int], list] = {}
        self.lost: dict[int, tuple[float, str]] = {}  # power rank given up on -> (since, why)
        self.stall: tuple[float, list[str]] = (0.0, [])  # (bound s, hosts): baseline.run_baseline's
        self._offsets: dict[int, ClockOffset] = {}  # each power rank's last measured clock offset
        self.heartbeats = {
            (node, j): Heartbeat(
                float(ch.get("sample_interval_s") or 1.0),
                f"{ch.get('spec', '?')} on node {node}",
                float(ch.get("longest_call_s") or 0.0),
            )
            for node, channels in enumerate(channel_attrs)
            for j, ch in enumerate(channels)
        }
        for k, ch in enumerate(fabric[1] if fabric else ()):
            where = f"{ch.get('spec', '?')} of the fabric on node {fabric[0]}"
            interval_s = float(ch.get("sample_interval_s") or 1.0)
            call_s = float(ch.get("longest_call_s") or 0.0)
            self.heartbeats[(FABRIC_GROUP, k)] = Heartbeat(interval_s, where, call_s)

    def stop_all(self, exit_code: int) -> None:
        """Tell every power rank to exit (between sizes only)."""
        for rank in self.power_ranks:
            self._command(rank, CMD_STOP, exit_code)

    def _command(self, rank: int, cmd: int, arg: int = 0) -> None:
        self.ctrl[:] = (cmd, arg, 0, 0)
        self.comm.Send(self.ctrl, rank, CTRL_TAG)

    def clock_offsets(self, exchanges: int = 32) -> list[ClockOffset]:
        """Each node's power-rank clock minus rank 0's clock (a lost rank's: its last measured one)."""
        out = []
        for node, rank in enumerate(self.power_ranks):
            if rank not in self.lost:
                self._command(rank, CMD_CLOCK, exchanges)
                offset = measure_offset(self.comm, rank, exchanges, self.lost_after_s(node))
                if offset is None:
                    self.give_up(node, rank, self.lost_after_s(node))
                else:
                    self._offsets[rank] = offset
            nan = math.nan  # never measured: its node's times cannot be put on rank 0's clock
            out.append(self._offsets.get(rank, ClockOffset(nan, nan, nan, time.time())))
        return out

    def collect(self, next_gap_s: float = 0.0) -> int:
        """Ask every power rank for its buffer, append everything to the file; returns samples added.

        `next_gap_s` is how long the next message size is expected to take (its trials).
        """
        for rank in self.power_ranks:
            if rank not in self.lost:
                self._command(rank, CMD_FLUSH, int(max(next_gap_s, 0.0) * 1000))
        added = 0
        for node, rank in enumerate(self.power_ranks):
            batch = self._receive(node, rank) if rank not in self.lost else None
            if batch is None:
                batch = self._lost_batch(node, rank)
            for index, (samples, faults, ticks, counters) in enumerate(batch):
                group, channel = self._route(node, index)
                faults = faults + self._gaps(group, channel, ticks)
                if counters and self.writer is not None:
                    self.writer.set_group_attrs(f"{power_group(group)}/channel{channel}", **counters)
                if self.writer is not None:
                    self.writer.append_samples(group, channel, samples, faults)
                else:  # no run file (calibration): keep the batches for the caller
                    self.kept.setdefault((group, channel), []).append((samples, faults))
                added += len(samples["time_unix_s"])
                self._count_faults(group, channel, faults)
        self.samples_total += added
        if self.writer is not None:
            self.writer.flush()
        return added

    def _route(self, node: int, index: int) -> tuple[int | str, int]:
        """(group, channel) of a power rank's `index`-th channel: the fabric rank's channels after its
        node's own are the fabric's (FABRIC_GROUP)."""
        own = len(self.channel_attrs[node])
        if self.fabric is not None and node == self.fabric[0] and index >= own:
            return FABRIC_GROUP, index - own
        return node, index

    def _receive(self, node: int, rank: int):
        """A power rank's batch; says so on stderr if it does not answer within a few sample intervals.

        Rank 0 still waits (between sizes: the pair idles, nothing is timed); the span the power rank
        did not sample is recorded from its heartbeat when it answers (see _gaps). After
        `lost_after_s` it gives the rank up (None: see give_up).
        """
        beats = [b for (n, _), b in self.heartbeats.items() if n in self._mine(node)]
        patience_s = max((b.threshold_s for b in beats), default=GAP_MIN_S)
        start = time.monotonic()
        warned = False
        pause = 0.0005
        while not self.comm.Iprobe(source=rank, tag=POWER_DATA_TAG):
            time.sleep(pause)  # not a blocking receive: it would spin a core for as long as this lasts
            pause = min(2 * pause, COMMAND_POLL_S)
            if time.monotonic() - start > self.lost_after_s(node):
                self.give_up(node, rank, time.monotonic() - start)
                return None
            if not warned and time.monotonic() - start > patience_s:
                warned = True
                print(
                    f"npmpi: the power rank of node {node} (rank {rank}) has not answered for "
                    f"{time.monotonic() - start:.1f} s (stopped or hung?): the sweep waits for it, at "
                    f"most {self.lost_after_s(node):.0f} s",
                    file=sys.stderr,
                    flush=True,
                )
        batch = self.comm.recv(source=rank, tag=POWER_DATA_TAG)
        if warned:
            print(
                f"npmpi: the power rank of node {node} (rank {rank}) answered after "
                f"{time.monotonic() - start:.1f} s",
                file=sys.stderr,
                flush=True,
            )
        return batch

    def _mine(self, node: int) -> tuple:
        """The heartbeat groups a node's power rank samples: the node's, and the fabric's on its rank."""
        return (node, FABRIC_GROUP) if self.fabric is not None and node == self.fabric[0] else (node,)

    def lost_after_s(self, node: int) -> float:
        """How long rank 0 waits for node's power rank before going on without it (bounded)."""
        beats = [b for (n, _), b in self.heartbeats.items() if n in self._mine(node)]
        patience_s = max((b.threshold_s for b in beats), default=GAP_MIN_S)
        return min(max(LOST_AFTER_MIN_S, LOST_AFTER_PATIENCES * patience_s), LOST_AFTER_MAX_S)

    def give_up(self, node: int, rank: int, waited_s: float) -> None:
        """Go on without a power rank that does not answer: one line now, a gap to the end in the file."""
        why = (
            f"the power rank of node {node} (rank {rank}) did not answer for {waited_s:.1f} s (stopped or "
            "hung): the run went on without its power"
        )
        self.lost[rank] = (time.time(), why)
        print(f"npmpi: {why} (recorded as a gap to the end)", file=sys.stderr, flush=True)

    def _lost_batch(self, node: int, rank: int) -> list:
        """A lost power rank's batch, made on rank 0: no samples, and for each channel the gap from its
        last heartbeat to now (one fault row, its end moved on at every collection)."""
        since, why = self.lost[rank]
        batch = []
        for (n, _channel), beat in self.heartbeats.items():
            if n in self._mine(node):
                start = beat.last_tick if beat.last_tick is not None else since
                gap = FaultRecord(start, time.time(), 1, f"{why}: no samples from then to the end", KIND_GAP)
                gap.fault_id = LOST_FAULT_ID
                batch.append((_pack([], []), [gap], np.zeros(0), {}))
        return batch

    def lost_message(self) -> str:
        """What the file's status message and the closing line say of the power ranks given up on."""
        return "; ".join(why for _since, why in self.lost.values())

    def end_job_if_lost(self, code: int, line: str = "") -> None:
        """After the file is closed: end the job with MPI_Abort if a power rank was given up on (it
        would never reach MPI_Finalize, where every other rank would wait for it); `line` says why."""
        if self.lost:
            from npmpi.core.abort import abort

            abort(self.comm, line or self.lost_message() + "; ending the job without it", code or 1, 0.3)

    def _count_faults(self, node: int | str, channel: int, faults: list[FaultRecord]) -> None:
        """Distinct faults and all their occurrences: a repeat sent again with a grown count is not new."""
        for f in faults:
            key = (node, channel, f.fault_id)
            if f.fault_id < 0 or key not in self._fault_counts:
                self.faults_total += 1
            if f.fault_id < 0:
                self.fault_events_total += f.count
            else:
                self.fault_events_total += f.count - self._fault_counts.get(key, 0)
                self._fault_counts[key] = f.count

    def _gaps(self, node: int | str, channel: int, ticks) -> list[FaultRecord]:
        """Gap faults from a sampler's heartbeat: spans its loop did not run (see npmpi.runfile.faults)."""
        beat = self.heartbeats.get((node, channel))
        if beat is None:
            beat = self.heartbeats[(node, channel)] = Heartbeat(1.0, f"channel {channel} on node {node}")
        gaps = beat.observe(ticks)
        for g in gaps:
            print(printable(f"npmpi: {g.message}"), file=sys.stderr, flush=True)
        return gaps

    def baseline(self, seconds: float, stop=None, during: str = "an idle baseline"):
        """Hold every rank quiet (npmpi.power.baseline) while the power ranks sample the idle nodes, then
        collect: the BaselineWindow (its span, each rank's CPU use); RankStalled past `self.stall`."""
        from npmpi.power.baseline import run_baseline, settle_s

        channels = [*self.channel_attrs, self.fabric[1] if self.fabric else []]
        patience = {r: self.lost_after_s(n) for n, r in enumerate(self.power_ranks)}
        settle = settle_s([{"channels": c} for c in channels])
        stall = (*self.stall, during)
        window = run_baseline(self.comm, seconds, stop, settle, set(self.lost), patience, stall)
        for rank in window.silent:
            self.give_up(self.power_ranks.index(rank), rank, patience[rank])
        self.collect()
        return window
