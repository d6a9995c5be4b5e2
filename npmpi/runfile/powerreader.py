"""A run file's /power part read without MPI (npmpi/runfile/format.py): every node's and the
fabric's meter channels, their samples (the fields asked for), their faults and their optional
fields, each checked as the reader checks the rest."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from npmpi.core.errors import RunFileError
from npmpi.runfile import faults as faultlog
from npmpi.runfile.datasets import check_stored, member, read_rows
from npmpi.runfile.format import (
    COUNTER_KINDS,
    ENERGY_OF_COUNTERS,
    FABRIC_GROUP,
    MAX_SAMPLES,
    OPTIONAL_SAMPLE_FIELDS,
    SAMPLE_FIELDS,
)
from npmpi.runfile.opening import attr_value, read_checked


@dataclass
class PowerChannel:
    """One meter channel of one node: its attributes, samples (node-local wall clock) and faults."""

    attrs: dict[str, Any]
    time_unix_s: np.ndarray | None  # None: not read (load_run's sample_fields)
    power_w: np.ndarray | None
    energy_j: np.ndarray | None
    volts: np.ndarray | None
    amps: np.ndarray | None
    fault_time_unix_s: np.ndarray
    fault_message: list[str]
    # per fault: last occurrence (a gap's end), how many times, kind (npmpi.runfile.faults); see load_run
    fault_extra: dict[str, np.ndarray] = field(default_factory=dict)
    # format 1.6's per-sample datasets (runformat.OPTIONAL_SAMPLE_FIELDS) asked for and present, as long
    # as the samples
    extra: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return str(self.attrs.get("label", ""))


@dataclass
class PowerNode:
    """One node's power: host, clock offsets against rank 0 and its channels."""

    attrs: dict[str, Any]
    channels: list[PowerChannel]

    @property
    def host(self) -> str:
        return str(self.attrs.get("host", ""))


def _is_counter(attrs) -> bool:
    """Whether a channel's energy_j is a counter to take a window's energy from."""
    if "energy_from_counter" in attrs:
        return bool(attrs["energy_from_counter"])
    return attr_value(attrs.get("kind", "")) in COUNTER_KINDS


def _numbered(group, prefix: str) -> list[str]:
    names = [k for k in group if k.startswith(prefix) and k[len(prefix) :].isdigit()]
    return sorted(names, key=lambda k: int(k[len(prefix) :]))


def read_power(
    f, p: Path, notices: list[str], sample_fields: tuple[str, ...] = SAMPLE_FIELDS
) -> tuple[dict[str, Any], list[PowerNode], PowerNode | None]:
    """(/power attributes, the nodes' groups, /power/fabric or None); nothing without /power."""
    g = member(f, "power", p, "/power", dataset=False, required=False)
    if g is None:
        return {}, [], None
    power_attrs = {k: attr_value(g.attrs[k]) for k in g.attrs}
    nodes = [
        _read_group(member(g, name, p, f"/power/{name}", dataset=False), name, p, notices, sample_fields)
        for name in _numbered(g, "node")
    ]
    fg = member(g, FABRIC_GROUP, p, f"/power/{FABRIC_GROUP}", dataset=False, required=False)
    fabric = _read_group(fg, FABRIC_GROUP, p, notices, sample_fields) if fg is not None else None
    return power_attrs, nodes, fabric


def _read_group(ng, group_name: str, p: Path, notices: list[str], sample_fields) -> PowerNode:
    """One power group (a node's, or the fabric's): its attributes and channels."""
    channels = [
        _read_channel(ng, f"/power/{group_name}/{ch_name}", ch_name, p, notices, sample_fields)
        for ch_name in _numbered(ng, "channel")
    ]
    return PowerNode({k: attr_value(ng.attrs[k]) for k in ng.attrs}, channels)


def _read_channel(ng, where: str, ch_name: str, p: Path, notices: list[str], sample_fields) -> PowerChannel:
    """One channel group: attributes, the per-sample datasets asked for (all checked) and faults."""
    import h5py

    cg = member(ng, ch_name, p, where, dataset=False)
    lengths, arrays = [], {}
    for name in SAMPLE_FIELDS:
        ds = member(cg, name, p, f"{where}/{name}", dataset=True)
        if len(ds.shape) != 1 or ds.dtype.kind not in "iuf" or ds.shape[0] > MAX_SAMPLES:
            raise RunFileError(f"{p}: {where}/{name} has an unexpected shape or type")
        lengths.append(ds.shape[0])
        arrays[name] = ds
    n = min(lengths)
    if n < max(lengths):
        held = ", ".join(f"{name} {k}" for name, k in zip(SAMPLE_FIELDS, lengths, strict=True) if k != n)
        short = ", ".join(name for name, k in zip(SAMPLE_FIELDS, lengths, strict=True) if k == n)
        notices.append(
            f"{where}: {short} {'holds' if ',' not in short else 'hold'} {n} sample(s), {held}: "
            f"the {max(lengths) - n} sample(s) past {n} (partly written, or lost) are ignored"
        )
    fg = member(cg, "faults", p, f"{where}/faults", dataset=False, required=False)
    ft_ds = fm_ds = None
    if fg is not None:
        ft_ds = member(fg, "time_unix_s", p, f"{where}/faults/time_unix_s", dataset=True)
        fm_ds = member(fg, "message", p, f"{where}/faults/message", dataset=True)
        if (
            len(ft_ds.shape) != 1
            or len(fm_ds.shape) != 1
            or ft_ds.dtype.kind not in "iuf"
            or fm_ds.dtype.kind not in "OSU"
        ):
            raise RunFileError(f"{p}: {where}/faults has an unexpected shape or type")
    try:
        data = {}
        for name, ds in arrays.items():
            # every field is checked, so a damaged file is refused whatever a reader uses
            check_stored(ds, n, p, f"{where}/{name}")
            wanted = name in sample_fields or (
                name == "energy_j" and ENERGY_OF_COUNTERS in sample_fields and _is_counter(cg.attrs)
            )
            data[name] = (
                np.asarray(read_checked(ds, np.s_[:n], p, f"{where}/{name}"), dtype=np.float64)
                if wanted
                else None
            )
        if fg is not None:
            nf = min(ft_ds.shape[0], fm_ds.shape[0])
            ft = np.asarray(read_rows(ft_ds, nf, p, f"{where}/faults/time_unix_s"), dtype=np.float64)
            fm = [str(attr_value(m)) for m in read_rows(fm_ds, nf, p, f"{where}/faults/message")]
            for name in ("last_time_unix_s", "count"):  # read by faultlog.read_extras: checked here
                if isinstance(fg.get(name), h5py.Dataset) and fg[name].shape[0] >= nf:
                    read_checked(fg[name], np.s_[:nf], p, f"{where}/faults/{name}")
        else:
            ft, fm = np.zeros(0), []
        extra = _optional_fields(cg, n, p, where, sample_fields, notices)
    except (OSError, ValueError, TypeError, KeyError) as exc:
        raise RunFileError(f"{p}: {where} cannot be read ({exc}); the file may be corrupt") from None
    return PowerChannel(
        {k: attr_value(cg.attrs[k]) for k in cg.attrs},
        fault_time_unix_s=ft,
        fault_message=fm[: len(ft)],
        fault_extra=faultlog.read_extras(fg, len(ft)),
        extra=extra,
        **data,
    )


def _optional_fields(cg, n: int, p: Path, where: str, sample_fields, notices: list[str]) -> dict:
    """The optional per-sample datasets asked for (format 1.6); one shorter than the samples or of
    another shape is left out with a notice (the samples stand without it)."""
    out = {}
    for name in OPTIONAL_SAMPLE_FIELDS:
        if name not in sample_fields or name not in cg:
            continue
        ds = cg[name]
        if not hasattr(ds, "shape") or len(ds.shape) != 1 or ds.dtype.kind not in "iuf" or ds.shape[0] < n:
            notices.append(f"{where}/{name}: not one value per sample: left out")
            continue
        check_stored(ds, n, p, f"{where}/{name}")
        out[name] = np.asarray(ds[:n], dtype=np.float64)
    return out


def read_power_part(
    f, p: Path, notices: list[str], sample_fields: tuple[str, ...] = SAMPLE_FIELDS
) -> tuple[dict[str, Any], list[PowerNode]]:
    """The /power group of an open npmpi file (a run or a cluster map): (its attributes, its nodes),
    ({}, []) without one; RunFileError when it is damaged. A fabric group is not read here (maps
    have none; a run's is Run.fabric)."""
    attrs, nodes, _fabric = read_power(f, p, notices, sample_fields)
    return attrs, nodes
