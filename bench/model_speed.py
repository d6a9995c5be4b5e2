#!/usr/bin/env python3
"""How long does the model of a full run take? NetPIPE's 124 sizes, 7 trials each, three regimes of
known alpha and beta with 2 % noise, one node's power: the time model with its breaks searched and
the energy model, at 200, 1,000 and 5,000 bootstrap resamples, beside the rest of the run's
analysis on the same file (ratios: this machine is shared and noisy).

    .venv/bin/python bench/model_speed.py              # median of 5 repeats per figure
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from npmpi_analysis.loading import load
from npmpi_analysis.numbers.analyse import analyse_run
from npmpi_analysis.numbers.model_energy import fit_model
from npmpi_analysis.numbers.model_summary import ModelOptions
from npmpi_analysis.synthetic import SynthChannel, SynthNode, write_run

from npmpi.core.schedule import netpipe_schedule

T0 = 1.7e9
REGIMES = [(1, 1e-6, 5e9), (4093, 3e-6, 40e9), (262141, 8e-6, 12e9)]


def write(path: Path) -> Path:
    sizes = [p.size_bytes for p in netpipe_schedule(1, 8 << 20, 3)]
    rng = np.random.default_rng(0)
    t = np.array([[a + 8 * s / b for m0, a, b in REGIMES if s >= m0][-1] for s in sizes])
    iters = np.maximum((0.05 / (2 * t)).astype(int), 7)
    trials = t[:, None] * 2 * iters[:, None] * (1 + 0.02 * rng.standard_normal((len(sizes), 7)))
    starts, now = [], T0
    for k in range(len(sizes)):
        starts.append(list(now + np.cumsum(np.r_[0.0, trials[k, :-1]])))
        now = starts[-1][-1] + trials[k, -1] + 0.01
    ts = np.arange(T0 - 12, now + 8, 0.1)
    node = SynthNode([SynthChannel(ts, 80 + rng.standard_normal(len(ts)), sample_interval_s=0.1)], host="n0")
    return write_run(
        path, sizes, iters.tolist(), trials.tolist(), starts, nodes=[node], baseline=(T0 - 10, T0 - 2)
    )


def median_s(fn, repeats: int = 5) -> float:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main() -> int:
    with tempfile.TemporaryDirectory() as d:
        run, _ = load(write(Path(d) / "run.h5"))
        no_model = ModelOptions(breaks_bytes=[], resamples=10)  # the least model: the rest's cost
        rest = median_s(lambda: analyse_run(run, "r", None, no_model))
        a = analyse_run(run, "r")
        print(
            f"sizes {a.sizes}, trials 7, regimes found {len(a.model.regimes)} (breaks {a.model.breaks_bytes})"
        )
        print(f"the rest of the run's analysis: {rest:.3f} s")
        for b in (200, 1000, 5000):
            s = median_s(lambda b=b: fit_model(a, None, b, 1))
            print(f"model, {b:5d} resamples: {s:.3f} s ({s / rest:.2f} x the rest of the analysis)")
    return 0


if __name__ == "__main__":
    import keep_results  # bench/keep_results.py: the output kept in bench/results/

    sys.exit(keep_results.run(main, "model_speed"))
