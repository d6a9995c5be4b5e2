#!/usr/bin/env python3
"""OSU's C collectives beside `npmpi coll --kernel c`, interleaved, average latency per size as ratios.

OSU's micro-benchmarks are not packaged: build OSU 7.x by hand (its own instructions) with the mpicc
of the MPI that npmpi's mpi4py uses, outside this repository, and point this script at the folder
holding its collective binaries (osu_allreduce, osu_allgather, osu_alltoall, osu_bcast, osu_reduce,
osu_reduce_scatter_block or osu_reduce_scatter, osu_barrier):

    python bench/osu_coll_compare.py --osu /path/to/libexec/osu-micro-benchmarks/mpi/collective

For each rank count and op, --rounds times in turn (OSU, then npmpi, so both see the same load):

    mpirun -np N osu_OP -f -T mpi_char -m MIN:MAX      OSU's avg/min/max latency across ranks
    mpirun -np N python -m npmpi coll --op OP --kernel c --dtype char --sizes SIZES
                                                       the file's latency_avg_s (npmpi-analyze)

both over the same MPI library and ranks (no power rank: every rank measures). Prints per op and
size the median of OSU's and of npmpi's average latency over the rounds and their ratio; --json
writes every round. What differs by method (docs/collectives.md): OSU times each call alone with a
barrier after it, npmpi times its calls back to back; OSU runs 1000 (100 above 8 KiB) iterations,
npmpi as many as --target-time allows.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
VENV = ROOT / ".venv"
OPS = ("allreduce", "allgather", "alltoall", "bcast", "reduce", "reduce_scatter", "barrier")


def osu_binary(folder: Path, op: str) -> Path:
    names = ["osu_reduce_scatter_block", "osu_reduce_scatter"] if op == "reduce_scatter" else [f"osu_{op}"]
    for name in names:
        for path in (folder / name, *folder.glob(f"**/{name}")):
            if path.is_file() and os.access(path, os.X_OK):
                return path
    raise SystemExit(f"osu_coll_compare: no {' or '.join(names)} under {folder}")


def parse_osu(text: str) -> dict[int, float]:
    """OSU's table: size -> average latency in seconds (barrier: size 0)."""
    out = {}
    for line in text.splitlines():
        cells = line.split()
        if not cells or line.lstrip().startswith("#"):
            continue
        try:
            numbers = [float(c) for c in cells]
        except ValueError:
            continue
        if len(numbers) >= 2 and numbers[0].is_integer() and len(numbers) != 4:
            out[int(numbers[0])] = numbers[1] * 1e-6  # size, avg, (min, max, iterations)
        else:
            out[0] = numbers[0] * 1e-6  # barrier: avg, (min, max, iterations)
    return out


def mpirun(np_: int) -> list[str]:
    return [str(VENV / "bin" / "mpirun"), "-np", str(np_), "--oversubscribe", "--bind-to", "none"]


def run(cmd: list[str], timeout: float) -> str:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"osu_coll_compare: {' '.join(cmd[:8])} … failed:\n{proc.stderr[-2000:]}")
    return proc.stdout


def osu_round(binary: Path, np_: int, op: str, sizes: list[int]) -> dict[int, float]:
    cmd = [*mpirun(np_), str(binary), "-f"]
    if op != "barrier":  # osu_barrier takes neither a datatype nor sizes
        cmd += ["-T", "mpi_char", "-m", f"{min(sizes)}:{max(sizes)}"]
    got = parse_osu(run(cmd, 600))
    return {s: got[s] for s in (sizes if op != "barrier" else [0]) if s in got}


def npmpi_round(np_: int, op: str, sizes: list[int], args: list[str]) -> dict[int, float]:
    from npmpi_analysis.numbers.analyse import analyse_run, size_rows

    from npmpi.runfile.reader import load_run

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "c.h5"
        cmd = [*mpirun(np_), str(VENV / "bin" / "python"), "-m", "npmpi", "coll", "--op", op, "--kernel", "c"]
        cmd += ["--dtype", "char", "-q", "-o", str(out), *args]
        cmd += [] if op == "barrier" else ["--sizes", ",".join(map(str, sizes))]
        run(cmd, 600)
        rows = size_rows(analyse_run(load_run(out), "c"))
    return {int(r["size_bytes"]): float(r["latency_avg_s"]) for r in rows}


def compare(args) -> list[dict]:
    results = []
    for np_ in args.np:
        for op in args.ops:
            binary = osu_binary(args.osu, op)
            sizes = [s for s in args.sizes if op != "reduce_scatter" or s % np_ == 0]
            osu, ours = [], []
            for _ in range(args.rounds):
                osu.append(osu_round(binary, np_, op, sizes))
                ours.append(npmpi_round(np_, op, sizes, args.npmpi_args))
            for size in sorted(set(osu[0]) & set(ours[0])):
                o = float(np.median([r[size] for r in osu if size in r]))
                n = float(np.median([r[size] for r in ours if size in r]))
                results.append({"ranks": np_, "op": op, "size_bytes": size, "osu_avg_s": o, "npmpi_avg_s": n,
                                "ratio": n / o, "osu_rounds_s": [r.get(size) for r in osu],
                                "npmpi_rounds_s": [r.get(size) for r in ours]})  # fmt: skip
                print(
                    f"{np_:>5} {op:>15} {size:>8} {o * 1e6:>10.3f} {n * 1e6:>10.3f} {n / o:>7.3f}", flush=True
                )
    return results


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--osu", type=Path, required=True, help="folder of OSU's collective binaries")
    p.add_argument("--np", default="2,4", help="rank counts, comma-separated (default 2,4)")
    p.add_argument("--ops", default=",".join(OPS), help="ops, comma-separated (default: all seven)")
    p.add_argument("--sizes", default="4,64,1024,16384,262144,1048576", help="bytes per rank")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds of each tool (default 3)")
    p.add_argument("--npmpi-args", default="--trials 5", help="more npmpi coll options (default --trials 5)")
    p.add_argument("--json", type=Path, help="write every round here")
    args = p.parse_args()
    args.np = [int(x) for x in args.np.split(",")]
    args.ops = [x for x in args.ops.split(",") if x]
    args.sizes = [int(x) for x in args.sizes.split(",")]
    args.npmpi_args = args.npmpi_args.split()
    bad = [op for op in args.ops if op not in OPS]
    if bad:
        raise SystemExit(f"osu_coll_compare: unknown op {bad[0]}")
    print(f"{'ranks':>5} {'op':>15} {'bytes':>8} {'OSU us':>10} {'npmpi us':>10} {'ratio':>7}")
    results = compare(args)
    if args.json:
        args.json.write_text(json.dumps({"argv": sys.argv[1:], "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
