"""Command-line options of `python -m npmpi`: parsing and checks that need no MPI."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from npmpi.commands.arguments import build_parser
from npmpi.commands.parser import parse_command_line
from npmpi.commands.protocol_options import check_protocol_options
from npmpi.core.buffers import (
    ARRANGEMENT_NETPIPE,
    ARRANGEMENT_SEPARATE,
    ARRANGEMENTS,
    HUGE_PAGE_CHOICES,
)
from npmpi.core.config import (
    DEFAULT_MAX_ONE_WAY_S,
    DEFAULT_TARGET_TIME_S,
    DEFAULT_TRIALS,
    MAX_BASELINE_S,
    MAX_REPEATS,
    MAX_STALL_TIMEOUT_S,
    MAX_TARGET_TIME_S,
    QUICK_TARGET_TIME_S,
    QUICK_TRIALS,
    THREAD_LEVEL_AUTO,
    THREAD_LEVELS,
    Options,
)
from npmpi.core.errors import UsageError
from npmpi.core.modes import (
    DEFAULT_CACHE_POOL_BYTES,
    DEFAULT_WINDOW,
    MAX_WINDOW,
    MODE_PINGPONG,
    MODES,
    mode_named,
)
from npmpi.core.units import format_size_bytes
from npmpi.sweep.kernels import KERNEL_NAMES


def parse_options(argv: list[str]) -> Options:
    """Parse and check options; UsageError carries the one-line reason, HelpRequested the help."""
    ns = parse_command_line(build_parser(), argv)
    _check_sizes(ns)
    trials, target = _repetition(ns)
    max_one_way = _max_one_way(ns.max_one_way, ns.max_round_trip)
    window = _check_mode(ns)
    _choose_buffers(ns)
    _check_choices(ns)
    protocol_fields = check_protocol_options(ns)
    baseline = check_power_and_output(ns)
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
        meters=ns.meter,
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
        np_out=ns.np_out,
        fabric_meters=ns.fabric_meter,
        fabric_rank=ns.fabric_rank,
        **protocol_fields,
        stall_timeout_s=check_stall_timeout(ns.stall_timeout),
    )


def check_stall_timeout(seconds: float) -> float:
    """--stall-timeout: 0 (never) or a floor of at least a second, at most a week."""
    if seconds != 0 and not 1 <= seconds <= MAX_STALL_TIMEOUT_S:
        raise UsageError(
            f"--stall-timeout {seconds:g}: give 0 (never end a stalled run) or 1 to "
            f"{MAX_STALL_TIMEOUT_S:g} seconds"
        )
    return seconds


def _check_sizes(ns: argparse.Namespace) -> None:
    if ns.lower < 0:
        raise UsageError(f"--lower {ns.lower}: the smallest message must be 0 bytes or more")
    if ns.upper < 1:
        raise UsageError(
            f"--upper {ns.upper}: the largest message must be at least 1 byte (-l 0 adds 0 bytes)"
        )
    if ns.upper < ns.lower:
        raise UsageError(
            f"--upper {format_size_bytes(ns.upper)} is below --lower {format_size_bytes(ns.lower)}: "
            "give an upper size at least as large as the lower one"
        )
    if ns.perturbation < 0:
        raise UsageError(f"--perturbation {ns.perturbation}: must be 0 (off) or a positive number of bytes")


def _repetition(ns: argparse.Namespace) -> tuple[int, float]:
    """Trials per size and the target time of a trial, checked (defaults depend on --quick)."""
    if ns.repeats is not None and ns.target_time is not None:
        raise UsageError("--repeats and --target-time contradict each other: give one of them")
    if ns.repeats is not None and not 1 <= ns.repeats <= MAX_REPEATS:
        raise UsageError(f"--repeats {ns.repeats}: give between 1 and {MAX_REPEATS} round trips")
    return trials_and_target(ns.trials, ns.target_time, ns.quick, "per size")


def trials_and_target(
    trials: int | None, target_time: float | None, quick: bool, per: str
) -> tuple[int, float]:
    """--trials and --target-time with their defaults (--quick's when `quick`), checked; `per` says
    what the trials are counted per in the error ("per size", "per pair and size")."""
    trials = trials if trials is not None else (QUICK_TRIALS if quick else DEFAULT_TRIALS)
    if not 1 <= trials <= 1000:
        raise UsageError(f"--trials {trials}: give between 1 and 1000 trials {per}")
    target = (
        target_time if target_time is not None else (QUICK_TARGET_TIME_S if quick else DEFAULT_TARGET_TIME_S)
    )
    if not 0 < target <= MAX_TARGET_TIME_S:
        raise UsageError(f"--target-time {target}: give a time above 0 and at most {MAX_TARGET_TIME_S:.0f} s")
    return trials, target


def _check_mode(ns: argparse.Namespace) -> int:
    """Check --mode, --window, --pairs and --cache-pool; returns the window (1 outside stream mode)."""
    window = check_mode_and_window(ns)
    if isinstance(ns.pairs, int) and ns.pairs < 1:
        raise UsageError(f"--pairs {ns.pairs}: give at least 1 pair, or 'all'")
    if ns.cache_pool is not None and not ns.cache_cold:
        raise UsageError("--cache-pool only applies with --cache-cold: add --cache-cold or drop --cache-pool")
    if ns.cache_pool is not None and ns.cache_pool < 4096:
        raise UsageError(
            f"--cache-pool {ns.cache_pool}: give at least 4K (it should exceed the last-level cache)"
        )
    return window


def check_mode_and_window(ns: argparse.Namespace) -> int:
    """Check --mode and --window (a run's, a map's); returns the window (1 outside stream mode)."""
    if ns.mode not in MODES:
        raise UsageError(f"--mode {ns.mode!r}: unknown mode; choose one of: {', '.join(MODES)}")
    windowed = mode_named(ns.mode).windowed
    if ns.window is not None and not windowed:
        raise UsageError(
            f"--window {ns.window} only applies to --mode stream (mode {ns.mode} sends one message per "
            "iteration and direction): drop --window or add --mode stream"
        )
    window = (ns.window if ns.window is not None else DEFAULT_WINDOW) if windowed else 1
    if not 1 <= window <= MAX_WINDOW:
        raise UsageError(f"--window {window}: give between 1 and {MAX_WINDOW} messages per iteration")
    return window


def _choose_buffers(ns: argparse.Namespace) -> None:
    """Set the default --buffers for the mode and refuse netpipe buffers where they are not defined."""
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


def _check_choices(ns: argparse.Namespace) -> None:
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


def check_power_and_output(ns: argparse.Namespace, example: str = "run.h5") -> float | None:
    """Check the meter specs (ns.meter and ns.fabric_meter become their spec values), --sample-interval,
    --baseline and --output (a run's, a map's: `example` names its file in the message on an empty
    --output); returns the baseline."""
    ns.meter = meter_specs(ns.meter)
    check_fabric(ns)
    if ns.sample_interval is not None and not 0.001 <= ns.sample_interval <= 3600:
        raise UsageError(f"--sample-interval {ns.sample_interval}: give between 0.001 and 3600 s")
    baseline = ns.baseline  # None: the default when power is measured (decided once ranks are known)
    if baseline is not None and not 0 <= baseline <= MAX_BASELINE_S:
        raise UsageError(f"--baseline {baseline}: give between 0 (off) and {MAX_BASELINE_S:.0f} s")
    if ns.output is not None and ns.output.strip() == "":
        raise UsageError(f"--output is empty: give a file name, e.g. -o {example}")
    return baseline


def meter_specs(texts, option: str = "--meter") -> tuple:
    """The spec values of `option`'s texts (--meter, --fabric-meter: npmpi.meters.MeterSpec), every
    value checked: the one parse of a spec given on the command line. Every rank parses its own command
    line, so the power ranks open these values (npmpi.power.rank.open_meters) without parsing again."""
    from npmpi.meters import MeterError, check_meter_spec

    try:
        return tuple(check_meter_spec(text) for text in texts)
    except MeterError as exc:
        raise UsageError(exc.under(option)) from None


def check_fabric(ns: argparse.Namespace) -> None:
    """--fabric-meter's specs (ns.fabric_meter becomes their values); --fabric-rank only with them and
    not negative (that it names a power rank is checked once the ranks' roles are known:
    npmpi.power.fabric.fabric_rank)."""
    from npmpi.power.fabric import FABRIC_OPTION

    ns.fabric_meter = meter_specs(ns.fabric_meter, FABRIC_OPTION)
    if ns.fabric_rank is not None and not ns.fabric_meter:
        raise UsageError(
            f"--fabric-rank {ns.fabric_rank} only applies with --fabric-meter: add a fabric meter "
            "(--fabric-meter SPEC, a spec as for --meter) or drop --fabric-rank"
        )
    if ns.fabric_rank is not None and ns.fabric_rank < 0:
        raise UsageError(f"--fabric-rank {ns.fabric_rank}: give a rank number (a power rank, 0 or more)")


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
