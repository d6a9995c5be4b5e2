#!/usr/bin/env python3
"""NetPIPE itself vs npmpi on one MPI library: Debian's NPopenmpi and Open MPI 4.1, side by side.

One command, as root on Debian 12 (installs what it needs, then about 6 minutes on 2 cores):

    python3 bench/netpipe_compare.py

It runs bench/setup-debian-mpi.sh (apt-get: netpipe-openmpi, openmpi-bin, libopenmpi-dev when
missing; a separate .venv-debian-mpi whose mpi4py and npmpi C kernel are built with
/usr/bin/mpicc), re-executes itself in that environment, then for each transport (shared memory:
`--mca pml ob1 --mca btl vader,self`; TCP: `--mca pml ob1 --mca btl tcp,self`) runs, under
/usr/bin/mpirun with the same binding, round after round (interleaved, so noise hits all alike):

    NPopenmpi -p 0 -u 8388608                        NetPIPE 3.7.2 (Debian), default "cache" mode
    python -m npmpi -p 0 -u 8M --kernel c           npmpi's C kernel, its defaults (NetPIPE's buffers)
    python -m npmpi -p 0 -u 8M --kernel python      npmpi's Python kernel, the same
    python -m npmpi -p 0 -u 8M --kernel c --buffers separate       npmpi's C kernel, OSU's and IMB's buffers
    python -m npmpi -p 0 -u 8M --kernel python --buffers separate  npmpi's Python kernel, the same
    python -m mpi4py.bench pingpong -n 8388608      mpi4py's own Python ping-pong

on NetPIPE's size schedule without perturbation (1, 2, 3, 4, 6, 8, 12, 16, 24, … 8 MiB: every
power of two and the midpoints). Then short 1-8 B runs of NPopenmpi and both npmpi kernels for the
latency figures (--standalone adds npmpi's C loop as a plain C program at two MPI thread levels),
and short 256 KiB-2 MiB runs of NPopenmpi and npmpi on NetPIPE's buffers for the peak bandwidth
(more chances for each tool to run in the machine's fast state); --probe adds bench/buffer_probe.py,
which times npmpi's C loop on six buffer arrangements. Prints the tables, writes a plot (--plot) and
the raw figures (the plot's path with .json; --report-from prints them again), and keeps the printed
tables with the command that made them in bench/results/YYYY-MM-DD-netpipe_compare.txt (the file
docs/netpipe-comparison.md quotes).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import keep_results

ROOT = Path(__file__).resolve().parents[1]
VENV = Path(os.environ.get("NPMPI_DEBIAN_VENV", ROOT / ".venv-debian-mpi"))
if not VENV.is_absolute():
    VENV = ROOT / VENV
MPIRUN = "/usr/bin/mpirun"
NETPIPE = "/usr/bin/NPopenmpi"
DEFAULT_PLOT = ROOT / "bench" / "out" / "netpipe_compare.png"

TRANSPORTS = {
    "shm": ("shared memory", ["--mca", "pml", "ob1", "--mca", "btl", "vader,self"]),
    "tcp": ("TCP", ["--mca", "pml", "ob1", "--mca", "btl", "tcp,self"]),
}
TOOLS = ("netpipe", "cnb", "pnb", "c", "python", "mpi4py")
TOOL_LABEL = {
    "netpipe": "NPopenmpi",
    "cnb": "npmpi C netpipe-buf",
    "pnb": "npmpi Py netpipe-buf",
    "c": "npmpi C separate",
    "python": "npmpi Py separate",
    "mpi4py": "mpi4py.bench",
    "netpipe-I": "NPopenmpi -I",
    "c-single": "standalone SINGLE",
    "c-funneled": "standalone FUNNELED",
}
# npmpi runs: tool -> (kernel, more npmpi options). "cnb" and "pnb" run npmpi's defaults, which are
# NetPIPE's method in full: its buffer arrangement (one buffer per size, sent from and received into),
# its nrepeat rule and stop rule; "c" and "python" the arrangement of OSU and IMB (separate long-lived
# send and receive buffers, --buffers separate)
SEPARATE_BUFFERS = ("--buffers", "separate")
NPMPI_RUNS = {
    "cnb": ("c", ()),
    "pnb": ("python", ()),
    "c": ("c", SEPARATE_BUFFERS),
    "python": ("python", SEPARATE_BUFFERS),
}
KIB, MIB = 1 << 10, 1 << 20
# (label, kind, size): latency = one-way time in us, bandwidth = decimal Gbit/s of one message
METRICS = [
    ("latency 1 B (us)", "lat", 1),
    ("latency 8 B (us)", "lat", 8),
    ("latency 1 KiB (us)", "lat", KIB),
    ("bandwidth 64 KiB (Gbit/s)", "bw", 64 * KIB),
    ("bandwidth 1 MiB (Gbit/s)", "bw", MIB),
    ("bandwidth 8 MiB (Gbit/s)", "bw", 8 * MIB),
    ("peak bandwidth (Gbit/s)", "peak", None),
]
PEER_METRICS = [
    ("latency 1 B (us)", "lat", 1),
    ("latency 1 KiB (us)", "lat", KIB),
    ("bandwidth 1 MiB (Gbit/s)", "bw", MIB),
    ("bandwidth 8 MiB (Gbit/s)", "bw", 8 * MIB),
    ("peak bandwidth (Gbit/s)", "peak", None),
]
PROBE_SIZES = [1, KIB, 64 * KIB, MIB, 8 * MIB]


# npmpi's C kernel loop as a standalone program (no Python), built with /usr/bin/mpicc: shows what
# the thread level asked of MPI costs. argv: thread level (single|funneled), sizes in bytes.
# Prints "size one-way-seconds" per size: best of 3 trials of about 0.1 s, after a calibration.
STANDALONE_C = r"""
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}
static double trial(char *s, char *r, int n, long it, int rank) {
    int peer = 1 - rank;
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = now();
    for (long i = 0; i < it; i++) {
        if (rank == 0) {
            MPI_Send(s, n, MPI_BYTE, peer, 1, MPI_COMM_WORLD);
            MPI_Recv(r, n, MPI_BYTE, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
            MPI_Recv(r, n, MPI_BYTE, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Send(s, n, MPI_BYTE, peer, 1, MPI_COMM_WORLD);
        }
    }
    return now() - t0;
}
int main(int argc, char **argv) {
    int provided, rank;
    int level = strcmp(argv[1], "single") == 0 ? MPI_THREAD_SINGLE : MPI_THREAD_FUNNELED;
    MPI_Init_thread(&argc, &argv, level, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    for (int a = 2; a < argc; a++) {
        int n = atoi(argv[a]);
        char *s = calloc(n + 1, 1), *r = calloc(n + 1, 1);
        long it = 1000;
        double per = trial(s, r, n, it, rank) / it;
        it = (long)(0.1 / per);
        MPI_Bcast(&it, 1, MPI_LONG, 0, MPI_COMM_WORLD);
        trial(s, r, n, it / 10 + 2, rank);
        double best = 1e30;
        for (int k = 0; k < 3; k++) {
            double t = trial(s, r, n, it, rank);
            if (t < best) best = t;
        }
        if (rank == 0) printf("%d %.12e\n", n, best / it / 2);
        free(s); free(r);
    }
    MPI_Finalize();
    return 0;
}
"""


def save_results(name: str, text: str, argv: list[str]) -> Path | None:
    """Keep a measuring run's printed tables, under the command that made them, in a dated file of
    bench/results/ (bench/keep_results.py)."""
    return keep_results.save(name, text, argv)


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


# ---------------------------------------------------------------- set-up and environment


def in_debian_venv() -> bool:
    return Path(sys.prefix).resolve() == VENV.resolve()


def setup_and_reexec(argv: list[str], script: Path | None = None) -> None:
    """Run the set-up helper, then continue script (default: this one) in .venv-debian-mpi."""
    say("== set-up: bench/setup-debian-mpi.sh")
    env = dict(os.environ, NPMPI_DEBIAN_VENV=str(VENV))
    rc = subprocess.run(["bash", str(ROOT / "bench" / "setup-debian-mpi.sh")], env=env, check=False)
    if rc.returncode != 0:
        raise SystemExit(f"netpipe_compare: set-up failed (exit {rc.returncode}); see the messages above")
    python = VENV / "bin" / "python"
    if not in_debian_venv():
        script = (script or Path(__file__)).resolve()
        os.execv(str(python), [str(python), str(script), *argv, "--no-setup"])


def mpi_env() -> dict[str, str]:
    """The caller's environment without anything that would point Open MPI elsewhere."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("OMPI_", "OPAL_", "PMIX_", "PRTE_"))
        and k not in ("LD_LIBRARY_PATH", "PYTHONPATH")
    }
    env["PATH"] = f"{VENV / 'bin'}:/usr/bin:/bin:{env.get('PATH', '')}"
    # for mpi4py.bench: the level npmpi's measuring ranks ask for (npmpi sets its own; mpi4py's default
    # is "multiple", which costs Open MPI about 20 ns per shared-memory message)
    env["MPI4PY_RC_THREAD_LEVEL"] = "single"
    if os.geteuid() == 0:
        env.update({"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"})
    return env


def mpirun(transport: str, bind: str, program: list[str], mca: tuple[str, ...] = ()) -> list[str]:
    return [MPIRUN, "-np", "2", "--bind-to", bind, *TRANSPORTS[transport][1], *mca, *program]


def run(cmd: list[str], cwd: Path, what: str) -> tuple[str, float]:
    t0 = time.monotonic()
    proc = subprocess.run(cmd, cwd=cwd, env=mpi_env(), capture_output=True, text=True, check=False)
    took = time.monotonic() - t0
    if proc.returncode != 0:
        say(f"netpipe_compare: {what} failed (exit {proc.returncode}): {' '.join(cmd)}")
        say(proc.stdout[-3000:] + proc.stderr[-3000:])
        raise SystemExit(1)
    return proc.stdout, took


# ---------------------------------------------------------------- the tools

Curve = dict[int, float]  # size in bytes -> one-way seconds
NO_CMA = ("--mca", "btl_vader_single_copy_mechanism", "none")


def run_netpipe(
    transport: str, args, work: Path, tag: str, flags: tuple[str, ...] = (), mca: tuple[str, ...] = ()
) -> tuple[Curve, float]:
    out = work / f"np-{tag}.out"
    lower = getattr(args, "lower", 1)
    prog = [NETPIPE, *flags, "-p", "0", "-l", str(lower), "-u", str(args.upper), "-o", str(out)]
    _, took = run(mpirun(transport, args.bind_to, prog, mca), work, f"NPopenmpi ({tag})")
    curve: Curve = {}
    for line in out.read_text().splitlines():
        fields = line.split()
        if len(fields) != 3:
            continue
        size, mbps = int(fields[0]), float(fields[1])
        # np.out's third column (one-way seconds) is printed with 10 ns resolution; the Mbps column
        # (bits / 2^20 / s, 6 decimals) gives the same time to many more digits
        curve[size] = size * 8 / (mbps * 1024 * 1024) if mbps > 0 else float(fields[2])
    return curve, took


def run_npmpi(
    kernel: str,
    transport: str,
    args,
    work: Path,
    tag: str,
    lower: int = 1,
    mca: tuple[str, ...] = (),
    extra: tuple[str, ...] = (),
) -> tuple[Curve, float]:
    """One npmpi sweep; extra: more npmpi options (e.g. --mode stream). Returns one message's time per
    size (pingpong: round trip / 2; stream: per message; bidir: one exchange), best trial."""
    from npmpi.runfile.reader import load_run

    out = work / f"npmpi-{tag}.h5"
    prog = [str(VENV / "bin" / "python"), "-m", "npmpi", "-p", "0", "-l", str(lower), "-u", str(args.upper)]
    prog += ["--trials", str(args.trials), "--target-time", str(args.target_time)]
    prog += ["--kernel", kernel, *extra, "-q", "-o", str(out)]
    _, took = run(mpirun(transport, args.bind_to, prog, mca), work, f"npmpi --kernel {kernel} ({tag})")
    run_file = load_run(out)
    pp = run_file.pingpong
    # not pp.one_way_s, which is a ping-pong's (trial / 2 iterations): the file's one_way_divisor is
    # 2 for pingpong, the window for stream, 1 for bidir (docs/file-format.md)
    times = pp.best_trial_s / (float(run_file.attrs.get("one_way_divisor", 2)) * pp.iterations)
    return {int(s): float(t) for s, t in zip(pp.size_bytes, times, strict=True)}, took


def run_mpi4py_bench(transport: str, args, work: Path, tag: str) -> tuple[Curve, float]:
    prog = [str(VENV / "bin" / "python"), "-m", "mpi4py.bench", "pingpong", "-n", str(args.upper)]
    stdout, took = run(mpirun(transport, args.bind_to, prog), work, f"mpi4py.bench ({tag})")
    curve: Curve = {}
    for line in stdout.splitlines():
        # "      1024           1234.56 | 1.2345678e-06 ± 1.2e-07    10000": size, MB/s | mean one-way
        if line.startswith("#") or "|" not in line:
            continue
        left, right = line.split("|", 1)
        curve[int(left.split()[0])] = float(right.split()[0])
    return curve, took


def run_alternating(
    transport: str, args, work: Path, short, tools: tuple[str, ...], count: int, label: str
) -> tuple[dict[str, list[Curve]], float]:
    """`count` short runs of each tool in turn (NPopenmpi, an NPMPI_RUNS entry, or the standalone C
    program "c-single"/"c-funneled"), on the sizes of `short` (its lower and upper)."""
    runs: dict[str, list[Curve]] = {t: [] for t in tools}
    lower = getattr(short, "lower", 1)
    total = 0.0
    for i in range(count):
        for tool in tools:
            tag = f"{label}-{transport}-{tool}-{i}"
            if tool == "netpipe":
                curve, took = run_netpipe(transport, short, work, tag)
            elif tool.startswith("c-"):
                exe, level = work / "pingpong_c", tool.split("-")[1]
                stdout, took = run(mpirun(transport, args.bind_to, [str(exe), level, "1", "8"]), work, tag)
                curve = {int(a): float(b) for a, b in (line.split() for line in stdout.split("\n") if line)}
            else:
                kernel, extra = NPMPI_RUNS[tool]
                curve, took = run_npmpi(kernel, transport, short, work, tag, lower=lower, extra=extra)
            runs[tool].append(curve)
            total += took
    return runs, total


def run_latency_duel(transport: str, args, work: Path) -> tuple[dict[str, list[Curve]], float]:
    """Short runs, 1 B to 8 B, alternating NPopenmpi, npmpi C, npmpi Python: many samples of latency."""
    tools = ("netpipe", "c", "python", *(("c-single", "c-funneled") if args.standalone else ()))
    exe = work / "pingpong_c"
    if args.standalone and not exe.exists():
        (work / "pingpong_c.c").write_text(STANDALONE_C)
        subprocess.run(["/usr/bin/mpicc", "-O2", "-o", str(exe), str(work / "pingpong_c.c")], check=True)
    short = argparse.Namespace(**{**vars(args), "lower": 1, "upper": 8})
    return run_alternating(transport, args, work, short, tools, args.latency_runs, "lat")


PEAK_RUN_SIZES = (256 * KIB, 2 * MIB)  # where NetPIPE's buffer arrangement peaks here, both transports


def run_peak_runs(transport: str, args, work: Path) -> tuple[dict[str, list[Curve]], float]:
    """Short sweeps around the peak, alternating NPopenmpi and npmpi on NetPIPE's buffers: more runs
    of each tool, so that each reaches the machine's fast state for the bandwidth targets."""
    lower, upper = PEAK_RUN_SIZES
    short = argparse.Namespace(**{**vars(args), "lower": lower, "upper": min(upper, args.upper)})
    return run_alternating(transport, args, work, short, ("netpipe", "cnb", "pnb"), args.peak_runs, "peak")


def run_probe(
    transport: str, args, work: Path, mca: tuple[str, ...] = (), extra: tuple[str, ...] = ()
) -> tuple[dict[str, Curve], float]:
    sizes = ",".join(str(s) for s in PROBE_SIZES if s <= args.upper)
    prog = [str(VENV / "bin" / "python"), str(ROOT / "bench" / "buffer_probe.py"), "--json", "--sizes", sizes]
    prog += ["--rounds", str(args.probe_rounds), "--target-time", "0.03", *extra]
    stdout, took = run(mpirun(transport, args.bind_to, prog, mca), work, "buffer_probe")
    data = json.loads(stdout.strip().splitlines()[-1])
    return {lay: {int(k): v for k, v in d.items()} for lay, d in data.items()}, took


# ---------------------------------------------------------------- figures and tables


def figure(curve: Curve, kind: str, size: int | None) -> float:
    if kind == "peak":
        return max(s * 8 / t / 1e9 for s, t in curve.items())
    if size not in curve:
        return float("nan")
    t = curve[size]
    return t * 1e6 if kind == "lat" else size * 8 / t / 1e9


def spread(values: list[float], digits: int) -> str:
    values = [v for v in values if v == v]
    if not values:
        return "n/a"
    f = f"{{:.{digits}f}}"
    return f"{f.format(statistics.median(values))} [{f.format(min(values))}-{f.format(max(values))}]"


def digits_for(kind: str) -> int:
    return 3 if kind == "lat" else 2


def per_round(results: dict, tool: str, kind: str, size: int | None) -> list[float]:
    return [figure(c, kind, size) for c in results[tool]]


def ratios(results: dict, tool: str, ref: str, kind: str, size: int | None) -> list[float]:
    a, b = per_round(results, tool, kind, size), per_round(results, ref, kind, size)
    return [x / y for x, y in zip(a, b, strict=False)]


def best(values: list[float], kind: str) -> float:
    """The best round: shortest time for a latency, highest bandwidth otherwise."""
    values = [v for v in values if v == v]
    if not values:
        return float("nan")
    return min(values) if kind == "lat" else max(values)


def best_ratio(results: dict, tool: str, ref: str, kind: str, size: int | None) -> float:
    return best(per_round(results, tool, kind, size), kind) / best(per_round(results, ref, kind, size), kind)


def transport_table(name: str, results: dict, args) -> list[str]:
    label, mca = TRANSPORTS[name]
    n = len(results["netpipe"])
    lines = [
        f"== {label}: {' '.join(mca)}, --bind-to {args.bind_to}; {n} interleaved rounds "
        f"({', '.join(TOOL_LABEL[t] for t in TOOLS)})",
        "   netpipe-buf: npmpi's defaults (NetPIPE's one buffer per size, sent from and received into);",
        "   separate: --buffers separate (OSU's and IMB's separate send and receive buffers). Each figure:",
        "   median over rounds [min-max]",
    ]
    shown = ("netpipe", "cnb", "pnb", "c", "python")
    head = f"{'metric':26s}" + "".join(f"{TOOL_LABEL[t]:>24s}" for t in shown)
    lines += [head, "-" * len(head)]
    for mlabel, kind, size in METRICS:
        d = digits_for(kind)
        cells = [spread(per_round(results, tool, kind, size), d) for tool in shown]
        lines.append(f"{mlabel:26s}" + "".join(f"{c:>24s}" for c in cells))
    lines += [
        "",
        "   ratios of the figures (latency: >1 slower; bandwidth: >1 faster). best: best round of each tool;",
        "   rounds: the ratio within each round, median [min-max]. Cnb, Pnb: npmpi C, Python netpipe-buf",
    ]
    pairs = (
        ("cnb", "netpipe", "Cnb/NP"),
        ("c", "netpipe", "C/NP"),
        ("pnb", "cnb", "Pnb/Cnb"),
        ("python", "c", "Py/C"),
    )
    head = f"{'metric':26s}" + "".join(f"{t + ' best':>13s}{t + ' rounds':>22s}" for _, _, t in pairs)
    lines += [head, "-" * len(head)]
    for mlabel, kind, size in METRICS:
        row = f"{mlabel:26s}"
        for tool, ref, _ in pairs:
            row += f"{best_ratio(results, tool, ref, kind, size):13.3f}"
            row += f"{spread(ratios(results, tool, ref, kind, size), 3):>22s}"
        lines.append(row)
    return lines


def round_lines(name: str, results: dict) -> list[str]:
    """Key figures of every run, in the order they ran: shows how each run fared."""
    lines = [
        f"   every run, {TRANSPORTS[name][0]}, in the order they ran:",
        f"   {'round':>5s}  {'tool':20s}{'1 B (us)':>11s}{'64 KiB (us)':>13s}{'1 MiB (us)':>12s}"
        f"{'peak (Gbit/s)':>15s}",
    ]
    for r in range(len(results["netpipe"])):
        for tool in TOOLS:
            c = results[tool][r]
            t = [c.get(sz, float("nan")) * 1e6 for sz in (1, 64 * KIB, MIB)]
            lines.append(
                f"   {r + 1:5d}  {TOOL_LABEL[tool]:20s}{t[0]:11.3f}{t[1]:13.2f}{t[2]:12.1f}"
                f"{figure(c, 'peak', None):15.1f}"
            )
    return lines


def targets(
    name: str,
    results: dict,
    duel: dict[str, list[Curve]] | None = None,
    peak_runs: dict[str, list[Curve]] | None = None,
) -> list[str]:
    """The targets, judged on the best run of each tool (1 B: sweeps and short latency runs pooled;
    peak bandwidth on NetPIPE's buffers: sweeps and short runs around the peak pooled)."""
    lat = {t: per_round(results, t, "lat", 1) for t in ("netpipe", "c", "python")}
    if duel:
        for t in lat:
            lat[t] += [c[1] * 1e6 for c in duel[t] if 1 in c]
    lat_c_best = min(lat["c"]) / min(lat["netpipe"])
    added_best = min(lat["python"]) - min(lat["c"])
    py_lat, c_lat = per_round(results, "python", "lat", 1), per_round(results, "c", "lat", 1)
    added = [p - c for p, c in zip(py_lat, c_lat, strict=True)]
    if duel:
        added += [p[1] * 1e6 - c[1] * 1e6 for p, c in zip(duel["python"], duel["c"], strict=True)]
    # bandwidth on NetPIPE's method (its buffer arrangement); npmpi's default arrangement beside it
    peak_c = ratios(results, "cnb", "netpipe", "peak", None)
    peak_py = ratios(results, "pnb", "cnb", "peak", None)
    peaks = {
        t: per_round(results, t, "peak", None)
        + [figure(c, "peak", None) for c in (peak_runs or {}).get(t, [])]
        for t in ("netpipe", "cnb", "pnb")
    }
    peak_c_best = max(peaks["cnb"]) / max(peaks["netpipe"])
    peak_py_best = max(peaks["pnb"]) / max(peaks["cnb"])
    default_c = best_ratio(results, "c", "netpipe", "peak", None)
    default_py = best_ratio(results, "python", "c", "peak", None)

    def verdict(ok: bool) -> str:
        return "met" if ok else "NOT met"

    def rng(v: list[float]) -> str:
        return f"per round {statistics.median(v):.3f} [{min(v):.3f}-{max(v):.3f}]"

    n = len(lat["netpipe"])
    return [
        f"targets ({TRANSPORTS[name][0]}), judged on each tool's best run ({n} runs per tool at 1 B, "
        f"{len(peaks['netpipe'])} for peak bandwidth):",
        f"  npmpi C latency at 1 B within 5 % of NPopenmpi: C/NP {lat_c_best:.3f} "
        f"({min(lat['c']):.3f} vs {min(lat['netpipe']):.3f} us) -> {verdict(abs(lat_c_best - 1) <= 0.05)}",
        *(
            [
                "    (the same loop without Python: MPI_THREAD_SINGLE "
                f"{min(c[1] for c in duel['c-single']) * 1e6 / min(lat['netpipe']):.3f}, MPI_THREAD_FUNNELED "
                f"{min(c[1] for c in duel['c-funneled']) * 1e6 / min(lat['netpipe']):.3f} of NPopenmpi)"
            ]
            if duel and duel.get("c-single") and duel.get("c-funneled")
            else []
        ),
        "  npmpi C peak bandwidth within 5 % of NPopenmpi, on its defaults (NetPIPE's buffers): "
        f"Cnb/NP {peak_c_best:.3f} ({max(peaks['cnb']):.2f} vs {max(peaks['netpipe']):.2f} Gbit/s; "
        f"sweeps {rng(peak_c)}) -> {verdict(abs(peak_c_best - 1) <= 0.05)}",
        f"  Python kernel's added one-way latency over C at 1 B < 0.5 us: {added_best:.3f} us "
        f"(run by run: median {statistics.median(added):.3f} [{min(added):.3f}-{max(added):.3f}]) "
        f"-> {verdict(added_best < 0.5)}",
        "  Python kernel's peak bandwidth within 3 % of C, on NetPIPE's buffers: "
        f"Pnb/Cnb {peak_py_best:.3f} (sweeps {rng(peak_py)}) -> {verdict(peak_py_best >= 0.97)}",
        f"  OSU's and IMB's buffers (--buffers separate), for comparison: peak C/NP {default_c:.3f}, "
        f"Py/C {default_py:.3f}",
        "    (where a single-copy transport serves unchanged data from cache: docs/netpipe-comparison.md)",
    ]


def duel_table(name: str, runs: dict[str, list[Curve]]) -> list[str]:
    n = len(runs["netpipe"])
    tools = [t for t in ("netpipe", "c", "python", "c-single", "c-funneled") if t in runs]
    lines = [
        f"== latency, {TRANSPORTS[name][0]}: {n} short runs each (1-8 B), alternating; one-way us, "
        "median [min-max]; the ratios use each tool's best (min)",
    ]
    if "c-single" in runs:
        lines += [
            "   standalone: npmpi's C loop as a plain C program (no Python), with MPI_THREAD_SINGLE (what",
            "   NetPIPE's MPI_Init gives, and npmpi's measuring ranks ask for) or MPI_THREAD_FUNNELED (what",
            "   a rank with meter threads needs)",
        ]
    head = f"{'size':6s}" + "".join(f"{TOOL_LABEL[t]:>22s}" for t in tools)
    head += f"{'C/NP best':>11s}{'Py-C best':>11s}"
    lines += [head, "-" * len(head)]
    for size in (1, 8):
        row = f"{size:4d} B"
        vals = {t: [c[size] * 1e6 for c in runs[t] if size in c] for t in tools}
        for t in tools:
            row += f"{spread(vals[t], 3):>22s}"
        row += f"{min(vals['c']) / min(vals['netpipe']):11.3f}{min(vals['python']) - min(vals['c']):11.3f}"
        lines.append(row)
    return lines


def peak_table(name: str, runs: dict[str, list[Curve]]) -> list[str]:
    lo, hi = PEAK_RUN_SIZES
    tools = [t for t in ("netpipe", "cnb", "pnb") if runs.get(t)]
    lines = [
        f"== peak bandwidth, {TRANSPORTS[name][0]}: {len(runs['netpipe'])} short runs each ({lo // KIB} KiB-"
        f"{hi // MIB} MiB), alternating; Gbit/s at the best size of each run, and that size",
    ]
    head = f"{'run':>5s}" + "".join(f"{TOOL_LABEL[t]:>28s}" for t in tools)
    lines += [head, "-" * len(head)]
    for i in range(len(runs["netpipe"])):
        row = f"{i + 1:5d}"
        for t in tools:
            c = runs[t][i]
            size = max(c, key=lambda k: k / c[k]) if c else 0
            row += f"{figure(c, 'peak', None):18.2f} at {size // KIB:5d} KiB"
        lines.append(row)
    return lines


def peer_table(name: str, results: dict) -> list[str]:
    lines = [
        f"== mpi4py.bench pingpong vs npmpi's Python kernel, {TRANSPORTS[name][0]} (same rounds; "
        "mpi4py.bench: mean of individually timed round trips, powers of two)",
    ]
    head = f"{'metric':26s}{'mpi4py.bench':>24s}{'npmpi Py separate':>24s}{'npmpi/bench':>21s}"
    lines += [head, "-" * len(head)]
    for mlabel, kind, size in PEER_METRICS:
        d = digits_for(kind)
        lines.append(
            f"{mlabel:26s}{spread(per_round(results, 'mpi4py', kind, size), d):>24s}"
            f"{spread(per_round(results, 'python', kind, size), d):>24s}"
            f"{spread(ratios(results, 'python', 'mpi4py', kind, size), 3):>21s}"
        )
    return lines


def probe_table(name: str, variant: str, probe: dict[str, Curve], refs: dict[str, Curve]) -> list[str]:
    """The probe's configurations at a few sizes, next to whole-sweep figures (refs) at the same sizes."""
    lines = [
        f"== buffers, {TRANSPORTS[name][0]}, {variant}: one-way us; LAYOUT/ALLOCATION columns: "
        "npmpi's C loop in bench/buffer_probe.py (best of interleaved trials)",
    ]
    cols = list(probe) + list(refs)
    width = max(13, *(len(c) + 2 for c in cols))
    head = f"{'size (B)':>10s}" + "".join(f"{c:>{width}s}" for c in cols)
    lines += [head, "-" * len(head)]
    sizes = sorted({s for c in [*probe.values(), *refs.values()] for s in c} & set(PROBE_SIZES))
    for size in sizes:
        row = [c.get(size, float("nan")) * 1e6 for c in [*probe.values(), *refs.values()]]
        lines.append(f"{size:10d}" + "".join(f"{v:{width}.3f}" for v in row))
    if len(refs) >= 2:
        peaks = {k: figure(c, "peak", None) for k, c in refs.items() if c}
        lines.append("   peak bandwidth (Gbit/s): " + ", ".join(f"{k} {v:.2f}" for k, v in peaks.items()))
    return lines


def best_curve(curves: list[Curve]) -> Curve:
    """Per size, the best (shortest) one-way time over rounds."""
    sizes = set.intersection(*(set(c) for c in curves)) if curves else set()
    return {s: min(c[s] for c in curves) for s in sizes}


PROBE_LEGEND = [
    "   layouts: two = separate send and receive buffers (npmpi --buffers separate); one = send from and",
    "   receive into one buffer (NetPIPE's default and npmpi's); mixed = rank 0 one, rank 1 two.",
    "   allocations: big = allocated once for the largest size with numpy (numpy advises huge pages from",
    "   4 MiB); exact = per size, 16 KiB-aligned, no huge pages (NetPIPE). NPopenmpi, npmpi: the best",
    "   round of the sweeps above.",
]


# ---------------------------------------------------------------- plot


def plot(all_results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    names = list(all_results)
    fig, axes = plt.subplots(len(names), 2, figsize=(13, 4.6 * len(names)), squeeze=False)
    color = {"netpipe": "k", "cnb": "C0", "pnb": "C1", "c": "C0", "python": "C1", "mpi4py": "C2"}
    dash = {"netpipe": "-", "cnb": ":", "pnb": ":", "c": "-", "python": "-", "mpi4py": "--"}
    for row, name in enumerate(names):
        results = all_results[name]
        ax_t, ax_b = axes[row]
        for tool in TOOLS:
            curves = results.get(tool) or []
            if not curves:
                continue
            sizes = sorted(set.intersection(*(set(c) for c in curves)))
            t = np.array([[c[s] for s in sizes] for c in curves])
            s = np.array(sizes, dtype=float)
            lo, hi = t.min(axis=0), t.max(axis=0)
            label = TOOL_LABEL[tool]
            line = {"color": color[tool], "ls": dash[tool], "lw": 1.3, "label": label}
            ax_t.plot(s, lo * 1e6, **line)
            ax_t.fill_between(s, lo * 1e6, hi * 1e6, color=color[tool], alpha=0.15, lw=0)
            bw = s * 8 / t / 1e9
            ax_b.plot(s, bw.max(axis=0), **line)
            ax_b.fill_between(s, bw.min(axis=0), bw.max(axis=0), color=color[tool], alpha=0.15, lw=0)
        label = TRANSPORTS[name][0]
        ax_t.set(xscale="log", yscale="log", xlabel="message size (B)", ylabel="one-way time (us)")
        ax_t.set_title(f"{label}: one-way time (line: best round; band: all rounds)")
        ax_b.set(xscale="log", xlabel="message size (B)", ylabel="bandwidth (Gbit/s, decimal)")
        ax_b.set_title(f"{label}: bandwidth (line: best round; band: all rounds)")
        for ax in (ax_t, ax_b):
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(loc="upper left")
    fig.suptitle("NetPIPE (NPopenmpi 3.7.2) vs npmpi vs mpi4py.bench on Debian's Open MPI 4.1, 2 ranks")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ---------------------------------------------------------------- main


def describe() -> list[str]:
    import mpi4py

    mpi4py.rc.initialize = False
    from mpi4py import MPI

    def dpkg_version(pkg: str) -> str:
        proc = subprocess.run(
            ["dpkg-query", "-W", "-f=${Version}", pkg], capture_output=True, text=True, check=False
        )
        return proc.stdout.strip() or "?"

    library = MPI.Get_library_version().replace("\0", "").splitlines()[0].strip()
    cpu = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return [
        f"host: {platform.node()}, {os.cpu_count()} CPUs ({cpu}), {platform.platform()}",
        f"MPI: {library}; mpirun {MPIRUN}; "
        f"netpipe-openmpi {dpkg_version('netpipe-openmpi')}; mpi4py {mpi4py.__version__} "
        f"(built with /usr/bin/mpicc); Python {platform.python_version()}",
    ]


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds per transport (default 3)")
    ap.add_argument(
        "--transports", default="shm,tcp", help="comma-separated: shm (vader,self), tcp (tcp,self)"
    )
    ap.add_argument(
        "--bind-to", default="core", choices=["core", "none"], help="mpirun binding for every run (core)"
    )
    ap.add_argument("--upper", type=int, default=8 * MIB, help="largest size in bytes (default 8388608)")
    ap.add_argument("--trials", type=int, default=3, help="npmpi --trials (default 3, NPopenmpi's count)")
    ap.add_argument(
        "--target-time",
        type=float,
        default=0.1,
        help="npmpi --target-time, NetPIPE's RUNTM (default 0.1, that of Debian's NPopenmpi)",
    )
    ap.add_argument(
        "--latency-runs",
        type=int,
        default=4,
        help="short 1-8 B runs per tool, alternating, for the latency targets (default 4; 0 skips)",
    )
    ap.add_argument(
        "--peak-runs",
        type=int,
        default=3,
        help="short 256 KiB-2 MiB runs of NPopenmpi and npmpi on NetPIPE's buffers, alternating, for the "
        "bandwidth targets (default 3; 0 skips)",
    )
    ap.add_argument(
        "--standalone",
        action="store_true",
        help="add npmpi's C loop as a plain C program at MPI_THREAD_SINGLE and _FUNNELED to the latency runs",
    )
    ap.add_argument("--probe-rounds", type=int, default=5, help="bench/buffer_probe.py --rounds (default 5)")
    ap.add_argument(
        "--probe",
        action="store_true",
        help="add bench/buffer_probe.py: npmpi's C loop on six buffer arrangements",
    )
    ap.add_argument(
        "--no-cma-check",
        action="store_true",
        help="skip the shared-memory probe without single-copy (btl_vader_single_copy_mechanism none)",
    )
    ap.add_argument("--netpipe-nocache", action="store_true", help="also run NPopenmpi -I once per transport")
    ap.add_argument("--plot", type=Path, default=DEFAULT_PLOT, help=f"PNG path (default {DEFAULT_PLOT})")
    ap.add_argument("--no-setup", action="store_true", help="skip bench/setup-debian-mpi.sh")
    ap.add_argument(
        "--report-from", type=Path, help="print the tables and plot again from a saved .json, measure nothing"
    )
    args = ap.parse_args()
    if args.report_from:
        if not in_debian_venv() and (VENV / "bin" / "python").exists():
            python = str(VENV / "bin" / "python")
            os.execv(python, [python, str(Path(__file__).resolve()), *sys.argv[1:]])
        report(json.loads(args.report_from.read_text()), args.plot, args.report_from)
        return 0

    if not args.no_setup:
        setup_and_reexec(sys.argv[1:])
    if not in_debian_venv():
        python = VENV / "bin" / "python"
        if not python.exists():
            raise SystemExit(f"netpipe_compare: {python} is missing: run without --no-setup")
        os.execv(str(python), [str(python), str(Path(__file__).resolve()), *sys.argv[1:]])
    for exe in (MPIRUN, NETPIPE):
        if not shutil.which(exe):
            raise SystemExit(f"netpipe_compare: {exe} is missing: run without --no-setup")
    transports = [t for t in args.transports.split(",") if t]
    for t in transports:
        if t not in TRANSPORTS:
            raise SystemExit(f"netpipe_compare: unknown transport {t!r} (use shm, tcp)")

    started = time.monotonic()
    load_before = os.getloadavg()
    header = [
        f"netpipe_compare, {time.strftime('%Y-%m-%d %H:%M:%S %Z')}",
        *describe(),
        f"sizes: NetPIPE's schedule without perturbation (-p 0), 1 B to {args.upper} B; "
        f"NPopenmpi: 3 trials of ~0.2 s per size (its build's TRIALS, RUNTM); npmpi: --trials {args.trials} "
        f"--target-time {args.target_time}; all: best trial, one-way = round trip / 2",
        f"load average before: {load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f}",
    ]
    for line in header:
        say(line)
    all_results: dict[str, dict[str, list[Curve]]] = {}
    probes: dict[str, dict[str, dict[str, Curve]]] = {}
    probe_refs: dict[str, dict[str, dict[str, Curve]]] = {}
    duels: dict[str, dict[str, list[Curve]]] = {}
    peak_runs: dict[str, dict[str, list[Curve]]] = {}
    durations: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="netpipe-compare-") as tmp:
        work = Path(tmp)
        for name in transports:
            results: dict[str, list[Curve]] = {tool: [] for tool in TOOLS}
            for r in range(args.rounds):
                tag = f"{name}-{r}"
                for tool in TOOLS:
                    if tool == "netpipe":
                        curve, took = run_netpipe(name, args, work, tag)
                    elif tool == "mpi4py":
                        curve, took = run_mpi4py_bench(name, args, work, tag)
                    else:
                        kernel, extra = NPMPI_RUNS[tool]
                        curve, took = run_npmpi(kernel, name, args, work, f"{tool}-{tag}", extra=extra)
                    results[tool].append(curve)
                    durations.setdefault(TOOL_LABEL[tool], []).append(took)
                    say(f"[{name} round {r + 1}/{args.rounds}] {TOOL_LABEL[tool]:13s} {took:5.1f} s")
            all_results[name] = results
            if args.latency_runs > 0:
                duels[name], took = run_latency_duel(name, args, work)
                say(f"[{name}] latency runs {took:5.1f} s")
            if args.peak_runs > 0:
                peak_runs[name], took = run_peak_runs(name, args, work)
                say(f"[{name}] peak runs {took:5.1f} s")
            probes[name], probe_refs[name] = {}, {}
            default = "default MCA settings"
            refs: dict[str, Curve] = {
                "NPopenmpi": best_curve(results["netpipe"]),
                "npmpi C separate": best_curve(results["c"]),
                "npmpi C netpipe-buf": best_curve(results["cnb"]),
            }
            if args.netpipe_nocache:
                refs["NPopenmpi -I"], took = run_netpipe(name, args, work, f"{name}-I", flags=("-I",))
                say(f"[{name}] NPopenmpi -I {took:5.1f} s")
            probe_refs[name][default] = refs
            if args.probe:
                probes[name][default], took = run_probe(name, args, work)
                say(f"[{name}] buffer probe {took:5.1f} s")
            if name == "shm" and not args.no_cma_check and args.probe:
                variant = "no single-copy (" + " ".join(NO_CMA[1:]) + ")"
                probes[name][variant], took = run_probe(name, args, work, NO_CMA)
                probe_refs[name][variant] = {}
                say(f"[{name}] buffer probe, no single-copy {took:5.1f} s")
    load_after = os.getloadavg()
    data = {
        "header": header,
        "bind_to": args.bind_to,
        "results": all_results,
        "probe": probes,
        "probe_refs": probe_refs,
        "latency_runs": duels,
        "peak_runs": peak_runs,
        "footer": [
            "run times (s): "
            + "; ".join(f"{k} {statistics.median(v):.1f} median of {len(v)}" for k, v in durations.items()),
            f"load average after: {load_after[0]:.2f} {load_after[1]:.2f} {load_after[2]:.2f}; "
            f"total {time.monotonic() - started:.0f} s",
        ],
    }
    raw = args.plot.with_suffix(".json")
    raw.parent.mkdir(parents=True, exist_ok=True)
    raw.write_text(json.dumps(data, indent=1))
    text = report(data, args.plot, raw)
    kept = save_results("netpipe_compare", text, sys.argv[1:])
    if kept is not None:
        say(f"tables kept in {kept}")
    return 0


def int_keys(obj):
    """JSON turned the sizes into strings: turn them back (curves are the dicts with digit keys)."""
    if isinstance(obj, dict):
        return {int(k) if k.isdigit() else k: int_keys(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [int_keys(v) for v in obj]
    return obj


def report(data: dict, plot_path: Path, raw: Path) -> str:
    data = int_keys(json.loads(json.dumps(data)))
    all_results, probes, probe_refs = data["results"], data["probe"], data["probe_refs"]
    for name, results in all_results.items():
        if any(not results.get(t) for t in TOOLS):
            missing = ", ".join(TOOL_LABEL[t] for t in TOOLS if not results.get(t))
            raise SystemExit(f"netpipe_compare: {raw} has no {missing} runs for {name}: measure again")
    args = argparse.Namespace(bind_to=data.get("bind_to", "core"))
    out = [line.replace("\0", "") for line in data["header"]] + [""]
    for name in all_results:
        out += transport_table(name, all_results[name], args)
        out.append("")
        out += round_lines(name, all_results[name])
        out.append("")
        if name in data.get("latency_runs", {}):
            out += duel_table(name, data["latency_runs"][name])
            out.append("")
        if name in data.get("peak_runs", {}):
            out += peak_table(name, data["peak_runs"][name])
            out.append("")
        out += targets(
            name,
            all_results[name],
            data.get("latency_runs", {}).get(name),
            data.get("peak_runs", {}).get(name),
        )
        out.append("")
        out += peer_table(name, all_results[name])
        out.append("")
        for variant, refs in probe_refs.get(name, {}).items():
            if variant in probes[name] or len(refs) > 2:
                out += probe_table(name, variant, probes[name].get(variant, {}), refs)
                out.append("")
        if probes.get(name):
            out += [*PROBE_LEGEND, ""]
    out += data.get("footer", [])
    plot(all_results, plot_path)
    out.append(f"plot: {plot_path}; raw figures: {raw}")
    print("\n".join(out))
    return "\n".join(out)


if __name__ == "__main__":
    sys.exit(main())
