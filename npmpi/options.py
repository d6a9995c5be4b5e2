"""Command-line options of `python -m npmpi`: parsing and checks that need no MPI."""

from __future__ import annotations

import argparse
import math
import os
import re
from dataclasses import asdict, dataclass
from pathlib import Path

from npmpi.buffers import (
    ARRANGEMENT_NETPIPE,
    ARRANGEMENT_SEPARATE,
    ARRANGEMENTS,
    HUGE_PAGE_CHOICES,
    HUGE_PAGES_SYSTEM,
)
from npmpi.errors import UsageError
from npmpi.kernels import KERNEL_NAMES
from npmpi.modes import (
    DEFAULT_CACHE_POOL_BYTES,
    DEFAULT_WINDOW,
    MAX_WINDOW,
    MODE_PINGPONG,
    MODE_STREAM,
    MODES,
)
from npmpi.units import format_size_bytes, parse_size_bytes

DEFAULT_LOWER_BYTES = 1
DEFAULT_UPPER_BYTES = 8 << 20
DEFAULT_PERTURBATION = 3
DEFAULT_TRIALS = 7  # NetPIPE 3.7's TRIALS (its release build); also the floor of iterations
# NetPIPE's RUNTM (0.25 s in its release build, 0.10 s with 3 trials in Debian's NPopenmpi): 7 trials
# at 0.05 s against NPopenmpi's 3 at 0.10 s keep a default sweep (124 sizes) about as long as Debian's
# NPopenmpi's, and as the former default (0.055 s trials): about 51 s by NetPIPE's rule for a transport
# of 0.3 us and 4 GB/s
DEFAULT_TARGET_TIME_S = 0.05
QUICK_TRIALS = 3
QUICK_TARGET_TIME_S = 0.004
DEFAULT_MAX_ONE_WAY_S = 1.0  # NetPIPE 3.7's STOPTM
MAX_TARGET_TIME_S = 3600.0
MAX_REPEATS = 1_000_000_000
DEFAULT_BASELINE_S = 3.0
THREAD_LEVEL_AUTO = "auto"
THREAD_LEVELS = ("single", "funneled", "serialized", "multiple")
MAX_BASELINE_S = 3600.0


@dataclass(frozen=True)
class Options:
    """Everything a run needs to know from its command line, with units in the names."""

    lower_bytes: int
    upper_bytes: int
    perturbation_bytes: int
    trials: int
    target_time_s: float
    repeats: int | None
    quick: bool
    max_one_way_s: float
    kernel: str
    integrity: bool
    output: str | None
    force: bool
    quiet: bool
    meters: tuple[str, ...] = ()
    sample_interval_s: float | None = None
    baseline_s: float | None = None
    meter_optional: bool = False
    calibration: str | None = None
    mode: str = MODE_PINGPONG
    window: int = 1  # messages per iteration and direction: --window in stream mode, else 1
    pairs: int | str = 1  # a number of pairs, or "all"
    async_: bool = False
    cache_cold: bool = False
    cache_pool_bytes: int = DEFAULT_CACHE_POOL_BYTES
    buffers: str = ARRANGEMENT_NETPIPE
    huge_pages: str = HUGE_PAGES_SYSTEM
    thread_level: str = THREAD_LEVEL_AUTO

    def to_dict(self) -> dict:
        return asdict(self)

    @property
    def largest_message_bytes(self) -> int:
        return self.upper_bytes + self.perturbation_bytes

    @property
    def pool_bytes(self) -> int:
        """Bytes of each of a measuring rank's send and receive buffers (pools)."""
        from npmpi.modes import pool_bytes

        return pool_bytes(
            self.mode, self.window, self.cache_cold, self.cache_pool_bytes, self.largest_message_bytes
        )


class UsageParser(argparse.ArgumentParser):
    """argparse that raises UsageError (one line, exit 2) instead of printing usage."""

    def error(self, message: str):  # type: ignore[override]
        raise UsageError(f"{message} (see python -m npmpi --help)")


class HelpRequested(Exception):
    """--help or --version was given; the text is to be printed by rank 0 only."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text


def _size(text: str) -> int:
    try:
        return parse_size_bytes(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _whole(text: str) -> int:
    """int() of ASCII digits with an optional sign (int() alone takes any script's digits and '_')."""
    if not re.fullmatch(r"\s*[+-]?[0-9]+\s*", text, re.ASCII):
        raise ValueError(text)
    return int(text)


def _count(text: str) -> int:
    try:
        value = _whole(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid count {text!r}: expected a whole number") from None
    return value


def _pairs(text: str) -> int | str:
    if text.strip().lower() == "all":
        return "all"
    try:
        return _whole(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"invalid pairs {text!r}: expected a whole number or 'all'"
        ) from None


def seconds_arg(text: str) -> float:
    """An option value in seconds: a finite number (argparse type)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid time {text!r}: expected seconds, e.g. 0.05") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"invalid time {text!r}: must be a finite number of seconds")
    return value


def build_parser() -> argparse.ArgumentParser:
    p = UsageParser(
        prog="python -m npmpi",
        description=(
            "Sweep message sizes with an MPI ping-pong (NetPIPE's method) and write every trial to one "
            "HDF5 run file. Launch with two or more ranks: mpirun -np 2 python -m npmpi. "
            "Sizes accept suffixes K, M, G (powers of two)."
        ),
        add_help=False,
        allow_abbrev=False,
    )
    p.add_argument("-h", "--help", action="store_true", help="show this help and exit")
    p.add_argument("--version", action="store_true", help="print npmpi's version and exit")
    g = p.add_argument_group("message sizes")
    g.add_argument(
        "-l",
        "--lower",
        type=_size,
        default=DEFAULT_LOWER_BYTES,
        metavar="SIZE",
        help="smallest message size in bytes (default: %(default)s B)",
    )
    g.add_argument(
        "-u",
        "--upper",
        type=_size,
        default=DEFAULT_UPPER_BYTES,
        metavar="SIZE",
        help="largest base message size in bytes; perturbed sizes may pass it by up to -p "
        "(default: 8M = 8388608 B)",
    )
    g.add_argument(
        "-p",
        "--perturbation",
        type=_count,
        default=DEFAULT_PERTURBATION,
        metavar="BYTES",
        help="also test n-p and n+p around each size n, as NetPIPE does; 0 turns it off "
        "(default: %(default)s B)",
    )
    g = p.add_argument_group("repetition")
    g.add_argument(
        "--trials",
        type=_count,
        default=None,
        metavar="N",
        help=f"trials per size; the best one is NetPIPE's figure, and no trial has fewer repeats "
        "(NetPIPE's TRIALS: round trips, exchanges, or messages of a stream) "
        f"(default: {DEFAULT_TRIALS}, {QUICK_TRIALS} with --quick)",
    )
    g.add_argument(
        "--target-time",
        type=seconds_arg,
        default=None,
        metavar="SECONDS",
        help="NetPIPE's RUNTM: iterations per trial = max(SECONDS / ((b/(b-inc+1)) x t), trials), with "
        "t the previous size b's best one-way time and inc the schedule's increment, as NetPIPE 3.7 "
        "computes nrepeat; a ping-pong trial then lasts 0.7-2 x SECONDS (NetPIPE's release build: "
        f"0.25 s, Debian's NPopenmpi: 0.1 s with --trials 3) (default: {DEFAULT_TARGET_TIME_S} s, "
        f"{QUICK_TARGET_TIME_S} s with --quick)",
    )
    g.add_argument(
        "--repeats",
        type=_count,
        default=None,
        metavar="N",
        help="fixed number of round trips per trial instead of --target-time",
    )
    g.add_argument(
        "--quick",
        action="store_true",
        help="a run of a few seconds: same sizes, fewer trials, shorter target time",
    )
    g.add_argument(
        "--max-one-way",
        type=seconds_arg,
        default=None,
        metavar="SECONDS",
        help="stop the sweep, as NetPIPE 3.7 does (STOPTM), after the first group of sizes n-p, n, n+p "
        "whose last size's one-way time (best trial; a stream's time per message, bidir's per "
        f"exchange) reaches this (default: {DEFAULT_MAX_ONE_WAY_S:g} s, NetPIPE's STOPTM)",
    )
    g.add_argument(
        "--max-round-trip",
        type=seconds_arg,
        default=None,
        metavar="SECONDS",
        help="the former name, still accepted and still a round-trip limit: it sets --max-one-way "
        "to SECONDS/2, so a script that gave it keeps its ping-pong's limit (now tested, as NetPIPE "
        "does, after each group of sizes n-p, n, n+p)",
    )
    g = p.add_argument_group("mode (what moves during an iteration)")
    g.add_argument(
        "--mode",
        default=MODE_PINGPONG,
        metavar="MODE",
        help="'pingpong' (a message there and back, NetPIPE's default), 'stream' (a window of "
        "messages one way, then an acknowledgement: one-way throughput, NetPIPE -s, osu_bw) or "
        "'bidir' (both sides send at once, both directions counted: NetPIPE -2, osu_bibw) "
        "(default: %(default)s)",
    )
    g.add_argument(
        "--window",
        type=_count,
        default=None,
        metavar="N",
        help=f"stream mode: messages per iteration before the acknowledgement (default: {DEFAULT_WINDOW}, "
        "as osu_bw)",
    )
    g.add_argument(
        "--pairs",
        type=_pairs,
        default=1,
        metavar="N|all",
        help="pairs measured at once: pair i is rank i with rank n-1-i of the n ranks that do not "
        "sample power (NetPIPE 5), across nodes when there are several; 'all' uses every such rank. "
        "The aggregate is reported, each pair's times are stored (default: %(default)s)",
    )
    g.add_argument(
        "--async",
        dest="async_",
        action="store_true",
        help="pre-post receives (MPI_Irecv) before the other side sends (NetPIPE -a)",
    )
    g.add_argument(
        "--cache-cold",
        action="store_true",
        help="every iteration uses another region of a large buffer pool, so messages come from "
        "memory, not cache (NetPIPE -I, IMB -off_cache)",
    )
    g.add_argument(
        "--cache-pool",
        type=_size,
        default=None,
        metavar="SIZE",
        help="with --cache-cold: bytes of each send and receive pool per rank; make it larger than the "
        "last-level cache (default: 64M, at least two of the largest message)",
    )
    g.add_argument(
        "--buffers",
        default=None,
        metavar="ARRANGEMENT",
        help="'netpipe': one buffer per size, 16 KiB-aligned, sent from and received into, so the "
        "reflector returns what it received (NetPIPE's default); 'separate': send from one buffer, "
        "receive into another, both kept for the whole run (as OSU and IMB do). Over single-copy "
        "shared memory the two differ by up to 2-3x (docs/netpipe-comparison.md) (default: netpipe "
        "for a plain ping-pong; separate with --mode stream or bidir, --async or --cache-cold, where "
        "one buffer would be sent from while a receive into it is pending, which MPI forbids, or "
        "where NetPIPE too uses separate buffers)",
    )
    g.add_argument(
        "--huge-pages",
        default=HUGE_PAGES_SYSTEM,
        metavar="CHOICE",
        help="message buffers on transparent huge pages: 'system' (no advice: the kernel's policy "
        "decides, as for an application's malloc), 'on' (huge-page aligned, MADV_HUGEPAGE) or 'off' "
        "(MADV_NOHUGEPAGE); what the kernel gave is stored per size (default: %(default)s)",
    )
    g = p.add_argument_group("kernel and checks")
    g.add_argument(
        "--kernel",
        default="python",
        metavar="NAME",
        help="timed loop: 'python' (mpi4py Send/Recv on numpy buffers) or 'c' (the same loop "
        "in C) (default: %(default)s)",
    )
    g.add_argument(
        "--integrity",
        action="store_true",
        help="verify every message, not only the last of each size (slower: the run is "
        "marked as not comparable for timing)",
    )
    g.add_argument(
        "--thread-level",
        default=THREAD_LEVEL_AUTO,
        metavar="LEVEL",
        help="MPI thread support each rank asks for: 'auto' (MPI_THREAD_SINGLE on ranks that run no "
        "other thread, as NetPIPE; MPI_THREAD_FUNNELED on power ranks, whose meter threads never call "
        "MPI), or single, funneled, serialized, multiple for every rank; some libraries add a "
        "few tens of ns per message above single. The level each rank got is stored (default: %(default)s)",
    )
    g = p.add_argument_group("power (one extra rank per node samples that node's meters)")
    g.add_argument(
        "--meter",
        action="append",
        default=[],
        metavar="SPEC",
        help="a meter channel of every node, KIND[:TARGET,key=value,...]; repeat for several. "
        "Kinds: wattsup, rapl, hwmon, nvml, ipmi, estimate, replay (see docs/meters.md). "
        "NPMPI_METERS='spec;spec' in a node's environment overrides it on that node",
    )
    g.add_argument(
        "--sample-interval",
        type=seconds_arg,
        default=None,
        metavar="SECONDS",
        help="seconds between samples (default: each meter's natural period, e.g. 1 s for a "
        "Watts Up?, 0.1 s for RAPL)",
    )
    g.add_argument(
        "--baseline",
        type=seconds_arg,
        default=None,
        metavar="SECONDS",
        help=f"idle power recorded before and after the sweep while every rank waits asleep; 0 "
        f"turns off the one before (the one after still covers the meters' delay) "
        f"(default: {DEFAULT_BASELINE_S:g} s when a meter is given)",
    )
    g.add_argument(
        "--meter-optional",
        action="store_true",
        help="go on without a meter that cannot be opened (recorded in the file) instead of "
        "stopping with an error",
    )
    g.add_argument(
        "--calibration",
        default=None,
        metavar="FILE",
        help="meter delays measured by `python -m npmpi calibrate` (JSON); stored in the run file "
        "and applied by npmpi-analyze",
    )
    g = p.add_argument_group("output")
    g.add_argument(
        "-o",
        "--output",
        default=None,
        metavar="FILE",
        help="run file to write (default: npmpi-YYYYmmdd-HHMMSS[-jobID].h5 in the current "
        "directory, never an existing name)",
    )
    g.add_argument("--force", action="store_true", help="overwrite an existing --output file")
    g.add_argument("-q", "--quiet", action="store_true", help="print nothing but errors")
    return p


def parse_options(argv: list[str]) -> Options:
    """Parse and check options; UsageError carries the one-line reason, HelpRequested the help."""
    parser = build_parser()
    ns = parser.parse_args(argv)
    if ns.help:
        raise HelpRequested(parser.format_help())
    if ns.version:
        from npmpi import __version__

        raise HelpRequested(f"npmpi {__version__}\n")

    if ns.lower < 1:
        raise UsageError(f"--lower {ns.lower}: the smallest message must be at least 1 byte")
    if ns.upper < ns.lower:
        raise UsageError(
            f"--upper {format_size_bytes(ns.upper)} is below --lower {format_size_bytes(ns.lower)}: "
            "give an upper size at least as large as the lower one"
        )
    if ns.perturbation < 0:
        raise UsageError(f"--perturbation {ns.perturbation}: must be 0 (off) or a positive number of bytes")
    trials = ns.trials if ns.trials is not None else (QUICK_TRIALS if ns.quick else DEFAULT_TRIALS)
    if not 1 <= trials <= 1000:
        raise UsageError(f"--trials {trials}: give between 1 and 1000 trials per size")
    if ns.repeats is not None and ns.target_time is not None:
        raise UsageError("--repeats and --target-time contradict each other: give one of them")
    if ns.repeats is not None and not 1 <= ns.repeats <= MAX_REPEATS:
        raise UsageError(f"--repeats {ns.repeats}: give between 1 and {MAX_REPEATS} round trips")
    target = (
        ns.target_time
        if ns.target_time is not None
        else (QUICK_TARGET_TIME_S if ns.quick else DEFAULT_TARGET_TIME_S)
    )
    if not 0 < target <= MAX_TARGET_TIME_S:
        raise UsageError(f"--target-time {target}: give a time above 0 and at most {MAX_TARGET_TIME_S:.0f} s")
    max_one_way = _max_one_way(ns.max_one_way, ns.max_round_trip)
    if ns.mode not in MODES:
        raise UsageError(f"--mode {ns.mode!r}: unknown mode; choose one of: {', '.join(MODES)}")
    if ns.window is not None and ns.mode != MODE_STREAM:
        raise UsageError(
            f"--window {ns.window} only applies to --mode stream (mode {ns.mode} sends one message per "
            "iteration and direction): drop --window or add --mode stream"
        )
    window = (ns.window if ns.window is not None else DEFAULT_WINDOW) if ns.mode == MODE_STREAM else 1
    if not 1 <= window <= MAX_WINDOW:
        raise UsageError(f"--window {window}: give between 1 and {MAX_WINDOW} messages per iteration")
    if isinstance(ns.pairs, int) and ns.pairs < 1:
        raise UsageError(f"--pairs {ns.pairs}: give at least 1 pair, or 'all'")
    if ns.cache_pool is not None and not ns.cache_cold:
        raise UsageError("--cache-pool only applies with --cache-cold: add --cache-cold or drop --cache-pool")
    if ns.cache_pool is not None and ns.cache_pool < 4096:
        raise UsageError(
            f"--cache-pool {ns.cache_pool}: give at least 4K (it should exceed the last-level cache)"
        )
    if ns.buffers is None:
        plain = ns.mode == MODE_PINGPONG and not ns.async_ and not ns.cache_cold
        ns.buffers = ARRANGEMENT_NETPIPE if plain else ARRANGEMENT_SEPARATE
    if ns.buffers not in ARRANGEMENTS:
        raise UsageError(
            f"--buffers {ns.buffers!r}: unknown arrangement; choose one of: {', '.join(ARRANGEMENTS)}"
        )
    if ns.buffers == ARRANGEMENT_NETPIPE:
        clash = (
            f"--mode {ns.mode}"
            if ns.mode != MODE_PINGPONG
            else "--async"
            if ns.async_
            else "--cache-cold"
            if ns.cache_cold
            else None
        )
        if clash:
            raise UsageError(
                f"--buffers netpipe does not combine with {clash}: one buffer both sent from and received "
                "into is only defined for plain ping-pong (a pending receive may not share a send's buffer)"
            )
    if ns.huge_pages not in HUGE_PAGE_CHOICES:
        raise UsageError(
            f"--huge-pages {ns.huge_pages!r}: unknown choice; choose one of: {', '.join(HUGE_PAGE_CHOICES)}"
        )
    if ns.thread_level not in (THREAD_LEVEL_AUTO, *THREAD_LEVELS):
        raise UsageError(
            f"--thread-level {ns.thread_level!r}: unknown level; choose one of: "
            f"{', '.join((THREAD_LEVEL_AUTO, *THREAD_LEVELS))}"
        )
    if ns.kernel not in KERNEL_NAMES:
        raise UsageError(f"--kernel {ns.kernel!r}: unknown kernel; choose one of: {', '.join(KERNEL_NAMES)}")
    for text in ns.meter:
        from npmpi.meters import MeterError, parse_meter_spec

        try:
            parse_meter_spec(text)
        except MeterError as exc:
            raise UsageError(str(exc)) from None
    if ns.sample_interval is not None and not 0.001 <= ns.sample_interval <= 3600:
        raise UsageError(f"--sample-interval {ns.sample_interval}: give between 0.001 and 3600 s")
    baseline = ns.baseline  # None: the default when power is measured (decided once ranks are known)
    if baseline is not None and not 0 <= baseline <= MAX_BASELINE_S:
        raise UsageError(f"--baseline {baseline}: give between 0 (off) and {MAX_BASELINE_S:.0f} s")
    if ns.output is not None and ns.output.strip() == "":
        raise UsageError("--output is empty: give a file name, e.g. -o run.h5")
    return Options(
        lower_bytes=ns.lower,
        upper_bytes=ns.upper,
        perturbation_bytes=ns.perturbation,
        trials=trials,
        target_time_s=target,
        repeats=ns.repeats,
        quick=ns.quick,
        max_one_way_s=max_one_way,
        kernel=ns.kernel,
        integrity=ns.integrity,
        output=ns.output,
        force=ns.force,
        quiet=ns.quiet,
        meters=tuple(ns.meter),
        sample_interval_s=ns.sample_interval,
        baseline_s=baseline,
        meter_optional=ns.meter_optional,
        calibration=ns.calibration,
        mode=ns.mode,
        window=window,
        pairs=ns.pairs,
        async_=ns.async_,
        cache_cold=ns.cache_cold,
        cache_pool_bytes=ns.cache_pool if ns.cache_pool is not None else DEFAULT_CACHE_POOL_BYTES,
        buffers=ns.buffers,
        huge_pages=ns.huge_pages,
        thread_level=ns.thread_level,
    )


def _max_one_way(max_one_way: float | None, max_round_trip: float | None) -> float:
    """The stop limit on the one-way time: --max-one-way, or the former --max-round-trip halved."""
    if max_one_way is not None and max_round_trip is not None:
        raise UsageError(
            "--max-one-way and --max-round-trip set the same limit: give --max-one-way only "
            "(--max-round-trip X means --max-one-way X/2)"
        )
    if max_round_trip is not None:
        if not max_round_trip > 0:
            raise UsageError(f"--max-round-trip {max_round_trip}: give a time above 0 s")
        return max_round_trip / 2
    if max_one_way is None:
        return DEFAULT_MAX_ONE_WAY_S
    if not max_one_way > 0:
        raise UsageError(f"--max-one-way {max_one_way}: give a time above 0 s")
    return max_one_way


def check_output_path(path: str, force: bool) -> str | None:
    """Why `path` may not be written (None when it may); does not create anything."""
    p = Path(path)
    if p.is_dir():
        return f"--output {path}: is a directory; give a file name inside it, e.g. {p / 'run.h5'}"
    if p.exists() and not force:
        return f"--output {path}: the file exists; choose another name or add --force to overwrite it"
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        return f"--output {path}: directory {parent} does not exist; create it first"
    if not os.access(parent, os.W_OK | os.X_OK):
        return f"--output {path}: directory {parent} is not writable; choose another location"
    if p.exists() and not os.access(p, os.W_OK):
        return f"--output {path}: the file is not writable"
    return None


def default_output_name(now_utc_stamp: str, directory: str = ".") -> str:
    """A run-file name that names no existing file: time stamp and Slurm job id when there is one."""
    job = os.environ.get("SLURM_JOB_ID")
    stem = f"npmpi-{now_utc_stamp}" + (f"-job{job}" if job else "")
    candidate = Path(directory) / f"{stem}.h5"
    k = 1
    while candidate.exists():
        candidate = Path(directory) / f"{stem}-{k}.h5"
        k += 1
    return str(candidate)
