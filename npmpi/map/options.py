"""The command line of `python -m npmpi map`: parsing and checks that need no MPI.

The map reuses a run's `Options` (npmpi/core/config.py) for what it shares with the sweep (trials,
target time, kernel, mode, meters, baseline, output) and adds its own: the sizes, the schedule and
whether every rank is mapped.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass

from npmpi.commands.checks import shared_fields, trials_and_target
from npmpi.commands.parser import (
    UsageParser,
    add_option,
    add_options,
    command_name,
    command_parser,
    count_arg,
    one_or_other,
    parse_command_line,
)
from npmpi.core.buffers import ARRANGEMENT_NETPIPE, ARRANGEMENT_SEPARATE
from npmpi.core.config import (
    DEFAULT_TARGET_TIME_S,
    DEFAULT_TRIALS,
    QUICK_TARGET_TIME_S,
    QUICK_TRIALS,
    Options,
)
from npmpi.core.errors import UsageError
from npmpi.core.inputfiles import read_regular_file
from npmpi.core.modes import DEFAULT_WINDOW, MODE_PINGPONG, MODE_STREAM, MODES
from npmpi.core.units import format_size_bytes, parse_number, parse_size_bytes
from npmpi.map.confirm import DEFAULT_BUDGET, DEFAULT_REPEATS
from npmpi.map.schedule import SCHEDULE_ROUNDS, SCHEDULES
from npmpi.persize.kernels import KERNEL_NAMES
from npmpi.persize.watchdog import STALL_FACTOR
from npmpi.run.options import check_mode_and_window, loop_fields

DEFAULT_MAP_SIZES = (1, 64 << 10, 4 << 20)
MAX_MAP_SIZE_BYTES = 1 << 30  # one call of any MPI carries it; two buffers of it per measuring rank
MAX_MAP_SIZES = 64
DIRECTIONS_ONE, DIRECTIONS_BOTH = "one", "both"
MAX_MINUTES = 10_000_000.0  # --max-minutes' bound (19 years: any larger number is a typo)


@dataclass(frozen=True)
class MapOptions:
    """A map's command line: the run's shared options and the map's own."""

    run: Options
    sizes_bytes: tuple[int, ...]  # ascending, distinct
    schedule: str
    per_rank: bool
    directions: str = DIRECTIONS_ONE  # both: i -> j and j -> i measured apart (a stream's default)
    confirm_repeats: int = DEFAULT_REPEATS  # each suspect measured again this many times (0: not)
    confirm_budget: float = DEFAULT_BUDGET  # the re-measurements' time, a fraction of the map's
    max_minutes: float | None = None  # --max-minutes: no round starts that would end past it
    sample_k: int = 0  # --pairs sample:K: K partners per member (0: --pairs all, every pair)
    sample_seed: int = 0  # the sample's seed (--pairs sample:K:SEED; default: today's date, YYYYMMDD UTC)
    topology: tuple[tuple[str, str], ...] = ()  # --topology: (host, switch) lines, in the file's order
    resume: str | None = None  # --resume FILE: an interrupted map continued (npmpi/map/resume.py)

    @property
    def pairs_plan(self) -> str:
        """/map's pairs_plan: 'all' or 'sample:K'."""
        return f"sample:{self.sample_k}" if self.sample_k else "all"


def _sizes(text: str) -> tuple[int, ...]:
    words = text.split(",")
    try:
        sizes = [parse_size_bytes(w) for w in words]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"invalid sizes {text!r}: {exc}") from None
    return tuple(sizes)


def build_parser() -> UsageParser:
    """The parser of `python -m npmpi map`: the map's own options and those it shares with a run,
    worded for a map."""
    p = command_parser(
        f"{command_name()} map",
        "Measure every pair of nodes (latency and bandwidth at a few message sizes, and with "
        "--meter each node's power) into one HDF5 map file. One rank per node measures "
        "(--per-rank: every rank); with --meter each node needs one more rank for its meters. "
        "Launch e.g.: mpirun -np 8 --map-by node python -m npmpi map.",
        allow_abbrev=False,
    )
    p.add_argument(
        "--sizes",
        type=_sizes,
        default=DEFAULT_MAP_SIZES,
        metavar="LIST",
        help="message sizes, comma-separated, suffixes K, M, G (default: 1,64K,4M); the smallest "
        "gives the latency matrix",
    )
    p.add_argument(
        "--schedule",
        default=SCHEDULE_ROUNDS,
        metavar="NAME",
        help="'rounds': N-1 rounds of disjoint pairs measured at once (N rounds with a bye each "
        "when N is odd); 'serial': one pair at a time, N(N-1)/2 rounds (default: %(default)s)",
    )
    p.add_argument(
        "--pairs",
        default="all",
        metavar="WHICH",
        help="'all': every pair (default); 'sample:K': the daily check, each node measured against K "
        "others in about K rounds (and every pair of switches at least once with --topology); "
        "'sample:K:SEED' chooses them reproducibly (default seed: today's date, YYYYMMDD UTC)",
    )
    p.add_argument(
        "--topology",
        default=None,
        metavar="FILE",
        help="with --pairs sample:K: each host's switch, one 'host switch' line per host of the map "
        "(default: none, the switches not known)",
    )
    p.add_argument(
        "--resume",
        default=None,
        metavar="FILE",
        help="continue the interrupted map FILE (the same nodes and options) from its last complete "
        "round into --output: its rounds copied, the rest measured (default: none, a new map)",
    )
    p.add_argument(
        "--per-rank",
        action="store_true",
        help="map every rank (not only one per node): for trying a map on one host",
    )
    add_options(
        p,
        {
            "--trials": f"trials per pair and size (default: {DEFAULT_TRIALS}, {QUICK_TRIALS} with --quick)",
            "--target-time": "NetPIPE's RUNTM: each pair's iterations per trial come from NetPIPE's rule "
            f"with its own time per message at the size (default: {DEFAULT_TARGET_TIME_S} s, "
            f"{QUICK_TARGET_TIME_S} s with --quick)",
            "--quick": "fewer trials, shorter target time",
            "--kernel": one_or_other(f"'{k}'" for k in KERNEL_NAMES) + " (default: python)",
            "--mode": one_or_other(MODES) + " (default: %(default)s)",
            "--window": f"stream mode: messages per window (default: {DEFAULT_WINDOW})",
        },
    )
    _add_map_measuring(p)
    _add_map_power_and_output(p)
    return p


def _add_map_power_and_output(p: UsageParser) -> None:
    """The power and output options a map shares with a run, worded for a map."""
    add_options(
        p,
        {
            "--meter": "a meter channel of every node (as for a run; see docs/meters.md; default: none)",
            "--fabric-meter": "a meter of a device that belongs to no node (a switch, a shared PDU), as "
            "for a run; repeat for several. Sampled by one power rank, stored under /power/fabric (needs "
            "--meter; default: none)",
        },
    )
    add_option(
        p,
        "--fabric-rank",
        "the power rank that samples the --fabric-meter devices (default: the first node's)",
        metavar="RANK",
    )
    add_options(
        p,
        {
            "--meter-optional": "go on without a meter that cannot be opened",
            "--sample-interval": "seconds between samples (default: each meter's own)",
            "--baseline": "idle power before and after the map (default: 3 s when a meter is given)",
            "--calibration": "meter delays from calibrate (default: none)",
            "--output": "map file to write (default: runs/npmpi-map-YYYYmmdd-HHMMSS.h5)",
            "--force": "overwrite an existing --output file",
            "--quiet": "print nothing but errors",
            "--stall-timeout": "end the map when a member stops answering (stopped, stuck, its node "
            f"down): after max(SECONDS, {STALL_FACTOR:g} x what the round should take) without its "
            "answer, rank 0 names the rank, marks the file failed with every completed round and ends "
            "every rank; 0: wait for ever (default: %(default)g s)",
        },
    )


def _minutes_arg(text: str) -> float:
    """Minutes (argparse type): the strict number grammar of npmpi.core.units."""
    try:
        return parse_number(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"invalid minutes {text!r}: expected a plain decimal number, e.g. 30 or 0.5"
        ) from None


def _fraction_arg(text: str) -> float:
    """A fraction (argparse type): the strict number grammar of npmpi.core.units."""
    try:
        return parse_number(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"invalid fraction {text!r}: expected a plain decimal number, e.g. 0.1"
        ) from None


def _add_map_measuring(p: UsageParser) -> None:
    """The map's own options on what is measured: directions, and the suspects measured again."""
    p.add_argument(
        "--directions",
        default=None,
        metavar="WHICH",
        help="'both': measure i -> j and j -> i apart (a stream map's default; the matrices are then "
        "asymmetric); 'one': the lower rank of each pair streams to the higher only. A ping-pong or "
        "bidir map measures both directions at once (the round trip): only 'one' applies",
    )
    p.add_argument(
        "--confirm",
        type=count_arg,
        default=DEFAULT_REPEATS,
        metavar="N",
        help="after the map, measure every link, direction or node the analysis would name again, one "
        "pair at a time, N times (0: not); only what is still slow is named (default: %(default)s)",
    )
    p.add_argument(
        "--confirm-budget",
        type=_fraction_arg,
        default=DEFAULT_BUDGET,
        metavar="FRACTION",
        help="the re-measurements may add this fraction of the map's time, or 10 s if more: fewer trials, "
        "then fewer repeats (down to 2) when the most severe suspect would not fit, and a suspect that "
        "still does not is listed as not re-measured, with the budget that would measure it "
        "(default: %(default)s)",
    )
    p.add_argument(
        "--max-minutes",
        type=_minutes_arg,
        default=None,
        metavar="M",
        help="stop the map cleanly once M minutes have passed since its file was created: no round "
        "starts that the estimate says would end past them (the first always runs); the file keeps "
        "every round measured, its status is interrupted with the reason, and the exit status is 0 "
        "(default: no limit)",
    )


def parse_map_options(argv: list[str]) -> MapOptions:
    """Parse and check a map's options; UsageError carries the one-line reason."""
    ns = parse_command_line(build_parser(), argv)
    sizes = _check_sizes(ns.sizes)
    trials, target = _repetition(ns)
    window = check_mode_and_window(ns)
    directions = _check_directions(ns)
    if not 0 <= ns.confirm <= 100:
        raise UsageError(f"--confirm {ns.confirm}: give between 0 (no re-measurement) and 100 repeats")
    if not 0 <= ns.confirm_budget <= 100:
        raise UsageError(f"--confirm-budget {ns.confirm_budget}: give a fraction of the map's time, 0 to 100")
    if ns.max_minutes is not None and not 0 < ns.max_minutes <= MAX_MINUTES:
        raise UsageError(
            f"--max-minutes {ns.max_minutes:g}: give a time limit above 0 and at most {MAX_MINUTES:g} minutes"
        )
    if ns.schedule not in SCHEDULES:
        raise UsageError(
            f"--schedule {ns.schedule!r}: unknown schedule; choose one of: {', '.join(SCHEDULES)}"
        )
    sample_k, sample_seed = _pairs(ns.pairs)
    if ns.topology is not None and not sample_k:
        raise UsageError("--topology: only a sampled map uses it; give --pairs sample:K with it")
    if ns.kernel not in KERNEL_NAMES:
        raise UsageError(f"--kernel {ns.kernel!r}: unknown kernel; choose one of: {', '.join(KERNEL_NAMES)}")
    plain = ns.mode == MODE_PINGPONG
    # the map measures through the run's message loop: Options of its sizes, without the sweep's
    # own rules (perturbation, --repeats, the stop rule, --integrity: their defaults are off)
    run = Options(
        lower_bytes=sizes[0],
        upper_bytes=sizes[-1],
        **loop_fields(ns, trials, target, window),
        buffers=ARRANGEMENT_NETPIPE if plain else ARRANGEMENT_SEPARATE,
        **shared_fields(ns, "map.h5"),
    )
    return MapOptions(
        run=run,
        sizes_bytes=sizes,
        schedule=ns.schedule,
        per_rank=ns.per_rank,
        directions=directions,
        confirm_repeats=ns.confirm,
        confirm_budget=ns.confirm_budget,
        max_minutes=ns.max_minutes,
        sample_k=sample_k,
        sample_seed=sample_seed,
        topology=read_topology(ns.topology) if ns.topology is not None else (),
        resume=ns.resume,
    )


MAX_SEED = 2**63 - 1
MAX_TOPOLOGY_BYTES = 16 << 20  # a line per host: a million hosts


def _pairs(text: str) -> tuple[int, int]:
    """--pairs: (0, 0) for 'all', else (K, seed) of 'sample:K' or 'sample:K:SEED'."""
    if text == "all":
        return 0, 0
    words = text.split(":")
    if words[0] == "sample" and len(words) in (2, 3) and all(w.isascii() and w.isdigit() for w in words[1:]):
        k = int(words[1])
        if k < 1:
            raise UsageError(f"--pairs {text}: give at least 1 partner per node (sample:K, K >= 1)")
        seed = int(words[2]) if len(words) == 3 else int(time.strftime("%Y%m%d", time.gmtime()))
        if seed > MAX_SEED:
            raise UsageError(f"--pairs {text}: the seed is above {MAX_SEED}")
        return k, seed
    raise UsageError(
        f"--pairs {text!r}: give 'all' or 'sample:K' (K partners per node), optionally 'sample:K:SEED'"
    )


def read_topology(path: str) -> tuple[tuple[str, str], ...]:
    """--topology FILE: lines 'host switch' ('#' starts a comment); UsageError on a bad file."""
    data = read_regular_file(path, f"--topology {path}", UsageError, limit=MAX_TOPOLOGY_BYTES)
    try:
        lines = data.decode("utf-8").splitlines()
    except UnicodeDecodeError:
        raise UsageError(f"--topology {path}: not UTF-8 text") from None
    out: dict[str, str] = {}
    for number, line in enumerate(lines, 1):
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        if len(words) != 2:
            raise UsageError(f"--topology {path}: line {number} is not 'host switch': {line.strip()!r}")
        if words[0] in out and out[words[0]] != words[1]:
            raise UsageError(f"--topology {path}: line {number}: host {words[0]} is given two switches")
        out[words[0]] = words[1]
    if not out:
        raise UsageError(f"--topology {path}: no 'host switch' line in it")
    return tuple(out.items())


def _check_directions(ns: argparse.Namespace) -> str:
    if ns.directions is None:
        return DIRECTIONS_BOTH if ns.mode == MODE_STREAM else DIRECTIONS_ONE
    if ns.directions not in (DIRECTIONS_ONE, DIRECTIONS_BOTH):
        raise UsageError(f"--directions {ns.directions!r}: choose 'both' or 'one'")
    if ns.directions == DIRECTIONS_BOTH and ns.mode != MODE_STREAM:
        raise UsageError(
            f"--directions both: a {ns.mode} map's message goes both ways in every iteration (it measures "
            "the round trip, not one direction); use --mode stream --directions both to measure each way"
        )
    return ns.directions


def _check_sizes(sizes: tuple[int, ...]) -> tuple[int, ...]:
    bad = [s for s in sizes if not 1 <= s <= MAX_MAP_SIZE_BYTES]
    if bad:
        raise UsageError(
            f"--sizes: {bad[0]} B is outside 1 B to {format_size_bytes(MAX_MAP_SIZE_BYTES)}; "
            "give sizes such as 1,64K,4M"
        )
    repeated = sorted({s for s in sizes if sizes.count(s) > 1})
    if repeated:
        # refused rather than merged: a size given twice is a typo (64K,64K for 64K,64M) more often
        # than an intent, and a merged list would measure other sizes than the ones typed
        raise UsageError(
            f"--sizes: {format_size_bytes(repeated[0])} ({repeated[0]} B) is given more than once; "
            "give each size once"
        )
    distinct = tuple(sorted(sizes))
    if len(distinct) > MAX_MAP_SIZES:
        raise UsageError(f"--sizes: {len(distinct)} sizes given, at most {MAX_MAP_SIZES}")
    return distinct


def _repetition(ns: argparse.Namespace) -> tuple[int, float]:
    return trials_and_target(ns.trials, ns.target_time, ns.quick, "per pair and size")
