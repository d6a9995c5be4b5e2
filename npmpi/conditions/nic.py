"""The node's NIC byte counters, read around each size: the bytes its interfaces sent and received.

Which interfaces: every one in sys/class/net summed, except those whose bytes another one counts
again or that carry no node-to-node traffic: loopback (type 772), interfaces that are down, any
interface stacked on others (a `lower_*` link in its sysfs directory: VLANs, macvlan and ipvlan,
bond and team masters, bridges: the devices under them count the same frames), bridges and bond
masters also by their `bridge/` and `bonding/` directories, ifb devices (name `ifb*`: tc's mirror of
another interface), and IPoIB interfaces (type 32) when InfiniBand ports are read (the port counts
their bytes). Summing avoids needing the peer's address and route; its price is that anything else
the node sends during a size counts too (ssh, a file system over Ethernet), which the per-size figure
shows as more wire bytes than payload.

InfiniBand: sys/class/infiniband/DEV/ports/N/counters/port_{xmit,rcv}_data count 4-octet words.
Since Linux 4.5 they are the 64-bit extended counters where the HCA has them; otherwise the 32-bit
PMA counters, which by the IB specification stop at 2^32-1 rather than wrap. The file does not say
which: a read of exactly 2^32-1 is unknown (saturated), a read above it proves a 64-bit counter, and
a counter that goes back was reset (`perfquery -R`, a fabric monitor): unknown, never folded into a
number. `counters_ext/port_{xmit,rcv}_data_64` (older OFED stacks) are read instead where present.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from npmpi.conditions.paths import Root

NET = "sys/class/net"
IB = "sys/class/infiniband"
ARPHRD_LOOPBACK, ARPHRD_INFINIBAND = 772, 32
SATURATED32 = (1 << 32) - 1  # a 32-bit PMA counter's ceiling
MAX_INTERFACES = 256


@dataclass(frozen=True)
class Counter:
    """One counter file: its path, the bytes per count, whether it may be a 32-bit counter that
    saturates (InfiniBand's `counters/`)."""

    path: str
    scale: int
    saturates: bool
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
    if any(entry.startswith("lower_") for entry in root.listdir(base)):
        return False  # stacked on other interfaces, which count its frames
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
    if counter.saturates and SATURATED32 in (before, after):
        return math.nan  # stopped at its ceiling: the bytes past it are not counted
    diff = after - before
    if diff < 0:
        return math.nan  # went back: the interface or the counter was reset
    return float(diff * counter.scale)


def totals(counters: list[Counter], before: list, after: list) -> tuple[float, float]:
    """(tx bytes, rx bytes) summed over the counters; NaN when none, or when any is unknown."""
    sums = {"tx": [], "rx": []}
    for c, b, a in zip(counters, before, after, strict=True):
        sums[c.direction].append(delta_bytes(c, b, a))
    return tuple(float(sum(v)) if v else math.nan for v in (sums["tx"], sums["rx"]))  # type: ignore[return-value]
