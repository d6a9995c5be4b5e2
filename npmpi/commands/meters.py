"""`python -m npmpi meters`: which meters work on this node, what they would measure, and why not.

No MPI: run it on a login node or inside an allocation (`srun -N1 python -m npmpi meters`) to see a
compute node. Every registered meter kind is tried as a power rank would open it (see
npmpi/meters/survey.py), then what `--meter auto` would choose. Human table by default; `--json` for
scripts. Exit status 0 (the survey ran), 2 for bad usage.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import socket
import sys

from npmpi.core.errors import NpmpiError
from npmpi.core.safetext import printable


def build_parser() -> argparse.ArgumentParser:
    from npmpi.commands.parser import command_name, command_parser

    parser = command_parser(
        f"{command_name()} meters",
        "Which power meters open on this node, what they measure, and why not (and the fix).",
    )
    parser.add_argument("--json", action="store_true", help="one JSON document instead of the table")
    parser.add_argument(
        "--auto",
        default="auto",
        metavar="SPEC",
        help="the --meter auto spec whose trees and addresses to try, e.g. auto:cray_root=DIR "
        "(default: auto)",
    )
    return parser


def parse_meters_options(argv: list[str]) -> argparse.Namespace:
    from npmpi.commands.parser import parse_command_line

    return parse_command_line(build_parser(), argv)


def main(argv: list[str]) -> int:
    from npmpi.core.abort import error_line, say
    from npmpi.core.startup import parse_or_exit_status

    ns = parse_or_exit_status(parse_meters_options, argv)
    if isinstance(ns, int):
        return ns
    from npmpi.commands.checks import meter_specs
    from npmpi.meters.auto import choose, kind_specs
    from npmpi.meters.survey import survey

    try:
        (spec,) = meter_specs([ns.auto], "--auto")
        if spec.kind != "auto":
            raise NpmpiError(f"--auto {ns.auto}: give an auto spec, e.g. auto:cray_root=DIR")
        findings = survey(kind_specs(spec))
        choice = choose(spec)
    except NpmpiError as exc:
        say(error_line(str(exc)), sys.stderr)
        return 2
    for meter in choice.meters:
        meter.close()
    chosen = ", ".join(m.spec.text for m in choice.meters)
    try:
        _print_survey(ns.json, findings, choice, chosen)
    except BrokenPipeError:  # `| head`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


def _printable(finding):
    """A finding with every control character of its texts escaped (npmpi.core.safetext)."""
    texts = {k: printable(v) for k, v in vars(finding).items() if isinstance(v, str)}
    return dataclasses.replace(finding, **texts, channels=[printable(c) for c in finding.channels])


def _print_survey(as_json: bool, findings, choice, chosen: str) -> None:
    from npmpi.meters.survey import table

    if as_json:
        doc = {
            "host": socket.gethostname(),
            "meters": [f.as_dict() for f in findings],
            "auto": choice.record(),
        }
        print(json.dumps(doc, indent=1))
    else:  # paths and reasons may hold control characters (a newline would forge a line): escaped
        print(printable(f"meters on {socket.gethostname()}:"))
        print(table([_printable(f) for f in findings], printable(chosen)))
    sys.stdout.flush()
