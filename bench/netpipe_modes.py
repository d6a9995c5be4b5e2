#!/usr/bin/env python3
"""NetPIPE's streaming (-s) and bidirectional (-2) modes vs npmpi's --mode stream and --mode bidir.

One command, as root on Debian 12 (same set-up as bench/netpipe_compare.py; about 4 minutes):

    python3 bench/netpipe_modes.py

Reuses bench/netpipe_compare.py (set-up, environment, mpirun line, transports, np.out and run-file
readers). Per transport (shared memory vader,self; TCP tcp,self), round after round, interleaved:

    NPopenmpi -s -p 0 -u 8388608                          NetPIPE 3.7.2 streaming
    python -m npmpi -p 0 -u 8M --mode stream --window 64  npmpi C, npmpi Python
    NPopenmpi -2 -a -p 0 -u 8388608                       NetPIPE bidirectional (-a: without it,
                                                          Open MPI deadlocks at 4 KiB over vader)
    python -m npmpi -p 0 -u 8M --mode bidir               npmpi C, npmpi Python

What the figures are (NetPIPE 3.7 netpipe.c/mpi.c, checked on Debian's binary):
- stream: time per message. NetPIPE: the receiver's time from the trial's barrier to its last
  MPI_Recv of nrepeat back-to-back MPI_Sends, / nrepeat (no acknowledgement; the receiver's best
  trial is what rank 0 writes). npmpi: the sender's time for iterations x (window Isends, Waitall,
  1-byte acknowledgement) / (iterations x window). Bandwidth: size / time, one direction.
- bidir: time of one exchange (each rank sends one message and receives one). NetPIPE: Irecv,
  Send, Wait per exchange (-a); np.out's first column is 2 x the message size and its Mbps counts
  both directions. npmpi: the same loop. Bandwidth here: 2 x size / time, both directions, for all.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import netpipe_compare as nc

KIB, MIB = nc.KIB, nc.MIB
DEFAULT_OUT = nc.ROOT / "bench" / "out" / "netpipe_modes.json"
MODES = {
    "stream": ("streaming, one way (NPopenmpi -s; npmpi --mode stream)", ("-s",), 1),
    "bidir": ("bidirectional (NPopenmpi -2 -a; npmpi --mode bidir)", ("-2", "-a"), 2),
}
# (label, kind, size): time = one message's time in us (stream: per message; bidir: per exchange),
# bw = decimal Gbit/s (stream: one direction; bidir: both directions together)
METRICS = [
    ("time 1 B (us)", "lat", 1),
    ("time 8 B (us)", "lat", 8),
    ("time 1 KiB (us)", "lat", KIB),
    ("bandwidth 64 KiB (Gbit/s)", "bw", 64 * KIB),
    ("bandwidth 1 MiB (Gbit/s)", "bw", MIB),
    ("bandwidth 8 MiB (Gbit/s)", "bw", 8 * MIB),
    ("peak bandwidth (Gbit/s)", "peak", None),
]
LABEL = {"netpipe": "NPopenmpi", "c": "npmpi C", "python": "npmpi Python"}
TOOLS = list(LABEL)


def run_tool(mode: str, tool: str, transport: str, args, work: Path, tag: str) -> tuple[nc.Curve, float]:
    if tool == "netpipe":
        curve, took = nc.run_netpipe(transport, args, work, tag, flags=MODES[mode][1])
        if mode == "bidir":
            # np.out: bits/8 = 2 x message size in column 1; its Mbps counts both directions, so the
            # time run_netpipe derives (column 1 x 8 / Mbps) is one exchange's time
            curve = {size // 2: t for size, t in curve.items()}
        return curve, took
    extra = ["--mode", mode, *(["--window", str(args.window)] if mode == "stream" else [])]
    return nc.run_npmpi(tool, transport, args, work, tag, extra=tuple(extra))


def figure(curve: dict, kind: str, size: int | None, directions: int) -> float:
    if kind == "peak":
        return max(directions * s * 8 / t / 1e9 for s, t in curve.items()) if curve else float("nan")
    if size not in curve:
        return float("nan")
    t = curve[size]
    return t * 1e6 if kind == "lat" else directions * size * 8 / t / 1e9


def per_run(runs: list[dict], kind: str, size: int | None, directions: int) -> list[float]:
    return [figure(c, kind, size, directions) for c in runs]


def table(mode: str, name: str, results: dict[str, list[dict]]) -> list[str]:
    title, _, directions = MODES[mode]
    present = [t for t in LABEL if results.get(t)]
    n = len(results["netpipe"])
    lines = [
        f"== {title}, {nc.TRANSPORTS[name][0]}: {n} interleaved rounds; median [min-max] over rounds",
        "   time: one message (stream) or one exchange (bidir); bandwidth: "
        + ("one direction" if directions == 1 else "both directions together (2 x size / exchange time)"),
    ]
    head = f"{'metric':26s}" + "".join(f"{LABEL[t]:>24s}" for t in present)
    lines += [head, "-" * len(head)]
    for mlabel, kind, size in METRICS:
        d = nc.digits_for(kind)
        cells = [nc.spread(per_run(results[t], kind, size, directions), d) for t in present]
        lines.append(f"{mlabel:26s}" + "".join(f"{c:>24s}" for c in cells))
    lines += ["", "   ratios to NPopenmpi (time: >1 slower; bandwidth: >1 faster): best / best; per round"]
    others = [t for t in present if t != "netpipe"]
    head = f"{'metric':26s}" + "".join(f"{LABEL[t] + ' best':>26s}{'rounds':>22s}" for t in others)
    lines += [head, "-" * len(head)]
    for mlabel, kind, size in METRICS:
        ref = per_run(results["netpipe"], kind, size, directions)
        row = f"{mlabel:26s}"
        for t in others:
            vals = per_run(results[t], kind, size, directions)
            row += f"{nc.best(vals, kind) / nc.best(ref, kind):26.3f} "
            row += f"{nc.spread([a / b for a, b in zip(vals, ref, strict=False)], 3):>21s}"
        lines.append(row)
    lines.append(f"   every run ({'time us at 1 B, 64 KiB, 1 MiB; peak Gbit/s'}):")
    for r in range(n):
        cells = []
        for t in present:
            c = results[t][r] if r < len(results[t]) else {}
            v = [c.get(s, float("nan")) * 1e6 for s in (1, 64 * KIB, MIB)]
            peak = figure(c, "peak", None, directions)
            cells.append(f"{LABEL[t]} {v[0]:.3f} {v[1]:.2f} {v[2]:.1f} {peak:.1f}")
        lines.append(f"   round {r + 1}: " + " | ".join(cells))
    return lines


def report(data: dict) -> str:
    data = nc.int_keys(json.loads(json.dumps(data)))
    out = [line.replace("\0", "") for line in data["header"]] + [""]
    for mode, per_transport in data["results"].items():
        for name, results in per_transport.items():
            out += [*table(mode, name, results), ""]
    out += data.get("footer", [])
    print("\n".join(out))
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--rounds", type=int, default=2, help="interleaved rounds per transport (default 2)")
    ap.add_argument("--transports", default="shm,tcp", help="comma-separated: shm, tcp (default both)")
    ap.add_argument("--modes", default="stream,bidir", help="comma-separated: stream, bidir (default both)")
    ap.add_argument("--bind-to", default="core", choices=["core", "none"], help="mpirun binding (core)")
    ap.add_argument("--upper", type=int, default=8 * MIB, help="largest size in bytes (default 8388608)")
    ap.add_argument("--trials", type=int, default=3, help="npmpi --trials (default 3, NPopenmpi's count)")
    ap.add_argument(
        "--target-time",
        type=float,
        default=0.1,
        help="npmpi --target-time, NetPIPE's RUNTM (default 0.1, that of Debian's NPopenmpi)",
    )
    ap.add_argument("--window", type=int, default=64, help="npmpi --window in stream mode (default 64)")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"JSON of the figures ({DEFAULT_OUT})")
    ap.add_argument("--no-setup", action="store_true", help="skip bench/setup-debian-mpi.sh")
    ap.add_argument("--report-from", type=Path, help="print the tables from a saved JSON, measure nothing")
    args = ap.parse_args()
    if args.report_from:
        report(json.loads(args.report_from.read_text()))
        return 0
    if not args.no_setup:
        nc.setup_and_reexec(sys.argv[1:], Path(__file__))
    if not nc.in_debian_venv():
        python = nc.VENV / "bin" / "python"
        if not python.exists():
            raise SystemExit(f"netpipe_modes: {python} is missing: run without --no-setup")
        os.execv(str(python), [str(python), str(Path(__file__).resolve()), *sys.argv[1:]])
    transports = [t for t in args.transports.split(",") if t]
    modes = [m for m in args.modes.split(",") if m]
    for t in transports:
        if t not in nc.TRANSPORTS:
            raise SystemExit(f"netpipe_modes: unknown transport {t!r} (use shm, tcp)")
    for m in modes:
        if m not in MODES:
            raise SystemExit(f"netpipe_modes: unknown mode {m!r} (use stream, bidir)")

    started = time.monotonic()
    load = os.getloadavg()
    header = [
        f"netpipe_modes, {time.strftime('%Y-%m-%d %H:%M:%S %Z')}",
        *nc.describe(),
        f"sizes: -p 0, 1 B to {args.upper} B; NPopenmpi: 3 trials of ~0.1 s per size; npmpi: --trials "
        f"{args.trials} --target-time {args.target_time}, stream --window {args.window}; best trial each",
        f"load average before: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}",
    ]
    for line in header:
        nc.say(line)
    results: dict[str, dict[str, dict[str, list[nc.Curve]]]] = {m: {} for m in modes}
    durations: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="netpipe-modes-") as tmp:
        work = Path(tmp)
        for name in transports:
            for m in modes:
                results[m][name] = {t: [] for t in TOOLS}
            for r in range(args.rounds):
                for m in modes:
                    for tool in TOOLS:
                        curve, took = run_tool(m, tool, name, args, work, f"{m}-{name}-{tool}-{r}")
                        results[m][name][tool].append(curve)
                        durations.setdefault(f"{m} {LABEL[tool]}", []).append(took)
                        nc.say(f"[{name} round {r + 1}/{args.rounds}] {m:6s} {LABEL[tool]:20s} {took:5.1f} s")
    load = os.getloadavg()
    data = {
        "header": header,
        "results": results,
        "footer": [
            "run times (s): " + "; ".join(f"{k} {statistics.median(v):.1f}" for k, v in durations.items()),
            f"load average after: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; "
            f"total {time.monotonic() - started:.0f} s; raw figures: {args.out}",
        ],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(data, indent=1))
    text = report(data)
    kept = nc.save_results("netpipe_modes", text, sys.argv[1:])
    if kept is not None:
        nc.say(f"tables kept in {kept}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
