"""argparse as every npmpi command uses it: one-line usage errors, help that keeps its line breaks,
strict number types, and the options more than one command has, declared once.

A shared option (`--meter`, `--trials`, `-o` ...) has its flags, type, default and metavar in
SHARED_OPTIONS: a run, a map, `calibrate` and `meters` add it by name with their own help text
(`add_options`), so its grammar cannot drift between commands. An option of one command only is
declared where that command's parser is built (npmpi/run/arguments.py for a run).
"""

from __future__ import annotations

import argparse
from typing import Any

from npmpi.core.config import DEFAULT_STALL_TIMEOUT_S
from npmpi.core.errors import HelpRequested, UsageError
from npmpi.core.modes import MODE_PINGPONG
from npmpi.core.units import parse_number, parse_whole


def command_name() -> str:
    """How the user started npmpi: the installed `npmpi` command, else `python -m npmpi`."""
    import os
    import sys

    return "npmpi" if os.path.basename(sys.argv[0] if sys.argv else "") == "npmpi" else "python -m npmpi"


class LinesFormatter(argparse.HelpFormatter):
    """argparse's formatter, but a description or epilog keeps its line breaks: each line is wrapped,
    except one that starts with spaces (a list), kept as it is."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        fill = super()._fill_text
        return "\n".join(
            indent + line if line.startswith(" ") else fill(line, width, indent) for line in text.splitlines()
        )


class UsageParser(argparse.ArgumentParser):
    """argparse that raises UsageError (one line, exit 2) instead of printing usage."""

    def __init__(self, **kwargs) -> None:
        kwargs.setdefault("formatter_class", LinesFormatter)
        super().__init__(**kwargs)

    def error(self, message: str):  # type: ignore[override]
        raise UsageError(f"{message} (see {self.prog} --help)")


def version_text() -> str:
    from npmpi import __version__

    return f"npmpi {__version__}\n"


def one_or_other(items) -> str:
    """'a, b or c' (a help text's list of choices)."""
    items = list(items)
    return " or ".join([", ".join(items[:-1]), items[-1]]) if len(items) > 1 else "".join(items)


def count_arg(text: str) -> int:
    """An option value that is a whole number (argparse type): the strict grammar of npmpi.core.units
    (int() alone takes any script's digits, '_' and spaces)."""
    try:
        value = parse_whole(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"invalid count {text!r}: expected a whole number (ASCII digits, at most 15)"
        ) from None
    return value


def seconds_arg(text: str) -> float:
    """An option value in seconds: a finite number (argparse type)."""
    try:
        value = parse_number(text)
    except ValueError:
        if text.strip().lower().lstrip("+-") in ("nan", "inf", "infinity"):
            raise argparse.ArgumentTypeError(
                f"invalid time {text!r}: must be a finite number of seconds"
            ) from None
        raise argparse.ArgumentTypeError(
            f"invalid time {text!r}: expected seconds as a plain decimal number, e.g. 0.05"
        ) from None
    return value


# flags and argparse settings of the options several commands share, by their long name
SHARED_OPTIONS: dict[str, tuple[tuple[str, ...], dict[str, Any]]] = {
    "--help": (("-h", "--help"), {"action": "store_true"}),
    "--version": (("--version",), {"action": "store_true"}),
    "--trials": (("--trials",), {"type": count_arg, "default": None, "metavar": "N"}),
    "--target-time": (("--target-time",), {"type": seconds_arg, "default": None, "metavar": "SECONDS"}),
    "--quick": (("--quick",), {"action": "store_true"}),
    "--mode": (("--mode",), {"default": MODE_PINGPONG, "metavar": "MODE"}),
    "--window": (("--window",), {"type": count_arg, "default": None, "metavar": "N"}),
    "--kernel": (("--kernel",), {"default": "python", "metavar": "NAME"}),
    "--meter": (("--meter",), {"action": "append", "default": [], "metavar": "SPEC"}),
    "--meter-optional": (("--meter-optional",), {"action": "store_true"}),
    "--sample-interval": (
        ("--sample-interval",),
        {"type": seconds_arg, "default": None, "metavar": "SECONDS"},
    ),
    "--baseline": (("--baseline",), {"type": seconds_arg, "default": None, "metavar": "SECONDS"}),
    "--fabric-meter": (("--fabric-meter",), {"action": "append", "default": [], "metavar": "SPEC"}),
    "--fabric-rank": (("--fabric-rank",), {"type": count_arg, "default": None, "metavar": "N"}),
    "--calibration": (("--calibration",), {"default": None, "metavar": "FILE"}),
    "--output": (("-o", "--output"), {"default": None, "metavar": "FILE"}),
    "--force": (("--force",), {"action": "store_true"}),
    "--quiet": (("-q", "--quiet"), {"action": "store_true"}),
    "--order": (("--order",), {"default": "ascending", "metavar": "ORDER"}),
    "--order-seed": (("--order-seed",), {"type": count_arg, "default": None, "metavar": "N"}),
    "--precision": (("--precision",), {"default": None, "metavar": "P"}),
    "--precision-cap": (("--precision-cap",), {"type": seconds_arg, "default": None, "metavar": "SECONDS"}),
    "--max-trials": (("--max-trials",), {"type": count_arg, "default": None, "metavar": "N"}),
    "--stall-timeout": (
        ("--stall-timeout",),
        {"type": seconds_arg, "default": DEFAULT_STALL_TIMEOUT_S, "metavar": "SECONDS"},
    ),
}


def add_option(group, name: str, help_text: str, **overrides) -> None:
    """Add the shared option `name` to a parser or argument group with the caller's help text
    (`overrides`: what one command shows differently, e.g. its metavar)."""
    flags, settings = SHARED_OPTIONS[name]
    group.add_argument(*flags, help=help_text, **{**settings, **overrides})


def add_options(group, helps: dict[str, str]) -> None:
    """Add several shared options, in the order of `helps` (name -> help text)."""
    for name, help_text in helps.items():
        add_option(group, name, help_text)


def command_parser(prog: str, description: str, **kwargs) -> UsageParser:
    """A command's parser with -h/--help and --version first (printed by rank 0 only:
    npmpi.core.errors.HelpRequested)."""
    p = UsageParser(prog=prog, description=description, add_help=False, **kwargs)
    add_options(p, {"--help": "show this help and exit", "--version": "print npmpi's version and exit"})
    return p


def parse_command_line(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """The parsed command line; HelpRequested for --help or --version, UsageError for bad usage."""
    ns = parser.parse_args(argv)
    if ns.help:
        raise HelpRequested(parser.format_help())
    if ns.version:
        raise HelpRequested(version_text())
    return ns
