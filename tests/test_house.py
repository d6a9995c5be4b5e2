"""The house rules that hold now stay held: no import cycle, no import of another module's private
name, no folders importing each other, no function over 80 lines nor file over 500, every module
named in docs/architecture.md (measured by bench/house_metrics.py); the rules, not the counts."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _metrics():
    spec = importlib.util.spec_from_file_location("house_metrics", REPO / "bench" / "house_metrics.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_no_import_cycle_and_no_private_cross_import():
    m = _metrics().measure(REPO)
    assert m["cycles"] == []
    assert m["private_imports"] == []
    assert [c for c in m["folder_cycles"] if any(f.startswith("npmpi") for f in c)] == []  # no upward import


def test_the_metrics_see_a_cycle_and_a_private_import(tmp_path):
    """The measure itself: a two-module cycle through a function-level import, and a private name."""
    pkg = tmp_path / "npmpi"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from npmpi.b import public\n\ndef _hidden():\n    return public\n")
    (pkg / "b.py").write_text("def public():\n    from npmpi.a import _hidden\n\n    return _hidden\n")
    (tmp_path / "analysis" / "npmpi_analysis").mkdir(parents=True)
    (tmp_path / "csrc").mkdir()
    m = _metrics().measure(tmp_path)
    assert m["cycles"] == [["npmpi.a", "npmpi.b"]]
    assert m["private_imports"] == ["npmpi.b imports npmpi.a._hidden"]


def _module_tables(page: str) -> dict[str, set[str]]:
    """Folder -> the modules its `### `folder/`` table names, from docs/architecture.md."""
    tables = {}
    for part in page.split("\n### `")[1:]:
        folder, rest = part.split("`", 1)
        table = rest.split("\n#", 1)[0]
        tables[folder.rstrip("/")] = set(re.findall(r"^\| `([\w.]+\.py)` \|", table, re.M))
    return tables


def test_architecture_page_names_every_module_and_no_other():
    """Every folder of the two packages has its table, naming each of its modules, and nothing else."""
    tables = _module_tables((REPO / "docs" / "architecture.md").read_text())
    on_disk = {}
    for top in (REPO / "npmpi", REPO / "analysis" / "npmpi_analysis"):
        for init in top.rglob("__init__.py"):
            folder = init.parent.relative_to(REPO).as_posix()
            on_disk[folder] = {p.name for p in init.parent.glob("*.py")}
    assert sorted(tables) == sorted(on_disk)
    assert {f: sorted(on_disk[f] - tables[f]) for f in on_disk if on_disk[f] - tables[f]} == {}
    assert {f: sorted(tables[f] - on_disk[f]) for f in on_disk if tables[f] - on_disk[f]} == {}


RULES = {  # the house figures that are rules: each is 0 in the code, and the page says so
    "functions over 80 lines": lambda m: len(m["long_functions"]),
    "files over 500 lines": lambda m: len(m["long_files"]),
    "import cycles": lambda m: len(m["cycles"]),
    "folders importing each other": lambda m: len(m["folder_cycles"]),
    "private cross-imports": lambda m: len(m["private_imports"]),
    "timed-state strings": lambda m: m["state_strings"],
}


def test_the_house_rules_hold_and_the_page_says_so():
    """Every rule of the house figures (docs/architecture.md) is 0 in the code, as bench/house_metrics.py
    measures it, and 0 in the page's "now" column. The other figures (modules, folders, depth, mode
    checks, spec parses) are counts the page gives as measured, not rules: a new module edits no test."""
    page = (REPO / "docs" / "architecture.md").read_text()
    table = page.split("## House figures", 1)[1].split("| figure | before | now |", 1)[1].split("\n\n", 1)[0]
    shown = {}
    for line in table.strip().splitlines()[1:]:
        name, _before, now = (cell.strip() for cell in line.strip("|").split("|"))
        shown[name] = int(now)
    m = _metrics().measure(REPO)
    assert {name: rule(m) for name, rule in RULES.items()} == dict.fromkeys(RULES, 0)
    assert {name: shown.get(name) for name in RULES} == dict.fromkeys(RULES, 0)


def test_the_tests_index_is_current():
    """tests/README.md lists every test file and which tests import each module (scripts/test_index.py)."""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "test_index.py"), "--check"], check=False)
    assert proc.returncode == 0, "tests/README.md is out of date: run python scripts/test_index.py"
