"""The conditions a run measured under (docs/file-format.md, "Conditions of the measurement"): each
measuring rank's effective core frequency per size, throttling, the nodes' frequency settings, and
the bytes the nodes' NICs moved against the payload.

    cpu_freq_ghz (a size)          the mean over the measuring ranks of each one's cycles / running time
    frequency moved                a rank's fastest and slowest single trial differ by more than
                                   FREQ_MOVED_FRACTION of its mean over the size
    throttled                      a core or package thermal throttle counter rose during the size
    wire bytes (a size)            the bytes sent by the NICs of the measuring ranks' nodes, each node
                                   once (its first measuring rank's reading)
    payload bytes (a size)         trials × iterations × size × bytes_per_iteration_factor × (pairs that
                                   cross nodes / pairs); a collective: × its ranks (the factor is one
                                   rank's bytes), all of it when its members span several nodes
    wire_bytes_per_payload_byte    wire / payload: headers, acknowledgements, retransmissions, and
                                   anything else the nodes sent meanwhile
    energy_pj_wire_bit             energy_pj_bit / wire_bytes_per_payload_byte
A pair meant to cross nodes whose NICs moved less than WIRE_LOW of its payload did not go through
them (shared memory, another interface); more than WIRE_HIGH times, beyond HEADER_BYTES per message
(small messages are mostly headers), is far more than its payload.

A value no machine reads (`bounded`: a core's frequency outside 1 MHz to 10 GHz, a throttle counter
rising faster than 1e6 events/s, a node's NIC bytes beyond 4 x 400 Gbit/s per interface over the
trials plus the counters' lag, the writer's own bounds in npmpi/conditions/) is unknown with a notice,
whatever wrote the file (one written before npmpi bounded its reads, a forged one). A frequency below
1 MHz from a cycles counter is kept: user-mode cycles over running time may be far below the clock.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from npmpi.conditions.cpufreq import COUNT_MAX, FREQ_MAX_HZ, FREQ_MIN_HZ, THROTTLE_MAX_RATE
from npmpi.conditions.nic import ABSOLUTE_RATE, max_bytes
from npmpi.core.safetext import shown
from npmpi_analysis.numbers.compute import run_mode_factors
from npmpi_analysis.numbers.kinds import ranks_moving

FREQ_MOVED_FRACTION = 0.05  # 5 %: a core whose frequency moved more within one size is flagged
WIRE_LOW = 0.5  # a crossing pair's NICs moved less than half its payload: it did not cross them
WIRE_HIGH = 4.0  # more than 4 bytes on the wire per payload byte: far more than headers
HEADER_BYTES = 64  # per message allowed above WIRE_HIGH: its frames' Ethernet, IP and TCP headers
MOVED, THROTTLED = "frequency moved", "throttled"
MAX_NODE_LINES = 4  # nodes the text summary names one by one (the rest in the JSON)
MAX_REFUSED_NAMED = 3  # values beyond a machine's the notice names one by one
FREQ_NAMES = ("cpu_freq_hz", "cpu_freq_min_hz", "cpu_freq_max_hz")
SETTING_KEYS = (
    "governor",
    "scaling_min_freq_hz",
    "scaling_max_freq_hz",
    "cpuinfo_min_freq_hz",
    "cpuinfo_max_freq_hz",
    "boost",
    "intel_pstate_no_turbo",
    "energy_performance_preference",
    "idle_states",
    "rapl_power_limits_w",
    "slurm_cpu_freq_req",
)


@dataclass
class CondFigures:
    """A run's conditions per size ([size, rank] arrays) and per node."""

    ranks: list[int]
    hosts: list[str]  # each rank's host
    freq_hz: np.ndarray
    freq_min_hz: np.ndarray | None  # None for a map's (npmpi_analysis.map.conditions keeps less)
    freq_max_hz: np.ndarray | None
    throttle: np.ndarray  # core + package events during the size
    wire_tx_bytes: np.ndarray  # [size] over distinct nodes
    payload_bytes: np.ndarray  # [size] the payload that should cross the nodes' NICs
    flags: list[str] | CodedWords  # [size] "" or what moved (a map's: CodedWords)
    info: dict[str, dict]
    crossing: bool  # the measurement is meant to cross nodes
    warnings: list[str] = field(default_factory=list)
    unit: str = "size(s)"  # what `flags` count (a map's: pair-size(s))
    flagged: np.ndarray | None = None  # a map's: the indices of `flags` not "" (made with them)

    @classmethod
    def of(cls, v: dict[str, np.ndarray], throttle: np.ndarray, **rest) -> CondFigures:
        """From the COND_DATASETS arrays `v` (each rank's frequencies) and their throttle events."""
        return cls(
            freq_hz=v["cpu_freq_hz"],
            freq_min_hz=v["cpu_freq_min_hz"],
            freq_max_hz=v["cpu_freq_max_hz"],
            throttle=throttle,
            **rest,
        )

    @property
    def mean_ghz(self) -> np.ndarray:
        ok = np.isfinite(self.freq_hz)
        with np.errstate(invalid="ignore", divide="ignore"):
            return (
                np.where(ok.any(axis=1), np.where(ok, self.freq_hz, 0).sum(axis=1) / ok.sum(axis=1), np.nan)
                / 1e9
            )

    @property
    def wire_ratio(self) -> np.ndarray:
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(self.payload_bytes > 0, self.wire_tx_bytes / self.payload_bytes, np.nan)


def _crossing_share(run, ranks: list[int], nodes: list[int]) -> float:
    """The share of the payload meant to cross nodes: crossing pairs / pairs (a run), 1 or 0 (a group)."""
    pairs_flat = np.asarray(run.attrs.get("all_pair_ranks", []), dtype=np.int64).ravel()
    node = {r: nodes[r] for r in range(len(nodes))}
    if pairs_flat.size >= 2:
        pairs = pairs_flat.reshape(-1, 2)
        crossing = sum(node.get(int(a), -1) != node.get(int(b), -1) for a, b in pairs)
        return crossing / len(pairs)
    return 1.0 if len({node.get(r, -1) for r in ranks}) > 1 else 0.0


def freq_moved(v: dict[str, np.ndarray]) -> np.ndarray:
    """Where a core's fastest and slowest trial differ by more than FREQ_MOVED_FRACTION of its mean
    frequency (False where not known), element by element of the COND_DATASETS arrays `v`."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return (v["cpu_freq_max_hz"] - v["cpu_freq_min_hz"]) / v["cpu_freq_hz"] > FREQ_MOVED_FRACTION


FLAG_WORDS = np.array(["", MOVED, THROTTLED, f"{MOVED}, {THROTTLED}"], dtype=object)  # by flag_codes


class CodedWords:
    """Texts held as int8 codes into `table` (a map's flags: 16.7 million pair-sizes at 4,096 nodes,
    a list of them 134 MB): read as the list of texts, counted without making it."""

    def __init__(self, codes: np.ndarray, table: np.ndarray = FLAG_WORDS):
        self.codes, self.table = np.asarray(codes), table

    def __len__(self) -> int:
        return len(self.codes)

    def __getitem__(self, k: int) -> str:
        return str(self.table[self.codes[k]])

    def __iter__(self):
        return iter(self.table[self.codes].tolist())

    def counts(self) -> Counter:
        """Counter(self) made from the codes."""
        n = np.bincount(self.codes.astype(np.intp), minlength=len(self.table))
        return Counter({str(self.table[c]): int(x) for c, x in enumerate(n) if x})


def flag_codes(moved: np.ndarray, throttle: np.ndarray) -> np.ndarray:
    """Per row of [row, rank] arrays (freq_moved's, throttle events): 0, or 1 where the frequency
    moved plus 2 where throttled on any of its ranks (FLAG_WORDS the words)."""
    throttled = (np.nan_to_num(throttle) > 0).any(axis=1)
    return moved.any(axis=1).astype(np.int8) + 2 * throttled.astype(np.int8)


def row_flags(moved: np.ndarray, throttle: np.ndarray) -> list[str]:
    """Per row of [row, rank] arrays (freq_moved's, throttle events): "" or what moved (MOVED,
    THROTTLED) on any of its ranks."""
    return FLAG_WORDS[flag_codes(moved, throttle)].tolist()


def throttle_events(v: dict[str, np.ndarray]) -> np.ndarray:
    """Core + package thermal throttle events (NaN where the core's count is unknown)."""
    return v["core_throttle_count"] + np.nan_to_num(v["package_throttle_count"])


def bounded(
    v: dict[str, np.ndarray], elapsed_s, cycles, interfaces, place
) -> tuple[dict[str, np.ndarray], list[str]]:
    """The COND_DATASETS arrays `v` with every value no machine reads made NaN, and the notice saying
    so ([] when none). Broadcast against each array: `elapsed_s` the trials' seconds, `cycles` where
    the frequency is a cycles counter's (no lower bound), `interfaces` the NIC counters summed in a
    value; `place(index)` names an element."""
    out, found = bounded_parts(v, elapsed_s, cycles, interfaces, place)
    return out, bounded_notice(found)


def bounded_parts(v: dict[str, np.ndarray], elapsed_s, cycles, interfaces, place) -> tuple[dict, dict]:
    """`bounded`'s arrays, and per name what was made unknown: (count, the first MAX_REFUSED_NAMED
    values named). Parts of arrays bounded apart (a map's blocks of rows, in order) add up to the
    whole's notice: `bounded_notice`, `add_found`."""
    el = np.maximum(np.nan_to_num(np.asarray(elapsed_s, dtype=float), nan=0.0, posinf=0.0), 0.0)
    out, found = dict(v), {}
    for name, x in v.items():
        if name in FREQ_NAMES:
            bad, unit = (x > FREQ_MAX_HZ) | ((x < FREQ_MIN_HZ) & ~np.asarray(cycles, dtype=bool)), 1e9
        elif name.endswith("_throttle_count"):
            bad, unit = x > np.minimum(THROTTLE_MAX_RATE * np.maximum(el, 1.0), COUNT_MAX), 1.0
        elif name.startswith("nic_"):
            bad, unit = x > max_bytes(ABSOLUTE_RATE, el) * np.maximum(interfaces, 1), 1.0
        else:
            continue
        bad = np.broadcast_to(np.isfinite(x) & bad, x.shape)
        if bad.any():
            out[name] = np.where(bad, np.nan, x)
            words = "GHz" if unit > 1 else "bytes" if name.startswith("nic_") else "events"
            first = np.flatnonzero(bad)[:MAX_REFUSED_NAMED]  # never every index as tuples
            found[name] = (
                int(bad.sum()),
                [
                    f"{name} {float(x[index]) / unit:.3g} {words} at {place(index)}"
                    for index in zip(*np.unravel_index(first, bad.shape), strict=True)
                ],
            )
    return out, found


def add_found(total: dict, part: dict) -> None:
    """`bounded_parts`' findings of a later part added to the earlier parts' `total`."""
    for name, (count, named) in part.items():
        was, said = total.get(name, (0, []))
        total[name] = (was + count, (said + named)[:MAX_REFUSED_NAMED])


def bounded_notice(found: dict) -> list[str]:
    """The notice of `bounded_parts`' findings, names in the order found ([] when none)."""
    count = sum(c for c, _ in found.values())
    if not count:
        return []
    named: list[str] = []
    for _, said in found.values():
        named += said[: MAX_REFUSED_NAMED - len(named)]
    more = f" and {count - len(named)} more" if count > len(named) else ""
    return [
        f"conditions: {count} value(s) no machine reads left unknown ({'; '.join(named)}{more}): a core "
        f"runs at {FREQ_MIN_HZ / 1e6:g} MHz to {FREQ_MAX_HZ / 1e9:g} GHz, a throttle counter rises at "
        f"most {THROTTLE_MAX_RATE:g} events/s, a NIC counts at most 4 x 400 Gbit/s over the trials "
        "(a forged or damaged file, or one written before npmpi bounded its reads)"
    ]


def rank_sources(info: dict, ranks: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """Per rank: whether its frequency is a cycles counter's, and how many NIC counters it sums."""
    texts = [info.get(str(r)) if isinstance(info.get(str(r)), dict) else {} for r in ranks]
    cycles = [str(t.get("cpu_freq_source", "")).startswith("perf") for t in texts]
    counted = [len(t["nic_counters"]) if isinstance(t.get("nic_counters"), list) else 1 for t in texts]
    return np.array(cycles, dtype=bool), np.array(counted, dtype=float)


def analyse_conditions(run, trials_run: np.ndarray) -> CondFigures | None:
    """The run's conditions; None for a file without them."""
    cond = getattr(run.pingpong, "conditions", None)
    if cond is None:
        return None
    pp = run.pingpong
    ranks = [int(r) for r in cond.ranks]
    cycles, interfaces = rank_sources(cond.info, ranks)
    elapsed = np.nansum(np.where(np.asarray(pp.trial_s) > 0, pp.trial_s, np.nan), axis=1)[:, None]
    sizes = [int(x) for x in pp.size_bytes]
    v, refused = bounded(
        cond.values, elapsed, cycles, interfaces, lambda i: f"{sizes[i[0]]} B (rank {ranks[i[1]]})"
    )
    hosts_all = [str(h) for h in run.layout.get("host", [])]
    nodes_all = [int(x) for x in run.layout.get("node_index", [])] or list(range(len(hosts_all)))
    first_of_node: dict[int, int] = {}
    for j, r in enumerate(ranks):
        first_of_node.setdefault(nodes_all[r] if 0 <= r < len(nodes_all) else -1 - r, j)
    cols = sorted(first_of_node.values())
    tx = v["nic_tx_bytes"][:, cols]
    wire = np.where(np.isfinite(tx).all(axis=1), np.nansum(tx, axis=1), np.nan)
    share = _crossing_share(run, ranks, nodes_all)
    every_rank = ranks_moving(run.attrs)  # a collective's factor is one rank's bytes: all ranks move as much
    payload = (
        np.asarray(pp.size_bytes, float)
        * pp.iterations
        * trials_run
        * run_mode_factors(run.attrs)[0]
        * every_rank
        * share
    )
    throttle = throttle_events(v)
    figures = CondFigures.of(
        v,
        throttle,
        ranks=ranks,
        hosts=[hosts_all[r] if 0 <= r < len(hosts_all) else "?" for r in ranks],
        wire_tx_bytes=wire,
        payload_bytes=payload,
        flags=row_flags(freq_moved(v), throttle),
        info=cond.info,
        crossing=share > 0,
    )
    figures.warnings = refused + _wire_warnings(figures, pp.size_bytes)
    return figures


def _wire_warnings(c: CondFigures, size_bytes) -> list[str]:
    """A pair meant to cross nodes whose NICs moved (almost) nothing, or far more than its payload."""
    if not c.crossing:
        return []
    return wire_warnings(c.wire_ratio, np.asarray(size_bytes), [f"{int(s)} B" for s in size_bytes])


WIRE_WORDS = (
    f"less than {WIRE_LOW:g} byte per payload byte: its traffic did not go through the NICs counted "
    "(shared memory, another interface?)",
    f"more than {WIRE_HIGH:g} bytes per payload byte beyond its frames' headers: far more than its "
    "payload (retransmissions, or other traffic on the nodes)",
)


def wire_high(size_bytes) -> np.ndarray:
    """The ratio above which a size's wire bytes are far more than its payload: WIRE_HIGH with
    HEADER_BYTES per message allowed (a 1-byte message's frame alone is about 67 bytes: a crossing
    map measured 90 to 150 wire bytes per payload byte at 1 B, 1.004 at 256 KiB)."""
    return WIRE_HIGH * (1.0 + HEADER_BYTES / np.maximum(np.asarray(size_bytes, dtype=float), 1.0))


def wire_warning(ratio: float, size_bytes: int) -> str:
    """What one wire ratio at a size says ('' when within its bounds, or unknown)."""
    if not math.isfinite(ratio):
        return ""
    return WIRE_WORDS[0] if ratio < WIRE_LOW else WIRE_WORDS[1] if ratio > wire_high(size_bytes) else ""


def wire_warnings(
    ratio: np.ndarray,
    size_bytes: np.ndarray,
    places: list[str],
    unit: str = "size(s)",
    who: str = "the pair meant to cross nodes",
) -> list[str]:
    """One line per kind of wire warning among `ratio`'s finite values (each at its size), naming up
    to 5 `places`."""
    out = []
    for test, words in ((ratio < WIRE_LOW, WIRE_WORDS[0]), (ratio > wire_high(size_bytes), WIRE_WORDS[1])):
        hit = np.nonzero(test & np.isfinite(ratio))[0]
        if hit.size:
            named = ", ".join(places[k] for k in hit[:5]) + (" ..." if hit.size > 5 else "")
            out.append(f"bytes on the wire: {who} moved {words}, at {hit.size} {unit}: {named}")
    return out


def size_columns(c: CondFigures, k: int, energy_pj_bit: float | None) -> dict[str, Any]:
    """A size's CSV/JSON columns: the mean GHz, the flag, wire bytes, then each rank's figures."""
    ratio = float(c.wire_ratio[k])
    row: dict[str, Any] = {
        "cpu_freq_ghz": float(c.mean_ghz[k]),
        "conditions_flag": c.flags[k],
        "nic_tx_bytes": float(c.wire_tx_bytes[k]),
        "wire_bytes_per_payload_byte": ratio,
    }
    if energy_pj_bit is not None:
        row["energy_pj_wire_bit"] = energy_pj_bit / ratio if ratio > 0 else math.nan
    for j, r in enumerate(c.ranks):
        row[f"rank{r}_cpu_freq_ghz"] = float(c.freq_hz[k, j]) / 1e9
        row[f"rank{r}_cpu_freq_min_ghz"] = float(c.freq_min_hz[k, j]) / 1e9
        row[f"rank{r}_cpu_freq_max_ghz"] = float(c.freq_max_hz[k, j]) / 1e9
        row[f"rank{r}_throttle_count"] = float(c.throttle[k, j])
    return row


def _changed(before: dict, after: dict) -> list[str]:
    return [
        f"{key} {before.get(key)!s} -> {after.get(key)!s}"
        for key in SETTING_KEYS
        if before.get(key) != after.get(key)
    ]


def summary(c: CondFigures) -> dict[str, Any]:
    """Per node (host): its first measuring rank's core settings, what changed, each rank's source."""
    flags = c.flags.counts() if isinstance(c.flags, CodedWords) else Counter(c.flags)  # a map's: millions
    nodes: dict[str, dict] = {}
    for r, host in zip(c.ranks, c.hosts, strict=True):
        info = c.info.get(str(r), {}) if isinstance(c.info.get(str(r)), dict) else {}
        before = info.get("settings_before") if isinstance(info.get("settings_before"), dict) else {}
        after = info.get("settings_after") if isinstance(info.get("settings_after"), dict) else before
        settings = {k: before.get(k) for k in SETTING_KEYS if k in before}
        node = nodes.setdefault(
            host, {"host": host, "settings": settings, "changed": _changed(before, after), "ranks": []}
        )
        node["ranks"].append({
            "rank": r, "cpu": info.get("cpu"), "cpu_freq_source": info.get("cpu_freq_source", "unknown"),
            "cpu_freq_reason": info.get("cpu_freq_reason", ""), "nic_counters": info.get("nic_counters", []),
            **({"refused": info["refused"]} if isinstance(info.get("refused"), list) else {}),
        })  # fmt: skip
    return {
        "conditions": {
            "nodes": list(nodes.values()),
            "freq_moved_threshold_fraction": FREQ_MOVED_FRACTION,
            "flagged_sizes": {w: sum(n for f, n in flags.items() if w in f) for w in (MOVED, THROTTLED)},
            "flagged_unit": c.unit,
            "wire_warnings": list(c.warnings),
        }
    }


def _setting_text(s: dict) -> str:
    parts = []
    for key in SETTING_KEYS:
        if key not in s:
            continue
        value = s[key]
        if key.endswith("_hz") and isinstance(value, (int, float)):
            value = f"{value / 1e9:.3g} GHz"
        elif key == "idle_states" and isinstance(value, list):
            value = "enabled " + (
                ",".join(str(x.get("name")) for x in value if isinstance(x, dict) and x.get("enabled"))
                or "none"
            )
        parts.append(f"{key} {value}")
    return "; ".join(parts) or "no cpufreq, turbo, idle or RAPL settings readable"


def summary_lines(s: dict[str, Any]) -> list[str]:
    """The text summary's conditions lines ('' for a file without them)."""
    cond = s.get("conditions")
    if not cond:
        return []
    out = []
    for node in cond["nodes"][:MAX_NODE_LINES]:
        out.append(f"  conditions on {node['host']}: {_setting_text(node['settings'])}")
        if node["changed"]:
            out.append(f"  conditions changed on {node['host']} during the run: {'; '.join(node['changed'])}")
        sources = sorted({(r["cpu_freq_source"], r["cpu_freq_reason"]) for r in node["ranks"]})
        for source, reason in sources:
            out.append(f"  core frequency on {node['host']}: {reason or source}")
        refused = [str(w) for r in node["ranks"] for w in r.get("refused", [])]
        if refused:
            more = f" (and {len(refused) - 1} more: see --json)" if len(refused) > 1 else ""
            out.append(f"  conditions refused on {node['host']}: {refused[0]}{more}")
    if len(cond["nodes"]) > MAX_NODE_LINES:
        out.append(f"  conditions of {len(cond['nodes']) - MAX_NODE_LINES} more node(s): see --json")
    flagged = cond["flagged_sizes"]
    if any(flagged.values()):
        out.append(
            f"  conditions flag: {flagged[MOVED]} {cond.get('flagged_unit', 'size(s)')} whose core "
            f"frequency moved more than {cond['freq_moved_threshold_fraction']:.0%} within them, "
            f"{flagged[THROTTLED]} that throttled"
        )
    return [shown(line) for line in out]  # the file's text: bounded, one printable line each


TABLE_HEADERS = ["GHz", "conditions"]


def table_cells(c: CondFigures | None, k: int) -> list[str]:
    """A size's cells in the text table: the ranks' mean GHz and the conditions flag ('-': none)."""
    if c is None:
        return []
    ghz = c.mean_ghz[k]
    return [f"{ghz:.3g}" if math.isfinite(ghz) else "?", c.flags[k] or "-"]
