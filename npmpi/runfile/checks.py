"""Checks of a run file's root attributes that the figures rest on (the reader's, npmpi/runfile/reader.py).

A file may hold any value: a mode factor of infinity or 0 would make every bandwidth wrong or
crash the arithmetic, options nested 100,000 levels deep would exhaust Python's recursion. Such a
file is refused with one line naming the attribute, as a damaged file is.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from npmpi.core.errors import RunFileError

MODE_FACTORS = ("bytes_per_iteration_factor", "one_way_divisor")
MAX_MODE_FACTOR = 1 << 20  # a window of 2^16 messages in both directions is far below this
MAX_OPTIONS_DEPTH = 32


def check_root_attrs(attrs: dict, p: Path) -> None:
    """RunFileError if a mode factor is not a positive whole number or options_json nests too deeply."""
    for key in MODE_FACTORS:
        if key not in attrs:
            continue  # files before format 1.2: ping-pong's factors
        value = attrs[key]
        ok = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(
            value, (bool, np.bool_)
        )
        ok = ok and math.isfinite(value) and value == int(value) and 1 <= value <= MAX_MODE_FACTOR
        if not ok:
            raise RunFileError(
                f"{p}: attribute {key} = {value!r:.40} is not a whole number from 1 to {MAX_MODE_FACTOR} "
                "(the mode's factor, docs/file-format.md); the file is damaged or forged"
            )
    options = attrs.get("options_json")
    if isinstance(options, str):
        from npmpi.core.inputfiles import json_depth

        depth = json_depth(options.encode("utf-8", "replace"))
        if depth > MAX_OPTIONS_DEPTH:
            raise RunFileError(
                f"{p}: attribute options_json is JSON nested {depth} levels deep (at most "
                f"{MAX_OPTIONS_DEPTH}); the file is damaged or forged"
            )
