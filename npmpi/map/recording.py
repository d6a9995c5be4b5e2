"""Rank 0's side of a map: the rounds commanded and timed, the map file written round by round, the
power recorded as in a run, and the file closed with its status whatever ends the map.

Per size, per round: CMD_MAP_ROUND to every paired member, their ready, then the go (the round's
start, a barrier); rank 0 measures its own pair when it has one, then collects each pair's result
(RESULT_TAG, TIMES_TAG, then both sides' conditions on COND_TAG);
the round's window on rank 0's clock runs from the go to the last result. A stop request is looked at
before each round and between a pair's trials (npmpi/map/pair.py).
"""

from __future__ import annotations

import contextlib
import json
import math
import sys
import time
from dataclasses import dataclass

import numpy as np

from npmpi.commands.filerecording import power_collector
from npmpi.commands.recordingsequence import RecordingSequence
from npmpi.core.abort import say
from npmpi.core.errors import DataMismatch
from npmpi.core.messages import CMD_MAP_ROUND, RESULT_TAG, TIMES_TAG
from npmpi.core.units import format_size_bytes
from npmpi.map.options import DIRECTIONS_BOTH
from npmpi.map.pair import (
    RESULT_FIELDS,
    TIMES_ROWS,
    PairSide,
    receive_report,
    reflect,
    round_word,
    transmit,
    wait_for,
)
from npmpi.map.plan import RoundClock, make_plan, plan_line
from npmpi.map.schedule import map_rounds
from npmpi.map.stall import WAIT_OWN, WAIT_READY, WAIT_RESULTS, RoundProgress, map_watchdog
from npmpi.persize.driver import SizeDriver
from npmpi.runfile.format import KIND_MAP
from npmpi.runfile.mapwriter import MapWriter, PairResult

COLLECT_EVERY_S = 2.0  # power samples reach the file this often (between rounds), and after each size ...
COLLECT_SHARE = 0.1  # ... or, when a collection itself took longer than this share of that, its time
# over this share: rank 0 writes each node's batch (0.4 to 0.7 ms a node, up to 2.9 s at 4,096 nodes, longer
# than the 2 s), so a map of thousands of meters would otherwise spend most of its time on samples
PROGRESS_EVERY_S = 5.0  # a long map prints rounds done / total and the time left at most this often


def collect_interval_s(took_s: float) -> float:
    """How long after a collection of the power samples that took `took_s` the next one comes:
    COLLECT_EVERY_S, or took_s / COLLECT_SHARE when longer (rank 0's share of time on samples bounded;
    the power ranks keep theirs meanwhile, and every size's end still collects)."""
    return max(COLLECT_EVERY_S, took_s / COLLECT_SHARE) if math.isfinite(took_s) else COLLECT_EVERY_S


@dataclass
class MapOutcome:
    """How the map ended, for the file's status and the exit code."""

    status: str = "complete"
    message: str = ""
    exit_code: int = 0
    rounds: int = 0


def sample_attrs(mopts) -> dict:
    """/map's attributes of what was chosen to be measured: pairs_plan ('all' or 'sample:K'), and for
    a sample its seed and, with --topology, each member's switch (JSON, in /map/hosts' order)."""
    out: dict = {"pairs_plan": mopts.pairs_plan}
    if mopts.sample_k:
        out["pairs_seed"] = mopts.sample_seed
        if mopts.topology:
            out["topology_json"] = json.dumps(dict(mopts.topology), sort_keys=True)
    return out


def resume_attrs(mopts) -> dict:
    """/map's attributes of what this map measures (a resumed map must share them: npmpi/map/resume.py):
    the schedule, the members, the kernel, mode and directions, the trials and the sample."""
    opts = mopts.run
    return {
        "schedule": mopts.schedule,
        "per_rank": bool(mopts.per_rank),
        "kernel": opts.kernel,
        "mode": opts.mode,
        "window": opts.window,
        "directions": mopts.directions,
        "trials": opts.trials,
        **sample_attrs(mopts),
    }


class MapCoordinator:
    """Rank 0's rounds. `state` tells a stop signal's handler where rank 0 is: "between" rounds,
    "ready" (members wait for the go) or "trials" (waiting for results); `stop.timing` is set while
    rank 0's own pair is in a timed loop."""

    def __init__(
        self, comm, mopts, members: list[int], side: PairSide, stop, on_round, clock=None, rounds=None
    ) -> None:
        self.comm, self.mopts, self.members, self.side, self.stop = comm, mopts, members, side, stop
        self.clock = clock  # npmpi.map.plan.RoundClock: the rounds' time, the time limit (None: none)
        self.rounds = rounds if rounds is not None else map_rounds(mopts, len(members))
        self.on_round = on_round  # (size index, round index, (start, end), [PairResult])
        self.state = "between"
        self.commanded: list[int] = []
        self.driver = SizeDriver(comm, [], [], None, stop)  # a round's start: command, ready, go
        run = mopts.run
        self.progress = RoundProgress(run.trials, run.target_time_s, mopts.directions == DIRECTIONS_BOTH)
        self.partner_of: dict[int, int] = {}  # this round's pairs without rank 0, for the watchdog's line
        self.skip = 0  # rounds (size 0's first) copied from a map resumed (--resume), not measured
        stop.transmitter = self

    def run(self) -> MapOutcome:
        """Every size, every round, until done or stopped."""
        outcome = MapOutcome()
        total = len(self.rounds) * len(self.mopts.sizes_bytes)
        clock, limited = self.clock, False
        outcome.rounds = skip = self.skip
        for s, size in enumerate(self.mopts.sizes_bytes):
            for r, pairs in enumerate(self.rounds):
                if s * len(self.rounds) + r < skip:  # copied from the map resumed
                    continue
                if self.stop:
                    break
                if clock is not None and clock.stop_before(s, outcome.rounds - skip):
                    limited = True
                    break
                begun = time.monotonic()
                self.progress.label = f"round {outcome.rounds + 1} of {total}"
                measured = self.measure_round(size, pairs)
                if measured is None:
                    break
                window, results = measured
                self.on_round(s, r, window, results)
                outcome.rounds += 1
                if clock is not None:
                    clock.learn(s, time.monotonic() - begun)
            if self.stop or limited:
                break
        self.progress.label = "a suspect's re-measurement (--confirm)"
        if self.stop:
            self.stop.mark_interrupted(outcome, f"; stopped after {outcome.rounds} rounds")
        elif limited:  # asked for: the file is whole up to here, exit status 0
            outcome.status, outcome.message = "interrupted", clock.stop_message(outcome.rounds)
        return outcome

    def measure_round(self, size: int, pairs: list[tuple[int, int]], trials: int = 0):
        """One round of one size: ((window start, end), [PairResult]); None when a stop came first.
        `trials`: each pair's (0: the map's; fewer for a suspect measured again within its budget).
        The stall watchdog watches its waits and is quiet once it returns (the file is written next)."""
        self.partner_of.clear()
        for i, j in pairs:
            if 0 not in (self.members[i], self.members[j]):
                self.partner_of.update({self.members[i]: self.members[j], self.members[j]: self.members[i]})
        try:
            measured = self._round(size, pairs, trials or self.mopts.run.trials)
        finally:
            self.progress.quiet()
        if measured is not None:
            (start, end), results = measured
            times = [r.trial_s for r in results]
            self.progress.learn(size, end - start, times, [r.iterations for r in results])
        return measured

    def _round(self, size: int, pairs: list[tuple[int, int]], trials: int):
        members, progress = self.members, self.progress
        both = self.mopts.directions == DIRECTIONS_BOTH
        own = None
        self.commanded = []
        for i, j in pairs:
            for me, peer in ((members[i], members[j]), (members[j], members[i])):
                if me == 0:
                    own = (i, j, peer)
                    continue
                self.driver.command_to(me, CMD_MAP_ROUND, size, peer, round_word(both, trials))
                self.commanded.append(me)
        if own is not None:
            self.side.prepare(self.comm, size, own[2], both, trials)
        self.state = "ready"
        at_go: list[float] = []  # the round's start: the go's moment (wall clock, monotonic)
        if not self.driver.ready_then_go(
            self.commanded,
            lambda rank: progress.wait(size, rank, WAIT_READY),
            wait_for,
            lambda: at_go.extend((time.time(), time.monotonic())),
        ):
            self.state = "between"
            return None
        start, since = at_go
        self.state = "trials"
        results, bad = [], []
        if own is not None:
            progress.wait(size, own[2], WAIT_OWN)
            result, times, cond = transmit(self.comm, own[2], self.side, size, self.stop, since=since)
            results.append(self._result(own[0], own[1], result, times, bad, both, cond))
            if both:
                reflect(self.comm, own[2], self.side, self.stop)
        result = np.zeros(RESULT_FIELDS, dtype=np.int64)
        for i, j in pairs:
            for a, b in ((i, j), (j, i))[: 2 if both else 1]:
                if members[a] == 0:  # the transmitter reports; rank 0's own is above
                    continue
                times = np.zeros((TIMES_ROWS, trials), dtype=np.float64)
                progress.wait(size, members[a], WAIT_RESULTS)
                wait_for(self.comm, result, members[a], RESULT_TAG)
                wait_for(self.comm, times, members[a], TIMES_TAG)
                cond = receive_report(self.comm, members[a])
                results.append(self._result(a, b, result, times, bad, both, cond))
        end = time.time()
        self.state = "between"
        if bad:
            raise DataMismatch(
                f"data check failed at message size {size} B between {'; '.join(bad)}: the MPI transport "
                "corrupted or truncated a message; the map file keeps every round before this one"
            )
        return (start, end), results

    def _result(
        self, i: int, j: int, result: np.ndarray, times: np.ndarray, bad: list[str], directed: bool, cond
    ) -> PairResult:
        iterations, untimed, ok, signum, elapsed_ns = (int(x) for x in result)
        if not ok:
            bad.append(f"ranks {self.members[i]} and {self.members[j]}")
        if signum and not self.stop:
            self.stop.set(signum, f"signal {signum} on rank {self.members[i]} or {self.members[j]}")
        return PairResult(
            i,
            j,
            iterations,
            untimed,
            np.array(times[0], dtype=np.float64),
            directed,
            elapsed_ns / 1e9,
            runq_wait_s=np.array(times[1:3].T, dtype=np.float64),  # [trials, (transmitter, reflector)]
            cond=np.array(cond[0], dtype=np.float64),  # [(transmitter, reflector), COND_DATASETS]
            cond_info=[dict(x, rank=self.members[k]) for x, k in zip(cond[1], (i, j), strict=True)],
        )

    def release(self, exit_code: int) -> bool:
        """Tell every other rank to exit; False when members are inside a round (only an abort ends it)."""
        if self.stop.timing or self.state == "trials":
            return False
        if self.state == "ready":
            self.driver.go(0, self.commanded)
        self.driver.release(exit_code, False, list(range(1, self.comm.Get_size())))
        self.state = "between"
        return True


def record_map(MPI, comm, mopts, argv: list[str], agreed, stop) -> int:
    """Rank 0: the map recorded into its file; the exit status."""
    return MapRecording(MPI, comm, mopts, argv, agreed, stop).run()


class MapRecording(RecordingSequence):
    """Rank 0's map from the file's creation to its close; `run()` returns the exit status."""

    FILE = "map"

    def __init__(self, MPI, comm, mopts, argv, agreed, stop) -> None:
        from npmpi.commands.console import Console
        from npmpi.run.recording import provenance, thread_attrs

        self.MPI, self.comm, self.mopts, self.agreed, self.stop = MPI, comm, mopts, agreed, stop
        self.opts = opts = mopts.run
        self.layout = layout = agreed.roles.layout
        kernel = agreed.kernel
        self.attrs = provenance(
            MPI, opts, ["map", *argv], layout, kernel.note, kernel.measure_clock(), KIND_MAP
        )
        self.attrs.update(thread_attrs(opts, layout, agreed.thread_levels))
        self.power_nodes = [agreed.gathered_power[r] for r in layout.power_ranks]
        self.calibration = agreed.calibration
        self.console = Console(quiet=opts.quiet)
        self.output, self.reservation = agreed.output, agreed.reservation
        self.stall_timeout_s = opts.stall_timeout_s
        self.collector = power_collector(comm, layout, self.power_nodes, opts.stall_timeout_s)
        self.coordinator = None
        self.plan = agreed.extra.get("plan") or make_plan(
            mopts, len(agreed.extra["members"]), self.power_nodes
        )
        super().__init__()  # the clock of the map's elapsed time (and of --max-minutes) starts here
        self.last_collect = self.last_progress = self.rounds_started = self.started
        self.collect_every_s = COLLECT_EVERY_S

    def _open(self) -> None:
        from npmpi.commands.filerecording import layout_rows

        a, opts, mopts = self.agreed, self.opts, self.mopts
        plan = self.plan
        self.coordinator = MapCoordinator(
            self.comm,
            mopts,
            a.extra["members"],
            PairSide(opts, a.kernel),
            self.stop,
            self.on_round,
            RoundClock(plan, self.started),
            a.extra.get("rounds"),
        )
        spec = {
            "attrs": {
                **{k: v for k, v in resume_attrs(mopts).items() if k != "trials"},  # the writer's own
                "planned_rounds": plan.total_rounds,
                "planned_duration_s": plan.duration_s,
                "planned_file_bytes": plan.file_bytes,
                "time_limit_s": plan.limit_s,
            },
            "hosts": list(a.extra["names"]),
            "ranks": list(a.extra["members"]),
            "sizes": list(mopts.sizes_bytes),
            "rounds": self.coordinator.rounds,
            "n_rounds": len(self.coordinator.rounds),
        }
        self.writer = MapWriter(
            a.output,
            self.attrs,
            layout_rows(self.layout, a.thread_levels),
            opts.trials,
            map_spec=spec,
            overwrite=opts.force,
            reservation=a.reservation,
        )
        resume = a.extra.get("resume")
        if resume is not None:  # --resume: its completed rounds copied, the rest measured
            from npmpi.map.resume import copy_rounds

            copy_rounds(self.writer, resume)
            self.coordinator.skip = resume.rounds

    def mark_file(self, message: str) -> None:
        """Mark the file interrupted at once (a stop signal; mpirun may kill the job any moment)."""
        lock = self.coordinator.progress.lock if self.coordinator is not None else contextlib.nullcontext()
        with lock, contextlib.suppress(Exception):  # not while the stall watchdog closes the file
            self.writer.mark_soon(
                {"status": "interrupted", "status_message": message}, {"map": {"status": "interrupted"}}
            )

    def on_round(self, s: int, r: int, window, results: list[PairResult]) -> None:
        """One round measured: into the file; power samples collected every few seconds
        (collect_interval_s)."""
        self.writer.store_round(s, r, window, results)
        last_of_size = r == len(self.coordinator.rounds) - 1
        if self.collector is not None and (
            last_of_size or time.monotonic() - self.last_collect >= self.collect_every_s
        ):
            began = time.monotonic()
            self.collector.collect(COLLECT_EVERY_S)
            self.last_collect = time.monotonic()
            self.collect_every_s = collect_interval_s(self.last_collect - began)
        if last_of_size:
            self._size_line(s)
        self._progress(s * len(self.coordinator.rounds) + r + 1)

    def _progress(self, done: int) -> None:
        """'round 40/189 (21 %), 62 s so far, about 231 s left' when PROGRESS_EVERY_S have passed."""
        now = time.monotonic()
        total = len(self.coordinator.rounds) * len(self.mopts.sizes_bytes)
        if done >= total or now - self.last_progress < PROGRESS_EVERY_S:
            return
        self.last_progress = now
        so_far = now - self.rounds_started
        left = so_far / done * (total - done)  # rounds of larger sizes take longer: a lower bound
        self.console.note(
            f"round {done}/{total} ({100 * done // total} %), {so_far:.0f} s so far, about {left:.0f} s left"
        )

    def _size_line(self, s: int) -> None:
        from npmpi.runfile.mapwriter import warnings_off

        size = self.mopts.sizes_bytes[s]
        bw = self.writer.bandwidth_row(s)
        with warnings_off():
            lo, med, hi = (float(f(bw)) for f in (np.nanmin, np.nanmedian, np.nanmax))
            lat = float(np.nanmedian(self.writer.best_one_way(s)))
        self.console.note(
            f"{size:>10d} B ({format_size_bytes(size)}): {len(self.coordinator.rounds)} rounds; one-way "
            f"median {lat * 1e6:.2f} us; bandwidth min {lo / 1e9:.3f}, median {med / 1e9:.3f}, "
            f"max {hi / 1e9:.3f} Gbit/s"
        )

    def _announce(self) -> None:
        opts, mopts, console = self.opts, self.mopts, self.console
        n, rounds = len(self.agreed.extra["members"]), len(self.coordinator.rounds)
        console.note(f"output: {self.agreed.output}")
        sampled = f", pairs {mopts.pairs_plan} (seed {mopts.sample_seed})" if mopts.sample_k else ""
        console.note(
            f"map: {n} members ({'every rank' if mopts.per_rank else 'one rank per node'}, "
            f"{self.layout.node_count} node(s)); schedule {mopts.schedule}{sampled}: {rounds} rounds x "
            f"{len(mopts.sizes_bytes)} sizes, {opts.trials} trials of ~{opts.target_time_s:g} s; "
            f"kernel {opts.kernel}, mode {opts.mode}, {_directions_words(mopts)}"
        )
        console.note(plan_line(self.plan))
        if self.coordinator.skip:
            console.note(
                f"resuming {mopts.resume}: its {self.coordinator.skip} completed rounds copied, "
                f"{rounds * len(mopts.sizes_bytes) - self.coordinator.skip} rounds left to measure"
            )

    def _watchdog(self):
        return map_watchdog(self)

    def _measure(self) -> MapOutcome:
        """The rounds, then (every round measured) the suspects measured again, from now on the clock
        of the progress lines and of the samples' collection (the baseline's just collected)."""
        now = time.monotonic()
        if self.collector is not None:
            self.last_collect = now
        self.last_progress = self.rounds_started = now
        outcome = self.coordinator.run()
        if outcome.status == "complete" and self.mopts.confirm_repeats > 0:
            self._confirm(outcome)
        return outcome

    def _report(self, outcome: MapOutcome, elapsed_s: float) -> None:
        self.console.note(
            f"{outcome.rounds} rounds in {elapsed_s:.1f} s, status {outcome.status}: {self.agreed.output}"
        )

    def _kept_at_end(self, outcome: MapOutcome) -> str:
        return f"; the {outcome.rounds} completed rounds are in {self.agreed.output}"

    def _last_word(self, outcome: MapOutcome, kept: str) -> None:
        if outcome.status != "complete":
            say(f"npmpi: {outcome.message}{kept}", sys.stderr)

    def _confirm(self, outcome: MapOutcome) -> None:
        """The suspects measured again (npmpi/map/confirm.py); a stop meanwhile marks the map interrupted."""
        from npmpi.map.confirm import confirm_suspects

        map_s = time.monotonic() - self.rounds_started
        m = self.mopts
        limit_s = self.plan.limit_s or math.inf  # --max-minutes: the re-measurement kept within it
        confirm_suspects(
            self.coordinator,
            self.writer,
            m.confirm_repeats,
            m.confirm_budget,
            map_s,
            self.console,
            list(self.agreed.extra["names"]),
            left_s=limit_s - (time.monotonic() - self.started),
        )
        if self.stop:
            self.stop.mark_interrupted(outcome, " while suspects were measured again")

    def _measurer(self):
        return self.coordinator

    def _quiet(self) -> bool:
        c = self.coordinator
        return c is not None and not (c.stop.timing or c.state == "trials")

    def _kept(self) -> str:
        return f"; {self.writer.rounds_completed} completed rounds are in {self.output}"


def _directions_words(mopts) -> str:
    """How the map's directions are measured, for its first lines."""
    if mopts.directions == DIRECTIONS_BOTH:
        return "each direction of a pair measured apart (i -> j, then j -> i)"
    if not mopts.run.mode_value.round_trip:
        return "one direction per pair (the lower rank streams to the higher)"
    return "round trips (both directions at once: a slow direction is not told apart)"
