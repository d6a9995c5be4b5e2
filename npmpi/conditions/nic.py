"""The node's NIC byte counters, read around each size: the bytes its interfaces sent and received.

Which interfaces: every one in sys/class/net summed, except those whose bytes another one counts
again or that carry no node-to-node traffic: loopback (type 772), interfaces that are down, bridges
(`bridge/`: their ports count the same frames), bond and team masters (`bonding/`: their slaves count
them), ifb devices (name `ifb*`: tc's mirror of another interface), and IPoIB interfaces (type 32)
when InfiniBand ports are read (the port counts their bytes). Summing avoids needing the peer's
address and route; its price is that anything else the node sends during a size counts too (ssh, a
file system over Ethernet), which the per-size figure shows as more wire bytes than payload.

InfiniBand: sys/class/infiniband/DEV/ports/N/counters/port_{xmit,rcv}_data count 4-octet words; a
32-bit PMA counter wraps (or, by the IB specification, stops at 2^32-1: a read of 2^32-1 is then
unknown, never a number); `counters_ext/port_{xmit,rcv}_data_64` (64-bit) are read instead where
present.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from npmpi.conditions.paths import Root

NET = "sys/class/net"
IB = "sys/class/infiniband"
ARPHRD_LOOPBACK, ARPHRD_INFINIBAND = 772, 32
WRAP32 = 1 << 32
SATURATED32 = WRAP32 - 1
MAX_INTERFACES = 256


@dataclass(frozen=True)
class Counter:
    """One counter file: its path, the bytes per count, whether it is 32-bit (wraps)."""

    path: str
    scale: int
    wraps: bool
    name: str
    direction: str  # tx | rx


def _ib_counters(root: Root) -> list[Counter]:
    out = []
    for dev in root.listdir(IB)[:MAX_INTERFACES]:
        for port in root.listdir(f"{IB}/{dev}/ports")[:64]:
            base = f"{IB}/{dev}/ports/{port}"
            for direction, word in (("tx", "xmit"), ("rx", "rcv")):
                ext = f"{base}/counters_ext/port_{word}_data_64"
                if root.integer(ext) is not None:
                    out.append(Counter(ext, 4, False, f"{dev}/{port}", direction))
                elif root.integer(f"{base}/counters/port_{word}_data") is not None:
                    path = f"{base}/counters/port_{word}_data"
                    out.append(Counter(path, 4, True, f"{dev}/{port}", direction))
    return out


def _counted(root: Root, name: str, ib: bool) -> bool:
    base = f"{NET}/{name}"
    kind = root.integer(f"{base}/type")
    if kind == ARPHRD_LOOPBACK or name == "lo" or name.startswith("ifb"):
        return False
    if ib and kind == ARPHRD_INFINIBAND:
        return False
    if root.text(f"{base}/operstate", 32) == "down":
        return False
    return not (root.path(f"{base}/bridge").is_dir() or root.path(f"{base}/bonding").is_dir())


def find_counters(root: Root) -> list[Counter]:
    """The counters summed on this node (see the module's note)."""
    ib = _ib_counters(root)
    out = list(ib)
    for name in root.listdir(NET)[:MAX_INTERFACES]:
        if not _counted(root, name, bool(ib)):
            continue
        for direction in ("tx", "rx"):
            path = f"{NET}/{name}/statistics/{direction}_bytes"
            if root.integer(path) is not None:
                out.append(Counter(path, 1, False, name, direction))
    return out


def read_all(root: Root, counters: list[Counter]) -> list[int | None]:
    return [root.integer(c.path) for c in counters]


def delta_bytes(counter: Counter, before: int | None, after: int | None) -> float:
    """The bytes a counter counted between two reads; NaN when unknown (unreadable, saturated, went back)."""
    if before is None or after is None:
        return math.nan
    if counter.wraps and (before >= SATURATED32 or after >= SATURATED32):
        return math.nan
    diff = after - before
    if diff < 0:
        if not (counter.wraps and before < WRAP32 and after < WRAP32):
            return math.nan  # a 64-bit counter went back: the interface was reset
        diff += WRAP32
    return float(diff * counter.scale)


def totals(counters: list[Counter], before: list, after: list) -> tuple[float, float]:
    """(tx bytes, rx bytes) summed over the counters; NaN when none, or when any is unknown."""
    sums = {"tx": [], "rx": []}
    for c, b, a in zip(counters, before, after, strict=True):
        sums[c.direction].append(delta_bytes(c, b, a))
    return tuple(float(sum(v)) if v else math.nan for v in (sums["tx"], sums["rx"]))  # type: ignore[return-value]
