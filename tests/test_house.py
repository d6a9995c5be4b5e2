"""The house rules that hold now stay held: no import cycle, no import of another module's private
name, every module named in docs/architecture.md (measured by bench/house_metrics.py)."""

from __future__ import annotations

import importlib.util
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


def test_architecture_page_names_every_module():
    page = (REPO / "docs" / "architecture.md").read_text()
    sections = {
        "npmpi": "### `npmpi/` ",
        "npmpi/meters": "### `npmpi/meters/`",
        "analysis/npmpi_analysis": "### `analysis/npmpi_analysis/`",
    }
    missing = []
    for folder, heading in sections.items():
        table = page.split(heading, 1)[1].split("###", 1)[0]
        missing += [
            f"{folder}/{p.name}"
            for p in sorted((REPO / folder).glob("*.py"))
            if f"| `{p.name}` |" not in table
        ]
    assert missing == []
