#!/usr/bin/env python3
"""How much a power rank disturbs the ping-pong, measured side by side in one invocation.

Three configurations, interleaved round by round so machine noise hits all alike:
  pair        mpirun -np 2: the ping-pong pair alone
  pair+idle   mpirun -np 3: a third rank that only waits (the same process count as below)
  pair+power  mpirun -np 3: the third rank is a power rank sampling `--meter` at 10 Hz
Prints small-message latency and peak bandwidth (median over rounds, spread) and the ratio of
pair+power to pair+idle (the disturbance of sampling itself; target: within 2 %).

    .venv/bin/python bench/power_disturbance.py [--rounds 3] [--meter estimate] [--kernel c]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from npmpi.runfile.reader import load_run

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from support.launcher import local_mpi_env, npmpi_command

CONFIGS = ("pair", "pair+idle", "pair+power")


def figures(path: Path) -> tuple[float, float]:
    pp = load_run(path).pingpong
    latency_us = float(pp.one_way_s[pp.size_bytes == 1][0] * 1e6)
    peak_gbit = float((pp.size_bytes * 8 / pp.one_way_s).max() / 1e9)
    return latency_us, peak_gbit


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--meter", default="estimate", help="meter of the power rank (default: estimate)")
    ap.add_argument("--sample-interval", default="0.1", help="seconds between samples (default 0.1 = 10 Hz)")
    ap.add_argument("--kernel", default="python")
    ap.add_argument("--target-time", default="0.02")
    args = ap.parse_args()
    common = ["-p", "0", "-u", "8M", "--target-time", args.target_time, "--kernel", args.kernel, "-q"]
    results: dict[str, list[tuple[float, float]]] = {c: [] for c in CONFIGS}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for config in CONFIGS:
                out = Path(tmp) / f"{config}-{r}.h5"
                np_, extra = (2, []) if config == "pair" else (3, [])
                if config == "pair+power":
                    extra = [
                        "--meter",
                        args.meter,
                        "--sample-interval",
                        args.sample_interval,
                        "--baseline",
                        "0",
                    ]
                cmd = npmpi_command(np_, [*common, *extra, "-o", str(out)])
                proc = subprocess.run(cmd, env=local_mpi_env(), capture_output=True, text=True, check=False)
                if proc.returncode != 0:
                    print(proc.stderr, file=sys.stderr)
                    return 1
                results[config].append(figures(out))
                print(f"round {r + 1}/{args.rounds}: {config} done", file=sys.stderr)
    print(
        f"power-rank disturbance: {args.rounds} interleaved rounds, {args.kernel} kernel, meter {args.meter} "
        f"every {args.sample_interval} s, -p 0 -u 8M"
    )
    print(f"{'configuration':14s} {'latency 1 B (us) [min-max]':>30s} {'peak (Gbit/s) [min-max]':>30s}")
    for config in CONFIGS:
        lat = [x[0] for x in results[config]]
        bw = [x[1] for x in results[config]]
        print(
            f"{config:14s} {statistics.median(lat):12.3f} [{min(lat):.3f}-{max(lat):.3f}]"
            f"{statistics.median(bw):17.2f} [{min(bw):.2f}-{max(bw):.2f}]"
        )
    for metric, k in (("latency 1 B", 0), ("peak bandwidth", 1)):
        ratios = [p[k] / i[k] for p, i in zip(results["pair+power"], results["pair+idle"], strict=True)]
        print(
            f"{metric}: pair+power / pair+idle = {statistics.median(ratios):.3f} "
            f"(rounds: {', '.join(f'{x:.3f}' for x in ratios)})"
        )
    return 0


if __name__ == "__main__":
    import keep_results  # bench/keep_results.py: the output kept in bench/results/

    sys.exit(keep_results.run(main, "power_disturbance"))
