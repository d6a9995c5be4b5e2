"""A map's CSV built a column at a time (`npmpi-analyze --csv` of a map): the same bytes as
`outfiles.rows_csv_bytes(map_report.pair_rows(a))`, one row per pair (or direction) and size, in a
few numpy operations per column instead of a dictionary per row (a 1,024-node map has a million
rows: 57 s as rows of dictionaries).

A number is written as Python writes it (repr), an undefined one (NaN, inf) as an empty cell, a text
made printable (npmpi.core.safetext.csv_cell) and quoted by the csv module where it needs it.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from typing import Any

import numpy as np

from npmpi.core.safetext import csv_cell
from npmpi_analysis.bulk_text import code_fields, int_fields, joined_rows, sci_fields, text_codes, text_table
from npmpi_analysis.map import model as map_model
from npmpi_analysis.map.analyse import is_directed
from npmpi_analysis.number_text import float_texts
from npmpi_analysis.numbers.compute import FLAG_NAMES, FLAG_OK
from npmpi_analysis.numbers.conditions import WIRE_LOW, WIRE_WORDS, wire_high

CHUNK_ROWS = 1 << 16  # rows made at once: the cells of a million rows would take gigabytes
LINK_TEXTS_NODES = 2048  # up to this many members a link's figures are written as text once
BULK_ROWS = 1 << 19  # maps of this many rows or more (725 nodes at 2 sizes): numbers as "%.8e", not repr
BULK_NOTE = (
    "the CSV's numbers are written to 9 significant digits (\"%.8e\") and the JSON gives each node's "
    "figures instead of the per-pair matrices (every pair is in the CSV and the run file)"
)


def csv_bytes(analyses: list) -> bytes:
    """Every map's pair rows as CSV: the columns in first-seen order, a column a map lacks empty."""
    return b"".join(csv_parts(analyses))


def csv_parts(analyses: list) -> Iterator[bytes]:
    """csv_bytes' bytes, CHUNK_ROWS rows at a time; numbers as "%.8e" (bulk_text) when the maps hold
    BULK_ROWS rows or more."""
    indices = [_indices(a) for a in analyses]
    fields = list(
        dict.fromkeys(
            k
            for a, (ks, ii, jj) in zip(analyses, indices, strict=True)
            for k in _columns(a, ks[:1], ii[:1], jj[:1])
        )
    )
    yield ",".join(_text(f) for f in fields).encode() + b"\n"
    bulk, tables = is_bulk(analyses), {}  # tables: each coded column's texts as bytes, made once
    for a, (ks, ii, jj) in zip(analyses, indices, strict=True):
        links = {} if bulk else _link_texts(a)
        for start in range(0, len(ks), CHUNK_ROWS):
            part = slice(start, start + CHUNK_ROWS)
            columns = _columns(a, ks[part], ii[part], jj[part])
            if bulk:
                blank = ("c", "")
                yield joined_rows([_fields(columns.get(f, blank), len(ks[part]), tables) for f in fields])
                continue
            blank_cells = [""] * len(ks[part])
            t = {f: _cells(f, c, links, ii[part], jj[part]) for f, c in columns.items()}
            lines = map(",".join, zip(*(t.get(f, blank_cells) for f in fields), strict=True))
            yield ("\n".join(lines) + "\n").encode()


def is_bulk(analyses: list) -> bool:
    """Whether the maps' CSV writes its numbers as "%.8e" (BULK_ROWS rows or more)."""
    return sum(len(a.size_bytes) * _links(a) for a in analyses) >= BULK_ROWS


def pair_sizes(analyses: list) -> int:
    """How many pairs and sizes the maps hold (about the rows of their CSV)."""
    return sum(len(a.size_bytes) * a.nodes * (a.nodes - 1) // 2 for a in analyses)


def _links(a) -> int:
    """A map's rows of a size: its pairs, or its directions when measured both ways."""
    return a.nodes * (a.nodes - 1) // (1 if is_directed(a.map_attrs) else 2)


def _indices(a) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(size, i, j) of each row, in pair_rows' order: each size, then each pair (i < j) or direction
    (i != j) in row-major order."""
    n, s = a.nodes, len(a.size_bytes)
    directed = is_directed(a.map_attrs)
    ii, jj = np.nonzero(~np.eye(n, dtype=bool) if directed else np.triu(np.ones((n, n), dtype=bool), 1))
    return np.repeat(np.arange(s), len(ii)), np.tile(ii, s), np.tile(jj, s)


def _link_matrices(a) -> dict[str, np.ndarray]:
    """The [N, N] matrices of the columns that are each link's, whatever the size."""
    out = {"latency_s": a.latency_s}
    if a.model is not None:
        out.update({col: getattr(a.model, attr) for col, attr in map_model.NAMES})
    return {col: x for col, x in out.items() if x is not None}


def _link_texts(a) -> dict[str, np.ndarray]:
    """The cells of the columns that are each link's, as [N, N] texts made once for every size's
    rows (a map of several sizes writes each link's figures once a size); {} for one size or a map
    of more than LINK_TEXTS_NODES members (their texts would outweigh their repeats)."""
    if len(a.size_bytes) < 2 or a.nodes > LINK_TEXTS_NODES:
        return {}
    return {col: float_texts(x, "") for col, x in _link_matrices(a).items()}


def _columns(a, ks: np.ndarray, ii_: np.ndarray, jj_: np.ndarray) -> dict[str, tuple]:
    """The columns of a map's rows (ks, ii_, jj_), each as what its cells are made of: ("f", floats),
    ("i", integers), ("t", texts), ("k", codes, texts: texts[code]) or ("c", one text for all)."""
    sizes = np.asarray(a.size_bytes)
    t: dict[str, tuple] = {
        "map": ("c", a.label),
        "host_a": ("k", ii_, a.names),
        "host_b": ("k", jj_, a.names),
        "size_bytes": ("i", sizes[ks]),
        "round": ("i", a.round[ii_, jj_]),
        "trials": ("i", a.trials_run[ks, ii_, jj_]),
        "trials_stalled": ("i", a.trials_stalled[ks, ii_, jj_]),
        "best_one_way_s": ("f", a.best_s[ks, ii_, jj_]),
        "latency_s": ("f", a.latency_s[ii_, jj_]),
        "bandwidth_bit_s": ("f", a.bandwidth_bit_s[ks, ii_, jj_]),
        "bandwidth_mean_bit_s": ("f", a.mean_bit_s[ks, ii_, jj_]),
        "bandwidth_sigma_bit_s": ("f", a.sigma_bit_s[ks, ii_, jj_]),
        "bytes_moved": ("i", a.bytes_moved[ks, ii_, jj_]),
    }
    energy = None
    if a.energy is not None:
        energy = a.energy.energy_pj_bit[ks, ii_, jj_]
        t.update(_energy(a, ks, ii_, jj_, len(ks)))
    if a.conditions is not None:
        t.update(_conditions(a.conditions, ks, ii_, jj_, sizes, energy))
    lm = a.model
    if lm is not None:
        for col, attr in map_model.NAMES:
            if getattr(lm, attr) is not None:
                t[col] = ("f", getattr(lm, attr)[ii_, jj_])
    return t


def _cells(col: str, spec: tuple, links: dict, ii_: np.ndarray, jj_: np.ndarray) -> list[str]:
    """A column's cells as Python writes them; a link's figures from `links` (_link_texts)."""
    kind, value = spec[0], spec[1]
    if kind == "f":
        return links[col][ii_, jj_].tolist() if col in links else _floats(value)
    if kind == "i":
        return _ints(value)
    if kind == "t":
        return _texts(value)
    if kind == "k":
        return _texts(np.asarray(spec[2], dtype=object)[value])
    return [_text(value)] * len(ii_)


def _fields(spec: tuple, rows: int, tables: dict) -> np.ndarray:
    """A column's cells as [rows, width] bytes (bulk_text): numbers as "%.8e", texts as _cells';
    `tables` keeps a coded column's texts as bytes for every block (a 4,096-node map's names were
    quoted again for each of its 256 blocks: 4 s)."""
    kind, value = spec[0], spec[1]
    if kind == "f":
        return sci_fields(value)
    if kind == "i":
        return int_fields(value)
    if kind == "t":
        codes, texts = text_codes(value)
        return code_fields(codes, [_text(v) for v in texts])
    texts = tuple(spec[2]) if kind == "k" else (value,)
    if texts not in tables:
        tables[texts] = text_table([_text(v) for v in texts])
    return code_fields(value if kind == "k" else np.zeros(rows, dtype=np.intp), tables[texts])


def _energy(a, ks, ii_, jj_, rows: int) -> dict[str, tuple]:
    e = a.energy
    names = [FLAG_NAMES[f] or FLAG_NAMES[FLAG_OK] for f in range(len(FLAG_NAMES))]
    nan = np.full(rows, np.nan)
    reason = e.flag_reason[ks, ii_, jj_] if e.flag_reason is not None else np.full(rows, "", dtype=object)
    return {
        "window_s": ("f", e.window_s[ks, ii_, jj_]),
        "power_w": ("f", e.power_w[ks, ii_, jj_]),
        "power_sigma_w": ("f", e.power_sigma_w[ks, ii_, jj_]),
        "power_flag": ("k", np.asarray(e.flag[ks, ii_, jj_], dtype=np.int64), names),
        "power_flag_reason": ("t", np.asarray(reason, dtype=object)),
        "power_label": ("c", a.caveat or "measured"),
        "energy_pj_bit": ("f", e.energy_pj_bit[ks, ii_, jj_]),
        "energy_sigma_pj_bit": ("f", e.energy_sigma_pj_bit[ks, ii_, jj_]),
        "dynamic_energy_pj_bit": (
            "f",
            e.dynamic_pj_bit[ks, ii_, jj_] if e.dynamic_pj_bit is not None else nan,
        ),
        "dynamic_energy_sigma_pj_bit": (
            "f",
            e.dynamic_sigma_pj_bit[ks, ii_, jj_] if e.dynamic_sigma_pj_bit is not None else nan,
        ),
    }


def _conditions(c, ks, ii_, jj_, sizes: np.ndarray, energy) -> dict[str, tuple]:
    ratio = np.asarray(c.wire_ratio[ks, ii_, jj_], dtype=np.float64)
    size = sizes[ks]
    with np.errstate(invalid="ignore"):  # conditions.wire_warning, for every row at once
        low, high = ratio < WIRE_LOW, ratio > wire_high(size)
    warning = np.where(low, 1, np.where(high, 2, 0))
    out = {
        "transmitter_cpu_freq_ghz": ("f", c.freq_hz[ks, ii_, jj_, 0] / 1e9),
        "reflector_cpu_freq_ghz": ("f", c.freq_hz[ks, ii_, jj_, 1] / 1e9),
        "transmitter_throttle_count": ("f", c.throttle[ks, ii_, jj_, 0]),
        "reflector_throttle_count": ("f", c.throttle[ks, ii_, jj_, 1]),
        "conditions_flag": ("t", np.asarray(c.flags[ks, ii_, jj_], dtype=object)),
        "nic_tx_bytes": ("f", c.wire_tx_bytes[ks, ii_, jj_]),
        "wire_bytes_per_payload_byte": ("f", ratio),
        "wire_warning": ("k", warning, ["", *WIRE_WORDS[:2]]),
    }
    if energy is not None:
        with np.errstate(divide="ignore", invalid="ignore"):
            out["energy_pj_wire_bit"] = ("f", np.where(ratio > 0, energy / ratio, np.nan))
    return out


def _floats(x) -> list[str]:
    """Numbers as Python writes a float; NaN and infinities as empty cells."""
    return float_texts(x, "").tolist()


def _ints(x) -> list[str]:
    return list(map(str, np.asarray(x, dtype=np.int64).tolist()))


def _texts(x: np.ndarray) -> list[str]:
    """Texts made printable and quoted as the csv module quotes them (each distinct one once)."""
    done: dict[Any, str] = {}
    return [done[v] if v in done else done.setdefault(v, _text(v)) for v in x.tolist()]


def _text(value: Any) -> str:
    buf = io.StringIO()
    csv.writer(buf, lineterminator="").writerow([csv_cell(str(value)), ""])
    return buf.getvalue()[:-1]  # the row's second cell (empty) and its comma left out
