"""The checks of the options more than one command shares (a run, a map, calibrate, a group kind,
`meters`): stall timeout, trials and target time, meters, fabric, baselines and the output's name."""

from __future__ import annotations

import argparse
import math
import os
from pathlib import Path

from npmpi.core.config import (
    DEFAULT_TARGET_TIME_S,
    DEFAULT_TRIALS,
    MAX_BASELINE_S,
    MAX_STALL_TIMEOUT_S,
    MAX_TARGET_TIME_S,
    QUICK_TARGET_TIME_S,
    QUICK_TRIALS,
)
from npmpi.core.errors import UsageError


def check_stall_timeout(seconds: float) -> float:
    """--stall-timeout: 0 (never) or a floor of at least a second, at most a week."""
    if seconds != 0 and not 1 <= seconds <= MAX_STALL_TIMEOUT_S:
        raise UsageError(
            f"--stall-timeout {seconds:g}: give 0 (never end a stalled run) or 1 to "
            f"{MAX_STALL_TIMEOUT_S:g} seconds"
        )
    return seconds


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
    line, so the power ranks open these values (npmpi.power.sampler.open_meters) without parsing again."""
    from npmpi.meters import MeterError, check_meter_spec
    from npmpi.meters.scope import refuse_doubled

    try:
        specs = tuple(check_meter_spec(text) for text in texts)
        refuse_doubled(specs)  # the same energy would count twice
    except MeterError as exc:
        raise UsageError(exc.under(option)) from None
    return specs


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


def parse_precision(text: str) -> float:
    """--precision: a fraction (0.01) or a percentage (1%) above 0 and at most 1 (100 %)."""
    from npmpi.core.units import parse_number

    raw = text.strip()
    percent = raw.endswith("%")
    try:
        value = parse_number(raw[:-1] if percent else raw)
    except ValueError:
        value = math.nan
    value = value / 100 if percent else value
    if not 0 < value <= 1:
        raise UsageError(
            f"--precision {text!r}: give a relative precision above 0 and at most 1, as a fraction "
            "(0.01) or a percentage (1%)"
        )
    return value


def sampling_fields(ns: argparse.Namespace) -> dict:
    """--order, --order-seed, --precision, --precision-cap and --max-trials checked, as the options'
    keywords (npmpi/core/sampling.py); --order random without a seed draws one."""
    from npmpi.core import sampling

    if ns.order not in sampling.ORDERS:
        raise UsageError(f"--order {ns.order!r}: give {' or '.join(sampling.ORDERS)}")
    seed = ns.order_seed
    if seed is not None and ns.order != sampling.ORDER_RANDOM:
        raise UsageError("--order-seed needs --order random")
    if seed is not None and seed > sampling.MAX_SEED:
        raise UsageError(f"--order-seed {seed}: give a seed from 0 to {sampling.MAX_SEED}")
    if seed is None and ns.order == sampling.ORDER_RANDOM:
        seed = sampling.draw_seed()
    precision = None if ns.precision is None else parse_precision(ns.precision)
    if precision is None and (ns.precision_cap is not None or ns.max_trials is not None):
        raise UsageError("--precision-cap and --max-trials need --precision")
    if ns.precision_cap is not None and not 0 < ns.precision_cap <= MAX_TARGET_TIME_S:
        raise UsageError(
            f"--precision-cap {ns.precision_cap:g}: give a time above 0 and at most {MAX_TARGET_TIME_S:.0f} s"
        )
    max_trials = sampling.DEFAULT_MAX_TRIALS if ns.max_trials is None else ns.max_trials
    if not 2 <= max_trials <= sampling.MAX_MAX_TRIALS:
        raise UsageError(f"--max-trials {max_trials}: give 2 to {sampling.MAX_MAX_TRIALS} trials per size")
    return {
        "size_order": ns.order,
        "order_seed": seed,
        "precision": precision,
        "precision_cap_s": ns.precision_cap,
        "max_trials": max_trials,
    }


def shared_fields(ns: argparse.Namespace, example: str = "run.h5") -> dict:
    """The options every kind shares, checked (`check_power_and_output`, `check_stall_timeout`), as
    the keyword arguments of a kind's options (npmpi.core.config.Options, the map's, a group kind's):
    output, meters, baselines, calibration and the stall bound."""
    baseline = check_power_and_output(ns, example)
    return {
        "output": ns.output,
        "force": ns.force,
        "quiet": ns.quiet,
        "meters": ns.meter,
        "sample_interval_s": ns.sample_interval,
        "baseline_s": baseline,
        "meter_optional": ns.meter_optional,
        "calibration": ns.calibration,
        "fabric_meters": ns.fabric_meter,
        "fabric_rank": ns.fabric_rank,
        "stall_timeout_s": check_stall_timeout(ns.stall_timeout),
    }
