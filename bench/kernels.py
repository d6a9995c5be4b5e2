#!/usr/bin/env python3
"""Python kernel vs C kernel, side by side in one invocation.

Runs `mpirun -np 2 python -m npmpi` with each kernel on the same sizes, interleaved
(python, c, python, c, …) so machine noise hits both alike, and prints one-way latency at 1 B and
1 KiB, bandwidth at 64 KiB, 1 MiB and the peak: the median over rounds, the spread (min–max) and
the ratio Python/C (median of the per-round ratios).

    .venv/bin/python bench/kernels.py                 # shared memory, 3 rounds (about 1 minute)
    .venv/bin/python bench/kernels.py --tcp --rounds 5
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

METRICS = [
    ("latency 1 B (us)", "lat", 1),
    ("latency 1 KiB (us)", "lat", 1024),
    ("bandwidth 64 KiB (Gbit/s)", "bw", 64 * 1024),
    ("bandwidth 1 MiB (Gbit/s)", "bw", 1 << 20),
    ("peak bandwidth (Gbit/s)", "peak", None),
]


def measure(path: Path) -> dict[str, float]:
    pp = load_run(path).pingpong
    one_way = pp.one_way_s
    bw_gbit = pp.size_bytes * 8 / one_way / 1e9
    out = {}
    for label, kind, size in METRICS:
        if kind == "peak":
            out[label] = float(bw_gbit.max())
            continue
        (idx,) = (pp.size_bytes == size).nonzero()
        if len(idx) == 0:
            raise SystemExit(f"size {size} B is not in the sweep: raise --upper")
        out[label] = float(one_way[idx[0]] * 1e6) if kind == "lat" else float(bw_gbit[idx[0]])
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds per kernel (default 3)")
    ap.add_argument("--upper", default="8M", help="largest size (default 8M)")
    ap.add_argument(
        "--target-time", default="0.02", help="npmpi --target-time, NetPIPE's RUNTM (default 0.02)"
    )
    ap.add_argument("--tcp", action="store_true", help="use Open MPI's TCP transport (btl tcp,self)")
    args = ap.parse_args()
    extra = {"OMPI_MCA_btl": "tcp,self"} if args.tcp else None
    results: dict[str, list[dict[str, float]]] = {"python": [], "c": []}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for kernel in ("python", "c"):
                out = Path(tmp) / f"{kernel}-{r}.h5"
                cmd = npmpi_command(
                    2,
                    [
                        "-p",
                        "0",
                        "-u",
                        args.upper,
                        "--target-time",
                        args.target_time,
                        "--kernel",
                        kernel,
                        "-q",
                        "-o",
                        str(out),
                    ],
                )
                proc = subprocess.run(
                    cmd, env=local_mpi_env(extra), capture_output=True, text=True, check=False
                )
                if proc.returncode != 0:
                    print(proc.stderr, file=sys.stderr)
                    return 1
                results[kernel].append(measure(out))
                print(f"round {r + 1}/{args.rounds}: {kernel} done", file=sys.stderr)
    transport = "tcp,self" if args.tcp else "default (shared memory)"
    print(f"npmpi kernels, {args.rounds} interleaved rounds, transport {transport}, -p 0 -u {args.upper}")
    header = f"{'metric':28s} {'python median [min-max]':>28s} {'c median [min-max]':>28s} {'python/c':>9s}"
    print(header)
    print("-" * len(header))
    for label, _kind, _size in METRICS:
        py = [m[label] for m in results["python"]]
        c = [m[label] for m in results["c"]]
        ratio = statistics.median(p / q for p, q in zip(py, c, strict=True))

        def cell(v):
            return f"{statistics.median(v):9.3f} [{min(v):.3f}-{max(v):.3f}]"

        print(f"{label:28s} {cell(py):>28s} {cell(c):>28s} {ratio:9.3f}")
    over = [
        p["latency 1 B (us)"] - c["latency 1 B (us)"]
        for p, c in zip(results["python"], results["c"], strict=True)
    ]
    print(
        f"Python kernel's added one-way latency at 1 B: {statistics.median(over):.3f} us "
        f"(rounds: {', '.join(f'{x:.3f}' for x in over)})"
    )
    return 0


if __name__ == "__main__":
    import keep_results  # bench/keep_results.py: the output kept in bench/results/

    sys.exit(keep_results.run(main, "kernels"))
