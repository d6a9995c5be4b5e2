"""Helpers shared by test modules (kept apart from conftest so they can be imported)."""

from __future__ import annotations

from pathlib import Path

DATA = Path(__file__).resolve().parent / "data"


def netpipe_reference_sizes() -> list[int]:
    lines = (DATA / "netpipe37_default_sizes.txt").read_text().splitlines()
    return [int(x) for x in lines if x and not x.startswith("#")]
