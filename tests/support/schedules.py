"""Helpers shared by test modules (kept apart from conftest so they can be imported)."""

from __future__ import annotations

from pathlib import Path

from npmpi.core.schedule import SizePoint

DATA = Path(__file__).resolve().parents[1] / "data"


def netpipe_reference_sizes() -> list[int]:
    lines = (DATA / "netpipe37_default_sizes.txt").read_text().splitlines()
    return [int(x) for x in lines if x and not x.startswith("#")]


def powers_of_two_schedule(lower: int, upper: int) -> list[SizePoint]:
    """Sizes lower, 2·lower, 4·lower … up to upper (the schedule with perturbation 0 is not this)."""
    points = []
    size = lower
    while size <= upper:
        points.append(SizePoint(size, size))
        size *= 2
    return points
