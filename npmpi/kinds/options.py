"""The options block every group kind shares (npmpi/kinds/group.py): meters, baselines, output,
trials, the stall watchdog, and the sizes. A kind adds its own options to the parser and keeps their
values in `GroupOptions.extra` (a dataclass of its own, as coll's npmpi/coll/options.py, or a
dict); what every kind shares has the names the run's Options gives it, so the command sequence
(npmpi/kinds/command.py), the power recording and the console read either.
"""

from __future__ import annotations

import argparse
from dataclasses import asdict, dataclass, field
from typing import Any

from npmpi.core.config import DEFAULT_STALL_TIMEOUT_S, THREAD_LEVEL_AUTO
from npmpi.core.errors import UsageError
from npmpi.core.units import format_size_bytes, parse_size_bytes

MAX_GROUP_SIZE_BYTES = 1 << 30
MAX_GROUP_SIZES = 64
DEFAULT_SIZES = tuple(1 << k for k in range(0, 21))  # OSU's: 1 B to 1 MiB, powers of two

_SHARED_HELP = {
    "--trials": "timed trials per size (default: 7; 3 with --quick)",
    "--target-time": "seconds each trial aims to take; the iterations of a size follow from the last "
    "size's time (default: 0.05; 0.004 with --quick)",
    "--quick": "fewer trials and shorter trials, for a first look",
    "--order": "ascending: each size after the one before (NetPIPE's); random: the sizes of each "
    "series in a seeded random order, each size's iterations from the measured size nearest to it or "
    "a probe of its own (default: ascending)",
    "--order-seed": "the seed of --order random (default: one drawn and stored in the file)",
    "--precision": "trials go on past --trials until the 95%% confidence interval of the size's mean "
    "trial time (rank 0's) is within P of it, e.g. 1%% or 0.01 (default: none, --trials trials)",
    "--precision-cap": "with --precision: seconds a size's trials may take (default: 10 x trials x "
    "target time)",
    "--max-trials": "with --precision: the most trials of a size (default: 100)",
    "--meter": "meter channel(s) of every node, as for a run (NPMPI_METERS overrides per node)",
    "--meter-optional": "go on without meters that cannot be opened",
    "--sample-interval": "seconds between samples (default: each meter's natural period)",
    "--baseline": "seconds of idle power recorded before and after the sizes (default: 3 with a meter)",
    "--fabric-meter": "a device of no node (a switch, a shared PDU), sampled by one power rank",
    "--fabric-rank": "the power rank that samples the --fabric-meter devices (default: node 0's)",
    "--calibration": "a calibration file of `npmpi calibrate`: each meter's delay",
    "--output": "run file to write (default runs/npmpi-KIND-YYYYmmdd-HHMMSS.h5)",
    "--force": "overwrite an existing --output",
    "--quiet": "print nothing but errors",
    "--stall-timeout": "end the run when a member stops answering for max(SECONDS, 20 x what the step "
    "should take); 0: never (default: %(default)g s)",
}


@dataclass(frozen=True)
class GroupOptions:
    """A group kind's options, with units in the names; `extra` holds the kind's own (a dataclass of
    its own, typed, as coll's CollOptions; or a dict), stored within options_json."""

    sizes_bytes: tuple[int, ...]
    trials: int
    target_time_s: float
    quick: bool = False
    meters: tuple = ()
    meter_optional: bool = False
    sample_interval_s: float | None = None
    baseline_s: float | None = None
    fabric_meters: tuple = ()
    fabric_rank: int | None = None
    calibration: str | None = None
    output: str | None = None
    force: bool = False
    quiet: bool = False
    stall_timeout_s: float = DEFAULT_STALL_TIMEOUT_S
    thread_level: str = THREAD_LEVEL_AUTO
    repeats: int | None = None
    # how the sizes are sampled (npmpi/core/sampling.py): as a run's Options
    size_order: str = "ascending"
    order_seed: int | None = None
    precision: float | None = None
    precision_cap_s: float | None = None
    max_trials: int = 100
    extra: Any = field(default_factory=dict)

    def to_dict(self) -> dict:
        """The options as the run file stores them (options_json)."""
        out = asdict(self)
        out["meters"] = [spec.text for spec in self.meters]
        out["fabric_meters"] = [spec.text for spec in self.fabric_meters]
        return out


def group_parser(name: str, description: str) -> argparse.ArgumentParser:
    """A group kind's parser: -h, --version, --sizes and the shared options; the kind adds its own."""
    from npmpi.commands.parser import add_options, command_name, command_parser

    p = command_parser(f"{command_name()} {name}", description, allow_abbrev=False)
    p.add_argument(
        "--sizes",
        default=None,
        metavar="LIST",
        help="message sizes, comma-separated (e.g. 1,64K,1M; default: 1 B to 1 MiB, powers of two)",
    )
    add_options(p, _SHARED_HELP)
    return p


def sizes_arg(text: str | None) -> tuple[int, ...]:
    """--sizes: distinct sizes from 0 B to 1 GiB, in increasing order."""
    if text is None:
        return DEFAULT_SIZES
    try:
        sizes = [parse_size_bytes(part.strip()) for part in text.split(",") if part.strip()]
    except ValueError as exc:
        raise UsageError(f"--sizes {text!r}: {exc}; give sizes such as 1,64K,1M") from None
    if not sizes:
        raise UsageError("--sizes is empty: give sizes such as 1,64K,1M")
    bad = [s for s in sizes if not 0 <= s <= MAX_GROUP_SIZE_BYTES]
    if bad:
        raise UsageError(f"--sizes: {bad[0]} B is outside 0 B to {format_size_bytes(MAX_GROUP_SIZE_BYTES)}")
    if len(set(sizes)) != len(sizes) or len(sizes) > MAX_GROUP_SIZES:
        raise UsageError(f"--sizes: give each size once, at most {MAX_GROUP_SIZES} sizes")
    return tuple(sorted(sizes))


def group_options(ns: argparse.Namespace, extra: Any) -> GroupOptions:
    """The shared options of a parsed command line checked (UsageError: one line), with the kind's own."""
    from npmpi.commands.checks import sampling_fields, shared_fields, trials_and_target

    trials, target = trials_and_target(ns.trials, ns.target_time, ns.quick, "per size")
    return GroupOptions(
        sizes_bytes=sizes_arg(ns.sizes),
        trials=trials,
        target_time_s=target,
        quick=ns.quick,
        extra=extra,
        **sampling_fields(ns),
        **shared_fields(ns),
    )
