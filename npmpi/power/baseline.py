"""Idle baselines: every rank waits without spinning while the power ranks sample the idle nodes.

Open MPI's blocking receive busy-polls a core, so a rank waiting in `comm.Recv` during a baseline
makes the "idle" power that of a busy core. Rank 0 therefore starts a baseline by sending
CMD_BASELINE (phase start) to every other rank on the control tag, sleeps through it and ends it
with CMD_BASELINE (phase end). In between each rank waits on a non-blocking receive checked every
POLL_S, asleep otherwise. At the end each rank sends rank 0 the CPU seconds its process used
(all its threads: a power rank's meter threads count) and, on a power rank, the node's
whole-system CPU utilisation from /proc/stat over the same span, so a disturbed baseline shows;
rank 0 stores both in the run file (docs/file-format.md).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from npmpi.core.messages import BASELINE_TAG, CMD_BASELINE, CTRL_TAG

PHASE_END = 0
PHASE_START = 1
POLL_S = 0.01
SLEEP_SLICE_S = 0.1  # rank 0 checks for a stop request this often while it sleeps
MAX_SETTLE_S = 2.0
# the most the baseline after the sweep is lengthened beyond --baseline to cover the meters' delays
# and sample intervals: a calibrated delay (at most MAX_METER_DELAY_S plus 3 uncertainties of at most
# as much) and two intervals of a slow meter; a longer wait is no measurement but a hang
MAX_AFTER_EXTENSION_S = 300.0
PROC_STAT = "/proc/stat"


def system_ticks(path: str = PROC_STAT) -> tuple[int, int] | None:
    """(busy, total) jiffies of the node's aggregate cpu line; None when unreadable."""
    from npmpi.meters.estimate import read_cpu_ticks

    try:
        return read_cpu_ticks(path)
    except (OSError, ValueError):
        return None


def busy_fraction(before: tuple[int, int] | None, after: tuple[int, int] | None) -> float:
    """The fraction of all the node's CPU time that was busy between two reads (NaN if unknown)."""
    if before is None or after is None or after[1] <= before[1]:
        return math.nan
    return min(max((after[0] - before[0]) / (after[1] - before[1]), 0.0), 1.0)


def take_part(comm, ctrl: np.ndarray, node_stat: bool, root: int = 0) -> int | None:
    """On a rank that just received a baseline's start: wait quietly for its end and report.

    Returns None when the baseline ended normally, or the exit code when rank 0 sent a stop
    instead (it failed or was interrupted during the baseline)."""
    cpu0 = time.process_time()
    ticks0 = system_ticks() if node_stat else None
    req = comm.Irecv(ctrl, root, CTRL_TAG)
    while not req.Test():
        time.sleep(POLL_S)
    if int(ctrl[0]) != CMD_BASELINE:
        return int(ctrl[1])  # a stop: the exit code travels in the second field
    cpu_s = time.process_time() - cpu0
    busy = busy_fraction(ticks0, system_ticks()) if node_stat else math.nan
    comm.Send(np.array([cpu_s, busy], dtype=np.float64), root, BASELINE_TAG)
    return None


@dataclass
class BaselineWindow:
    """One baseline as rank 0 saw it: its window on rank 0's clock and every rank's report."""

    start_unix_s: float
    end_unix_s: float
    cpu_s: np.ndarray  # per rank of the world (rank 0 included)
    system_busy: np.ndarray  # per rank: the node's utilisation as its power rank measured, else NaN
    silent: tuple[int, ...] = ()  # power ranks that did not reply within their patience (frozen)

    @property
    def seconds(self) -> float:
        return self.end_unix_s - self.start_unix_s


def _sleep_until(deadline: float, stop) -> None:
    """Sleep until time.monotonic() reaches `deadline`, waking for a stop request."""
    while not stop:
        left = deadline - time.monotonic()
        if left <= 0:
            return
        time.sleep(min(left, SLEEP_SLICE_S))


def longest_span_s(power_nodes) -> float:
    """The longest span one reading covers over the nodes' channels and the fabric's (sample or
    averaging interval)."""
    return max(
        (
            max(float(c.get("sample_interval_s") or 0.0), float(c.get("averaging_s") or 0.0))
            for p in power_nodes
            for c in [*p["channels"], *(p.get("fabric") or {}).get("channels", ())]
        ),
        default=0.0,
    )


def settle_s(power_nodes) -> float:
    """How long every rank is quiet before a baseline's window opens: the longest span a reading
    covers, so that no reading of the window averages the work done before the baseline (start-up,
    clock offsets, the last size); at most MAX_SETTLE_S."""
    return min(max(longest_span_s(power_nodes), 0.0), MAX_SETTLE_S)


def run_baseline(
    comm,
    seconds: float,
    stop=None,
    settle: float = 0.0,
    skip=(),
    patience: dict | None = None,
    stall: tuple[float, list, str] = (0.0, [], "an idle baseline"),
) -> BaselineWindow:
    """Rank 0: hold every other rank quiet for `settle` + `seconds` (less if a stop request comes);
    the baseline's window is the last `seconds` of it. Ranks in `skip` (power ranks given up on) take
    no part; a rank in `patience` (rank -> seconds) that does not reply within its patience after the
    end is left out and named in the window's `silent`. Any other rank that does not reply within
    `stall` (seconds, 0: no bound; every rank's host; what the baseline is) raises RankStalled: a
    measuring rank stopped now would otherwise hang the job here."""
    size = comm.Get_size()
    others = [r for r in range(1, size) if r not in skip]
    patience = patience or {}
    silent = []
    ctrl = np.array([CMD_BASELINE, PHASE_START, 0, 0], dtype=np.int64)
    for rank in others:
        comm.Send(ctrl, rank, CTRL_TAG)
    cpu0 = time.process_time()
    cpu = np.full(size, np.nan)
    busy = np.full(size, np.nan)
    start = time.time()
    try:
        _sleep_until(time.monotonic() + settle, stop)
        start = time.time()
        _sleep_until(time.monotonic() + seconds, stop)
    finally:
        # even when a second stop signal raises here: every rank leaves the baseline and replies, so
        # the next command (a flush, a stop) finds each of them in its own loop again
        end = time.time()
        cpu[0] = time.process_time() - cpu0
        ctrl[1] = PHASE_END
        for rank in others:
            comm.Send(ctrl, rank, CTRL_TAG)
        ended = time.monotonic()
        for rank in others:
            reply = np.zeros(2, dtype=np.float64)
            if _reply(comm, rank, reply, ended, patience, stall):
                cpu[rank], busy[rank] = reply
            else:
                silent.append(rank)  # a frozen power rank: not waited for any longer
    return BaselineWindow(start, end, cpu, busy, tuple(silent))


def _reply(comm, rank: int, reply: np.ndarray, ended: float, patience: dict, stall) -> bool:
    """Wait asleep for `rank`'s report after a baseline's end: True once it came, False when a power
    rank's patience ran out; RankStalled when another rank's stall bound did."""
    bound_s, hosts, during = stall
    limit = patience.get(rank, bound_s if bound_s > 0 else math.inf)
    req = comm.Irecv(reply, rank, BASELINE_TAG)
    while not req.Test():  # asleep, not spinning, should a rank be slow to answer
        time.sleep(POLL_S / 10)
        waited = time.monotonic() - ended
        if waited > limit:
            if rank not in patience:
                from npmpi.core.ending import stalled_message
                from npmpi.core.errors import RankStalled

                message = stalled_message(rank, hosts, waited, bound_s, f"the end of {during}")
                raise RankStalled(message, bound_s)
            req.Cancel()
            req.Wait()
            return False
    return True


def after_baseline_s(baseline_s: float, power_nodes, largest_delay_s: float) -> float:
    """How long the baseline after the sweep lasts: --baseline, but at least the largest meter delay
    plus two sample (or averaging) intervals, so the samples describing the last sizes are taken;
    that extension is at most MAX_AFTER_EXTENSION_S whatever a calibration file or a meter claims."""
    extension = largest_delay_s + 2.0 * longest_span_s(power_nodes)
    if not math.isfinite(extension):
        extension = MAX_AFTER_EXTENSION_S
    return max(baseline_s, min(extension, MAX_AFTER_EXTENSION_S))


def store_baseline(writer, layout, window, after: bool) -> None:
    """A baseline's window (/power attributes), each rank's CPU seconds (/layout/baseline_cpu_s)
    and each node's whole-system CPU utilisation (its power rank's /proc/stat)."""
    prefix = "baseline_after" if after else "baseline"
    writer.set_group_attrs(
        "power",
        **{f"{prefix}_start_unix_s": window.start_unix_s, f"{prefix}_end_unix_s": window.end_unix_s},
    )
    writer.set_baseline_cpu(1 if after else 0, window.cpu_s)
    for node, rank in enumerate(layout.power_ranks):
        writer.set_group_attrs(
            f"power/node{node}", **{f"{prefix}_system_busy_fraction": float(window.system_busy[rank])}
        )
    writer.flush()
