"""Synthetic run files in the run-file schema, for tests, demos and the speed benchmark.

Everything written here is labelled as it is: channels default to `simulated`, and the run's
`mpi_library_version` says the file is synthetic.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from npmpi.runfile.format import COND_DATASETS, CPU_DATASETS, FABRIC_GROUP, OPEN_EPOCH, SizeResult
from npmpi.runfile.writer import RunWriter


@dataclass
class SynthChannel:
    """One meter channel's samples, as the node's clock stamped them."""

    time_unix_s: np.ndarray
    power_w: np.ndarray
    label: str = "simulated"
    kind: str = "replay"
    sample_interval_s: float = 1.0
    meter_delay_s: float | None = None
    faults: list = field(default_factory=list)  # (time, message) pairs or npmpi.runfile.faults.FaultRecords
    energy_j: np.ndarray | None = None  # a cumulative counter, where the meter has one
    attrs: dict = field(default_factory=dict)  # more channel attributes (averaging, resolutions, ...)
    open_epoch: np.ndarray | None = None  # each sample's opening of the meter (format 1.6); None: not stored


@dataclass
class SynthNode:
    """One node's channels and its clock offset (node minus rank 0) at start and end."""

    channels: list[SynthChannel]
    host: str = ""
    offset_start_s: float | None = 0.0
    offset_end_s: float | None = None
    measured_start_unix_s: float = 0.0
    measured_end_unix_s: float | None = None
    attrs: dict = field(default_factory=dict)  # more node attributes (boot_id, machine_id, ...)


def write_run(
    path: str | os.PathLike,
    size_bytes: list[int],
    iterations: list[int],
    trial_s: list[list[float]],
    trial_start_unix_s: list[list[float]],
    trial_end_unix_s: list[list[float]] | None = None,
    nodes: list[SynthNode] | None = None,
    baseline: tuple[float, float] | None = None,
    status: str = "complete",
    baseline_after: tuple[float, float] | None = None,
    attrs: dict | None = None,
    overwrite: bool = False,
    fabric: SynthNode | None = None,
    cpu: dict | None = None,
    conditions: dict | None = None,
) -> Path:
    """Write a run file with these rows and, if `nodes` is given, a /power group; `fabric` (its
    channels, stamped by node 0's clock) adds /power/fabric as node 0's power rank samples it.
    `cpu` (format 1.7) gives the measuring ranks' CPU time: {"ranks": [0, 1], "cpu_user_s":
    [per size: one value per rank], "cpu_system_s": …, "cpu_wall_s": …, optionally
    "cpu_runqueue_wait_s": …}. `conditions` (with `cpu`) gives their conditions: per name of
    COND_DATASETS [per size: one value per rank] (missing: NaN), and "info": each rank's text."""
    path = Path(path)
    trials = max(len(t) for t in trial_s) if trial_s else 1
    nnodes = len(nodes) if nodes else 1
    hosts = [n.host or f"node{i}" for i, n in enumerate(nodes)] if nodes else ["node0"]
    base_attrs = {
        "kernel": "python",
        "mpi_library_version": "synthetic run file",
        "platform": "synthetic",
        "world_size": 2 + (nnodes if nodes else 0),
        "node_count": nnodes,
        "pair_crosses_nodes": nnodes > 1,
        "npmpi_version": "0",
        "created_utc": "2024-01-01T00:00:00+00:00",
        "command_line": "synthetic",
    }
    base_attrs.update(attrs or {})
    ranks = ["transmitter", "reflector"] + (["power"] * nnodes if nodes else [])
    layout = {
        "host": [hosts[0], hosts[min(1, nnodes - 1)], *(hosts if nodes else [])],
        "node_index": [0, min(1, nnodes - 1), *(range(nnodes) if nodes else [])],
        "role": ranks,
    }
    w = RunWriter(path, base_attrs, layout, trials, overwrite=overwrite)
    if nodes:
        w.create_power(
            _power_attrs(baseline, baseline_after), _node_attrs(nodes, hosts), _channel_attrs(nodes)
        )
        if fabric is not None:
            attrs = {**_node_attrs([fabric], [hosts[0]])[0], "meter_specs": [c.kind for c in fabric.channels]}
            w.create_fabric(attrs, _channel_attrs([fabric])[0])
        _append_samples(w, nodes, fabric)
    for k, size in enumerate(size_bytes):
        times = list(trial_s[k])
        starts = list(trial_start_unix_s[k])
        ends = (
            list(trial_end_unix_s[k])
            if trial_end_unix_s is not None
            else [s + t for s, t in zip(starts, times, strict=True)]
        )
        w.append(
            SizeResult(
                size_bytes=int(size),
                iterations=int(iterations[k]),
                warmup_iterations=0,
                trial_s=times,
                trial_start_unix_s=starts,
                trial_end_unix_s=ends,
                **_cpu_fields(cpu, k),
                **_cond_fields(conditions, cpu, k),
            )
        )
    w.finish(status, "" if status == "complete" else f"synthetic {status} run")
    return path


def _cpu_fields(cpu: dict | None, k: int) -> dict:
    """SizeResult's CPU fields of row k (none without `cpu`; a missing wait is NaN)."""
    if cpu is None:
        return {}
    ranks = list(cpu["ranks"])
    out: dict = {"cpu_ranks": ranks}
    for name in CPU_DATASETS:
        rows = cpu.get(name)
        out[name] = list(rows[k]) if rows is not None else [float("nan")] * len(ranks)
    return out


def _cond_fields(cond: dict | None, cpu: dict | None, k: int) -> dict:
    """SizeResult's condition fields of row k (none without `cond`)."""
    if cond is None or cpu is None:
        return {}
    nan = [float("nan")] * len(cpu["ranks"])
    values = {name: list(cond[name][k]) if name in cond else nan for name in COND_DATASETS}
    return {"conditions": values, "condition_info": cond.get("info")}


def _power_attrs(baseline: tuple[float, float] | None, baseline_after: tuple[float, float] | None) -> dict:
    power_attrs: dict = {"baseline_requested_s": (baseline[1] - baseline[0]) if baseline else 0.0}
    if baseline:
        power_attrs.update(baseline_start_unix_s=baseline[0], baseline_end_unix_s=baseline[1])
    if baseline_after:
        power_attrs.update(
            baseline_after_start_unix_s=baseline_after[0], baseline_after_end_unix_s=baseline_after[1]
        )
    return power_attrs


def _node_attrs(nodes: list[SynthNode], hosts: list[str]) -> list[dict]:
    node_attrs = []
    for i, n in enumerate(nodes):
        a: dict = {"host": hosts[i], "node_index": i, "power_rank": 2 + i, "meter_specs": ["synthetic"]}
        if n.offset_start_s is not None:
            a.update(
                clock_offset_start_s=n.offset_start_s,
                clock_offset_start_uncertainty_s=1e-6,
                clock_offset_start_measured_unix_s=n.measured_start_unix_s,
            )
        if n.offset_end_s is not None and n.measured_end_unix_s is not None:
            a.update(
                clock_offset_end_s=n.offset_end_s,
                clock_offset_end_uncertainty_s=1e-6,
                clock_offset_end_measured_unix_s=n.measured_end_unix_s,
            )
        a.update(n.attrs)
        node_attrs.append(a)
    return node_attrs


def _channel_attrs(nodes: list[SynthNode]) -> list[list[dict]]:
    channel_attrs = []
    for n in nodes:
        chans = []
        for c in n.channels:
            ca = {
                "kind": c.kind,
                "spec": c.kind,
                "description": f"synthetic {c.label} channel",
                "label": c.label,
                "natural_interval_s": c.sample_interval_s,
                "sample_interval_s": c.sample_interval_s,
                "quantities": ["power_w"],
            }
            if c.meter_delay_s is not None:
                ca["meter_delay_s"] = c.meter_delay_s
            if c.open_epoch is not None:  # else a channel as written before format 1.6
                ca["extra_sample_fields"] = [OPEN_EPOCH]
            ca.update(c.attrs)
            chans.append(ca)
        channel_attrs.append(chans)
    return channel_attrs


def _append_samples(w: RunWriter, nodes: list[SynthNode], fabric: SynthNode | None = None) -> None:
    groups = [*enumerate(nodes), *([(FABRIC_GROUP, fabric)] if fabric is not None else [])]
    for i, n in groups:
        for j, c in enumerate(n.channels):
            t = np.asarray(c.time_unix_s, dtype=float)
            nan = np.full(len(t), np.nan)
            samples = {
                "time_unix_s": t,
                "power_w": np.asarray(c.power_w, dtype=float),
                "energy_j": nan if c.energy_j is None else np.asarray(c.energy_j, dtype=float),
                "volts": nan,
                "amps": nan,
            }
            if c.open_epoch is not None:
                samples[OPEN_EPOCH] = np.asarray(c.open_epoch, dtype=float)
            w.append_samples(i, j, samples, list(c.faults))


# (protocol, one-way latency s, asymptotic bandwidth B/s, fraction of a core busy, of it in the
# kernel, power W over an idle 90 W): made-up rungs shaped like a ladder on one node, for the README
LADDER_EXAMPLE = (
    ("mpi", 1.0e-6, 6.0e9, 1.0, 0.02, 110.0),
    ("tcp", 12.0e-6, 2.5e9, 0.6, 0.7, 104.0),
    ("rma", 2.5e-6, 5.5e9, 1.0, 0.03, 110.0),
    ("memcpy", 0.05e-6, 12.0e9, 1.0, 0.0, 108.0),
)
LADDER_SIZES = (1, 8, 64, 1024, 8192, 65536, 1 << 20)


def write_ladder_example(directory: str | os.PathLike) -> list[Path]:
    """Four SYNTHETIC run files, one per protocol (mpi.h5, tcp.h5, rma.h5, memcpy.h5), with made-up
    latency, bandwidth, CPU time and simulated power: the protocol ladder's outputs without a cluster.
    Every file says it is synthetic (mpi_library_version, the power's `simulated` label)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for protocol, latency_s, rate_b_s, busy, kernel_share, watts in LADDER_EXAMPLE:
        one_way = [latency_s + s / rate_b_s for s in LADDER_SIZES]
        iters = [max(3, int(0.01 / (2 * t))) for t in one_way]
        trial = [[2 * i * t * f for f in (1.0, 1.05, 1.1)] for i, t in zip(iters, one_way, strict=True)]
        starts = [[1000.0 + 10.0 * k + 3.0 * j for j in range(3)] for k in range(len(LADDER_SIZES))]
        wall = [[sum(t) * 1.01] * 2 for t in trial]
        cpu = {
            "ranks": [0, 1],
            "cpu_user_s": [[w * busy * (1 - kernel_share) for w in row] for row in wall],
            "cpu_system_s": [[w * busy * kernel_share for w in row] for row in wall],
            "cpu_wall_s": wall,
            "cpu_runqueue_wait_s": [[0.0, 0.0] for _ in wall],
        }
        t = 1000.0 + np.arange(-5.0, 10.0 * len(LADDER_SIZES) + 5.0, 0.5)
        node = SynthNode(
            [SynthChannel(t, np.where(t < 999.5, 90.0, watts), sample_interval_s=0.5)], host="node0"
        )
        attrs = {"protocol": protocol, "kernel": "c"}
        path = directory / f"{protocol}.h5"
        write_run(
            path,
            list(LADDER_SIZES),
            iters,
            trial,
            starts,
            nodes=[node],
            baseline=(995.0, 999.0),
            attrs=attrs,
            overwrite=True,
            cpu=cpu,
        )
        paths.append(path)
    return paths
