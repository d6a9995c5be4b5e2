#!/usr/bin/env python3
"""OSU's point-to-point benchmarks beside npmpi, each arrangement of buffers, interleaved, as ratios.

OSU's micro-benchmarks are not packaged: build OSU 7.x by hand (its own instructions,
`./configure CC=mpicc CXX=mpicxx && make`) with the mpicc of the MPI that npmpi's mpi4py uses
(for the pip wheel: .venv/bin/mpicc), outside this repository, and point this script at the folder
holding osu_latency, osu_bw, osu_bibw and osu_mbw_mr (searched below it):

    python bench/osu_compare.py --osu /path/to/libexec/osu-micro-benchmarks/mpi/pt2pt
    python bench/osu_compare.py --osu … --omb-py /path/to/osu-src/python   # OMB-Py beside the Python kernel

For each benchmark, --rounds times in turn (OSU, then npmpi, so both see the same load), both
under one mpirun line (same binding, same MPI library, no power rank):

    osu_latency                       npmpi --buffers separate (osu_latency sends from one buffer
                                      and receives into another): latency_avg_s, the mean trial
    osu_bw        (-b single)         npmpi --mode stream --window 64 --buffers osu
    osu_bw -b multiple                npmpi --mode stream --window 64 (npmpi's default: a region
                                      per message of the window)
    osu_bibw      (-b single)         npmpi --mode bidir --window 64 --buffers osu
    osu_bibw -b multiple              npmpi --mode bidir --window 64
    osu_mbw_mr    (4 ranks, 2 pairs)  npmpi --mode stream --window 64 --pairs 2 --buffers osu:
                                      MB/s and messages/s

Bandwidths are OSU's MB/s (10^6 bytes/s) against npmpi's bytes of its iterations over its mean
trial time: both average over every timed iteration (OSU over one long run per size, npmpi over
its trials); latency is OSU's average against npmpi's latency_avg_s (the mean trial's one-way
time). osu_bibw counts both directions, as npmpi's bidir does; osu_mbw_mr averages its senders'
times where npmpi takes the slowest pair's (its aggregate), so that ratio leans below 1 by the
pairs' spread. Sizes: the powers of two both measure (npmpi's NetPIPE schedule with -p 0 holds
them). Prints per benchmark and size the medians over the rounds and their ratio (npmpi / OSU:
above 1 is npmpi faster for bandwidth, slower for latency); --json writes every round.
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
WINDOW = 64  # OSU's default window, npmpi's default stream window

BIDIR = ["--mode", "bidir", "--window", str(WINDOW)]
# name -> (OSU binary, OSU options, ranks, npmpi options, figure)
BENCHES = {
    "latency": ("osu_latency", [], 2, ["--buffers", "separate"], "latency"),
    "bw": ("osu_bw", [], 2, ["--mode", "stream", "--buffers", "osu"], "bandwidth"),
    "bw-multiple": ("osu_bw", ["-b", "multiple"], 2, ["--mode", "stream"], "bandwidth"),
    "bibw": ("osu_bibw", [], 2, [*BIDIR, "--buffers", "osu"], "bandwidth"),
    "bibw-multiple": ("osu_bibw", ["-b", "multiple"], 2, BIDIR, "bandwidth"),
    "mbw_mr": ("osu_mbw_mr", [], 4, ["--mode", "stream", "--pairs", "2", "--buffers", "osu"], "rate"),
}  # fmt: skip
OMB_PY = {"latency": "latency", "bw": "bw", "bibw": "bibw"}  # OMB-Py's --benchmark for these


def find_binary(folder: Path, name: str) -> Path:
    for path in (folder / name, *folder.glob(f"**/{name}")):
        if path.is_file() and os.access(path, os.X_OK):
            return path
    raise SystemExit(f"osu_compare: no {name} under {folder}")


def mpirun(np_: int, bind: str) -> list[str]:
    bind = bind if np_ <= (os.cpu_count() or 1) else "none"  # more ranks than cores: no binding
    return [str(VENV / "bin" / "mpirun"), "-np", str(np_), "--oversubscribe", "--bind-to", bind]


def run(cmd: list[str], timeout: float = 900) -> str:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"osu_compare: {' '.join(cmd[:10])} … failed:\n{proc.stderr[-2000:]}")
    return proc.stdout


def parse_osu(text: str, column: int = 1) -> dict[int, float]:
    """OSU's table: size -> the column's figure (latency us, MB/s; osu_mbw_mr: 1 MB/s, 2 messages/s)."""
    out = {}
    for line in text.splitlines():
        cells = line.split()
        if not cells or line.lstrip().startswith("#"):
            continue
        try:
            out[int(cells[0])] = float(cells[column])
        except (ValueError, IndexError):
            continue
    return out


def osu_round(binary: Path, bench: str, args) -> dict[int, float]:
    _, opts, np_, _, figure = BENCHES[bench]
    cmd = [*mpirun(np_, args.bind), str(binary), *opts, "-m", f"{args.lower}:{args.upper}"]
    got = parse_osu(run(cmd), 2 if figure == "rate" else 1)
    scale = 1e-6 if figure == "latency" else 1.0  # us -> s; MB/s and messages/s as they are
    return {size: value * scale for size, value in got.items()}


def omb_py_round(folder: Path, bench: str, args) -> dict[int, float]:
    cmd = [*mpirun(2, args.bind), str(VENV / "bin" / "python"), str(folder / "run.py")]
    cmd += [
        "--benchmark",
        OMB_PY[bench],
        "--buffer",
        "numpy",
        "--min",
        str(args.lower),
        "--max",
        str(args.upper),
    ]
    got = parse_osu(run(cmd))
    return {size: value * (1e-6 if bench == "latency" else 1.0) for size, value in got.items()}


def npmpi_round(bench: str, kernel: str, args) -> dict[int, float]:
    from npmpi_analysis.numbers.analyse import analyse_run, size_rows

    from npmpi.runfile.reader import load_run

    _, _, np_, opts, figure = BENCHES[bench]
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "r.h5"
        cmd = [
            *mpirun(np_, args.bind),
            str(VENV / "bin" / "python"),
            "-m",
            "npmpi",
            "--kernel",
            kernel,
            *opts,
        ]
        cmd += ["-l", str(max(args.lower, 1)), "-u", str(args.upper), "-p", "0", "-q", "-o", str(out)]
        run([*cmd, *args.npmpi_args])
        run_file = load_run(out)
        rows = size_rows(analyse_run(run_file, "r"))
    # every timed iteration over every trial's time, as OSU's one long run per size: the figure of
    # the mean trial time (bytes or messages of an iteration x iterations / mean trial time)
    factor = float(run_file.attrs["bytes_per_iteration_factor"])
    out = {}
    for r in rows:
        size, per_s = int(r["size_bytes"]), float(r["iterations"]) / float(r["trial_mean_s"])
        if figure == "latency":
            out[size] = float(r["latency_avg_s"])
        elif figure == "bandwidth":
            out[size] = factor * size * per_s / 1e6  # MB/s
        else:
            out[size] = factor * per_s  # messages/s: window x pairs messages per iteration
    return out


def summarise(bench: str, kernel: str, theirs: list[dict], ours: list[dict]) -> list[dict]:
    figure = BENCHES[bench][4]
    results = []
    for size in sorted(set(theirs[0]) & set(ours[0])):
        if size & (size - 1):  # powers of two only (npmpi's schedule holds more)
            continue
        o = float(np.median([r[size] for r in theirs if size in r]))
        n = float(np.median([r[size] for r in ours if size in r]))
        unit, show = (
            ("us", 1e6) if figure == "latency" else ("MB/s", 1.0) if figure == "bandwidth" else ("msg/s", 1.0)
        )
        rounds = {"osu_rounds": [r.get(size) for r in theirs], "npmpi_rounds": [r.get(size) for r in ours]}
        row = {"bench": bench, "kernel": kernel, "size_bytes": size, "unit": unit, "osu": o, "npmpi": n}
        results.append({**row, "ratio": n / o, **rounds})
        print(
            f"{bench:>14} {kernel:>6} {size:>8} {o * show:>12.3f} {n * show:>12.3f} {unit:>5} {n / o:>7.3f}"
        )
    return results


def compare(args) -> list[dict]:
    results = []
    for bench in args.benches:
        binary = find_binary(args.osu, BENCHES[bench][0])
        theirs, ours = [], []
        for _ in range(args.rounds):
            theirs.append(osu_round(binary, bench, args))
            # --null: OSU against itself, the ratios the machine's noise alone gives
            ours.append(osu_round(binary, bench, args) if args.null else npmpi_round(bench, "c", args))
        results += summarise(bench, "c", theirs, ours)
        if args.omb_py and bench in OMB_PY and not BENCHES[bench][1] and not args.null:
            theirs, ours = [], []
            for _ in range(args.rounds):
                theirs.append(omb_py_round(args.omb_py, bench, args))
                ours.append(npmpi_round(bench, "python", args))
            results += summarise(bench, "python", theirs, ours)
    return results


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--osu", type=Path, required=True, help="folder of OSU's pt2pt binaries (searched below)")
    p.add_argument("--omb-py", type=Path, help="OSU's python/ folder (run.py): OMB-Py beside --kernel python")
    p.add_argument("--benches", default=",".join(BENCHES), help=f"comma-separated, of {', '.join(BENCHES)}")
    p.add_argument("--lower", type=int, default=1, help="smallest size in bytes (default 1)")
    p.add_argument("--upper", type=int, default=4 << 20, help="largest size in bytes (default 4 MiB)")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds of each tool (default 3)")
    p.add_argument("--bind", default="core", choices=["core", "none"], help="mpirun --bind-to (default core)")
    p.add_argument("--npmpi-args", default="--trials 5", help="more npmpi options (default --trials 5)")
    p.add_argument(
        "--null",
        action="store_true",
        help="OSU against itself (a second OSU job where npmpi's would be): the ratios noise alone gives "
        "on this machine, to judge a difference against",
    )
    p.add_argument("--json", type=Path, help="write every round here")
    args = p.parse_args()
    args.benches = [b for b in args.benches.split(",") if b]
    args.npmpi_args = args.npmpi_args.split()
    bad = [b for b in args.benches if b not in BENCHES]
    if bad:
        raise SystemExit(f"osu_compare: unknown benchmark {bad[0]}; choose of {', '.join(BENCHES)}")
    print(f"{'bench':>14} {'kernel':>6} {'bytes':>8} {'OSU':>12} {'npmpi':>12} {'unit':>5} {'ratio':>7}")
    results = compare(args)
    if args.json:
        args.json.write_text(json.dumps({"argv": sys.argv[1:], "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    import keep_results  # bench/keep_results.py: the output kept in bench/results/

    sys.exit(keep_results.run(main, "osu_compare"))
