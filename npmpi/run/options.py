"""Command-line options of `python -m npmpi`: parsing and checks that need no MPI."""

from __future__ import annotations

import argparse

from npmpi.commands.checks import (  # noqa: F401  (default_output_name, meter_specs: their old home)
    check_power_and_output,
    check_stall_timeout,
    default_output_name,
    meter_specs,
    sampling_fields,
    shared_fields,
    trials_and_target,
)
from npmpi.commands.parser import parse_command_line
from npmpi.core.buffers import (
    ARRANGEMENT_NETPIPE,
    ARRANGEMENT_OSU,
    ARRANGEMENT_SEPARATE,
    ARRANGEMENTS,
    HUGE_PAGE_CHOICES,
)
from npmpi.core.config import (
    DEFAULT_MAX_ONE_WAY_S,
    MAX_REPEATS,
    THREAD_LEVEL_AUTO,
    THREAD_LEVELS,
    Options,
)
from npmpi.core.errors import UsageError
from npmpi.core.modes import (
    DEFAULT_CACHE_POOL_BYTES,
    MAX_WINDOW,
    MODE_PINGPONG,
    MODES,
    mode_named,
)
from npmpi.core.units import format_size_bytes
from npmpi.persize.kernels import KERNEL_NAMES
from npmpi.run.arguments import build_parser
from npmpi.run.protocol_options import check_protocol_options


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
    shared = shared_fields(ns)
    return Options(
        lower_bytes=ns.lower,
        upper_bytes=ns.upper,
        perturbation_bytes=ns.perturbation,
        repeats=ns.repeats,
        max_one_way_s=max_one_way,
        integrity=ns.integrity,
        **loop_fields(ns, trials, target, window),
        pairs=ns.pairs,
        async_=ns.async_,
        cache_cold=ns.cache_cold,
        cache_pool_bytes=ns.cache_pool if ns.cache_pool is not None else DEFAULT_CACHE_POOL_BYTES,
        buffers=ns.buffers,
        huge_pages=ns.huge_pages,
        thread_level=ns.thread_level,
        np_out=ns.np_out,
        **protocol_fields,
        **sampling_fields(ns),
        **shared,
    )


def loop_fields(ns: argparse.Namespace, trials: int, target_s: float, window: int) -> dict:
    """The timed loop's options a run and a map share (their Options keywords): trials and target
    time (checked by the caller), --quick, the kernel, the mode and its window."""
    return {
        "trials": trials,
        "target_time_s": target_s,
        "quick": ns.quick,
        "kernel": ns.kernel,
        "mode": ns.mode,
        "window": window,
    }


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
    """Check --mode and --window (a run's, a map's); returns the window (a stream's default 64, a
    bidir's 1: NetPIPE -2; 1 in every other mode)."""
    if ns.mode not in MODES:
        raise UsageError(f"--mode {ns.mode!r}: unknown mode; choose one of: {', '.join(MODES)}")
    mode = mode_named(ns.mode)
    if ns.window is not None and not mode.takes_window():
        raise UsageError(
            f"--window {ns.window} only applies to --mode stream or bidir (mode {ns.mode} sends one "
            "message per iteration and direction): drop --window or add --mode stream"
        )
    window = ns.window if ns.window is not None else mode.default_window()
    if not 1 <= window <= MAX_WINDOW:
        raise UsageError(f"--window {window}: give between 1 and {MAX_WINDOW} messages per iteration")
    if window > 1 and mode.window_optional and getattr(ns, "async_", False):
        raise UsageError(
            f"--async does not combine with --mode {ns.mode} --window {window}: a window's receives are "
            "already posted before its sends (as osu_bibw); drop --async or --window"
        )
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
    if ns.buffers == ARRANGEMENT_OSU and ns.cache_cold:
        raise UsageError(
            "--buffers osu does not combine with --cache-cold: OSU's arrangement keeps a window in one "
            "buffer, --cache-cold spreads messages over a pool; drop one of them"
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
