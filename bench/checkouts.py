#!/usr/bin/env python3
"""Two checkouts of npmpi side by side: do the kernels time the same after a change?

Each checkout runs with its own environment (CHECKOUT/.venv, made by its scripts/setup.sh), with the
same options, interleaved (before, after, then after, before: the order swapped every round, so the
machine's noise hits both alike), for each kernel. Prints, per kernel, the median over rounds of
after / before of the one-way time at 1 B and 1 KiB and of the bandwidth at 64 KiB and 1 MiB, with
the spread (min-max) of the per-round ratios: times above 1 are slower, bandwidths above 1 faster.

    .venv/bin/python bench/checkouts.py /path/to/before-checkout . --rounds 6
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from npmpi.runfile.reader import load_run

METRICS = [("one way 1 B", 1, "t"), ("one way 1 KiB", 1024, "t"), ("bandwidth 64 KiB", 65536, "b"),
           ("bandwidth 1 MiB", 1 << 20, "b")]  # fmt: skip
OPTIONS = ["--upper", "1M", "-p", "0", "--trials", "3", "--target-time", "0.01", "--force"]


def run_once(checkout: Path, kernel: str, out: Path) -> dict[str, float]:
    """One sweep of `checkout` with `kernel`: the metrics (one-way s, bandwidth bit/s)."""
    python = checkout / ".venv" / "bin" / "python"
    mpirun = checkout / ".venv" / "bin" / "mpirun"
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    env.update({"OMPI_MCA_btl": "^ofi", "OMPI_MCA_rmaps_base_oversubscribe": "1"})
    if os.geteuid() == 0:
        env.update({"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"})
    cmd = [str(mpirun), "-np", "2", "--bind-to", "none", str(python), "-m", "npmpi", "-q",
           "--kernel", kernel, "-o", str(out), *OPTIONS]  # fmt: skip
    subprocess.run(cmd, env=env, cwd=out.parent, check=True, timeout=600, capture_output=True)
    pp = load_run(out).pingpong
    found = {}
    for name, size, what in METRICS:
        (i,) = (pp.size_bytes == size).nonzero()
        one_way = float(pp.one_way_s[i[0]])
        found[name] = one_way if what == "t" else size * 8 / one_way
    return found


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("before", type=Path)
    ap.add_argument("after", type=Path)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--kernels", default="c,python")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for kernel in args.kernels.split(","):
            ratios: dict[str, list[float]] = {name: [] for name, _, _ in METRICS}
            for r in range(args.rounds):
                order = [("before", args.before), ("after", args.after)]
                figures = {}
                for label, checkout in order if r % 2 == 0 else order[::-1]:
                    figures[label] = run_once(checkout.resolve(), kernel, Path(tmp) / f"{label}.h5")
                for name, _, _ in METRICS:
                    ratios[name].append(figures["after"][name] / figures["before"][name])
            cells = [f"{statistics.median(v):.2f} ({min(v):.2f}-{max(v):.2f})" for v in ratios.values()]
            print(f"| {kernel}, {args.rounds} rounds | " + " | ".join(cells) + " |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
