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

A counter's rise is bounded by what its link can carry: its line rate (an Ethernet device's `speed`,
Mb/s, for an interface backed by a device; an InfiniBand port's `rate`) x LINE_MARGIN, else (a
virtual interface, whose `speed` says nothing of its copies in memory, or no rate) ABSOLUTE_RATE,
over the time between the reads plus STATS_LAG_S (drivers refresh their counters on a timer, so one
read may hold bytes from before the first). A rise beyond that, or a read beyond a 64-bit counter,
is unknown with the reason, never a number.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from npmpi.conditions.paths import Root

NET = "sys/class/net"
IB = "sys/class/infiniband"
ARPHRD_LOOPBACK, ARPHRD_INFINIBAND = 772, 32
SATURATED32 = (1 << 32) - 1  # a 32-bit PMA counter's ceiling
MAX_INTERFACES = 256
COUNT_MAX = (1 << 64) - 1  # no kernel counter holds more
LINE_MARGIN = 4.0  # a link's bytes over a span: at most 4 x its line rate
ABSOLUTE_RATE = 400e9 / 8 * LINE_MARGIN  # bytes/s: 4 x 400 Gbit/s, when the line rate is not known
STATS_LAG_S = 2.0  # a driver's counters may lag its traffic by this much


@dataclass(frozen=True)
class Counter:
    """One counter file: its path, the bytes per count, whether it may be a 32-bit counter that
    saturates (InfiniBand's `counters/`)."""

    path: str
    scale: int
    saturates: bool
    name: str
    direction: str  # tx | rx
    max_rate: float = ABSOLUTE_RATE  # bytes per second it can count, at most
    rate_said: str = "no line rate known: 4 x 400 Gbit/s"


def _line(bit_s: float | None) -> tuple[float, str]:
    """(max_rate, rate_said) of a link of `bit_s` (None: not known)."""
    if bit_s is None or not 0 < bit_s <= 1e15:
        return ABSOLUTE_RATE, Counter.rate_said
    return bit_s / 8 * LINE_MARGIN, f"{LINE_MARGIN:g} x its {bit_s / 1e9:g} Gbit/s"


def _ib_rate(root: Root, base: str) -> float | None:
    """An IB port's `rate` ('100 Gb/sec (4X EDR)') in bit/s, None when not readable."""
    got = re.match(r"\s*(\d+(?:\.\d+)?)\s*Gb/sec", root.text(f"{base}/rate", 64) or "")
    return float(got.group(1)) * 1e9 if got else None


def _eth_rate(root: Root, name: str) -> float | None:
    """An interface's `speed` (Mb/s) in bit/s where a device backs it; None for a virtual one (veth,
    tun: its copies in memory are not bound by the speed it reports) or no speed (-1, down)."""
    base = f"{NET}/{name}"
    if not root.path(f"{base}/device").exists():
        return None
    mbit = root.integer(f"{base}/speed")
    return mbit * 1e6 if mbit is not None and mbit > 0 else None


def _ib_counters(root: Root) -> list[Counter]:
    out = []
    for dev in root.listdir(IB)[:MAX_INTERFACES]:
        for port in root.listdir(f"{IB}/{dev}/ports")[:64]:
            base = f"{IB}/{dev}/ports/{port}"
            rate = _line(_ib_rate(root, base))
            for direction, word in (("tx", "xmit"), ("rx", "rcv")):
                ext = f"{base}/counters_ext/port_{word}_data_64"
                if root.integer(ext) is not None:
                    out.append(Counter(ext, 4, False, f"{dev}/{port}", direction, *rate))
                elif root.integer(f"{base}/counters/port_{word}_data") is not None:
                    path = f"{base}/counters/port_{word}_data"
                    out.append(Counter(path, 4, True, f"{dev}/{port}", direction, *rate))
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
        rate = _line(_eth_rate(root, name))
        for direction in ("tx", "rx"):
            path = f"{NET}/{name}/statistics/{direction}_bytes"
            if root.integer(path) is not None:
                out.append(Counter(path, 1, False, name, direction, *rate))
    return out


def read_all(root: Root, counters: list[Counter]) -> list[int | None]:
    return [root.integer(c.path) for c in counters]


def max_bytes(rate: float, elapsed_s: float) -> float:
    """The most bytes a counter of `rate` bytes/s may rise by between reads `elapsed_s` (>= 0; an
    array too) apart."""
    return rate * (elapsed_s + STATS_LAG_S)


def refused(counter: Counter, before: int | None, after: int | None, elapsed_s: float | None) -> str:
    """Why two reads of `counter` give no byte count although neither is missing ('' when they may):
    a read beyond a 64-bit counter, or a rise beyond what its link carries in `elapsed_s`."""
    if before is None or after is None:
        return ""
    what = f"{counter.name} {counter.direction}"
    if max(before, after) > COUNT_MAX:
        return f"{what} read {float(min(max(before, after), 10**300)):.3g}, beyond a 64-bit counter: unknown"
    rise = (after - before) * counter.scale
    if elapsed_s is not None and rise > max_bytes(counter.max_rate, max(elapsed_s, 0.0)):
        return (
            f"{what} rose by {float(rise):.3g} bytes in {elapsed_s:.3g} s, more than its link carries "
            f"({counter.rate_said}, {STATS_LAG_S:g} s allowed for the counters' lag): unknown"
        )
    return ""


def delta_bytes(
    counter: Counter, before: int | None, after: int | None, elapsed_s: float | None = None
) -> float:
    """The bytes a counter counted between two reads `elapsed_s` apart (None: not bounded by time);
    NaN when unknown (unreadable, saturated, went back, beyond a 64-bit counter or its link)."""
    if before is None or after is None:
        return math.nan
    if counter.saturates and SATURATED32 in (before, after):
        return math.nan  # stopped at its ceiling: the bytes past it are not counted
    diff = after - before
    if diff < 0:
        return math.nan  # went back: the interface or the counter was reset
    if refused(counter, before, after, elapsed_s):
        return math.nan
    return float(diff * counter.scale)


def totals(
    counters: list[Counter],
    before: list,
    after: list,
    elapsed_s: float | None = None,
    why: list[str] | None = None,
) -> tuple[float, float]:
    """(tx bytes, rx bytes) summed over the counters; NaN when none, or when any is unknown. The
    reasons of counters refused (`refused`) are added to `why`."""
    sums = {"tx": [], "rx": []}
    for c, b, a in zip(counters, before, after, strict=True):
        sums[c.direction].append(delta_bytes(c, b, a, elapsed_s))
        said = refused(c, b, a, elapsed_s) if why is not None else ""
        if said and c.saturates and SATURATED32 in (b, a):
            said = ""
        if said:
            why.append(said)
    return tuple(float(sum(v)) if v else math.nan for v in (sums["tx"], sums["rx"]))  # type: ignore[return-value]
