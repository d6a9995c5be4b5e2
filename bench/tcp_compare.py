#!/usr/bin/env python3
"""npmpi --protocol tcp against NetPIPE's own TCP module and against MPI over TCP.

    python3 bench/tcp_compare.py [--rounds 3] [--upper 8M] [--netns] [--rate 500mbit] [--json FILE]

Loopback (one host): round after round (interleaved, so noise hits every tool alike), on
NetPIPE's size schedule without perturbation (-p 0), each tool writing NetPIPE's np.out (bytes,
Mbps, seconds of one message; NetPIPE keeps each size's best trial, npmpi's --np-out too):

    NPtcp (receiver) + NPtcp -h 127.0.0.1        Debian's netpipe-tcp 3.7.2
    npmpi --protocol tcp --kernel c               npmpi's C loop on the pair's own connection
    npmpi --protocol tcp --kernel python          npmpi's Python loop (sendall / recv_into)
    npmpi --protocol mpi --kernel c, btl tcp,self Open MPI's TCP transport under the same loop

Each size's best over the rounds is kept; the latency is the smallest one-way time of 1-8 B, the
peak bandwidth the largest of any size; ratios are npmpi's over NPtcp's.

--netns adds two network-namespace hosts (tests/support/netns_hosts.py) whose link is shaped with tc tbf
to --rate: NPtcp across them, npmpi --protocol tcp and npmpi --protocol mpi (Open MPI's btl
tcp,self, as the hosts' launcher sets), the same interleaving; the plateau is the median of the
best bandwidths of the sizes from 1 MiB, which on a shaped link should sit at the rate for all.
Run as root (namespaces) on a quiet machine; the figures depend on it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from support.launcher import local_mpi_env, npmpi_command  # noqa: E402

NPTCP = "/usr/bin/NPtcp"
NP_MBPS_BIT_S = 2**20  # NetPIPE's Mbps: 2^20 bit/s
PORT = 5182
LOOPBACK_TOOLS = {
    "nptcp": "NPtcp",
    "tcp-c": "npmpi tcp (C)",
    "tcp-py": "npmpi tcp (Python)",
    "mpi-c": "npmpi mpi over btl tcp (C)",
}
NETNS_TOOLS = {"nptcp": "NPtcp", "tcp-c": "npmpi tcp (C)", "mpi-c": "npmpi mpi over btl tcp (C)"}


def read_np_out(path: Path) -> dict[int, tuple[float, float]]:
    """{bytes: (Mbps, seconds of one message)} of an np.out file."""
    rows = {}
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) >= 3:
            rows[int(parts[0])] = (float(parts[1]), float(parts[2]))
    return rows


def run_nptcp(out: Path, upper: int, host: str = "127.0.0.1", wrap=(), peer_wrap=()) -> None:
    """NPtcp's receiver, then its transmitter (which writes np.out); `wrap`s put them in hosts."""
    receiver = subprocess.Popen(
        [*peer_wrap, NPTCP, "-P", str(PORT), "-p", "0", "-u", str(upper)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        time.sleep(0.5)
        subprocess.run(
            [*wrap, NPTCP, "-h", host, "-P", str(PORT), "-p", "0", "-u", str(upper), "-o", str(out)],
            check=True,
            capture_output=True,
            timeout=600,
        )
    finally:
        try:
            receiver.wait(timeout=30)
        except subprocess.TimeoutExpired:
            receiver.kill()


def npmpi_args(tool: str, upper: int, out: Path) -> list[str]:
    protocol, kernel = ("mpi", "c") if tool == "mpi-c" else ("tcp", "c" if tool == "tcp-c" else "python")
    return ["-p", "0", "-u", str(upper), "--protocol", protocol, "--kernel", kernel, "-q",
            "--np-out", str(out), "--force", "-o", str(out.with_suffix(".h5"))]  # fmt: skip


def run_loopback_tool(tool: str, upper: int, out: Path) -> None:
    if tool == "nptcp":
        run_nptcp(out, upper)
        return
    extra = {"OMPI_MCA_btl": "tcp,self", "OMPI_MCA_pml": "ob1"} if tool == "mpi-c" else None
    cmd = npmpi_command(2, npmpi_args(tool, upper, out))
    subprocess.run(cmd, env=local_mpi_env(extra), check=True, capture_output=True, timeout=900)


def best_over_rounds(rounds: list[dict[int, tuple[float, float]]]) -> dict[int, tuple[float, float]]:
    """Each size's best (largest Mbps, smallest time) over the rounds that measured it."""
    sizes = sorted(set().union(*rounds))
    return {
        s: (max(r[s][0] for r in rounds if s in r), min(r[s][1] for r in rounds if s in r)) for s in sizes
    }


def figures(best: dict[int, tuple[float, float]]) -> dict[str, float]:
    small = [best[s][1] for s in best if 1 <= s <= 8]
    large = [best[s][0] for s in best if s >= 1 << 20]
    return {
        "latency_us": min(small) * 1e6 if small else float("nan"),
        "peak_gbit_s": max(v[0] for v in best.values()) * NP_MBPS_BIT_S / 1e9,
        "plateau_gbit_s": statistics.median(large) * NP_MBPS_BIT_S / 1e9 if large else float("nan"),
    }


def interleave(tools: dict[str, str], rounds: int, run_one, workdir: Path) -> dict[str, dict]:
    """Run every tool once per round, in turn; each tool's per-size best and its figures."""
    got: dict[str, list] = {t: [] for t in tools}
    for k in range(rounds):
        for tool in tools:
            out = workdir / f"{tool}-{k}.out"
            t0 = time.monotonic()
            run_one(tool, out)
            got[tool].append(read_np_out(out))
            print(f"  round {k + 1}: {tools[tool]} {time.monotonic() - t0:.0f} s", file=sys.stderr)
    result = {}
    for tool, rows in got.items():
        best = best_over_rounds(rows)
        result[tool] = {"figures": figures(best), "best": {str(s): v for s, v in best.items()}}
    return result


def print_table(title: str, tools: dict[str, str], result: dict[str, dict], ref: str = "nptcp") -> None:
    print(f"\n{title}")
    heads = ("latency us", 11), ("peak Gbit/s", 12), (">=1MiB Gbit/s", 14), ("lat/ref", 8), ("peak/ref", 9)
    print(f"{'tool':30} " + " ".join(f"{h:>{w}}" for h, w in heads))
    r = result[ref]["figures"]
    for tool, label in tools.items():
        f = result[tool]["figures"]
        print(
            f"{label:30} {f['latency_us']:11.2f} {f['peak_gbit_s']:12.2f} {f['plateau_gbit_s']:14.3f} "
            f"{f['latency_us'] / r['latency_us']:8.2f} {f['peak_gbit_s'] / r['peak_gbit_s']:9.2f}"
        )


def loopback(rounds: int, upper: int, workdir: Path, only: list[str] | None = None) -> dict:
    tools = {t: n for t, n in LOOPBACK_TOOLS.items() if not only or t in only or t == "nptcp"}
    result = interleave(tools, rounds, lambda t, o: run_loopback_tool(t, upper, o), workdir)
    print_table(f"loopback, best of {rounds} interleaved rounds, 1 B - {upper} B", tools, result)
    return result


def netns(rounds: int, upper: int, rate: str, workdir: Path) -> dict:
    from support.netns_hosts import SUBNET, NetnsHosts

    hosts = NetnsHosts.up(workdir / "hosts", count=2, rate=rate)
    try:
        h1, h2 = hosts.names
        wrap = ["ip", "netns", "exec", h1]
        peer_wrap = ["ip", "netns", "exec", h2]
        mpirun = hosts.mpirun_wrapper(str(Path(sys.prefix) / "bin" / "mpirun"))

        def run_one(tool: str, out: Path) -> None:
            if tool == "nptcp":
                run_nptcp(out, upper, f"{SUBNET}.2", wrap, peer_wrap)
                return
            cmd = [str(mpirun), "-np", "2", "--map-by", "node", sys.executable, "-m", "npmpi"]
            subprocess.run([*cmd, *npmpi_args(tool, upper, out)], env=local_mpi_env(), check=True,
                           capture_output=True, timeout=1200)  # fmt: skip

        result = interleave(NETNS_TOOLS, rounds, run_one, workdir)
    finally:
        hosts.down()
    print_table(
        f"two namespace hosts, link shaped to {rate} (tc tbf), best of {rounds} rounds", NETNS_TOOLS, result
    )
    return result


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--upper", type=int, default=8 << 20, help="largest message in bytes (default 8 MiB)")
    p.add_argument("--netns", action="store_true", help="also the two shaped namespace hosts (root)")
    p.add_argument("--netns-upper", type=int, default=4 << 20)
    p.add_argument("--rate", default="500mbit", help="tc tbf rate of the hosts' link (default 500mbit)")
    p.add_argument("--skip-loopback", action="store_true")
    p.add_argument(
        "--loopback-tools",
        default="",
        help=f"comma-separated subset of {','.join(LOOPBACK_TOOLS)} on loopback (NPtcp always; default all)",
    )
    p.add_argument("--json", type=Path, default=ROOT / "bench" / "out" / "tcp_compare.json")
    a = p.parse_args()
    if not os.access(NPTCP, os.X_OK):
        print(f"tcp_compare: no {NPTCP} (Debian: apt-get install netpipe-tcp)", file=sys.stderr)
        return 2
    report: dict = {"load_before": os.getloadavg(), "cpus": os.cpu_count(), "rounds": a.rounds}
    with tempfile.TemporaryDirectory(prefix="tcp-compare-") as tmp:
        if not a.skip_loopback:
            only = [t for t in a.loopback_tools.split(",") if t]
            report["loopback"] = loopback(a.rounds, a.upper, Path(tmp), only)
        if a.netns:
            report["netns"] = netns(a.rounds, a.netns_upper, a.rate, Path(tmp))
            report["rate"] = a.rate
    report["load_after"] = os.getloadavg()
    a.json.parent.mkdir(parents=True, exist_ok=True)
    a.json.write_text(json.dumps(report, indent=1))
    print(f"\nload average before {report['load_before']}, after {report['load_after']}; raw: {a.json}")
    return 0


if __name__ == "__main__":
    import keep_results  # bench/keep_results.py: the output kept in bench/results/

    sys.exit(keep_results.run(main, "tcp_compare"))
