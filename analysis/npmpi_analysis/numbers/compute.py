"""The paper's formulas and the array math behind them (pure numpy, no files, no MPI).

Units are in the names: bit/s (`_bit_s`), watts (`_w`), bits per joule (`_bit_j`), picojoules per
bit (`_pj_bit`), seconds (`_s`). Every function works on whole arrays, one element per message size
or per sample; nothing loops over samples in Python.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from npmpi.core.modes import MODE_TABLE
from npmpi.core.safetext import printable, shown
from npmpi.protocols import PROTOCOLS

BITS_PER_BYTE = 8
PJ_PER_J = 1e12

FLAG_OK = 0
FLAG_SHORT = 1  # window shorter than the sample interval: nearest samples used
FLAG_GAP = 2  # window long enough but holding no sample: nearest samples used
FLAG_NONE = 3  # no sample in or near the window: no power
FLAG_RECORDED_GAP = 4  # the window overlaps a recorded sampling gap (a stopped power rank): reason kept
FLAG_NAMES = ("", "short", "gap", "none", "recorded gap")  # ordered: a larger code is more serious


@dataclass
class Bandwidth:
    """Per-size timing figures (one element per message size)."""

    size_bytes: np.ndarray
    iterations: np.ndarray
    trials_run: np.ndarray  # trials with a finite time
    best_s: np.ndarray  # the best (shortest) trial
    trial_mean_s: np.ndarray
    trial_sigma_s: np.ndarray  # standard deviation of the mean of the trial times
    one_way_s: np.ndarray  # best / (D i): NetPIPE's time (D = 2 for a ping-pong, see run_mode_factors)
    peak_bit_s: np.ndarray  # bandwidth of the best trial: NetPIPE's figure
    mean_bit_s: np.ndarray  # F i m / mean trial time (F = 2 for a ping-pong)
    sigma_bit_s: np.ndarray  # b sigma_t / t
    min_bit_s: np.ndarray  # slowest trial
    max_bit_s: np.ndarray  # fastest trial (= peak)
    trial_bit_s: np.ndarray  # [n, trials] every trial's bandwidth, NaN where it did not run
    worst_s: np.ndarray | None = None  # the slowest trial (None: as the best)
    trial_s: np.ndarray | None = None  # [n, trials] every trial's time, NaN where it did not run


PINGPONG_FACTORS = (2, 2)  # what files before format 1.2 (ping-pong only) imply


def float_attr(attrs: dict, key: str) -> float | None:
    """A finite numeric attribute, or None (missing, text, a bool, NaN or infinite)."""
    value = attrs.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


# Timing attributes of power groups and channels the analysis uses, with the values that can be
# true: a clock offset or a time beyond these is damage, a meter delay over an hour is not a meter's
# (the calibration file's own bound). A value outside is named and left out (issue 28).
TIMING_BOUNDS = {
    "clock_offset_start_s": (-1e9, 1e9),
    "clock_offset_end_s": (-1e9, 1e9),
    "clock_offset_start_measured_unix_s": (0.0, 1e10),
    "clock_offset_end_measured_unix_s": (0.0, 1e10),
    "clock_offset_start_uncertainty_s": (0.0, 3600.0),
    "clock_offset_end_uncertainty_s": (0.0, 3600.0),
    "meter_delay_s": (0.0, 3600.0),
    "meter_delay_uncertainty_s": (0.0, 3600.0),
}


def checked_timing_attrs(attrs: dict, where: str, problems: list[str]) -> dict:
    """`attrs` without the TIMING_BOUNDS attributes whose value is not a number within bounds, each
    one named in `problems` (an infinite clock offset, a meter delay of -1e6 s)."""
    bad = {}
    for key, (lo, hi) in TIMING_BOUNDS.items():
        if key not in attrs:
            continue
        value = attrs[key]
        number = not isinstance(value, bool) and isinstance(value, (int, float))
        if not (number and lo <= float(value) <= hi):
            bad[key] = value
            problems.append(
                f"{where}: attribute {key} = {str(value)[:40]!r} is not a number from {lo:g} to {hi:g}: "
                "it is ignored"
            )
    return {k: v for k, v in attrs.items() if k not in bad} if bad else attrs


def run_mode_factors(attrs: dict) -> tuple[int, int]:
    """(bytes_per_iteration_factor, one_way_divisor) of a run (docs/file-format.md): bytes moved per
    iteration / message size, and one message's time = trial / (divisor i). Ping-pong's (2, 2) when
    the file has no such attributes."""
    try:
        factor = int(attrs.get("bytes_per_iteration_factor", PINGPONG_FACTORS[0]))
        divisor = int(attrs.get("one_way_divisor", PINGPONG_FACTORS[1]))
    except (TypeError, ValueError, OverflowError):  # the reader refuses such files; never crash here
        return PINGPONG_FACTORS
    return (factor, divisor) if factor > 0 and divisor > 0 else PINGPONG_FACTORS


def protocol_of(attrs: dict) -> str:
    """The run's protocol (1.7; before: MPI send/receive); an unknown one cut short (a forged file)."""
    name = str(attrs.get("protocol", "") or "").strip() or "mpi"
    return name if name in PROTOCOLS else printable(name)[:16] + ("…" if len(printable(name)) > 16 else "")


def protocol_label(attrs: dict) -> str:
    """The protocol and what its link was granted, in one phrase: 'mpi', 'tcp (socket buffer
    asked 65536 B, granted 131072 B send / 131072 B receive; a new connection per trial)'."""
    import json

    name = protocol_of(attrs)
    try:
        settings = json.loads(str(attrs.get("protocol_settings", "") or "{}"))
    except (ValueError, RecursionError):
        return name + " (protocol_settings unreadable)"
    notes = []
    if not isinstance(settings, dict):
        return name
    asked = settings.get("requested") or {}
    pairs = settings.get("pairs") or [{}]
    first = (pairs[0] or {}).get("transmitter") or {} if isinstance(pairs, list) else {}
    if isinstance(asked, dict) and asked.get("socket_buffer_bytes"):
        notes.append(
            f"socket buffer asked {asked['socket_buffer_bytes']} B, granted "
            f"{first.get('granted_sndbuf_bytes', '?')} B send / "
            f"{first.get('granted_rcvbuf_bytes', '?')} B receive"
        )
    if isinstance(asked, dict) and asked.get("tcp_reconnect"):
        notes.append("a new connection per trial")
    if isinstance(first, dict) and first.get("local_address"):
        notes.append(f"{first.get('local_address')} -> {first.get('peer_address', '?')}")
    if isinstance(first, dict) and name in ("rma", "memcpy"):
        notes += _one_sided_or_copy_notes(name, first)
    return shown(name + (f" ({'; '.join(notes)})" if notes else ""), 300)


def _one_sided_or_copy_notes(name: str, granted: dict) -> list[str]:
    """rma: 'MPI_Put, MPI_Win_fence, window over the receive buffer (per size), unified memory';
    memcpy: 'numpy.copyto between the send and receive pools, 4096 B aligned, every measuring rank'."""
    if name == "rma":
        where = f"window over the {granted.get('window_over', '?')}"
        where += (
            " (per size)" if granted.get("window_per_size") else f" ({granted.get('window_bytes', '?')} B)"
        )
        return [
            str(granted.get("op", "?")),
            str(granted.get("sync", "?")),
            where,
            f"{granted.get('memory_model', '?')} memory model",
        ]
    return [
        f"{granted.get('copy', '?')} between {granted.get('buffers', '?')}",
        f"{granted.get('alignment_bytes', '?')} B aligned",
        "every measuring rank copies on its own",
    ]


def mode_label(attrs: dict) -> str:
    """What the run's bandwidth is: e.g. 'ping-pong', 'stream (window 64)', 'bidirectional (both
    directions), aggregate of 2 pairs'; a protocol other than MPI's comes first ('tcp ping-pong')."""
    name = str(attrs.get("mode", "pingpong") or "pingpong")
    mode = MODE_TABLE.get(name)
    window = int(attrs["window"]) if isinstance(attrs.get("window"), (int, np.integer)) else "?"
    text = mode.labelled(mode.analysis_label, window) if mode else name
    if protocol_of(attrs) != "mpi":
        text = f"{protocol_of(attrs)} {text}"
    pairs = attrs.get("pairs", 1)
    if isinstance(pairs, (int, np.integer)) and pairs > 1:
        text += f", aggregate of {int(pairs)} pairs"
    if attrs.get("buffers") == "netpipe":
        text += ", one buffer per size (NetPIPE's)"
    elif attrs.get("buffers") == "osu" and window != 1:
        text += ", every message of a window in one buffer (OSU's -b single, outside MPI's rules)"
    elif str(attrs.get("buffers_note", "")).startswith("from "):  # a window sharing the pool's regions
        text += f", {str(attrs['buffers_note']).split(':')[0]} (outside MPI's rules there)"
    return text


def trial_bandwidth_bit_s(
    size_bytes: np.ndarray, iterations: np.ndarray, trial_s: np.ndarray, bytes_per_iteration_factor: int = 2
) -> np.ndarray:
    """b = F i m / t for every trial (m in bits; F = 2 for a ping-pong's round trip); NaN where t is NaN."""
    bits = (
        float(bytes_per_iteration_factor)
        * np.asarray(iterations, dtype=float)
        * BITS_PER_BYTE
        * np.asarray(size_bytes, dtype=float)
    )
    return bits[:, None] / np.asarray(trial_s, dtype=float)


def sigma_of_mean(values: np.ndarray) -> np.ndarray:
    """Standard deviation of the mean per row, s / sqrt(k) with s the sample std (ddof 1); 0 if k < 2."""
    finite = np.isfinite(values)
    k = finite.sum(axis=1)
    x = np.where(finite, values, 0.0)
    mean = x.sum(axis=1) / np.maximum(k, 1)
    dev = np.where(finite, values - mean[:, None], 0.0)
    var = (dev**2).sum(axis=1) / np.maximum(k - 1, 1)
    return np.where(k >= 2, np.sqrt(var / np.maximum(k, 1)), 0.0)


def bandwidth(
    size_bytes: np.ndarray,
    iterations: np.ndarray,
    trial_s: np.ndarray,
    bytes_per_iteration_factor: int = 2,
    one_way_divisor: int = 2,
) -> Bandwidth:
    """Every bandwidth figure of every size: peak (best trial), mean ± sigma_b, spread, latency.

    sigma_b = b sigma_t / t: the relative error of the time carries over to the bandwidth (the paper
    prints b / (sigma_t t), which is dimensionally wrong). The factors are run_mode_factors':
    b = F i m / t and one-way time = best / (D i); ping-pong's 2 and 2 by default.
    """
    size_bytes = np.asarray(size_bytes, dtype=np.int64)
    iterations = np.asarray(iterations, dtype=np.int64)
    trial_s = np.asarray(trial_s, dtype=float)
    # keep the trial width of an empty table (a run stopped during its first size): (0, -1) has none
    trial_s = trial_s.reshape(len(size_bytes), trial_s.shape[-1] if trial_s.ndim == 2 else -1)
    n = len(size_bytes)
    per_trial = trial_bandwidth_bit_s(size_bytes, iterations, trial_s, bytes_per_iteration_factor)
    finite = np.isfinite(trial_s)
    runs = finite.sum(axis=1)
    if n == 0:
        z = np.zeros(0)
        return Bandwidth(size_bytes, iterations, runs, z, z, z, z, z, z, z, z, z, per_trial, trial_s=trial_s)
    best = np.min(np.where(finite, trial_s, np.inf), axis=1)
    best[runs == 0] = np.nan
    mean_t = np.where(finite, trial_s, 0.0).sum(axis=1) / np.maximum(runs, 1)
    mean_t[runs == 0] = np.nan
    sigma_t = sigma_of_mean(trial_s)
    bits = float(bytes_per_iteration_factor) * iterations * BITS_PER_BYTE * size_bytes.astype(float)
    mean_b = bits / mean_t
    worst = np.max(np.where(finite, trial_s, -np.inf), axis=1)
    worst[runs == 0] = np.nan
    return Bandwidth(
        size_bytes=size_bytes,
        iterations=iterations,
        trials_run=runs,
        best_s=best,
        trial_mean_s=mean_t,
        trial_sigma_s=sigma_t,
        one_way_s=best / (float(one_way_divisor) * iterations),
        peak_bit_s=bits / best,
        mean_bit_s=mean_b,
        sigma_bit_s=mean_b * sigma_t / mean_t,
        min_bit_s=bits / worst,
        max_bit_s=bits / best,
        trial_bit_s=per_trial,
        worst_s=worst,
        trial_s=trial_s,
    )


def latency_spread_s(bw: Bandwidth) -> tuple[np.ndarray, np.ndarray]:
    """(mean, largest) one-way time per size: the mean and the slowest trial's time / (D i), OSU's
    average and maximum latency beside NetPIPE's best (one_way_s); NaN where no trial ran."""
    with np.errstate(divide="ignore", invalid="ignore"):
        per_second = bw.one_way_s / bw.best_s  # 1 / (D i)
        worst = bw.worst_s if bw.worst_s is not None else bw.best_s
        return bw.trial_mean_s * per_second, worst * per_second


def pipelined(attrs: dict) -> bool:
    """Whether a run's time per message is one of a window in flight (a stream; bidir with a window):
    trial time / (window x iterations) is then the inverse of a message rate, not a latency."""
    mode, window = MODE_TABLE.get(str(attrs.get("mode", ""))), attrs.get("window", 1)
    if mode is None or mode.windowed:  # a stream: its acknowledged window, even of 1
        return mode is not None
    return isinstance(window, (int, np.integer)) and mode.messages_per_iteration(int(window)) > 1


def energy_basis(bw: Bandwidth, ranks: float) -> Bandwidth:
    """The bit rate that energy per bit (and bits per joule) divides by: every moving rank's bits
    (`ranks`: npmpi_analysis.numbers.kinds.ranks_moving, 1 for a run)."""
    from dataclasses import replace

    if ranks == 1:
        return bw
    return replace(bw, mean_bit_s=bw.mean_bit_s * ranks, sigma_bit_s=bw.sigma_bit_s * ranks)


def shows_message_rate(attrs: dict) -> bool:
    """Whether the table shows messages per second: a stream (osu_mbw_mr's figure) or several pairs."""
    pairs = attrs.get("pairs", 1)
    mode = MODE_TABLE.get(str(attrs.get("mode", "")))
    return bool(mode and mode.windowed) or (isinstance(pairs, (int, np.integer)) and pairs > 1)


def message_rate_per_s(bw: Bandwidth, messages_per_iteration: int) -> np.ndarray:
    """Messages per second in the best trial, osu_mbw_mr's figure: F i / t (F: the mode's bytes per
    iteration factor, the messages of all pairs per iteration)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return float(messages_per_iteration) * bw.iterations / bw.best_s


@dataclass
class EnergyRate:
    """Bits per joule (= bit/s per watt) with the paper's bounds and propagated uncertainty."""

    rate_bit_j: np.ndarray
    sigma_bit_j: np.ndarray
    high_bit_j: np.ndarray  # (b + sigma_b) / (p - sigma_p); NaN when p - sigma_p <= 0
    low_bit_j: np.ndarray  # (b - sigma_b) / (p + sigma_p)


def energy_rate(b: np.ndarray, sigma_b: np.ndarray, p: np.ndarray, sigma_p: np.ndarray) -> EnergyRate:
    """r = b / p, bounds (b ± sigma_b) / (p ∓ sigma_p), sigma_r = r sqrt((sigma_b/b)² + (sigma_p/p)²)."""
    b, sigma_b, p, sigma_p = (np.asarray(x, dtype=float) for x in (b, sigma_b, p, sigma_p))
    with np.errstate(divide="ignore", invalid="ignore"):
        good = p > 0
        r = np.where(good, b / p, np.nan)
        sigma_r = r * np.sqrt((sigma_b / b) ** 2 + (sigma_p / p) ** 2)
        denom_hi = p - sigma_p
        high = np.where(good & (denom_hi > 0), (b + sigma_b) / denom_hi, np.nan)
        low = np.where(good, (b - sigma_b) / (p + sigma_p), np.nan)
    return EnergyRate(r, sigma_r, high, low)


def energy_per_bit_pj(
    b: np.ndarray, sigma_b: np.ndarray, p: np.ndarray, sigma_p: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """e = p / b in pJ/bit and sigma_e = (1/b) sqrt(sigma_p² + (p sigma_b / b)²) (also for p near 0)."""
    b, sigma_b, p, sigma_p = (np.asarray(x, dtype=float) for x in (b, sigma_b, p, sigma_p))
    with np.errstate(divide="ignore", invalid="ignore"):
        good = b > 0
        e = np.where(good, PJ_PER_J * p / b, np.nan)
        sigma = np.where(good, PJ_PER_J / b * np.sqrt(sigma_p**2 + (p * sigma_b / b) ** 2), np.nan)
    return e, sigma


def not_above_idle(
    b: np.ndarray, dyn_w: np.ndarray, dyn_sigma_w: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(True where the power above idle is not above its own sigma, or negative; the upper bound of
    the dynamic energy per bit there, in pJ/bit: the power above idle, if positive, plus 2 sigma).
    Such a difference is noise: its value (down to -3.7e4 pJ/bit on a busy host) says nothing."""
    with np.errstate(invalid="ignore"):
        low = np.isfinite(dyn_w) & ~(dyn_w > dyn_sigma_w)
        bound_w = np.where(low, np.maximum(dyn_w, 0.0) + 2.0 * dyn_sigma_w, np.nan)
    bound, _ = energy_per_bit_pj(b, np.zeros_like(b), bound_w, np.zeros_like(bound_w))
    return low, bound


def correlation(x: np.ndarray, y: np.ndarray) -> float:
    """numpy.corrcoef of x and y over the elements where both are finite; NaN if undefined."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    ok = np.isfinite(x) & np.isfinite(y)
    if ok.sum() < 2 or np.ptp(x[ok]) == 0 or np.ptp(y[ok]) == 0:
        return float("nan")
    with np.errstate(all="ignore"):
        c = float(np.corrcoef(x[ok], y[ok])[0, 1])
    return c if math.isfinite(c) else float("nan")


def power_constant(power_w: np.ndarray, sigma_w: np.ndarray) -> bool:
    """Whether the power hardly changed over the sizes (its spread no larger than a size's typical
    σ_p): the energy rate is then the bandwidth over a constant and their correlation is ~1 by
    construction, not a finding (e.g. an estimate at full CPU load)."""
    p, s = np.asarray(power_w, dtype=float), np.asarray(sigma_w, dtype=float)
    ok = np.isfinite(p)
    if ok.sum() < 2:
        return False
    typical = (
        float(np.nanmedian(np.where(np.isfinite(s[ok]), s[ok], np.nan))) if np.isfinite(s[ok]).any() else 0.0
    )
    return float(np.std(p[ok])) <= typical


def scaled(x: np.ndarray) -> np.ndarray:
    """x divided by its largest finite value (the paper's 'scaled' curves)."""
    x = np.asarray(x, dtype=float)
    finite = x[np.isfinite(x)]
    if finite.size == 0 or np.max(np.abs(finite)) == 0:
        return np.full_like(x, np.nan)
    return x / np.max(finite)
