"""Message buffers: how they are arranged and whether they sit on huge pages, chosen and recorded.

Over a single-copy shared-memory transport (Open MPI's CMA, `process_vm_readv`) both choices
change the bandwidth a ping-pong reports by up to 2x at 64 KiB-1 MiB (docs/netpipe-comparison.md),
so neither is left to an allocator's heuristics:

- arrangement "separate" (the default, as the OSU and IMB benchmarks): each measuring rank sends
  from one long-lived buffer and receives into another, both sized for the largest message;
- arrangement "netpipe" (NetPIPE's default "cache" mode): one buffer per message size, exactly as
  large as the message and 16 KiB-aligned, that the rank both sends from and receives into, so
  the reflector sends back what it has just received;
- arrangement "osu" (osu_bw's, osu_bibw's and osu_mbw_mr's default, their `-b single`): as
  "separate", but every message of a window is sent from the one send buffer and received into
  the one receive buffer, where "separate" gives each message of a window its own region (OSU's
  `-b multiple`). Several receives pending into one buffer are outside MPI's rules; the window
  then stays in cache, which is why OSU's published bandwidths are higher at mid sizes.

Buffers are anonymous memory maps, as malloc gives for large blocks. Huge pages: "system" gives
no advice (the kernel's transparent-huge-page policy decides, as for any application's buffers),
"on" aligns buffers to the huge-page size, rounds them up to whole huge pages and advises
MADV_HUGEPAGE, "off" advises MADV_NOHUGEPAGE. What the kernel actually gave is measured from
/proc/self/smaps and stored per size.
"""

from __future__ import annotations

import mmap
from collections.abc import Iterable
from pathlib import Path

import numpy as np

ARRANGEMENT_SEPARATE = "separate"
ARRANGEMENT_NETPIPE = "netpipe"
ARRANGEMENT_OSU = "osu"
ARRANGEMENTS = (ARRANGEMENT_SEPARATE, ARRANGEMENT_NETPIPE, ARRANGEMENT_OSU)
# what a run with --buffers osu says of itself (console, file, report)
OSU_NOTE = (
    "every message of a window sent from one buffer and received into one (OSU's -b single): "
    "receives pending into one buffer are outside MPI's rules; for comparison with OSU's figures"
)

HUGE_PAGES_SYSTEM = "system"
HUGE_PAGES_ON = "on"
HUGE_PAGES_OFF = "off"
HUGE_PAGE_CHOICES = (HUGE_PAGES_SYSTEM, HUGE_PAGES_ON, HUGE_PAGES_OFF)

NETPIPE_ALIGN_BYTES = 16384  # NetPIPE 3.7 aligns its buffers to 16 KiB (its -A default)
DEFAULT_ALIGN_BYTES = 4096
THP_DIR = Path("/sys/kernel/mm/transparent_hugepage")
FALLBACK_HUGE_PAGE_BYTES = 2 << 20


def huge_page_size_bytes() -> int:
    """The transparent huge page size (2 MiB on x86-64)."""
    try:
        return int((THP_DIR / "hpage_pmd_size").read_text().strip())
    except (OSError, ValueError):
        return FALLBACK_HUGE_PAGE_BYTES


def thp_policy() -> str:
    """The kernel's transparent-huge-page mode ('always', 'madvise', 'never'), or 'unavailable'."""
    try:
        text = (THP_DIR / "enabled").read_text()
    except OSError:
        return "unavailable"
    for word in text.split():
        if word.startswith("[") and word.endswith("]"):
            return word[1:-1]
    return "unknown"


def huge_pages_problem(choice: str) -> str | None:
    """Why --huge-pages CHOICE cannot be honoured on this machine, or None."""
    if choice != HUGE_PAGES_ON:
        return None
    policy = thp_policy()
    if policy in ("never", "unavailable") or not hasattr(mmap, "MADV_HUGEPAGE"):
        return (
            f"--huge-pages on: transparent huge pages are {policy} on this machine "
            f"({THP_DIR / 'enabled'}); use --huge-pages system or off, or enable them (madvise)"
        )
    return None


def allocate(nbytes: int, huge_pages: str, align_bytes: int = DEFAULT_ALIGN_BYTES) -> np.ndarray:
    """A zeroed uint8 buffer of `nbytes` on its own anonymous map, every page touched now (so no
    page fault lands in a timed loop), aligned to `align_bytes` (to the huge-page size with "on")."""
    nbytes = max(int(nbytes), 1)
    if huge_pages == HUGE_PAGES_ON:
        align_bytes = max(align_bytes, huge_page_size_bytes())
    page = mmap.PAGESIZE
    align_bytes = max(align_bytes, page)
    span = -(-nbytes // page) * page
    if huge_pages == HUGE_PAGES_ON:
        span = -(-nbytes // align_bytes) * align_bytes
    length = span + (align_bytes - page)
    mm = mmap.mmap(-1, length, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    whole = np.frombuffer(mm, dtype=np.uint8)
    offset = -whole.ctypes.data % align_bytes
    if huge_pages == HUGE_PAGES_ON:
        mm.madvise(mmap.MADV_HUGEPAGE, offset, span)
    elif huge_pages == HUGE_PAGES_OFF and hasattr(mmap, "MADV_NOHUGEPAGE"):
        mm.madvise(mmap.MADV_NOHUGEPAGE, 0, length)
    buf = whole[offset : offset + nbytes]
    buf[::page] = 0  # fault every page in now
    buf[-1] = 0
    return buf


def huge_page_bytes(buffers: Iterable[np.ndarray], smaps: Path = Path("/proc/self/smaps")) -> int:
    """Bytes of the maps holding these buffers that sit on transparent huge pages (AnonHugePages),
    each map counted once; -1 when /proc cannot tell."""
    addresses = {int(b.ctypes.data) for b in buffers if b.size}
    if not addresses:
        return 0
    try:
        text = smaps.read_text()
    except OSError:
        return -1
    total, found, current = 0, set(), False
    for line in text.splitlines():
        head = line.split(None, 1)[0] if line else ""
        if "-" in head and not head.endswith(":"):
            try:
                start, end = (int(x, 16) for x in head.split("-", 1))
            except ValueError:
                current = False
                continue
            hits = {a for a in addresses if start <= a < end}
            current = bool(hits)
            found |= hits
        elif current and head == "AnonHugePages:":
            total += int(line.split()[1]) * 1024
            current = False
    return total if found == addresses else -1
