"""The command line of `python -m npmpi map`: parsing and checks that need no MPI.

The map reuses a run's `Options` (npmpi/core/config.py) for what it shares with the sweep (trials,
target time, kernel, mode, meters, baseline, output) and adds its own: the sizes, the schedule and
whether every rank is mapped.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from npmpi.commands.arguments import (
    UsageParser,
    add_meter_option,
    add_version_option,
    command_name,
    count_arg,
    one_or_other,
    seconds_arg,
    version_text,
)
from npmpi.commands.options import check_fabric, trials_and_target
from npmpi.core.buffers import ARRANGEMENT_NETPIPE, ARRANGEMENT_SEPARATE
from npmpi.core.config import (
    DEFAULT_TARGET_TIME_S,
    DEFAULT_TRIALS,
    MAX_BASELINE_S,
    QUICK_TARGET_TIME_S,
    QUICK_TRIALS,
    Options,
)
from npmpi.core.errors import HelpRequested, UsageError
from npmpi.core.modes import DEFAULT_WINDOW, MAX_WINDOW, MODE_PINGPONG, MODE_STREAM, MODES, mode_named
from npmpi.core.units import format_size_bytes, parse_number, parse_size_bytes
from npmpi.map.confirm import DEFAULT_BUDGET, DEFAULT_REPEATS
from npmpi.map.schedule import SCHEDULE_ROUNDS, SCHEDULES
from npmpi.sweep.kernels import KERNEL_NAMES

DEFAULT_MAP_SIZES = (1, 64 << 10, 4 << 20)
MAX_MAP_SIZE_BYTES = 1 << 30  # one call of any MPI carries it; two buffers of it per measuring rank
MAX_MAP_SIZES = 64
DIRECTIONS_ONE, DIRECTIONS_BOTH = "one", "both"


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


def _sizes(text: str) -> tuple[int, ...]:
    words = text.split(",")
    try:
        sizes = [parse_size_bytes(w) for w in words]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"invalid sizes {text!r}: {exc}") from None
    return tuple(sizes)


def _add_map_repetition_and_mode(p: UsageParser) -> None:
    """--trials, --target-time, --quick, --kernel, --mode and --window, as the map words them."""
    p.add_argument(
        "--trials",
        type=count_arg,
        default=None,
        metavar="N",
        help=f"trials per pair and size (default: {DEFAULT_TRIALS}, {QUICK_TRIALS} with --quick)",
    )
    p.add_argument(
        "--target-time",
        type=seconds_arg,
        default=None,
        metavar="SECONDS",
        help="NetPIPE's RUNTM: each pair's iterations per trial come from NetPIPE's rule with its "
        f"own time per message at the size (default: {DEFAULT_TARGET_TIME_S} s, "
        f"{QUICK_TARGET_TIME_S} s with --quick)",
    )
    p.add_argument("--quick", action="store_true", help="fewer trials, shorter target time")
    p.add_argument(
        "--kernel",
        default="python",
        metavar="NAME",
        help=one_or_other(f"'{k}'" for k in KERNEL_NAMES) + " (default: python)",
    )
    p.add_argument(
        "--mode",
        default=MODE_PINGPONG,
        metavar="MODE",
        help=one_or_other(MODES) + " (default: %(default)s)",
    )
    p.add_argument(
        "--window",
        type=count_arg,
        default=None,
        metavar="N",
        help=f"stream mode: messages per window (default: {DEFAULT_WINDOW})",
    )


def build_parser() -> UsageParser:
    """The parser of `python -m npmpi map`."""
    p = UsageParser(
        prog=f"{command_name()} map",
        description=(
            "Measure every pair of nodes (latency and bandwidth at a few message sizes, and with "
            "--meter each node's power) into one HDF5 map file. One rank per node measures "
            "(--per-rank: every rank); with --meter each node needs one more rank for its meters. "
            "Launch e.g.: mpirun -np 8 --map-by node python -m npmpi map."
        ),
        add_help=False,
        allow_abbrev=False,
    )
    p.add_argument("-h", "--help", action="store_true", help="show this help and exit")
    add_version_option(p)
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
        "--per-rank",
        action="store_true",
        help="map every rank (not only one per node): for trying a map on one host",
    )
    _add_map_repetition_and_mode(p)
    _add_map_measuring(p)
    add_meter_option(
        p, "--meter", "a meter channel of every node (as for a run; see docs/meters.md; default: none)"
    )
    _add_fabric(p)
    add_meter_option(p, "--meter-optional", "go on without a meter that cannot be opened")
    add_meter_option(p, "--sample-interval", "seconds between samples (default: each meter's own)")
    p.add_argument(
        "--baseline",
        type=seconds_arg,
        default=None,
        metavar="SECONDS",
        help="idle power before and after the map (default: 3 s when a meter is given)",
    )
    p.add_argument(
        "--calibration", default=None, metavar="FILE", help="meter delays from calibrate (default: none)"
    )
    p.add_argument(
        "-o",
        "--output",
        default=None,
        metavar="FILE",
        help="map file to write (default: runs/npmpi-map-YYYYmmdd-HHMMSS.h5)",
    )
    p.add_argument("--force", action="store_true", help="overwrite an existing --output file")
    p.add_argument("-q", "--quiet", action="store_true", help="print nothing but errors")
    return p


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
        help="the re-measurements may add this fraction of the map's time, or 10 s if more (the most severe "
        "suspect is measured whatever it is; default: %(default)s)",
    )


def _add_fabric(p: UsageParser) -> None:
    """--fabric-meter and --fabric-rank, as a run's."""
    p.add_argument(
        "--fabric-meter",
        action="append",
        default=[],
        metavar="SPEC",
        help="a meter of a device that belongs to no node (a switch, a shared PDU), as for a run; "
        "repeat for several. Sampled by one power rank, stored under /power/fabric (needs --meter; "
        "default: none)",
    )
    p.add_argument(
        "--fabric-rank",
        type=count_arg,
        default=None,
        metavar="RANK",
        help="the power rank that samples the --fabric-meter devices (default: the first node's)",
    )


def parse_map_options(argv: list[str]) -> MapOptions:
    """Parse and check a map's options; UsageError carries the one-line reason."""
    parser = build_parser()
    ns = parser.parse_args(argv)
    if ns.help:
        raise HelpRequested(parser.format_help())
    if ns.version:
        raise HelpRequested(version_text())
    sizes = _check_sizes(ns.sizes)
    trials, target = _repetition(ns)
    window = _check_mode(ns)
    directions = _check_directions(ns)
    if not 0 <= ns.confirm <= 100:
        raise UsageError(f"--confirm {ns.confirm}: give between 0 (no re-measurement) and 100 repeats")
    if not 0 <= ns.confirm_budget <= 100:
        raise UsageError(f"--confirm-budget {ns.confirm_budget}: give a fraction of the map's time, 0 to 100")
    if ns.schedule not in SCHEDULES:
        raise UsageError(
            f"--schedule {ns.schedule!r}: unknown schedule; choose one of: {', '.join(SCHEDULES)}"
        )
    if ns.kernel not in KERNEL_NAMES:
        raise UsageError(f"--kernel {ns.kernel!r}: unknown kernel; choose one of: {', '.join(KERNEL_NAMES)}")
    _check_power_and_output(ns)
    plain = ns.mode == MODE_PINGPONG
    run = Options(
        lower_bytes=sizes[0],
        upper_bytes=sizes[-1],
        perturbation_bytes=0,
        trials=trials,
        target_time_s=target,
        repeats=None,
        quick=ns.quick,
        max_one_way_s=float("inf"),
        kernel=ns.kernel,
        integrity=False,
        output=ns.output,
        force=ns.force,
        quiet=ns.quiet,
        meters=tuple(ns.meter),
        fabric_meters=tuple(ns.fabric_meter),
        fabric_rank=ns.fabric_rank,
        sample_interval_s=ns.sample_interval,
        baseline_s=ns.baseline,
        meter_optional=ns.meter_optional,
        calibration=ns.calibration,
        mode=ns.mode,
        window=window,
        buffers=ARRANGEMENT_NETPIPE if plain else ARRANGEMENT_SEPARATE,
    )
    return MapOptions(
        run=run,
        sizes_bytes=sizes,
        schedule=ns.schedule,
        per_rank=ns.per_rank,
        directions=directions,
        confirm_repeats=ns.confirm,
        confirm_budget=ns.confirm_budget,
    )


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


def _check_mode(ns: argparse.Namespace) -> int:
    if ns.mode not in MODES:
        raise UsageError(f"--mode {ns.mode!r}: unknown mode; choose one of: {', '.join(MODES)}")
    windowed = mode_named(ns.mode).windowed
    if ns.window is not None and not windowed:
        raise UsageError(
            f"--window {ns.window} only applies to --mode stream: drop --window or add --mode stream"
        )
    window = (ns.window if ns.window is not None else DEFAULT_WINDOW) if windowed else 1
    if not 1 <= window <= MAX_WINDOW:
        raise UsageError(f"--window {window}: give between 1 and {MAX_WINDOW} messages per iteration")
    return window


def _check_power_and_output(ns: argparse.Namespace) -> None:
    from npmpi.meters import MeterError, check_meter_spec

    for text in ns.meter:
        try:
            check_meter_spec(text)
        except MeterError as exc:
            raise UsageError(str(exc)) from None
    check_fabric(ns)
    if ns.sample_interval is not None and not 0.001 <= ns.sample_interval <= 3600:
        raise UsageError(f"--sample-interval {ns.sample_interval}: give between 0.001 and 3600 s")
    if ns.baseline is not None and not 0 <= ns.baseline <= MAX_BASELINE_S:
        raise UsageError(f"--baseline {ns.baseline}: give between 0 (off) and {MAX_BASELINE_S:.0f} s")
    if ns.output is not None and ns.output.strip() == "":
        raise UsageError("--output is empty: give a file name, e.g. -o map.h5")
