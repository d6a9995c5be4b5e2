"""A map's plan before its first round, the disk it needs, and its time limit (`--max-minutes`).

Before round 1 rank 0 knows the schedule (members, rounds, sizes, trials, directions), the options
and the power ranks' channels, nothing of the network: each pair's probe runs inside its round
(npmpi/map/pair.py). A pair's work in a round is then known in units of --target-time: the first
contact and the probe (chunks doubled until one takes a tenth of the target: about PROBE_TARGETS
targets in all), the warm-up (a tenth of a trial) and the trials, each iteration count chosen by
NetPIPE's rule so that a trial's loop lasts the target times the mode's one-way factor (a ping-pong
iteration is a round trip: twice the target). Rank 0's own work per round (commands, the go, the
results, the round written and flushed) is ROUND_OVERHEAD_S plus PAIR_OVERHEAD_S per pair, measured
on small maps on one host. A size whose message takes longer than a trial's share (NetPIPE's floor:
at least `trials` iterations) lasts longer than planned: the first round of each size tells, and the
estimate of every later round uses the rounds measured (`RoundClock`).

The file: the /map group's datasets at their full shape (npmpi/runfile/mapwriter.py
`map_data_bytes`: about 24 x trials + 136 bytes per size and row, a row a measured pair or, measured
apart, each direction of one; before the compression of the waits and conditions), HDF5's own structures
and the members' text, and each power channel's samples at its interval over the planned duration.
"""

from __future__ import annotations

import math
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from npmpi.core.config import DEFAULT_BASELINE_S
from npmpi.map.confirm import MIN_BUDGET_S
from npmpi.map.options import DIRECTIONS_BOTH
from npmpi.map.schedule import map_rounds, round_lengths
from npmpi.runfile.mapwriter import map_data_bytes

PROBE_TARGETS = 0.3  # first contact and the probe, in --target-time (chunks doubled to a tenth of it)
WARMUP_TRIALS = 0.1  # warmup_iterations: a tenth of a trial's iterations
ROUND_OVERHEAD_S = 0.01  # rank 0's per round: commands, ready, go, the round written and flushed
PAIR_OVERHEAD_S = 0.0005  # per pair of a round: its steps and echoes, its reports to rank 0, its rows
START_S = 0.04  # the file created, before the first round (and the power set up, with meters)
END_S = 0.06  # after the last round: every rank released, its end reported, the file finished (0.05 to
# 0.08 s more than the rounds on four namespace hosts, bench/map_plan_netns.py, 2026-11-28)
POWER_QUIET_S = 1.0  # a power rank answers no flush for half of COLLECT_EVERY_S after one
# (npmpi/power/rank.py): with meters, each size after the first lasts at least this long, and the
# samples' last collection, right after the last size's, waits as long
FILE_OVERHEAD_BYTES = 76 * 1024  # an empty map file: attributes, /layout, /pingpong, HDF5's headers
MEMBER_TEXT_BYTES = 1024  # each member's conditions text (/map/conditions_json) and its names
CHUNK_OVERHEAD_BYTES = 64  # per chunk of a /map dataset: its index entry and checksum
SAMPLE_CHUNK_ROWS = 4096  # a sample dataset grows by chunks of this many rows (npmpi/runfile/writer.py)
CHANNEL_BYTES = 20 * 1024  # a power channel's group, attributes and fault datasets
DISK_MARGIN = 1.2  # the plan's file must fit 1.2 x over in the output's directory ...
DISK_MARGIN_BYTES = 16 << 20  # ... and 16 MiB more
DISK_FREE_ENV = "NPMPI_FAULT_DISK_FREE_BYTES"  # fault injection for the test suite: pretend so much is free


@dataclass(frozen=True)
class MapPlan:
    """What a map will take, as known before its first round."""

    members: int
    rounds: int  # per size
    sizes: tuple[int, ...]
    trials: int
    per_rank: bool
    directions: int  # 1, or 2 when each direction of a pair is measured apart
    pairs: int  # pairs in the fullest round
    round_s: float  # a round's estimate before any is measured (every size alike)
    start_s: float  # before the first round: the file, the idle baseline before
    end_s: float  # after the last round: the idle baseline after
    map_bytes: int  # the file without power samples
    channels: tuple[tuple[int, float], ...] = ()  # each power channel's (fields per sample, interval)
    confirm_repeats: int = 0
    confirm_budget: float = 0.0
    limit_s: float = 0.0  # --max-minutes in seconds (0: none)
    sample_k: int = 0  # --pairs sample:K (0: every pair)
    sampled_pairs: int = 0  # the pairs the sample measures (with sample_k)

    @property
    def total_rounds(self) -> int:
        return self.rounds * len(self.sizes)

    def size_s(self, size_index: int) -> float:
        """A size's rounds by the estimate (with meters, at least the power ranks' quiet after the first)."""
        rounds_s = self.rounds * self.round_s
        return max(rounds_s, POWER_QUIET_S) if self.channels and size_index > 0 else rounds_s

    @property
    def duration_s(self) -> float:
        return self.start_s + sum(self.size_s(k) for k in range(len(self.sizes))) + self.end_s

    @property
    def file_bytes(self) -> int:
        return int(self.map_bytes + power_bytes(self.channels, self.duration_s))

    @property
    def rounds_in_limit(self) -> int:
        """The rounds the limit lets run by this estimate (all when there is no limit); at least 1."""
        if not self.limit_s:
            return self.total_rounds
        fit = (
            math.floor((self.limit_s - self.start_s) / self.round_s)
            if self.round_s > 0
            else self.total_rounds
        )
        return max(1, min(self.total_rounds, fit))


def trial_s(mopts) -> float:
    """A trial's loop by NetPIPE's rule: the target time x the mode's one-way factor."""
    run = mopts.run
    return run.target_time_s * run.mode_value.one_way_factor


def round_estimate_s(mopts, pairs: int, directions: int) -> float:
    """A round before any is measured: the slowest pair's work (all pairs alike) and rank 0's share."""
    run = mopts.run
    pair_s = (run.trials + WARMUP_TRIALS) * trial_s(mopts) + PROBE_TARGETS * run.target_time_s
    return directions * pair_s + ROUND_OVERHEAD_S + PAIR_OVERHEAD_S * pairs * directions


def power_channels(power_nodes: list) -> tuple[tuple[int, float], ...]:
    """Each power channel's (fields per sample: SAMPLE_FIELDS and its extra fields, sample interval);
    `power_nodes` as gathered from the power ranks, the fabric's channels (--fabric-meter) with them."""
    from npmpi.runfile.format import SAMPLE_FIELDS

    out = []
    for node in power_nodes or []:
        fabric = (node or {}).get("fabric") or {}
        for channel in [*(node or {}).get("channels", []), *fabric.get("channels", [])]:
            interval = float(channel.get("sample_interval_s") or 1.0)
            out.append(
                (len(SAMPLE_FIELDS) + len(channel.get("extra_sample_fields") or []), max(interval, 1e-3))
            )
    return tuple(out)


def power_bytes(channels: tuple[tuple[int, float], ...], duration_s: float) -> int:
    """The power channels' bytes over `duration_s`: 8 bytes per field and sample, in whole chunks."""
    total = 0
    for fields, interval in channels:
        chunks = max(1, math.ceil(duration_s / interval / SAMPLE_CHUNK_ROWS))
        total += CHANNEL_BYTES + 8 * fields * SAMPLE_CHUNK_ROWS * chunks
    return total


def make_plan(mopts, members: int, power_nodes: list | None = None, rounds: list | None = None) -> MapPlan:
    """The plan of a map of `members` members with these options (power_nodes: the power ranks'
    gathered descriptions, None or empty without meters; rounds: the map's, npmpi/map/schedule.py
    `map_rounds`, made here without the members' switches when not given)."""
    run = mopts.run
    rounds = rounds if rounds is not None else map_rounds(mopts, members)
    lengths = round_lengths(rounds)
    pairs = int(lengths.max())
    directions = 2 if mopts.directions == DIRECTIONS_BOTH else 1
    baseline_s = 0.0
    if power_nodes:
        baseline_s = run.baseline_s if run.baseline_s is not None else DEFAULT_BASELINE_S
    rows = int(lengths.sum()) * directions  # a pair's row, or each direction's
    data = map_data_bytes(rows, len(mopts.sizes_bytes), run.trials, len(rounds), members)
    per_round = max(pairs * directions, 64)
    chunks = len(mopts.sizes_bytes) * math.ceil(rows / per_round) * 12  # 12 datasets of [S, P, ...]
    limit = mopts.max_minutes
    return MapPlan(
        members=members,
        rounds=len(rounds),
        sizes=tuple(mopts.sizes_bytes),
        trials=run.trials,
        per_rank=bool(mopts.per_rank),
        directions=directions,
        pairs=pairs,
        round_s=round_estimate_s(mopts, pairs, directions),
        start_s=START_S + baseline_s,
        end_s=END_S + baseline_s + (POWER_QUIET_S if power_nodes else 0.0),  # the last collection waits
        map_bytes=FILE_OVERHEAD_BYTES + MEMBER_TEXT_BYTES * members + CHUNK_OVERHEAD_BYTES * chunks + data,
        channels=power_channels(power_nodes or []),
        confirm_repeats=mopts.confirm_repeats,
        confirm_budget=mopts.confirm_budget,
        limit_s=60.0 * limit if limit else 0.0,
        sample_k=mopts.sample_k,
        sampled_pairs=int(lengths.sum()) if mopts.sample_k else 0,
    )


def format_duration(seconds: float) -> str:
    """4.2 s, 4.2 min, 3.1 h, 2.5 days."""
    if seconds < 100:
        return f"{seconds:.2g} s" if seconds < 10 else f"{seconds:.0f} s"
    if seconds < 6000:
        return f"{seconds / 60:.2g} min" if seconds < 600 else f"{seconds / 60:.0f} min"
    if seconds < 48 * 3600:
        return f"{seconds / 3600:.2g} h"
    return f"{seconds / 86400:.2g} days"


def format_bytes(n: float) -> str:
    """1.3 MiB, 104 KiB, 2.1 GiB."""
    for suffix, factor in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= factor:
            value = n / factor
            return f"{value:.2g} {suffix}" if value < 10 else f"{value:.0f} {suffix}"
    return f"{int(n)} B"


def plan_line(plan: MapPlan) -> str:
    """The line rank 0 prints before the first round."""
    who = "every rank" if plan.per_rank else "one rank per node"
    ways = ", each direction apart" if plan.directions == 2 else ""
    line = (
        f"map plan: {plan.rounds} rounds x {len(plan.sizes)} sizes x {plan.trials} trials ({plan.members} "
        f"members, {who}{ways}), about {format_duration(plan.duration_s)} and "
        f"{format_bytes(plan.file_bytes)} (file)"
    )
    if plan.sample_k:
        every = plan.members * (plan.members - 1) // 2
        line += (
            f"; sampled: {plan.sample_k} partners per member, {plan.sampled_pairs} of {every} pairs, "
            "the others not measured"
        )
    if plan.confirm_repeats and plan.confirm_budget > 0:
        rounds_s = plan.duration_s - plan.start_s - plan.end_s
        most = max(plan.confirm_budget * rounds_s, MIN_BUDGET_S)
        line += f"; suspects, if any, measured again after it: up to {format_duration(most)} more"
    if plan.limit_s:
        minutes = f"--max-minutes {plan.limit_s / 60:g}"
        if plan.rounds_in_limit < plan.total_rounds:
            line += f"; {minutes} stops it after about {plan.rounds_in_limit} of {plan.total_rounds} rounds"
        else:
            line += f"; {minutes}: within it"
    return line


def free_bytes(directory: Path) -> int | None:
    """Bytes free to this user in `directory` (None when the system does not say)."""
    faked = os.environ.get(DISK_FREE_ENV, "")
    if faked.isdigit():
        return int(faked)
    try:
        return shutil.disk_usage(directory).free
    except OSError:
        return None


def disk_problem(output: str, plan: MapPlan) -> str | None:
    """The map refused when its planned file would not fit, with the margin, in the output's
    directory; None when it fits or the free space is not known."""
    directory = Path(output).parent if str(Path(output).parent) else Path(".")
    free = free_bytes(directory)
    need = DISK_MARGIN * plan.file_bytes + DISK_MARGIN_BYTES
    if free is None or free >= need:
        return None
    return (
        f"--output {output}: the map's file will be about {format_bytes(plan.file_bytes)} "
        f"({plan.total_rounds} rounds of {plan.members} members, {format_duration(plan.duration_s)}) "
        f"but {directory} has {format_bytes(free)} free (needed: {format_bytes(need)} with the margin); "
        "free some space, choose another location, or give fewer --sizes or --trials"
    )


class RoundClock:
    """What the rounds take, for the time limit: the plan's estimate until a round is measured, then
    the last round of the same size, or for a size not measured yet the plan's estimate scaled as
    the last size measured was."""

    def __init__(self, plan: MapPlan, started: float) -> None:
        self.plan = plan
        self.started = started  # time.monotonic() at the recording's start: the limit counts from it
        self.last: dict[int, float] = {}  # size index -> its last round's seconds
        self.scale = 1.0  # measured / planned of the last size measured

    def learn(self, size_index: int, seconds: float) -> None:
        """A round of this size took `seconds` (from its command to its rows flushed)."""
        self.last[size_index] = seconds
        if self.plan.round_s > 0:
            self.scale = seconds / self.plan.round_s

    def expected_s(self, size_index: int) -> float:
        if size_index in self.last:
            return self.last[size_index]
        return self.plan.round_s * self.scale

    def stop_before(self, size_index: int, rounds_done: int, now: float | None = None) -> bool:
        """Whether the time limit ends the map before this round: the limit reached, or this round
        would end past it by the estimate. The first round always runs (a map with no round tells
        nothing); without a limit, never."""
        if not self.plan.limit_s or rounds_done == 0:
            return False
        elapsed = (time.monotonic() if now is None else now) - self.started
        return elapsed + self.expected_s(size_index) > self.plan.limit_s

    def stop_message(self, rounds_done: int) -> str:
        return (
            f"stopped at the time limit (--max-minutes {self.plan.limit_s / 60:g}) after {rounds_done} of "
            f"{self.plan.total_rounds} rounds"
        )
