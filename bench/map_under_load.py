#!/usr/bin/env python3
"""Uniform and shaped maps of network-namespace hosts under a CPU hog: what the map names.

    python bench/map_under_load.py --maps 10            (as root: it makes namespaces)

Brings up --hosts hosts joined by a bridge, every link shaped to 1 Gbit/s (tests/support/netns_hosts.py),
starts one busy loop in its own session (another user's job, to the scheduler; --hogs N of them;
--bursty: each busy a quarter of a second, idle the next, as other jobs come and go), then runs --maps
uniform maps and --maps maps with h1 -> h2 at --slow-rate (an htb class on h1 filtering on h2's
address; --cases host: every packet h1 sends through a tbf at --slow-rate), each `npmpi map --quick
--kernel c --sizes 1,256K` with the default re-measurement. For each map it prints what
npmpi-analyze names (confirmed findings), what it lists as not confirmed and why, and the run-queue
wait of the re-measured pairs (/map/confirm_runq_wait_s: each trial's wait of the transmitter and the
reflector over the trial's loop time, the larger of the two), the suspects' and the references'
apart. At the end: how many maps of each case named anything.
Figures depend on the machine's other load: compare the cases within one run.
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

import h5py
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
VENV = ROOT / ".venv"


def run_map(hosts, path: Path, sizes: str) -> str:
    """One --quick map into `path`; its console."""
    mpirun = hosts.mpirun_wrapper(str(VENV / "bin" / "mpirun"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_") and k != "PYTHONPATH"}
    cmd = [str(mpirun), "-np", str(hosts.count), "--map-by", "node", str(VENV / "bin" / "python"), "-m",
           "npmpi", "map", "--quick", "--kernel", "c", "--sizes", sizes, "-o", str(path)]  # fmt: skip
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        raise RuntimeError(proc.stdout + proc.stderr)
    return proc.stdout + proc.stderr


def findings(path: Path) -> list[dict]:
    """npmpi-analyze --json's findings of one map."""
    out = path.with_suffix(".json")
    proc = subprocess.run(
        [str(VENV / "bin" / "npmpi-analyze"), str(path), "--json", str(out), "-q"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if proc.returncode != 0:
        raise RuntimeError(proc.stdout + proc.stderr)
    return json.loads(out.read_text())["maps"][0]["outliers"]


def waits(path: Path) -> dict[str, list[float]]:
    """{"suspect"|"reference": [each re-measured trial's wait fraction]} as the analysis reads them
    (npmpi_analysis.map.confirmed.wait_fractions: the larger rank's, a reading past the trial
    left out)."""
    from npmpi_analysis.map.confirmed import wait_fractions

    out: dict[str, list[float]] = {"suspect": [], "reference": []}
    with h5py.File(path) as f:
        g = f["map"]
        if "confirm_runq_wait_s" not in g:
            return out
        confirm = {n: g[n][:] for n in ("confirm_runq_wait_s", "confirm_trial_elapsed_s", "confirm_trial_s")}
        role = g["confirm_role"][:]
    frac = wait_fractions(confirm)
    for k, r in enumerate(role):
        out["reference" if r else "suspect"] += [float(x) for x in frac[k] if np.isfinite(x)]
    return out


def span(values: list[float]) -> str:
    return f"{100 * min(values):.0f}-{100 * max(values):.0f} %" if values else "-"


def one_case(hosts, case: str, maps: int, workdir: Path, sizes: str) -> list[dict]:
    """`maps` maps of one case; a row per map."""
    rows = []
    for k in range(maps):
        path = workdir / f"{case}{k}.h5"
        run_map(hosts, path, sizes)
        found = findings(path)
        named = [f["sentence"] for f in found if f["confirmed"] is not False]
        refused = [(f["sentence"], f.get("confirm_reason")) for f in found if f["confirmed"] is False]
        w = waits(path)
        rows.append({"case": case, "map": k, "named": named, "not_confirmed": refused, "waits": w})
        print(f"{case} {k}: named {named or 'nothing'}; waited: suspects {span(w['suspect'])}, "
              f"references {span(w['reference'])}", flush=True)  # fmt: skip
        for sentence, reason in refused:
            print(f"    not confirmed: {sentence}: {reason}", flush=True)
    return rows


@contextlib.contextmanager
def bursty_hog():
    """A loop busy for 0.25 s, then asleep for 0.25 s, in its own session, while inside."""
    code = (
        "import time\nwhile True:\n    t = time.monotonic() + 0.25\n"
        "    while time.monotonic() < t: pass\n    time.sleep(0.25)"
    )
    hog = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
    try:
        yield hog
    finally:
        hog.kill()
        hog.wait(timeout=30)


def main() -> int:
    from support.netns_hosts import NetnsHosts, cpu_hog, shape_link, tc, unshape

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--maps", type=int, default=10)
    p.add_argument("--hosts", type=int, default=4)
    p.add_argument("--cases", default="uniform,shaped", help="of uniform, shaped (h1 -> h2), host (h1)")
    p.add_argument("--slow-rate", default="20mbit")
    p.add_argument("--sizes", default="1,256K")
    p.add_argument("--no-hog", action="store_true", help="without the busy loop")
    p.add_argument("--hogs", type=int, default=1, help="busy loops, each in its own session (default 1)")
    p.add_argument("--bursty", action="store_true", help="each busy loop busy 0.25 s, idle 0.25 s, in turn")
    p.add_argument("--json", type=Path, help="write every map's row here")
    p.add_argument("--keep", type=Path, help="keep the map files in this directory")
    args = p.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="npmpi-load-") as tmp:
        if args.keep:
            args.keep.mkdir(parents=True, exist_ok=True)
        hosts = NetnsHosts.up(Path(tmp), count=args.hosts, rate="1gbit")
        h = hosts.names
        try:
            with contextlib.ExitStack() as stack:
                for _ in range(0 if args.no_hog else args.hogs):
                    stack.enter_context(bursty_hog() if args.bursty else cpu_hog())
                for case in args.cases.split(","):
                    if case == "shaped":
                        shape_link(h[0], 2, args.slow_rate, "1gbit")
                    elif case == "host":  # every packet h1 sends through a token bucket at --slow-rate
                        tc(h[0], "qdisc", "replace", "dev", "eth0", "root", "tbf", "rate", args.slow_rate,
                           "burst", "128kb", "latency", "50ms")  # fmt: skip
                    try:
                        rows += one_case(hosts, case, args.maps, args.keep or Path(tmp), args.sizes)
                    finally:
                        unshape(h[0], "1gbit")
        finally:
            hosts.down()
    for case in args.cases.split(","):
        mine = [r for r in rows if r["case"] == case]
        print(f"{case}: {sum(bool(r['named']) for r in mine)} of {len(mine)} maps named something")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    import keep_results  # bench/keep_results.py: the output kept in bench/results/

    sys.exit(keep_results.run(main, "map_under_load"))
