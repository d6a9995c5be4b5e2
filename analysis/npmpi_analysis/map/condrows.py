"""A rows map's conditions (/map/cond_* [S, P, 2], format 2.0) read a block of rows at a time:
each block checked, bounded (values no machine reads made unknown, `conditions.bounded`) and folded
into what the analysis keeps (map/conditions.FOLDED: each side's frequency, throttle events,
whether its frequency moved, its NIC bytes), kept as rows (map/pairmatrix.py).

The seven datasets whole were 1.9 GB at 4,096 nodes, and their bounds' temporaries 1 GB more; a
block is at most rows.BLOCK_BYTES a dataset. The numbers, the notice and the errors are those of
the datasets read whole: a dataset's first error (its shape, a damaged chunk, an impossible value),
the first dataset's in their order, is the one said; the notice names values in the datasets' order.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from npmpi.core.errors import RunFileError
from npmpi.core.safetext import shown
from npmpi.runfile.format import COND_DATASETS
from npmpi.runfile.maprows import COND_PREFIX, row_blocks
from npmpi.runfile.opening import check_own_data, read_checked
from npmpi_analysis.map.pairmatrix import PairMatrix
from npmpi_analysis.map.rows import stored
from npmpi_analysis.numbers.conditions import (
    add_found,
    bounded_notice,
    bounded_parts,
    freq_moved,
    rank_sources,
    throttle_events,
)

MAX_COUNT = 1e18  # a throttle or byte count beyond this is damage
BLOCK_BYTES = 8 << 20  # of each dataset a block reads (rows of [2] float64): 512 Ki rows
SIDES = ("transmitter", "reflector")
READ_ERRORS = (RunFileError, ValueError, OSError, KeyError, TypeError)  # map/conditions._left_out's


def impossible(x: np.ndarray) -> bool:
    """Whether conditions' values hold one no reading gives: negative, infinite or beyond MAX_COUNT
    (damage, not a value to bound)."""
    return bool(np.any(np.isinf(x) | (np.isfinite(x) & ((x < 0) | (x > MAX_COUNT)))))


def place_text(hosts: list[str], ends, size_bytes: int, side: int) -> str:
    """A conditions' value named in a notice: 'h0–h1 at 1000 B (transmitter)'."""
    names = "–".join(shown(hosts[e]) if e < len(hosts) else str(e) for e in (int(x) for x in ends))
    return f"{names} at {int(size_bytes)} B ({SIDES[side]})"


def read_folded_rows(g, p: Path, m, notices: list[str]) -> dict[str, PairMatrix]:
    """/map/cond_* of a rows map folded (FOLDED names -> PairMatrix [S, N, N, 2]), the values no
    machine reads made unknown (their notice added to `notices`), each side's frequency source from
    m.cond_info. RunFileError (a damaged dataset) or ValueError (a shape, a type, an impossible
    value): the first dataset's, as read whole."""
    rows, sizes = m.rows, len(m.size_bytes)
    want = (sizes, len(rows.pair), 2)
    names = [COND_PREFIX + n for n in COND_DATASETS]
    sets, errors, values = {}, {}, {}  # values: a dataset's impossible value, said unless a read fails
    for k, name in enumerate(names):
        try:
            ds = stored(g, name, p, required=True)  # a dataset of this file: not a link, not a group
            if getattr(ds, "shape", None) != want or ds.dtype.kind != "f":
                raise ValueError(f"/map/{name} has shape {getattr(ds, 'shape', '?')}, expected {want}")
            check_own_data(ds, p, f"/map/{name}")
            sets[k] = ds
        except READ_ERRORS as exc:  # said in the datasets' order, as read whole
            errors[k] = exc
    cycles, interfaces = rank_sources(getattr(m, "cond_info", {}) or {}, [int(r) for r in m.ranks])
    out = {
        "cpu_freq_hz": np.empty(want),
        "throttle": np.empty(want),
        "freq_moved": np.empty(want, dtype=bool),
        "nic_tx_bytes": np.empty(want),
    }
    found: dict = {}
    for s in range(sizes):
        for r in row_blocks(len(rows.pair), 2 * 8, BLOCK_BYTES):
            block = _block(sets, errors, values, names, s, r, p)
            if errors or values:
                continue  # the rest is read only to find a read's error, or an earlier dataset's
            pair = rows.pair[r]
            elapsed = m.trial_stats["sum_s"][s, pair[:, 0], pair[:, 1]]
            elapsed = elapsed * m.iterations[s, pair[:, 0], pair[:, 1]] * 2.0
            v, part = bounded_parts(
                block,
                elapsed[:, None],
                cycles[pair],
                interfaces[pair],
                lambda i, pair=pair, s=s: place_text(m.hosts, pair[int(i[0])], m.size_bytes[s], int(i[-1])),
            )
            add_found(found, part)
            out["cpu_freq_hz"][s, r] = v["cpu_freq_hz"]
            out["throttle"][s, r] = throttle_events(v)
            out["freq_moved"][s, r] = freq_moved(v)
            out["nic_tx_bytes"][s, r] = v["nic_tx_bytes"]
    if errors or values:  # each dataset's read error before its values' (read whole: read, then checked)
        raise {**values, **errors}[min({*errors, *values})]
    notices.extend(bounded_notice({n: found[n] for n in COND_DATASETS if n in found}))
    cells = rows.cells()
    return {k: PairMatrix(v, cells, False if k == "freq_moved" else np.nan) for k, v in out.items()}


def _block(sets: dict, errors: dict, values: dict, names: list[str], s: int, r: slice, p: Path) -> dict:
    """Size s's rows r of each dataset whose read has not failed, as float64 and checked: a read's
    error is kept in `errors`, the first impossible value's in `values`, by the dataset's place."""
    block = {}
    for k, ds in sets.items():
        if k in errors:
            continue
        name = names[k]
        try:
            x = np.asarray(read_checked(ds, (s, r), p, f"/map/{name}"), dtype=np.float64)
        except READ_ERRORS as exc:  # said in the datasets' order, as read whole
            errors[k] = exc
            continue
        if impossible(x):
            values.setdefault(k, ValueError(f"/map/{name} holds negative, infinite or impossible values"))
        block[name[len(COND_PREFIX) :]] = x
    return block
