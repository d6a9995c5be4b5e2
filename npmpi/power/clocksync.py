"""Clock offset of a remote rank's wall clock against rank 0's, NTP-style.

Rank 0 sends a ping, the remote answers with its `time.time()`, rank 0 notes its own clock before
and after. Of several exchanges the one with the smallest round trip wins (the least queueing):
offset = remote - (t_send + t_receive)/2, uncertainty = round trip / 2 (the remote's reading lies
somewhere inside the round trip).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from npmpi.core.messages import CLOCK_TAG

DEFAULT_EXCHANGES = 32


@dataclass(frozen=True)
class ClockOffset:
    """Remote clock minus rank 0's clock, measured at `measured_unix_s` on rank 0's clock."""

    offset_s: float
    uncertainty_s: float
    round_trip_s: float
    measured_unix_s: float


def best_offset(t_send: np.ndarray, t_remote: np.ndarray, t_receive: np.ndarray) -> ClockOffset:
    """The exchange with the smallest round trip gives the offset (pure, tested by hand)."""
    rtt = t_receive - t_send
    k = int(np.argmin(rtt))
    midpoint = 0.5 * (t_send[k] + t_receive[k])
    return ClockOffset(float(t_remote[k] - midpoint), float(rtt[k] / 2), float(rtt[k]), float(midpoint))


def measure_offset(
    comm, remote: int, exchanges: int = DEFAULT_EXCHANGES, patience_s: float = math.inf
) -> ClockOffset | None:
    """Rank 0's side: ping `remote`, which must be in `answer_pings` for `exchanges` rounds; None if
    an answer takes longer than `patience_s` (a stopped or hung remote)."""
    buf = np.zeros(1, dtype=np.float64)
    sends, remotes, receives = (np.zeros(exchanges) for _ in range(3))
    clock = time.time
    for k in range(exchanges):
        sends[k] = clock()
        comm.Send(buf, remote, CLOCK_TAG)
        req = comm.Irecv(buf, remote, CLOCK_TAG)
        if not req.Test() and not _answered(req, patience_s):
            return None
        receives[k] = clock()
        remotes[k] = buf[0]
    return best_offset(sends, remotes, receives)


def _answered(req, patience_s: float) -> bool:
    """Wait for a ping's answer as a blocking receive would (spinning) for a millisecond, then asleep;
    False (the receive cancelled) after `patience_s`."""
    start = time.monotonic()
    while not req.Test():
        waited = time.monotonic() - start
        if waited > patience_s:
            req.Cancel()
            req.Wait()
            return False
        if waited > 1e-3:
            time.sleep(1e-3)
    return True


def answer_pings(comm, exchanges: int = DEFAULT_EXCHANGES) -> None:
    """The remote's side: answer each ping with this host's wall clock."""
    buf = np.zeros(1, dtype=np.float64)
    clock = time.time
    for _ in range(exchanges):
        comm.Recv(buf, 0, CLOCK_TAG)
        buf[0] = clock()
        comm.Send(buf, 0, CLOCK_TAG)


def interpolate_offset(start: ClockOffset, end: ClockOffset | None, when_unix_s: np.ndarray) -> np.ndarray:
    """Offset at given times, linear between the start and end measurements (drift), else constant."""
    if end is None or end.measured_unix_s <= start.measured_unix_s:
        return np.full(np.shape(when_unix_s), start.offset_s)
    slope = (end.offset_s - start.offset_s) / (end.measured_unix_s - start.measured_unix_s)
    return start.offset_s + slope * (np.asarray(when_unix_s) - start.measured_unix_s)
