#!/usr/bin/env python3
"""How fast is `npmpi-analyze` on a big run? A synthetic 64-node, 4-hour run sampled at 10 Hz.

Writes a run file in the run-file schema (RunWriter: the full NetPIPE sweep of 124 sizes, 7
trials each, spread over the run; one simulated power channel per node with clock offsets that
drift), then runs `python -m npmpi_analysis FILE --plots DIR --csv --json --np-out --report` in a
child process and prints its wall time and peak memory (ru_maxrss of the child).

    .venv/bin/python bench/analysis_speed.py                       # 64 nodes, 4 h, 10 Hz
    .venv/bin/python bench/analysis_speed.py --nodes 8 --hours 0.5 --keep /tmp/big.h5
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from npmpi.core.schedule import netpipe_schedule
from npmpi.runfile.format import SizeResult
from npmpi.runfile.writer import RunWriter

TRIALS = 7


def make_run(path: Path, nodes: int, hours: float, rate_hz: float, seed: int = 1) -> int:
    """Write the synthetic run; returns the number of power samples."""
    rng = np.random.default_rng(seed)
    sizes = [p.size_bytes for p in netpipe_schedule(1, 8 << 20, 3)]
    start = 1.7e9
    baseline_s = 60.0
    sweep_s = hours * 3600.0 - baseline_s
    per_size = sweep_s / len(sizes)
    trial_s = 0.9 * per_size / TRIALS
    attrs = {
        "kernel": "python",
        "mpi_library_version": "synthetic (bench/analysis_speed.py)",
        "platform": "synthetic",
        "world_size": nodes + 2,
        "node_count": nodes,
        "created_utc": "2024-01-01T00:00:00+00:00",
        "command_line": "bench/analysis_speed.py",
    }
    hosts = [f"n{i:03d}" for i in range(nodes)]
    roles = ["transmitter", "reflector"] + ["power"] * nodes
    layout = {
        "host": [hosts[0], hosts[min(1, nodes - 1)], *hosts],
        "node_index": [0, min(1, nodes - 1), *range(nodes)],
        "role": roles,
    }
    w = RunWriter(path, attrs, layout, TRIALS, overwrite=True)
    end = start + hours * 3600.0
    offsets = rng.normal(0.0, 0.005, nodes)
    drift = rng.normal(0.0, 1e-6, nodes)  # s per s
    w.create_power(
        {
            "baseline_requested_s": baseline_s,
            "baseline_start_unix_s": start,
            "baseline_end_unix_s": start + baseline_s,
        },
        [
            {
                "host": hosts[i],
                "node_index": i,
                "power_rank": 2 + i,
                "meter_specs": ["replay"],
                "clock_offset_start_s": offsets[i],
                "clock_offset_start_uncertainty_s": 1e-5,
                "clock_offset_start_measured_unix_s": start,
                "clock_offset_end_s": offsets[i] + drift[i] * (end - start),
                "clock_offset_end_uncertainty_s": 1e-5,
                "clock_offset_end_measured_unix_s": end,
            }
            for i in range(nodes)
        ],
        [
            [
                {
                    "kind": "replay",
                    "spec": "replay:synthetic",
                    "description": "synthetic load for the speed benchmark",
                    "label": "simulated",
                    "natural_interval_s": 1.0 / rate_hz,
                    "sample_interval_s": 1.0 / rate_hz,
                    "quantities": ["power_w"],
                }
            ]
            for _ in range(nodes)
        ],
    )
    t = start + baseline_s
    for k, size in enumerate(sizes):
        starts = t + np.arange(TRIALS) * (per_size / TRIALS)
        times = trial_s * (1 + 0.01 * rng.random(TRIALS))
        w.append(
            SizeResult(
                size_bytes=size,
                iterations=max(1, int(trial_s / (1e-6 + size * 1e-10))),
                warmup_iterations=2,
                trial_s=list(times),
                trial_start_unix_s=list(starts),
                trial_end_unix_s=list(starts + times),
            )
        )
        t += per_size
        del k
    n = int(hours * 3600.0 * rate_hz)
    base = start + np.arange(n) / rate_hz
    for i in range(nodes):
        local = base + offsets[i] + drift[i] * (base - start) + rng.normal(0, 0.002, n)
        activity = np.clip((base - start - baseline_s) / sweep_s, 0, 1)
        power = 100.0 + 30.0 * activity + rng.normal(0, 2.0, n)
        nan = np.full(n, np.nan)
        w.append_samples(
            i, 0, {"time_unix_s": local, "power_w": power, "energy_j": nan, "volts": nan, "amps": nan}
        )
    w.set_group_attrs("power")
    w.finish("complete", elapsed_s=hours * 3600.0)
    return n * nodes


def time_analysis(path: Path, out: Path, extra: list[str]) -> tuple[float, float, int]:
    """Run the analysis in a child; (wall seconds, peak resident MiB of the child, exit status)."""
    cmd = [
        sys.executable,
        "-m",
        "npmpi_analysis",
        str(path),
        "--plots",
        str(out / "plots"),
        "--csv",
        str(out / "run.csv"),
        "--json",
        str(out / "run.json"),
        "--np-out",
        str(out / "np.out"),
        "--report",
        str(out / "report.html"),
        "--force",
        *extra,
    ]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, check=False)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        print(proc.stderr, file=sys.stderr)
    rss_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss  # KiB on Linux
    return wall, rss_kib / 1024.0, proc.returncode


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=64, help="nodes (default 64)")
    ap.add_argument("--hours", type=float, default=4.0, help="run length in hours (default 4)")
    ap.add_argument("--rate", type=float, default=10.0, help="samples per second per node (default 10)")
    ap.add_argument("--keep", type=Path, help="write the run file here and keep it (default: a temp dir)")
    ap.add_argument("--repeat", type=int, default=1, help="time the analysis this many times (default 1)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        path = args.keep or out / "big.h5"
        t0 = time.perf_counter()
        samples = make_run(path, args.nodes, args.hours, args.rate)
        made = time.perf_counter() - t0
        size_mib = path.stat().st_size / 2**20
        print(
            f"run file: {args.nodes} nodes, {args.hours:g} h at {args.rate:g} Hz = {samples:,} samples, "
            f"{size_mib:.0f} MiB, written in {made:.1f} s"
        )
        status = 0
        for _ in range(args.repeat):
            wall, rss_mib, status = time_analysis(path, out, [])
            print(
                f"analysis (table, exports, all plots, report): {wall:.2f} s, peak memory {rss_mib:.0f} MiB"
            )
    return status


if __name__ == "__main__":
    import keep_results  # bench/keep_results.py: the output kept in bench/results/

    sys.exit(keep_results.run(main, "analysis_speed"))
