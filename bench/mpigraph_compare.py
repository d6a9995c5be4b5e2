#!/usr/bin/env python3
"""LLNL's mpiGraph beside `npmpi map --mode stream` on the same network-namespace hosts, pair by pair.

mpiGraph is not packaged: build it by hand from its public source (github.com/LLNL/mpiGraph) with
the mpicc of the MPI that npmpi's mpi4py uses, outside this repository, and point this script at it:

    .venv/bin/mpicc -O2 -o /tmp/mpiGraph mpiGraph.c
    python bench/mpigraph_compare.py --mpigraph /tmp/mpiGraph        (as root: it makes namespaces)

It brings up N hosts (tests/support/netns_hosts.py: network namespaces joined by a bridge, every host's
link shaped to --rate), then for each case (uniform; one direction h1 -> h2 shaped to --slow-rate
by an htb class on h1 filtering on h2's address; one host h4 shaped to --slow-rate) runs

    mpiGraph SIZE ITERS WINDOW                          every host streams to the host D to its
                                                        right while receiving from D to its left
    python -m npmpi map --mode stream --window WINDOW --sizes SIZE
                                                        each pair's directions apart, round by round

and compares the two directional matrices: mpiGraph's "Send" table (row i "to" column j, MB/s of
2^20 bytes) and npmpi's /map/bandwidth_bit_s[size] (i -> j), both in Gbit/s (10^9 bit/s). Prints,
per case, the median ratio npmpi / mpiGraph over the unshaped directions with its range, the
shaped directions' values in each tool, which directions each tool puts below half its median,
and what npmpi-analyze names; --json writes the matrices.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
VENV = ROOT / ".venv"


def parse_send_matrix(text: str, n: int) -> np.ndarray:
    """mpiGraph's Send table: [n, n] bit/s, row i to column j (NaN on the diagonal)."""
    lines = text.splitlines()
    start = next(k for k, line in enumerate(lines) if line.startswith("Send\t"))
    out = np.full((n, n), np.nan)
    for i in range(n):
        cells = lines[start + 1 + i].rstrip("\t").split("\t")[1:]
        out[i] = [float(c) * 2**20 * 8 for c in cells]
    np.fill_diagonal(out, np.nan)
    return out


def tc(host: str, *args: str) -> None:
    subprocess.run(["ip", "netns", "exec", host, "tc", *args], check=True, capture_output=True, timeout=30)


def shape(case: str, names: list[str], rate: str, slow: str, subnet: str) -> None:
    """Every host at `rate`, then the case's direction or host at `slow`."""
    for h in names:
        tc(
            h,
            "qdisc",
            "replace",
            "dev",
            "eth0",
            "root",
            "tbf",
            "rate",
            rate,
            "burst",
            "128kb",
            "latency",
            "50ms",
        )
    if case == "direction":  # h1 -> h2 only: an htb class on h1 for packets to h2's address
        h = names[0]
        tc(h, "qdisc", "replace", "dev", "eth0", "root", "handle", "1:", "htb", "default", "20")
        tc(h, "class", "add", "dev", "eth0", "parent", "1:", "classid", "1:10", "htb", "rate", slow)
        tc(h, "class", "add", "dev", "eth0", "parent", "1:", "classid", "1:20", "htb", "rate", rate,
           "ceil", rate, "burst", "128kb", "cburst", "128kb")  # fmt: skip
        tc(h, "filter", "add", "dev", "eth0", "parent", "1:", "protocol", "ip", "prio", "1", "u32",
           "match", "ip", "dst", f"{subnet}.2/32", "flowid", "1:10")  # fmt: skip
    elif case == "host":
        tc(names[-1], "qdisc", "replace", "dev", "eth0", "root", "tbf", "rate", slow, "burst", "128kb",
           "latency", "50ms")  # fmt: skip


def run(cmd: list[str], timeout: float = 600) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_") and k != "PYTHONPATH"}
    proc = subprocess.run(
        cmd, env=env, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
    )
    if proc.returncode != 0:
        raise SystemExit(
            f"mpigraph_compare: {' '.join(cmd[:6])} … failed:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}"
        )
    return proc.stdout


def measure(args, hosts, case: str, work: Path) -> dict:
    """One case: both tools' matrices and what the analysis names."""
    mpirun = str(hosts.mpirun_wrapper(str(VENV / "bin" / "mpirun")))
    n = args.hosts
    shape(case, hosts.names, args.rate, args.slow_rate, hosts.env["NPMPI_NETNS_SUBNET"])
    launch = [mpirun, "-np", str(n), "--map-by", "node"]
    graph_out = run([*launch, args.mpigraph, str(args.size), str(args.iters), str(args.window)])
    graph = parse_send_matrix(graph_out, n)
    path = work / f"{case}.h5"
    run([*launch, str(VENV / "bin" / "python"), "-m", "npmpi", "map", "--mode", "stream",
         "--window", str(args.window), "--sizes", f"1,{args.size}", "--kernel", "c", "--trials", "3",
         "--target-time", str(args.target_time), "-q", "-o", str(path), "--force"])  # fmt: skip
    import h5py

    with h5py.File(path) as f:
        ours = f["map/bandwidth_bit_s"][-1]
    said = run([str(VENV / "bin" / "npmpi-analyze"), str(path)])
    named = [line.strip() for line in said.splitlines() if re.match(r"^    \S.*bandwidth", line)]
    return {"case": case, "mpigraph_bit_s": graph, "npmpi_bit_s": ours, "named": named}


def report(result: dict) -> list[str]:
    """One case's lines: the ratio over unshaped directions and each tool's slow directions."""
    g, m, case = result["mpigraph_bit_s"], result["npmpi_bit_s"], result["case"]
    n = len(g)
    shaped = (
        {(0, 1)} if case == "direction" else ({(n - 1, j) for j in range(n - 1)} if case == "host" else set())
    )
    normal = [(i, j) for i in range(n) for j in range(n) if i != j and (i, j) not in shaped]
    ratio = np.array([m[i, j] / g[i, j] for i, j in normal])
    out = [f"{case}: npmpi / mpiGraph over {len(normal)} unshaped directions: median {np.median(ratio):.2f} "
           f"(range {ratio.min():.2f}-{ratio.max():.2f}); medians {np.nanmedian(m) / 1e9:.3f} and "
           f"{np.nanmedian(g) / 1e9:.3f} Gbit/s"]  # fmt: skip
    for name, x in (("mpiGraph", g), ("npmpi", m)):
        slow = [(i, j) for i in range(n) for j in range(n) if i != j and x[i, j] < 0.5 * np.nanmedian(x)]
        text = ", ".join(f"h{i + 1}->h{j + 1} {x[i, j] / 1e9:.3f}" for i, j in slow) or "none"
        out.append(f"  {name}: directions below half its median (Gbit/s): {text}")
    out.append(f"  npmpi-analyze names: {'; '.join(result['named']) or 'nothing'}")
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mpigraph", required=True, help="the mpiGraph binary, built with .venv/bin/mpicc")
    p.add_argument("--hosts", type=int, default=4)
    p.add_argument("--size", type=int, default=1 << 20, help="message bytes (default 1 MiB)")
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--window", type=int, default=10)
    p.add_argument("--target-time", type=float, default=0.05)
    p.add_argument("--rate", default="1gbit")
    p.add_argument("--slow-rate", default="300mbit")
    p.add_argument("--cases", default="uniform,direction,host")
    p.add_argument("--json", default=None, help="write both tools' matrices here")
    args = p.parse_args()
    if not os.access(args.mpigraph, os.X_OK):
        print(f"mpigraph_compare: {args.mpigraph} is not an executable mpiGraph", file=sys.stderr)
        return 2
    from support.netns_hosts import NetnsHosts, NetnsUnavailable

    with tempfile.TemporaryDirectory(prefix="npmpi-mpigraph-") as tmp:
        try:
            hosts = NetnsHosts.up(Path(tmp), count=args.hosts, rate=args.rate)
        except NetnsUnavailable as exc:
            print(f"mpigraph_compare: no network namespaces here: {exc}", file=sys.stderr)
            return 2
        try:
            results = [measure(args, hosts, case, Path(tmp)) for case in args.cases.split(",")]
        finally:
            hosts.down()
    print(f"{args.hosts} namespace hosts at {args.rate}, shaped {args.slow_rate}; ", end="")
    print(f"{args.size} B, window {args.window}")
    for r in results:
        print("\n".join(report(r)))
    if args.json:
        doc = [{k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in r.items()} for r in results]
        Path(args.json).write_text(json.dumps(doc, indent=1, default=lambda x: None))
    return 0


if __name__ == "__main__":
    import keep_results  # bench/keep_results.py: the output kept in bench/results/

    sys.exit(keep_results.run(main, "mpigraph_compare"))
