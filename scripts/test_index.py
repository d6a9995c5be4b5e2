#!/usr/bin/env python3
"""Write tests/README.md: every test file with what it tests (its docstring's first sentence), and for
each module of npmpi and the analysis the test files that import it.

    python scripts/test_index.py          # rewrite tests/README.md
    python scripts/test_index.py --check  # exit 1 when tests/README.md is not what this would write
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TESTS = REPO / "tests"
HEAD = """# The tests

`scripts/test.sh` runs them all (set-up, lint, then pytest); `scripts/test.sh -k WORDS` or
`.venv/bin/python -m pytest tests/test_x.py` runs some (after `source scripts/mpi-env.sh`). Tests
marked `mpi` launch real `mpirun` jobs, `slow` ones take more than a few seconds.

The whole suite takes about 22 minutes on the 2-core test machine (1,790 tests, 2026-11-28; CI's
limit is 90 minutes, the project's budget 30); each run prints its 25 slowest tests at the end.

Files are named by area, the area first, then the guarantee: `test_analysis_*` (npmpi-analyze's
formulas and outputs), `test_coll*` (collectives), `test_conditions*`, `test_map*` (the cluster map),
`test_meter_*` / `test_meters_*` (each power meter against a faithful fake of its interface),
`test_model*` (the fitted models), `test_protocol*`, `test_reliability_*` (a failure, and what the
user gets: one line, every rank out, every measurement kept), `test_slurm*`, and single files for
the rest; `_mpi` and `_netns` at the end of a name mark the real `mpirun` jobs and the
network-namespace hosts.

Beside the test files: `conftest.py` (fixtures: an `mpirun` job with a timeout), `support/` (what
the tests share and that is no test: `launcher.py` the mpirun command and environment,
`reliability.py` freezing and killing ranks, `slurm_cluster.py` a local Slurm cluster,
`netns_hosts.py` network-namespace hosts, `protocol_variants.py` a script run under mpirun,
`schedules.py` size schedules, `kinds/` a benchmark kind written outside npmpi), `fakes/` (meters'
and devices' stand-ins), `inprocess/` (tests run on every rank of one mpirun job), `data/` (saved
help texts, reference outputs).

This page is written by `python scripts/test_index.py` (tests/test_house.py checks it is current).
"""


def _imports(path: Path) -> set[str]:
    """The npmpi and npmpi_analysis modules a file imports (at any depth of the file)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        found |= {n for n in names if n.split(".")[0] in ("npmpi", "npmpi_analysis")}
    return found


def _modules() -> list[str]:
    out = []
    for top, prefix in ((REPO / "npmpi", "npmpi"), (REPO / "analysis" / "npmpi_analysis", "npmpi_analysis")):
        for p in sorted(top.rglob("*.py")):
            parts = p.relative_to(top).with_suffix("").parts
            if parts[-1] == "__init__":
                continue
            out.append(".".join((prefix, *parts)))
    return out


def _summary(path: Path) -> str:
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    first = " ".join(doc.split("\n\n")[0].split())
    return (first.split(". ")[0].rstrip(".") + ".") if first else "—"


def render() -> str:
    files = sorted(TESTS.glob("test_*.py"))
    lines = [HEAD, "## Test files", "", "| file | what it tests |", "|---|---|"]
    lines += [f"| `{p.name}` | {_summary(p).replace('|', '/')} |" for p in files]
    imported = {p.name: _imports(p) for p in files}
    lines += ["", "## Which tests import a module", "", "| module | test files |", "|---|---|"]
    for module in _modules():
        users = [n for n, mods in imported.items() if module in mods]
        lines.append(f"| `{module}` | {', '.join(f'`{u}`' for u in users) or '(through mpirun jobs only)'} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    text = render()
    readme = TESTS / "README.md"
    if "--check" in argv:
        return 0 if readme.exists() and readme.read_text() == text else 1
    readme.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
