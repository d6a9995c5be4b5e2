"""The --help of every command is the one saved in tests/data/help/: declaring an option once for
several commands (npmpi/commands/parser.py) must not change what any command shows."""

from __future__ import annotations

from pathlib import Path

import pytest

from npmpi.calibrate.command import build_parser as calibrate_parser
from npmpi.coll.kind import KIND as COLL_KIND
from npmpi.commands.meters import build_parser as meters_parser
from npmpi.map.options import build_parser as map_parser
from npmpi.run.arguments import build_parser as run_parser

SAVED = Path(__file__).resolve().parent / "data" / "help"


@pytest.mark.parametrize(
    "name, build",
    [
        ("run", run_parser),
        ("map", map_parser),
        ("calibrate", calibrate_parser),
        ("meters", meters_parser),
        ("coll", COLL_KIND.parser),
    ],
)
def test_help_is_the_saved_text(name, build, monkeypatch):
    monkeypatch.setattr("sys.argv", ["python -m npmpi"])  # the program name the saved texts show
    monkeypatch.setenv("COLUMNS", "80")  # argparse wraps at the terminal's width
    assert build().format_help() == (SAVED / f"{name}.txt").read_text()
