#!/usr/bin/env python3
"""OSU's C collectives beside `npmpi coll --kernel c`, interleaved, average latency per size as ratios.

OSU's micro-benchmarks are not packaged: build OSU 7.x by hand (its own instructions) with the mpicc
of the MPI that npmpi's mpi4py uses, outside this repository, and point this script at the folder
holding its collective binaries (osu_allreduce, osu_allgather, osu_alltoall, osu_bcast, osu_reduce,
osu_reduce_scatter_block or osu_reduce_scatter, osu_barrier):

    python bench/osu_coll_compare.py --osu /path/to/libexec/osu-micro-benchmarks/mpi/collective

For each op, --rounds times in turn (OSU, then npmpi, so both see the same load):

    mpirun -np N osu_OP -f -T TYPE -m MIN:MAX          OSU's avg/min/max latency across ranks, for
                                                       each N of --ranks
    mpirun -np MAX python -m npmpi coll --op OP --ranks LIST --kernel K --dtype DTYPE --sizes SEQ
           --iterations osu                           the file's latency_avg_s per series (npmpi-analyze)

TYPE is DTYPE's MPI datatype (--dtype: char, OSU's default, or float32). SEQ is OSU's own
sequence, every power of two from MIN to MAX (a size's figure depends on the sizes run before it);
the table shows --sizes of it.

both over the same MPI library (no power rank: every rank measures). Each rank count is a job of its
own, as OSU's; with --together npmpi measures every count in one job, on the first N of MAX ranks
(the others wait, polling every millisecond: on fewer cores than ranks that slows the series).
With --method osu (the default) npmpi times each call alone
with a barrier after it and runs OSU's iteration counts, as OSU's loop does; --method target-time
compares npmpi's default (calls back to back, as many as --target-time allows). Prints per rank
count, op and size the median of OSU's and of npmpi's average latency over the rounds and their
ratio; --json writes every round. docs/collectives.md explains what differs by method.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
VENV = ROOT / ".venv"
# npmpi's --dtype -> OSU's -T. With char, OSU's reductions reduce MPI_CHAR (outside the standard's
# reduction types; Open MPI takes it) and npmpi's MPI_SIGNED_CHAR, the same byte: Open MPI's sum
# costs them differently (here reduce at 4 KiB-1 MiB: 1.04-1.19 of OSU with SIGNED_CHAR, 0.88-1.07
# with npmpi forced to MPI_CHAR), so reductions are compared as the same thing with --dtype float32,
# MPI_FLOAT in both.
DTYPES = {"char": "mpi_char", "float32": "mpi_float"}
ITEM_BYTES = {"char": 1, "float32": 4}
DTYPE = ["char"]
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


LAUNCH = {"mpirun": [str(VENV / "bin" / "mpirun")], "extra": []}  # --netns-hosts: the hosts' wrapper


def mpirun(np_: int) -> list[str]:
    if LAUNCH["extra"]:  # the hosts' wrapper places and binds the ranks itself
        return [*LAUNCH["mpirun"], "-np", str(np_), *LAUNCH["extra"]]
    bind = "core" if np_ <= (os.cpu_count() or 1) else "none"  # more ranks than cores: no binding
    return [*LAUNCH["mpirun"], "-np", str(np_), "--oversubscribe", "--bind-to", bind]


@contextlib.contextmanager
def netns_hosts(count: int, burst: str = ""):
    """`count` network-namespace hosts joined by a bridge (tests/support/netns_hosts.py, root): every
    launch of both tools goes through their mpirun wrapper, one rank per host (--map-by node). With
    `burst` (--netns-burst), every host's tbf gets that bucket instead of the hosts' 128 kb."""
    if not count:
        yield
        return
    sys.path.insert(0, str(ROOT / "tests"))
    from support.netns_hosts import NetnsHosts, NetnsUnavailable, unshape

    with tempfile.TemporaryDirectory() as tmp:
        try:
            hosts = NetnsHosts.up(Path(tmp), count=count)
        except NetnsUnavailable as exc:
            raise SystemExit(f"osu_coll_compare: --netns-hosts: {exc}") from None
        try:
            for host in hosts.names if burst else []:
                try:
                    unshape(host, hosts.rate, burst)
                except subprocess.CalledProcessError as exc:
                    why = (exc.stderr or b"").decode(errors="replace").strip() or "refused"
                    raise SystemExit(f"osu_coll_compare: --netns-burst {burst}: tc: {why}") from None
            LAUNCH["mpirun"] = [str(hosts.mpirun_wrapper(str(VENV / "bin" / "mpirun")))]
            LAUNCH["extra"] = ["--map-by", "node"]
            yield
        finally:
            hosts.down()


def run(cmd: list[str], timeout: float) -> str:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"osu_coll_compare: {' '.join(cmd[:8])} … failed:\n{proc.stderr[-2000:]}")
    return proc.stdout


def osu_round(binary: Path, np_: int, op: str, sizes: list[int]) -> dict[int, float]:
    cmd = [*mpirun(np_), str(binary), "-f"]
    if op != "barrier":  # osu_barrier takes neither a datatype nor sizes
        cmd += ["-T", DTYPES[DTYPE[0]], "-m", f"{min(sizes)}:{max(sizes)}"]
    got = parse_osu(run(cmd, 600))
    return {s: got[s] for s in (sizes if op != "barrier" else [0]) if s in got}


def osu_counts(binary: Path, counts: list[int], op: str, sizes: list[int]) -> dict[tuple[int, int], float]:
    """OSU's job at each rank count: (ranks, size) -> avg latency."""
    return {(n, s): t for n in counts for s, t in osu_round(binary, n, op, sizes).items()}


def splits(op: str, size: int, counts: list[int]) -> bool:
    """Whether `size` bytes split into whole items among every count's ranks (reduce_scatter)."""
    return op != "reduce_scatter" or all(size % (n * ITEM_BYTES[DTYPE[0]]) == 0 for n in counts)


def osu_sequence(sizes: list[int]) -> list[int]:
    """The sizes OSU's `-m MIN:MAX` runs, in its order (MIN, then doubling): npmpi runs the same
    sequence, since a size's figure depends on the sizes before it (at 16 KiB OSU's osu_bcast gives
    1.9 µs run alone and 2.5 µs after 1-8 KiB here; npmpi 2.9 and 2.5)."""
    out, size = [], min(sizes)
    while size <= max(sizes):
        out.append(size)
        size *= 2
    return out


def npmpi_round(
    counts: list[int], op: str, sizes: list[int], args: list[str]
) -> dict[tuple[int, int], float]:
    """One npmpi job on max(counts) ranks, every count as a series: (ranks, size) -> avg latency."""
    from npmpi_analysis.coll.numbers import series_runs
    from npmpi_analysis.numbers.analyse import analyse_run, size_rows

    from npmpi.runfile.reader import load_run

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "c.h5"
        runs = [s for s in osu_sequence(sizes) if splits(op, s, counts)]
        cmd = [*mpirun(max(counts)), str(VENV / "bin" / "python"), "-m", "npmpi", "coll", "--op", op]
        cmd += ["--dtype", DTYPE[0], "-q", "-o", str(out), *args]
        cmd += ["--ranks", ",".join(map(str, counts))] if len(counts) > 1 or counts[0] != max(counts) else []
        cmd += [] if op == "barrier" else ["--sizes", ",".join(map(str, runs))]
        run(cmd, 1200)
        rows = [
            r for part, label in series_runs(load_run(out), "c") for r in size_rows(analyse_run(part, label))
        ]
    return {(int(r["coll_ranks"]), int(r["size_bytes"])): float(r["latency_avg_s"]) for r in rows}


def compare(args) -> list[dict]:
    results = []
    for op in args.ops:
        binary = osu_binary(args.osu, op)
        sizes = [s for s in args.sizes if splits(op, s, args.ranks)]
        osu, ours = [], []
        for _ in range(args.rounds):
            osu.append(osu_counts(binary, args.ranks, op, sizes))
            if args.null:  # OSU against itself: the ratios the machine's noise alone gives
                ours.append(
                    {(n, s): t for n in args.ranks for s, t in osu_round(binary, n, op, sizes).items()}
                )
            elif not args.together:
                ours.append(
                    {
                        k: t
                        for n in args.ranks
                        for k, t in npmpi_round([n], op, sizes, args.npmpi_args).items()
                    }
                )
            else:
                ours.append(npmpi_round(args.ranks, op, sizes, args.npmpi_args))
        for key in sorted(set(osu[0]) & set(ours[0])):
            o = float(np.median([r[key] for r in osu if key in r]))
            n = float(np.median([r[key] for r in ours if key in r]))
            np_, size = key
            results.append({"ranks": np_, "op": op, "size_bytes": size, "osu_avg_s": o, "npmpi_avg_s": n,
                            "ratio": n / o, "osu_rounds_s": [r.get(key) for r in osu],
                            "npmpi_rounds_s": [r.get(key) for r in ours]})  # fmt: skip
            print(f"{np_:>5} {op:>15} {size:>8} {o * 1e6:>10.3f} {n * 1e6:>10.3f} {n / o:>7.3f}", flush=True)
    return results


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--osu", type=Path, required=True, help="folder of OSU's collective binaries")
    p.add_argument("--ranks", "--np", default="2,4", help="rank counts, comma-separated (default 2,4)")
    p.add_argument(
        "--together",
        action="store_true",
        help="every rank count in one npmpi job, as series (default: one job per count, as OSU's: a series' "
        "idle ranks poll for their next command, which on a machine with fewer cores than ranks slows it)",
    )
    p.add_argument(
        "--kernel",
        choices=("c", "python"),
        default="c",
        help="npmpi's kernel (default c; python: mpi4py's calls, whose ratio carries mpi4py's per-call cost)",
    )
    p.add_argument(
        "--null",
        action="store_true",
        help="OSU against itself (a second OSU job where npmpi's would be): the ratios noise alone gives "
        "on this machine, to judge a difference against",
    )
    p.add_argument(
        "--method", choices=("osu", "target-time"), default="osu", help="npmpi's --iterations (default osu)"
    )
    p.add_argument(
        "--dtype",
        choices=sorted(DTYPES),
        default="char",
        help="npmpi's --dtype and OSU's -T (default char: OSU's default; float32 compares reductions on "
        "one MPI datatype, MPI_FLOAT, where char is MPI_CHAR in OSU's and MPI_SIGNED_CHAR in npmpi's)",
    )
    p.add_argument("--ops", default=",".join(OPS), help="ops, comma-separated (default: all seven)")
    p.add_argument("--sizes", default="4,64,1024,16384,262144,1048576", help="bytes per rank")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds of each tool (default 3)")
    p.add_argument("--npmpi-args", default="--trials 5", help="more npmpi coll options (default --trials 5)")
    p.add_argument("--json", type=Path, help="write every round here")
    p.add_argument(
        "--netns-hosts",
        type=int,
        default=0,
        metavar="N",
        help="run both tools across N network-namespace hosts, one rank per host (root; default: this host)",
    )
    p.add_argument(
        "--netns-burst",
        default="16kb",
        metavar="SIZE",
        help="the hosts' tbf bucket with --netns-hosts (tc's units; default 16kb, below one 64 KiB call's "
        "traffic; the hosts' own is 128kb). A bucket larger than a call's traffic refills during the "
        "untimed barrier after it and lets the next call's bytes through faster than the link's rate, "
        "which a real link never does: docs/performance.md",
    )
    args = p.parse_args()
    args.ranks = sorted(int(x) for x in args.ranks.split(","))
    if args.netns_hosts and max(args.ranks) > args.netns_hosts:
        raise SystemExit("osu_coll_compare: --netns-hosts N needs every --ranks count at most N")
    args.ops = [x for x in args.ops.split(",") if x]
    DTYPE[0] = args.dtype
    args.sizes = [int(x) for x in args.sizes.split(",")]
    args.npmpi_args = ["--kernel", args.kernel, "--iterations", args.method, *args.npmpi_args.split()]
    bad = [op for op in args.ops if op not in OPS]
    if bad:
        raise SystemExit(f"osu_coll_compare: unknown op {bad[0]}")
    print(f"{'ranks':>5} {'op':>15} {'bytes':>8} {'OSU us':>10} {'npmpi us':>10} {'ratio':>7}")
    with netns_hosts(args.netns_hosts, args.netns_burst):
        results = compare(args)
    if args.json:
        args.json.write_text(json.dumps({"argv": sys.argv[1:], "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    import keep_results  # bench/keep_results.py: the output kept in bench/results/

    sys.exit(keep_results.run(main, "osu_coll_compare"))
