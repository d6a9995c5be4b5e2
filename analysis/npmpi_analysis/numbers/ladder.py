"""The protocol ladder: runs of one link through several protocols (mpi, tcp, rma, memcpy) named
by their protocol, so that overlays and the per-size table say which layer each curve is.

A file written before `--protocol` existed has no `protocol` attribute: it measured MPI
send/receive, "mpi".
"""

from __future__ import annotations

import re

from npmpi_analysis.numbers.compute import protocol_of

MAX_PART_CHARS = 24


def _part(text: str) -> str:
    """A label part safe in file names (figures, np.out names take the label), and short."""
    return re.sub(r"[^A-Za-z0-9_.+-]+", "_", text).strip("_")[:MAX_PART_CHARS].strip("_") or "x"


def ladder_labels(attrs_list: list[dict]) -> list[str] | None:
    """Labels by protocol, plus mode and kernel where the runs differ in them, made unique
    ("mpi", "tcp", "tcp-2"); None when the runs share one protocol (their file names tell them
    apart better)."""
    protocols = [protocol_of(a) for a in attrs_list]
    if len(attrs_list) < 2 or len(set(protocols)) < 2:
        return None
    modes = [str(a.get("mode", "pingpong")) for a in attrs_list]
    kernels = [str(a.get("kernel", "")) for a in attrs_list]
    labels, taken = [], set()
    for proto, mode, kernel in zip(protocols, modes, kernels, strict=True):
        parts = [proto]
        if len(set(modes)) > 1:
            parts.append(mode)
        if len(set(kernels)) > 1 and kernel:
            parts.append(kernel)
        base = "-".join(_part(p) for p in parts)
        label, k = base, 2
        while label in taken:
            label = f"{base}-{k}"
            k += 1
        taken.add(label)
        labels.append(label)
    return labels


def relabel(analyses: list) -> None:
    """Give the analysed runs their ladder labels when they differ in protocol (else leave them)."""
    labels = ladder_labels([a.attrs for a in analyses])
    if labels is not None:
        for a, label in zip(analyses, labels, strict=True):
            a.label = label
