#!/usr/bin/env python3
"""The collectives' Python kernel against their C kernel, on the same buffers, in one job.

Each rank builds npmpi's own collective step (npmpi/coll/step.py's CollStep: page-aligned buffers
bound once per size) and times a loop of the op with the Python kernel (mpi4py's buffer methods)
and with the C kernel (csrc/ccoll.c), one after the other on the same buffers, the order swapped
each round, `--rounds` rounds per size. A size's figure is the median over rounds of the mean over
ranks of each rank's time per call (OSU's average latency). What the Python kernel adds per call
is its time minus the C kernel's: mpi4py's cost per call (its argument handling) and whatever
grows with the size.

    .venv/bin/python bench/coll_kernels.py                        # every op, 2 ranks, 4 B-1 MiB
    .venv/bin/python bench/coll_kernels.py --ops allreduce,bcast --rounds 9 --json out.json

Separate jobs (bench/osu_coll_compare.py --kernel python) carry the jobs' own spread (OSU against
itself: 0.85-1.21 here); one job does not: docs/performance.md, "The collectives' kernels".
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

OPS = ("allreduce", "allgather", "alltoall", "bcast", "reduce", "reduce_scatter", "barrier")
LOOP_S = 0.02  # each loop's length, about


def inner(ops: list[str], sizes: list[int], rounds: int, dtype: str) -> None:
    """On every rank: each op and size, both kernels' loops; rank 0 prints one JSON line a size."""
    from mpi4py import MPI

    from npmpi.coll.options import CollOptions
    from npmpi.coll.step import CollStep

    comm = MPI.COMM_WORLD
    n = comm.Get_size()
    for op in ops:
        step = CollStep(comm, CollOptions(op=op, dtype=dtype, reduce_op="sum", check=True, kernel="python"))
        for size in [0] if op == "barrier" else sizes:
            if op == "reduce_scatter" and size % (n * step.dtype.itemsize):
                continue
            step.set_size(size)
            step.kernel = "python"
            step.run(10)
            # the iterations of a loop of about LOOP_S, agreed by all (rank 0's estimate)
            comm.Barrier()
            t = time.perf_counter()
            step.run(10)
            per = comm.bcast((time.perf_counter() - t) / 10, 0)
            iterations = max(10, int(LOOP_S / max(per, 1e-7)))
            times: dict[str, list[float]] = {"python": [], "c": []}
            for r in range(rounds + 1):  # round 0 warms both up, unrecorded
                for kernel in ("python", "c") if r % 2 else ("c", "python"):
                    step.kernel = kernel
                    comm.Barrier()
                    mean = comm.allreduce(step.run(iterations) / iterations, MPI.SUM) / n
                    if r:
                        times[kernel].append(mean)
            ok = comm.allreduce(int(step.check()), MPI.MIN)
            if comm.Get_rank() == 0:
                row = {"op": op, "bytes": size, "ranks": n, "iterations": iterations, "checked": bool(ok)}
                print(json.dumps({**row, **times}), flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", default=",".join(OPS), help="comma-separated ops (default: all seven)")
    ap.add_argument("--ranks", type=int, default=2, help="ranks (default 2; bound to cores when they fit)")
    ap.add_argument("--min", type=int, default=4, help="smallest size in bytes (default 4)")
    ap.add_argument("--max", type=int, default=1 << 20, help="largest size in bytes (default 1 MiB)")
    ap.add_argument("--rounds", type=int, default=7, help="rounds per size, order swapped each (default 7)")
    ap.add_argument("--dtype", default="float32", help="npmpi coll --dtype (default float32: MPI_FLOAT)")
    ap.add_argument("--json", type=Path, help="write every round's figures here")
    ap.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    ops = [o for o in args.ops.split(",") if o]
    bad = [o for o in ops if o not in OPS]
    if bad or args.rounds < 1 or args.ranks < 2 or not 0 < args.min <= args.max:
        ap.error(
            f"unknown op(s) {', '.join(bad)}" if bad else "--rounds >= 1, --ranks >= 2, 0 < --min <= --max"
        )
    sizes, size = [], args.min
    while size <= args.max:  # OSU's sequence: every power of two from --min
        sizes.append(size)
        size *= 2
    if args.inner:
        inner(ops, sizes, args.rounds, args.dtype)
        return 0

    import os

    from support.launcher import local_mpi_env, mpirun_path

    bind = "core" if args.ranks <= (os.cpu_count() or 1) else "none"
    cmd = [str(mpirun_path()), "-np", str(args.ranks), "--bind-to", bind, "--oversubscribe",
           sys.executable, __file__, "--inner", "--ops", ",".join(ops), "--min", str(args.min),
           "--max", str(args.max), "--rounds", str(args.rounds), "--dtype", args.dtype]  # fmt: skip
    proc = subprocess.run(cmd, env=local_mpi_env(), capture_output=True, text=True, check=False)
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not rows:
        print(proc.stderr[-3000:], file=sys.stderr)
        return 1
    print(
        f"npmpi coll, Python kernel vs C kernel on the same buffers: {args.ranks} ranks (--bind-to "
        f"{bind}), --dtype {args.dtype}, {args.rounds} rounds, medians of the mean over ranks"
    )
    print(
        f"{'op':>15s} {'bytes':>8s} {'python us':>10s} {'c us':>10s} {'added us':>9s} {'ratio':>6s}  checked"
    )
    for row in rows:
        py, c = statistics.median(row["python"]), statistics.median(row["c"])
        added = statistics.median(p - q for p, q in zip(row["python"], row["c"], strict=True))
        print(f"{row['op']:>15s} {row['bytes']:8d} {py * 1e6:10.3f} {c * 1e6:10.3f} {added * 1e6:9.3f} "
              f"{py / c:6.3f}  {'yes' if row['checked'] else 'WRONG RESULT'}")  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0 if all(r["checked"] for r in rows) else 1


if __name__ == "__main__":
    import keep_results  # bench/keep_results.py: the output kept in bench/results/

    sys.exit(keep_results.run(main, "coll_kernels"))
