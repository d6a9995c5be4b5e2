"""Reading the optional conditions of /pingpong (docs/file-format.md, "Conditions of the measurement"):
each measuring rank's core frequency, throttle events and its node's NIC bytes per size, and the root
attribute `conditions` (per rank: its core, where the frequency comes from or why it is unknown, the
NIC counters summed, the settings before and after).

An addition, not the run: a file without them reads as before; ones of another shape, with impossible
values or an attribute that is not JSON are left out with a notice.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from npmpi.runfile.cputimes import Malformed, read_ranked
from npmpi.runfile.format import COND_ATTR, COND_DATASETS

MAX_INFO_CHARS = 4_000_000


@dataclass
class Conditions:
    """Per size and measuring rank, COND_DATASETS' values (NaN unknown), and per rank its text."""

    ranks: np.ndarray  # [r]
    values: dict[str, np.ndarray]  # name -> [n, r]
    info: dict[str, dict] = field(default_factory=dict)  # str(rank) -> what the rank said

    def rank_info(self, rank: int) -> dict:
        got = self.info.get(str(int(rank)))
        return got if isinstance(got, dict) else {}


def _info(g, notices: list[str], p: Path) -> dict:
    raw = g.file.attrs.get(COND_ATTR)
    if raw is None:
        return {}
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
    try:
        parsed = json.loads(text[:MAX_INFO_CHARS])
        ranks = parsed.get("ranks", {}) if isinstance(parsed, dict) else None
        if isinstance(ranks, dict):
            return ranks
    except ValueError:
        pass
    notices.append(f"{p}: the root attribute {COND_ATTR} is not the expected JSON: its text left out")
    return {}


def read_conditions(g, p: Path, n: int, notices: list[str], read_rows: Callable) -> Conditions | None:
    """The conditions of the open /pingpong group `g` for its first n rows; None when the file has none."""
    present = [name in g for name in COND_DATASETS]
    if not all(present):
        if any(present):
            notices.append("/pingpong: some of the conditions datasets are missing: conditions left out")
        return None
    try:
        ranks, values = read_ranked(g, p, n, read_rows, COND_DATASETS)
    except Malformed as exc:
        notices.append(f"{p}: {exc}: conditions left out")
        return None
    return Conditions(ranks=ranks, values=values, info=_info(g, notices, p))
