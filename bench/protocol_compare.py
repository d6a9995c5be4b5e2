#!/usr/bin/env python3
"""--protocol rma against NetPIPE's one-sided module, --protocol memcpy against a numpy copy loop.

One command, as root on Debian 12 (bench/setup-debian-mpi.sh makes .venv-debian-mpi, whose mpi4py
and npmpi C kernel use Debian's Open MPI 4.1, the library /usr/bin/NPopenmpi2 is built on):

    python3 bench/protocol_compare.py [--rounds 2] [--no-setup]

rma, on shared memory (`--mca pml ob1 --mca btl vader,self`), round after round, interleaved:

    NPopenmpi2 -p 0 -l L -u U               NetPIPE 3.7.2's NPmpi2: MPI_Put, fences (Debian's build)
    python -m npmpi --protocol rma -p 0 -l L -u U --kernel c / python   (--trials 3 --target-time 0.1,
                                             Debian's build's TRIALS and RUNTM)

and with --rma-op get (or both): NPopenmpi2 -g (MPI_Get) against npmpi --protocol rma --rma-op get.

for latency (1-8 B) and peak bandwidth (256 KiB-2 MiB): the best run of each tool, and the ratio
npmpi / NPopenmpi. Debian's NPopenmpi2 passes NULL where MPI_Win_create wants MPI_INFO_NULL, which
Open MPI refuses (MPI_ERR_INFO) or, without parameter checks, crashes on; this script builds a
five-line PMPI wrapper (bench/out/info_null.so) that passes MPI_INFO_NULL, and preloads it.

memcpy, two processes each copying on their own (as an npmpi memcpy run's pair does):

    python -m npmpi --protocol memcpy -p 0 -u 8M --kernel c / python   (NetPIPE's sizes and rule)
    a numpy loop per size: best of 3 trials of n × (np.copyto there, np.copyto back), two processes

bandwidth = bytes of one copy / time of one copy (NetPIPE's memcpy module's figure). The machine is
whatever it is: run it idle, or read the ratios with the load average printed beside them.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
import netpipe_compare as nc  # noqa: E402  (set-up, environment, npmpi runs on Debian's MPI)

NETPIPE2 = "/usr/bin/NPopenmpi2"
OUT = ROOT / "bench" / "out"
SHM = ["--mca", "pml", "ob1", "--mca", "btl", "vader,self"]
SHIM_C = """#include <mpi.h>
#include <stddef.h>
int MPI_Win_create(void *b, MPI_Aint n, int u, MPI_Info i, MPI_Comm c, MPI_Win *w)
{
    return PMPI_Win_create(b, n, u, i == NULL ? MPI_INFO_NULL : i, c, w);
}
"""
COPY_LOOP = r"""
import sys, time, numpy as np
from mpi4py import MPI
comm = MPI.COMM_WORLD
sizes = [int(x) for x in sys.argv[1].split(",")]
out = {}
prev = 1e-7
for n in sizes:
    s = np.full(max(n, 1), 7, np.uint8); r = np.zeros_like(s); sv, rv = s[:n], r[:n]
    reps = max(3, int(0.1 / max(prev, 1e-9) / 2))
    copy = np.copyto
    comm.Barrier()  # both processes copy the same size at the same time
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(reps):
            copy(rv, sv); copy(sv, rv)
        best = min(best, time.perf_counter() - t0)
    prev = best / (2 * reps)
    out[n] = prev
if comm.Get_rank() == 0:
    print(" ".join(f"{k}:{v!r}" for k, v in out.items()))
"""


def shim() -> Path:
    """The MPI_INFO_NULL wrapper for Debian's NPopenmpi2, built with Debian's mpicc."""
    OUT.mkdir(parents=True, exist_ok=True)
    src, lib = OUT / "info_null.c", OUT / "info_null.so"
    src.write_text(SHIM_C)
    subprocess.run(["/usr/bin/mpicc", "-shared", "-fPIC", "-O2", "-o", str(lib), str(src)], check=True)
    return lib


def np2(args, work: Path, lower: int, upper: int, lib: Path, tag: str, op: str = "put") -> dict[int, float]:
    out = work / f"np2-{tag}.out"
    prog = [NETPIPE2, "-p", "0", "-l", str(lower), "-u", str(upper), "-o", str(out)]
    prog += ["-g"] if op == "get" else []
    cmd = [nc.MPIRUN, "-np", "2", "--bind-to", args.bind_to, "-x", f"LD_PRELOAD={lib}", *SHM, *prog]
    nc.run(cmd, work, f"NPopenmpi2 ({tag})")
    curve = {}
    for line in out.read_text().splitlines():
        f = line.split()
        if len(f) == 3 and float(f[1]) > 0:
            curve[int(f[0])] = int(f[0]) * 8 / (float(f[1]) * 1024 * 1024)
    return curve


def npmpi(args, work: Path, kernel: str, lower: int, upper: int, extra: tuple, tag: str) -> dict[int, float]:
    ns = argparse.Namespace(upper=upper, trials=3, target_time=0.1, bind_to=args.bind_to)
    curve, _ = nc.run_npmpi(kernel, "shm", ns, work, tag, lower=lower, extra=extra)
    return curve


def latency(curves: list[dict[int, float]]) -> float:
    """The best one-way seconds at 8 B or less over runs (NetPIPE's first size has few
    repetitions, from its own latency probe: one size alone says little)."""
    return min(t for c in curves for s, t in c.items() if s <= 8)


def peak(curves: list[dict[int, float]]) -> float:
    """The best bandwidth in bit/s over runs and sizes."""
    return max(s * 8 / t for c in curves for s, t in c.items())


def rma_rounds(args, work: Path, op: str = "put") -> dict:
    lib = shim()
    rma = ("--protocol", "rma", "--rma-op", op)
    tools = {
        "NPopenmpi2": lambda lo, up, tag: np2(args, work, lo, up, lib, f"{op}-{tag}", op),
        "npmpi rma C": lambda lo, up, tag: npmpi(args, work, "c", lo, up, rma, f"{op}-{tag}"),
        "npmpi rma Py": lambda lo, up, tag: npmpi(args, work, "python", lo, up, rma, f"{op}-{tag}"),
    }
    lat: dict[str, list] = {k: [] for k in tools}
    peaks: dict[str, list] = {k: [] for k in tools}
    for rnd in range(args.rounds):
        order = list(tools) if rnd % 2 == 0 else list(tools)[::-1]
        for name in order:
            t0 = time.monotonic()
            lat[name].append(tools[name](1, 8, f"lat{rnd}-{name.split()[-1]}"))
            peaks[name].append(tools[name](262144, 2097152, f"peak{rnd}-{name.split()[-1]}"))
            nc.say(f"[rma {op} round {rnd + 1}] {name}: {time.monotonic() - t0:.1f} s")
    raw = {"latency_runs": lat, "peak_runs": peaks}
    return {k: {"latency_s": latency(lat[k]), "peak_bit_s": peak(peaks[k])} for k in tools} | {"raw": raw}


def copy_loop(work: Path, sizes: list[int], bind: str) -> dict[int, float]:
    script = work / "copy_loop.py"
    script.write_text(COPY_LOOP)
    prog = [str(nc.VENV / "bin" / "python"), str(script), ",".join(map(str, sizes))]
    stdout, _ = nc.run(nc.mpirun("shm", bind, prog), work, "numpy copy loop")
    return {int(k): float(v) for k, v in (p.split(":") for p in stdout.split())}


def memcpy_rounds(args, work: Path) -> dict:
    curves: dict[str, list] = {"npmpi memcpy C": [], "npmpi memcpy Py": [], "numpy copyto loop": []}
    for rnd in range(args.rounds):
        for kernel, name in (("c", "npmpi memcpy C"), ("python", "npmpi memcpy Py")):
            curves[name].append(
                npmpi(args, work, kernel, 1, args.memcpy_upper, ("--protocol", "memcpy"), f"m{rnd}{kernel}")
            )
        sizes = sorted(curves["npmpi memcpy Py"][-1])
        curves["numpy copyto loop"].append(copy_loop(work, sizes, args.bind_to))
        nc.say(f"[memcpy round {rnd + 1}] done")
    big = max(curves["npmpi memcpy Py"][0])
    out = {}
    for name, cs in curves.items():
        out[name] = {
            "latency_s": latency(cs),
            "peak_bit_s": peak(cs),
            "largest_bit_s": max(big * 8 / c[big] for c in cs),
        }
    out["largest_bytes"] = big
    out["raw"] = curves
    return out


def table(title: str, rows: dict, ref: str, keys: tuple[str, ...]) -> list[str]:
    lines = [title]
    for name, fig in rows.items():
        if not isinstance(fig, dict) or name == "raw":
            continue
        parts = []
        for k in keys:
            v, r = fig[k], rows[ref][k]
            shown = f"{v * 1e6:.3f} us" if k == "latency_s" else f"{v / 1e9:.2f} Gbit/s"
            parts.append(f"{k} {shown} ({v / r:.3f} x {ref})")
        lines.append(f"  {name:18} " + "; ".join(parts))
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--memcpy-upper", type=int, default=8 << 20)
    ap.add_argument("--bind-to", default="core", choices=["core", "none"])
    ap.add_argument("--only", choices=["rma", "memcpy"], default=None)
    ap.add_argument("--rma-op", choices=["put", "get", "both"], default="put", help="rma's operation(s)")
    ap.add_argument("--no-setup", action="store_true")
    args = ap.parse_args()
    if not args.no_setup or not nc.in_debian_venv():
        nc.setup_and_reexec(sys.argv[1:], Path(__file__))
    work = OUT / "protocol_compare"
    work.mkdir(parents=True, exist_ok=True)
    for old in work.glob("npmpi-*.h5"):  # a run's files from the last time (npmpi never overwrites)
        old.unlink()
    load = os.getloadavg()[0]
    data: dict = {"load_before": load}
    lines = []
    ops = ("put", "get") if args.rma_op == "both" else (args.rma_op,)
    for op in ops if args.only in (None, "rma") else ():
        key = "rma" if op == "put" else "rma_get"
        data[key] = rma_rounds(args, work, op)
        lines += table(
            f"rma {op} (shared memory, Debian Open MPI 4.1), best of rounds:",
            data[key],
            "NPopenmpi2",
            ("latency_s", "peak_bit_s"),
        )
    if args.only in (None, "memcpy"):
        data["memcpy"] = memcpy_rounds(args, work)
        lines += table(
            "memcpy (two processes copying), best of rounds:",
            data["memcpy"],
            "numpy copyto loop",
            ("latency_s", "peak_bit_s", "largest_bit_s"),
        )
    data["load_after"] = os.getloadavg()[0]
    lines.append(f"load average before {load:.1f}, after {data['load_after']:.1f} (2 cores)")
    print("\n".join(lines))
    (OUT / "protocol_compare.json").write_text(json.dumps(data, indent=1))
    return 0


if __name__ == "__main__":
    import keep_results  # bench/keep_results.py: the output kept in bench/results/

    sys.exit(keep_results.run(main, "protocol_compare"))
