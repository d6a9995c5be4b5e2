"""A cluster map's conditions (docs/file-format.md, "1.10: a map's conditions"; docs/analysis.md,
"The conditions"): per pair and size, its transmitter's and its reflector's core frequency over their
trials, their thermal throttling and their nodes' NIC bytes (/map/cond_*), and each rank's text
(/map/conditions_json), judged by the run's rules (npmpi_analysis.numbers.conditions):

    cpu_freq_ghz of each side       the side's cycles / running time over its part's trials
    frequency moved                 a side's fastest and slowest single trial differ by more than
                                    FREQ_MOVED_FRACTION of its mean over the pair's trials
    throttled                       a side's core or package thermal throttle counter rose meanwhile
    wire_bytes_per_payload_byte     a pair whose members are on different nodes: the bytes both nodes'
                                    NICs sent during the trials / the payload of the trials (size ×
                                    iterations × trials × bytes_per_iteration_factor); NaN on one node

A finding measured again (/map/confirm_cond_*, each re-measured pair's sides) is told what moved
meanwhile (`confirm_conditions`): an entry of its pairs that throttled, whose core frequency moved
within a re-measurement, or whose cores ran more than SLOWER_CLOCK slower than the reference links'
measured with it (their median) — a CPU's clock or heat, not the network, may be what was confirmed.

An addition, not the map: a file without them reads and analyses as before; datasets of another
shape or with impossible values are left out with a notice, and values no machine reads (a
frequency outside a core's, a counter beyond what it counts in the pair's trials:
`conditions.bounded`) are unknown with a notice.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from npmpi.core.safetext import shown
from npmpi.runfile.format import COND_DATASETS, TEXT_CHECKSUM, text_crc32
from npmpi.runfile.maprows import COND_PREFIX, ROW_BLOCK_CELLS, row_blocks
from npmpi.runfile.mapwriter import COND_TEXT
from npmpi_analysis.map.condrows import READ_ERRORS, impossible, place_text
from npmpi_analysis.map.pairmatrix import PairMatrix, rows_of
from npmpi_analysis.numbers.compute import run_mode_factors
from npmpi_analysis.numbers.conditions import (
    FLAG_WORDS,
    FREQ_MOVED_FRACTION,
    MOVED,
    CodedWords,
    CondFigures,
    bounded,
    flag_codes,
    freq_moved,
    rank_sources,
    summary,
    summary_lines,
    throttle_events,
    wire_warning,
    wire_warnings,
)

MAX_TEXT_CHARS = 4_000_000
MAX_NAMED = 5  # flagged pair-sizes the text names one by one (all of them in --csv and --json)
FOLDED = ("cpu_freq_hz", "throttle", "freq_moved", "nic_tx_bytes")  # m.cond's, as _folded keeps them
SLOWER_CLOCK = 0.10  # a suspect's side whose cores ran this much below the references' is named


def read_map_conditions(g, p: Path, m) -> None:
    """/map/cond_* bounded and folded into m.cond (FOLDED names -> [S, N, N, 2]) and
    /map/conditions_json into m.cond_info (str(rank) -> text); /map/confirm_cond_* into
    m.confirm_cond (name -> [K, 2]: confirm_conditions). Nothing for a file without them; a notice
    for ones that cannot be used, a problem for a checksum that fails (the map is analysed without
    them). A rows map's are bounded and folded as its rows, before they are made matrices."""
    names = [COND_PREFIX + n for n in COND_DATASETS]
    present = [n in g for n in names]
    if all(present) and getattr(m, "rows", None) is not None:
        _read_rows_conditions(g, p, m)
    elif all(present):
        cond = _read_sets(g, p, m, "", (len(m.size_bytes), m.nodes, m.nodes, 2))
        m.cond_info = _read_text(g, m.notices) if cond is not None else {}
        m.cond = None
        if cond is not None:
            m.cond = _folded(_bounded_pairs(m, cond))
    elif any(present):
        m.notices.append("/map: some of the conditions datasets (cond_*) are missing: conditions left out")
    if all(f"confirm_{n}" in g for n in names) and "confirm_pair" in g:
        m.confirm_cond = _read_sets(g, p, m, "confirm_", (g["confirm_pair"].shape[0], 2))
        if m.confirm_cond is not None:
            m.confirm_cond = _bounded_again(g, m, m.confirm_cond)


def _read_rows_conditions(g, p: Path, m) -> None:
    """A rows map's /map/cond_* read, bounded and folded a block of rows at a time (map/condrows.py),
    with the notices and problems of the datasets read whole (`_read_sets`, `_bounded_pairs`)."""
    from npmpi_analysis.map.condrows import read_folded_rows

    said: list[str] = []
    m.cond_info, m.cond = _read_text(g, said), None  # its frequency sources bound the frequencies
    try:
        m.cond = read_folded_rows(g, p, m, said)
    except READ_ERRORS as exc:
        m.cond_info = {}
        _left_out(m, exc, "")
        return
    m.notices.extend(said)


def _left_out(m, exc: Exception, prefix: str) -> None:
    """The conditions (`prefix`cond_*) left out: a damaged dataset is a problem, another a notice."""
    from npmpi.core.errors import RunFileError

    if isinstance(exc, RunFileError):
        m.problems.append(f"{exc}; the map's conditions ({prefix}cond_*) are left out")
    else:
        m.notices.append(f"{exc}: the map's conditions ({prefix}cond_*) are left out")


def _folded(cond: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """What the map's analysis keeps of a dense map's conditions (FOLDED): each side's frequency,
    throttle events, whether its frequency moved and its NIC bytes sent (the others' arrays are
    dropped as they are folded; a rows map's are folded a block of rows at a time, map/condrows.py)."""
    values = (cond["cpu_freq_hz"], throttle_events(cond), freq_moved(cond), cond["nic_tx_bytes"])
    cond.clear()
    return dict(zip(FOLDED, values, strict=True))


def _bounded_pairs(m, cond: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """A dense map's /map/cond_* with the values no machine reads made unknown (a notice says which,
    each cell once): the pair's trials last the sum of its trials' one-way times x iterations x 2
    (a round trip's)."""
    cycles, interfaces = rank_sources(getattr(m, "cond_info", {}) or {}, [int(r) for r in m.ranks])
    n = len(cycles)
    cycles, interfaces = (
        np.stack([np.broadcast_to(x[:, None], (n, n)), np.broadcast_to(x[None, :], (n, n))], -1)
        for x in (cycles, interfaces)
    )
    elapsed = m.trial_stats["sum_s"] * m.iterations * 2.0

    def place(i) -> str:
        return place_text(m.hosts, i[1:3], m.size_bytes[int(i[0])], int(i[-1]))

    out, said = bounded(cond, elapsed[..., None], cycles, interfaces, place)
    m.notices.extend(said)
    return out


def _bounded_again(g, m, cond: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """/map/confirm_cond_* bounded as /map/cond_*, over each re-measurement's window (none when the
    windows cannot be read: only the counters' lag)."""
    k = next(iter(cond.values())).shape[0]
    try:
        start, end = (np.asarray(g[f"confirm_window_{w}_unix_s"][()], dtype=float) for w in ("start", "end"))
        elapsed = end - start if start.shape == end.shape == (k,) else np.zeros(k)
    except (KeyError, OSError, TypeError, ValueError):
        elapsed = np.zeros(k)
    out, said = bounded(
        cond, np.asarray(elapsed, float)[:, None], False, 1, lambda i: f"re-measurement {int(i[0])}"
    )
    m.notices.extend(said)
    return out


def _read_sets(g, p: Path, m, prefix: str, want: tuple[int, ...]) -> dict[str, np.ndarray] | None:
    """Each COND_DATASETS name's /map/<prefix>cond_<name> of shape `want`, checked; None (said) when
    one cannot be used."""
    from npmpi.runfile.opening import read_declared

    got = {}
    try:
        for short in COND_DATASETS:
            name = f"{prefix}{COND_PREFIX}{short}"
            ds = g[name]
            if getattr(ds, "shape", None) != want or ds.dtype.kind != "f":
                raise ValueError(f"/map/{name} has shape {getattr(ds, 'shape', '?')}, expected {want}")
            x = got[short] = np.asarray(read_declared(ds, p, f"/map/{name}"), dtype=np.float64)
            if impossible(x):
                raise ValueError(f"/map/{name} holds negative, infinite or impossible values")
    except READ_ERRORS as exc:
        _left_out(m, exc, prefix)
        return None
    return got


def _read_text(g, notices: list[str]) -> dict[str, dict]:
    """Each rank's text from /map/conditions_json ({} when absent or damaged, with a notice)."""
    if COND_TEXT not in g:
        return {}
    try:
        raw = g[COND_TEXT][()]
        text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
        stored = g[COND_TEXT].attrs.get(TEXT_CHECKSUM)
        if stored is not None and int(stored) != text_crc32([text]):
            raise ValueError("its CRC-32 differs from its text's")
        ranks = json.loads(text[:MAX_TEXT_CHARS]).get("ranks")
        if isinstance(ranks, dict):
            return ranks
        raise ValueError("it holds no ranks")
    except (ValueError, OSError, KeyError, TypeError, AttributeError) as exc:
        notices.append(f"/map/{COND_TEXT} cannot be used ({exc}): the ranks' condition text left out")
        return {}


@dataclass
class MapConditions:
    """Per pair and size: each side's figures [S, N, N, 2] (0 transmitter, 1 reflector), the flags
    and the wire bytes [S, N, N]; `figures` the run's summary's view (per rank text, counts)."""

    freq_hz: np.ndarray
    throttle: np.ndarray  # core + package events
    flags: np.ndarray  # "" or what moved
    wire_tx_bytes: np.ndarray  # both sides' nodes' NIC bytes sent (a node once)
    wire_ratio: np.ndarray  # NaN for a pair on one node
    figures: CondFigures
    places: Any  # each of figures.flags' pair-sizes, made when asked: 'h1–h2 at 64 B' (_Places)


def analyse_map_conditions(m, a, hosts: list[str], directed: bool) -> MapConditions | None:
    """The map's conditions beside its figures (`hosts`: each entry's node; `directed`: each
    direction measured apart); None for a file without them. A rows map's are figured on its rows
    and kept as them (PairMatrix); a dense map's as its matrices."""
    cond = getattr(m, "cond", None)
    if cond is None:
        return None
    throttle, moved = cond["throttle"], rows_of(cond["freq_moved"])
    code = flag_codes(moved.reshape(-1, 2), rows_of(throttle).reshape(-1, 2)).reshape(moved.shape[:-1])
    host_id = host_ids(hosts)
    crossing = host_id[:, None] != host_id[None, :]
    shared = _node_shared_in_round(m.round, hosts)
    if isinstance(throttle, PairMatrix):
        wire, ratio = _wire_rows(m, a, cond["nic_tx_bytes"].rows, crossing, shared, directed)
        wire, ratio = throttle.like(wire, np.nan), throttle.like(ratio, np.nan)
        code, flags, payload = throttle.like(code, 0), throttle.like(code, 0, FLAG_WORDS), None
    else:
        flags = FLAG_WORDS[code]
        wire, payload, ratio = _wire(m, a, cond["nic_tx_bytes"], crossing, shared, directed)
    ks, ii, jj = _cells(a, directed)
    cell_codes = code[ks, ii, jj]
    figures = CondFigures(
        freq_hz=cond["cpu_freq_hz"],
        freq_min_hz=None,  # a map keeps whether the frequency moved, not its bounds (_folded)
        freq_max_hz=None,
        throttle=throttle,
        ranks=[int(r) for r in m.ranks],
        hosts=hosts,
        wire_tx_bytes=wire,
        payload_bytes=payload,  # a rows map's: not kept (its ratio is)
        flags=CodedWords(cell_codes),
        flagged=np.flatnonzero(cell_codes),
        info=getattr(m, "cond_info", {}) or {},
        crossing=bool(crossing.any()),
        unit="pair-size(s)",
    )
    places = _Places(a, directed, ks, ii, jj)
    figures.warnings = wire_warnings(
        ratio[ks, ii, jj], a.size_bytes[ks], places, "pair-size(s)", "a pair meant to cross nodes"
    )
    n_shared = int((shared & crossing)[ii, jj].sum())
    if n_shared:
        figures.warnings.append(
            f"wire bytes per payload byte: not given for {n_shared} pair-size(s) across nodes whose "
            "node carried another pair of the same round (several entries per node, --per-rank): its "
            "NIC counters hold both pairs' bytes"
        )
    places.forget()
    return MapConditions(cond["cpu_freq_hz"], throttle, flags, wire, ratio, figures, places)


WIRE_BLOCK = ROW_BLOCK_CELLS  # pair-sizes of a block of rows: the wire figures made a block at a time (their
# temporaries were 2 GB at 4,096 nodes), the same numbers


def _wire(m, a, tx, crossing, shared, directed: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """[S, N, N] each pair's NIC bytes sent (both sides' nodes' across nodes, one side's on one
    node), the payload that should have crossed, and their ratio (NaN on one node, or a node that
    carried another pair of the round)."""
    shape = a.best_s.shape
    wire, payload, ratio = (np.empty(shape) for _ in range(3))
    factor = run_mode_factors(a.attrs)[0]
    size = a.size_bytes.astype(float)[:, None, None]
    for r in row_blocks(shape[1], shape[0] * shape[2], WIRE_BLOCK):
        wire[:, r] = np.where(crossing[r], tx[:, r, :, 0] + tx[:, r, :, 1], tx[:, r, :, 0])
        it = m.iterations[:, r]
        if not directed:
            it = np.maximum(it, np.swapaxes(m.iterations, 1, 2)[:, r])
        payload[:, r] = size * it * a.trials_run[:, r] * factor
        with np.errstate(invalid="ignore", divide="ignore"):
            ratio[:, r] = np.where(
                crossing[r] & ~shared[r] & (payload[:, r] > 0), wire[:, r] / payload[:, r], np.nan
            )
    return wire, payload, ratio


def _wire_rows(m, a, tx, crossing, shared, directed: bool) -> tuple[np.ndarray, np.ndarray]:
    """`_wire`'s NIC bytes and ratio of a rows map's rows [S, P] (tx [S, P, 2]): the numbers its
    dense matrices hold at each row's cells, made a block of rows at a time."""
    s, p = tx.shape[:2]
    wire, ratio = np.empty((s, p)), np.empty((s, p))
    factor = run_mode_factors(a.attrs)[0]
    size = a.size_bytes.astype(float)[:, None]
    for r in row_blocks(p, s, WIRE_BLOCK):
        i, j = m.rows.pair[r, 0], m.rows.pair[r, 1]
        cross = crossing[i, j]
        wire[:, r] = np.where(cross, tx[:, r, 0] + tx[:, r, 1], tx[:, r, 0])
        it = m.iterations[:, i, j]
        if not directed:
            it = np.maximum(it, m.iterations[:, j, i])
        payload = size * it * a.trials_run[:, i, j] * factor
        with np.errstate(invalid="ignore", divide="ignore"):
            ratio[:, r] = np.where(cross & ~shared[i, j] & (payload > 0), wire[:, r] / payload, np.nan)
    return wire, ratio


def host_ids(hosts: list[str]) -> np.ndarray:
    """[N] int64: each entry's node as a number (entries of one host alike)."""
    return np.unique(np.asarray(hosts, dtype=object).astype(str), return_inverse=True)[1].astype(np.int64)


def _node_shared_in_round(rounds: np.ndarray, hosts: list[str]) -> np.ndarray:
    """[N, N]: whether a node of pair i, j also carried another pair of its round (entries that share
    a node, as --per-rank's, measured at once): the node's NIC bytes are then not the pair's alone."""
    n = len(hosts)
    host_id = host_ids(hosts)
    i, j = np.nonzero(np.triu(rounds >= 0, 1))
    r = rounds[i, j].astype(np.int64)
    hi, hj = host_id[i], host_id[j]
    width = int(host_id.max()) + 1 if n else 1
    # each pair touches its round's node(s): one key per (round, node), a pair within a node once
    keys = np.concatenate([r * width + hi, (r * width + hj)[hi != hj]])
    if len(keys) and (int(r.max()) + 1) * width <= 4 * len(keys):  # the rounds schedule: count each key
        count = np.bincount(keys, minlength=(int(r.max()) + 1) * width)
        busy = lambda k: count[k] > 1  # noqa: E731
    else:  # a pair a round (serial): the distinct keys
        uniq, count = np.unique(keys, return_counts=True)
        busy = lambda k: count[np.searchsorted(uniq, k)] > 1  # noqa: E731
    pair = busy(r * width + hi) | busy(r * width + hj)
    out = np.zeros((n, n), dtype=bool)
    out[i, j] = out[j, i] = pair
    return out


def _cells(a, directed: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(size, i, j) of every measured pair (i < j) or direction, as the CSV's rows (in their order)."""
    n, s = a.nodes, len(a.size_bytes)
    ii, jj = np.nonzero(~np.eye(n, dtype=bool) if directed else np.triu(np.ones((n, n), dtype=bool), 1))
    # a size at a time, in int32: 4,096 nodes' 16.7 million cells had taken 1 GB more
    ii, jj = ii.astype(np.int32), jj.astype(np.int32)
    keep = [np.isfinite(a.best_s[k][ii, jj]) for k in range(s)]
    ks = np.concatenate([np.full(int(x.sum()), k, dtype=np.int32) for k, x in enumerate(keep)] or [[]])
    ii, jj = (np.concatenate([v[x] for x in keep] or [[]]).astype(np.int32, copy=False) for v in (ii, jj))
    return ks.astype(np.int32, copy=False), ii, jj


class _Places:
    """The cells' names ('h1–h2 at 1024 B'), each made when asked for (a large map has millions).
    `forget()` drops the cells, made again from the map (`_cells`) if a name is asked for after:
    a 4,096-node map's are 200 MB, held through the outputs for the few flagged ones named."""

    def __init__(self, a, directed: bool, ks, ii, jj) -> None:
        self.a, self.directed, self.cells, self.count = a, directed, (ks, ii, jj), len(ks)

    def forget(self) -> None:
        self.cells = None

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, c: int) -> str:
        if self.cells is None:
            self.cells = _cells(self.a, self.directed)
        k, i, j = (int(x[c]) for x in self.cells)
        return f"{self.a.names[i]}–{self.a.names[j]} at {int(self.a.size_bytes[k])} B"


def pair_columns(
    c: MapConditions | None, k: int, i: int, j: int, size: int, energy_pj_bit: float | None
) -> dict:
    """A pair row's columns (none for a map without conditions): each side's GHz and throttle events,
    the flag, the NIC bytes and, for a pair across nodes, the wire bytes per payload byte."""
    if c is None:
        return {}
    ratio = float(c.wire_ratio[k, i, j])
    row: dict[str, Any] = {
        "transmitter_cpu_freq_ghz": float(c.freq_hz[k, i, j, 0]) / 1e9,
        "reflector_cpu_freq_ghz": float(c.freq_hz[k, i, j, 1]) / 1e9,
        "transmitter_throttle_count": float(c.throttle[k, i, j, 0]),
        "reflector_throttle_count": float(c.throttle[k, i, j, 1]),
        "conditions_flag": str(c.flags[k, i, j]),
        "nic_tx_bytes": float(c.wire_tx_bytes[k, i, j]),
        "wire_bytes_per_payload_byte": ratio,
        "wire_warning": wire_warning(ratio, size),
    }
    if energy_pj_bit is not None:
        row["energy_pj_wire_bit"] = energy_pj_bit / ratio if ratio > 0 else math.nan
    return row


def map_matrices(c: MapConditions | None) -> dict[str, Any]:
    """The JSON's per-pair matrices ({} without conditions): [S, N, N, 2] each side's GHz and throttle
    events (transmitter, reflector), [S, N, N] the flag and the wire bytes per payload byte."""
    if c is None:
        return {}
    return {
        "cpu_freq_ghz": np.asarray(c.freq_hz) / 1e9,  # a PairMatrix's dense matrix
        "throttle_count": np.asarray(c.throttle),
        "conditions_flag": np.asarray(c.flags),
        "wire_bytes_per_payload_byte": np.asarray(c.wire_ratio),
    }


def map_summary(c: MapConditions | None) -> dict[str, Any]:
    """The JSON summary's `conditions` (the run's shape; flags counted per pair-size)."""
    return summary(c.figures) if c is not None else {}


def map_lines(c: MapConditions | None) -> list[str]:
    """The text report's conditions lines: the nodes' settings and frequency sources (up to
    MAX_NODE_LINES nodes), the flagged pair-sizes, the wire warnings."""
    if c is None:
        return []
    lines = summary_lines(map_summary(c))
    flagged = c.figures.flagged if c.figures.flagged is not None else []
    if len(flagged):
        more = f" and {len(flagged) - MAX_NAMED} more" if len(flagged) > MAX_NAMED else ""
        named = ", ".join(f"{c.places[k]} ({c.figures.flags[k]})" for k in flagged[:MAX_NAMED])
        lines.append(shown(f"  conditions flagged: {named}{more}"))
    return lines + [shown(f"  {w}") for w in c.figures.warnings]


def confirm_conditions(a, m) -> None:
    """Set `confirm_conditions` of each finding measured again from its re-measurement's conditions
    (/map/confirm_cond_*): its entries that throttled (events summed over its pairs), whose core
    frequency moved more than FREQ_MOVED_FRACTION within a re-measurement, or whose median frequency
    was more than SLOWER_CLOCK below the median of the reference pairs' sides at its size. Nothing for
    a map without them."""
    from npmpi_analysis.map.confirmed import belongs

    cond, confirm = getattr(m, "confirm_cond", None), getattr(m, "confirm", None)
    if cond is None or confirm is None:
        return
    pairs, sizes, roles = confirm["confirm_pair"], confirm["confirm_size_bytes"], confirm["confirm_role"]
    freq, throttle, moved = cond["cpu_freq_hz"], throttle_events(cond), freq_moved(cond)
    index = {name: k for k, name in enumerate(a.names)}
    for f in a.outliers:
        ends = [index[n] for n in f.names]
        mine = [
            k
            for k in range(len(roles))
            if roles[k] == 0 and belongs(f, ends, int(sizes[k]), *map(int, pairs[k]))
        ]
        if not mine:
            continue
        refs = [k for k in range(len(roles)) if roles[k] == 1 and int(sizes[k]) == int(f.size_bytes)]
        ref_freq = freq[refs].ravel() if refs else np.array([])
        ref_freq = ref_freq[np.isfinite(ref_freq)]
        reference_hz = float(np.median(ref_freq)) if ref_freq.size else math.nan
        f.confirm_conditions = _what_moved(a.names, pairs, mine, freq, throttle, moved, reference_hz)


def _what_moved(names, pairs, rows: list[int], freq, throttle, moved, reference_hz: float) -> str:
    """'h4 throttled (3 events); h4's core frequency moved more than 5% within a measurement; h4's
    cores at 1.20 GHz, the reference pairs' at 2.90 GHz' for the rows' sides ("" when nothing)."""
    events: dict[str, float] = {}
    shifted: list[str] = []
    hz: dict[str, list[float]] = {}
    for k in rows:
        for side, entry in enumerate(int(e) for e in pairs[k]):
            name = str(names[entry])
            if np.isfinite(throttle[k, side]) and throttle[k, side] > 0:
                events[name] = events.get(name, 0.0) + float(throttle[k, side])
            if moved[k, side] and name not in shifted:
                shifted.append(name)
            if np.isfinite(freq[k, side]):
                hz.setdefault(name, []).append(float(freq[k, side]))
    parts = [f"{shown(n)} throttled ({e:.0f} events)" for n, e in events.items()]
    parts += [f"{shown(n)}'s core {MOVED} more than {FREQ_MOVED_FRACTION:.0%} within a measurement"
              for n in shifted]  # fmt: skip
    if math.isfinite(reference_hz) and reference_hz > 0:
        for name, values in hz.items():
            own = float(np.median(values))
            if own < (1.0 - SLOWER_CLOCK) * reference_hz:
                parts.append(f"{shown(name)}'s cores at {own / 1e9:.2f} GHz, the reference pairs' at "
                             f"{reference_hz / 1e9:.2f} GHz")  # fmt: skip
    return "; ".join(parts)
