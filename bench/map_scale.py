#!/usr/bin/env python3
"""The cluster map at the size of the largest systems (issue 44): recording, file, analysis, plan.

No MPI. For each --nodes count, the map file is written by the real writer
(npmpi.runfile.mapwriter.MapWriter, opened as rank 0 opens it in npmpi/map/recording.py) with
synthetic rounds of the circle schedule: every pair's loop times with noise, iterations, untimed
iterations, its window, run-queue waits (mostly 0, a few small ones) and both sides' conditions
(CPU frequency about 2.4 GHz per node, no throttling, each NIC's bytes over the pair's trials: its
payload and 66 header bytes a message). Each round goes through
`store_round(size_index, round_index, window, results)` and is timed; then `finish`. The file is
then analysed by `python -m npmpi_analysis` in a child process with every output (--json, --csv,
--plots, --report), its wall time, peak memory (the child's ru_maxrss) and exit code reported.
Last, the schedule (`map_rounds`, `sample_rounds`) and the plan (`make_plan`) are timed at
--plan-nodes members, each in a child process under an address-space cap.

Recording every round of a large map takes long with a slow writer: without --rounds-limit the
rounds of the first size are recorded until --budget-s / sizes is spent, and every size gets that
many rounds. A map recorded in part is marked interrupted (as a map stopped by its time limit);
the table then says so and gives its full-map figures extrapolated: the store time per round as
measured, the file as the plan estimates it (npmpi/map/plan.py) and linearly from the bytes the
recorded rounds added. Its analysis is of the partial file.

    .venv/bin/python bench/map_scale.py                           # 1,024 nodes, 2 sizes, 7 trials
    .venv/bin/python bench/map_scale.py --nodes 256,1024 --rounds-limit 0 --json out.json
    .venv/bin/python bench/map_scale.py --nodes 4096 --rounds-limit 4 --plan-nodes 16384
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from npmpi.map.options import parse_map_options
from npmpi.map.plan import make_plan
from npmpi.map.schedule import map_rounds, round_lengths
from npmpi.runfile.format import KIND_MAP
from npmpi.runfile.mapwriter import MapWriter, PairResult, map_data_bytes

GIB, MIB = float(1 << 30), float(1 << 20)
LATENCY_S = 1.5e-6  # the synthetic network: one-way time = latency + 8 x size / bandwidth
BANDWIDTH_BIT_S = 100e9
TARGET_S = 0.05  # --target-time's default: a ping-pong trial's loop lasts 2 x the target
WAIT_PROBABILITY = 0.02  # a trial's side with a run-queue wait, of up to WAIT_MAX_S
WAIT_MAX_S = 2e-4
FREQ_HZ = 2.4e9
FRAME_HEADER_BYTES = 66  # Ethernet, IP and TCP headers of a message's frame
T0 = 1.7e9
BASELINE_S = 30.0  # the idle baseline before the map, with --power-interval-s
IDLE_W, MEASURING_W = 180.0, 40.0  # a node's simulated power: idle, and more while the map runs
POWER_BATCH_ROUNDS = 256


def map_options(sizes: str, trials: int, pairs: str = "all"):
    """The map's options as `npmpi map` parses them."""
    return parse_map_options(["--sizes", sizes, "--trials", str(trials), "--pairs", pairs])


def open_writer(path: Path, mopts, n: int, rounds: list, plan, power: float = 0.0) -> MapWriter:
    """The map file, opened as rank 0 opens it (npmpi/map/recording.py `MapRecording._open`), with
    a simulated meter on every node sampled every `power` seconds (0: none)."""
    hosts = [f"node{k:05d}" for k in range(n)]
    attrs = {
        "kind": KIND_MAP,
        "created_utc": "2026-01-01T00:00:00+00:00",
        "command_line": f"python -m npmpi map --sizes {','.join(map(str, mopts.sizes_bytes))}",
        "world_size": n,
        "node_count": n,
        "mpi_library_version": "synthetic (bench/map_scale.py)",
        "platform": "synthetic",
        "kernel": mopts.run.kernel,
        "mode": mopts.run.mode,
        "window": mopts.run.window,
    }
    spec = {
        "attrs": {
            "schedule": mopts.schedule,
            "per_rank": bool(mopts.per_rank),
            "kernel": mopts.run.kernel,
            "mode": mopts.run.mode,
            "window": mopts.run.window,
            "directions": mopts.directions,
            "planned_rounds": plan.total_rounds,
            "planned_duration_s": plan.duration_s,
            "planned_file_bytes": plan.file_bytes,
            "time_limit_s": plan.limit_s,
            "pairs_plan": mopts.pairs_plan,
        },
        "hosts": hosts,
        "ranks": list(range(n)),
        "sizes": list(mopts.sizes_bytes),
        "rounds": rounds,
        "n_rounds": len(rounds),
    }
    layout = {"host": hosts, "node_index": list(range(n)), "role": ["map"] * n}
    if power:  # a power rank per node after the measuring ranks, as `npmpi map` lays them out
        layout = {k: v + v if k != "role" else ["map"] * n + ["power"] * n for k, v in layout.items()}
    w = MapWriter(path, attrs, layout, mopts.run.trials, map_spec=spec, overwrite=True)
    if power:
        clock = {  # each power rank's clock measured against rank 0's at the start (here: one clock)
            "clock_offset_start_s": 0.0,
            "clock_offset_start_uncertainty_s": 1e-6,
            "clock_offset_start_measured_unix_s": T0 - BASELINE_S,
        }
        ids = ({"boot_id": f"boot{k}", "machine_id": f"machine{k}", **clock} for k in range(n))
        nodes = [
            {"host": h, "node_index": k, "power_rank": n + k, "meter_specs": ["simulated"], **i}
            for k, (h, i) in enumerate(zip(hosts, ids, strict=True))
        ]
        channel = {
            "kind": "replay",
            "spec": "replay",
            "label": "simulated",
            "description": "simulated meter (bench/map_scale.py)",
            "natural_interval_s": power,
            "sample_interval_s": power,
            "quantities": ["power_w"],
        }
        w.create_power({"baseline_requested_s": BASELINE_S}, nodes, [[dict(channel)] for _ in hosts])
        w.set_group_attrs("power", baseline_start_unix_s=T0 - BASELINE_S, baseline_end_unix_s=T0)
    return w


class Meters:
    """Each node's simulated meter (labelled simulated in the file): IDLE_W with noise, MEASURING_W
    more while the map runs, a sample every `interval` seconds, appended as the power ranks' batches
    are (every POWER_BATCH_ROUNDS rounds)."""

    def __init__(self, n: int, interval: float, seed: int) -> None:
        self.n, self.interval, self.rng = n, interval, np.random.default_rng(seed + 1)
        self.next_t = T0 - BASELINE_S
        self.seconds = 0.0

    def append(self, w: MapWriter, until: float) -> None:
        """Every node's samples from the last batch's to `until`, timed."""
        t = np.arange(self.next_t, until, self.interval)
        if not len(t):
            return
        self.next_t = float(t[-1] + self.interval)
        began = time.perf_counter()
        busy = np.where(t >= T0, MEASURING_W, 0.0)
        nan = np.full(len(t), np.nan)
        for k in range(self.n):
            watts = IDLE_W + busy + self.rng.normal(0.0, 2.0, len(t))
            w.append_samples(
                k, 0, {"time_unix_s": t, "power_w": watts, "energy_j": nan, "volts": nan, "amps": nan}
            )
        w.flush()
        self.seconds += time.perf_counter() - began


class Synth:
    """The synthetic measurements (a seeded generator): each node's CPU frequency, its NIC's bytes
    over a pair's trials."""

    def __init__(self, n: int, trials: int, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.trials = trials
        self.freq = FREQ_HZ * (1.0 + self.rng.normal(0.0, 0.003, n))
        self.clock = T0

    def side(self, node: int, freq_noise: float, sent: float, received: float) -> list[float]:
        """One side's COND_DATASETS: mean, lowest and highest frequency, throttle events, and the
        bytes its NIC sent and received over the pair's trials (as the map records them: the
        counters' rise, not their value)."""
        f = self.freq[node] * (1.0 + freq_noise)
        return [f, 0.995 * f, 1.005 * f, 0.0, 0.0, sent, received]

    def round_results(self, pairs: list, size: int) -> tuple[tuple[float, float], list[PairResult]]:
        """One round's window and its pairs' results at `size` bytes."""
        rng, t = self.rng, self.trials
        k = len(pairs)
        one_way = (LATENCY_S + 8.0 * size / BANDWIDTH_BIT_S) * (1.0 + rng.lognormal(-4.0, 0.5, k))
        iterations = np.maximum(t, np.round(2 * TARGET_S / (2 * one_way))).astype(np.int64)
        loops = (2 * one_way * iterations)[:, None] * (1.0 + np.abs(rng.normal(0.0, 0.01, (k, t))))
        untimed = iterations // 10 + 20  # warm-up (a tenth of a trial) and the probe
        elapsed = loops.sum(axis=1) * 1.12 + 2e-3
        waits = np.where(rng.random((k, t, 2)) < WAIT_PROBABILITY, rng.uniform(0, WAIT_MAX_S, (k, t, 2)), 0.0)
        noise = rng.normal(0.0, 0.002, (k, 2))
        # each side's NIC over the trials: its direction's payload and each message's headers
        messages = iterations * t
        wire = (size + FRAME_HEADER_BYTES) * messages * (1.0 + np.abs(rng.normal(0.0, 0.01, k)))
        out = []
        for x, (i, j) in enumerate(pairs):
            sides = (self.side(i, noise[x, 0], wire[x], wire[x]), self.side(j, noise[x, 1], wire[x], wire[x]))
            cond = np.array(sides)
            info = [{"rank": int(i), "cpu": 0, "nic_counters": ["eth0"]}, {"rank": int(j), "cpu": 0}]
            out.append(
                PairResult(
                    int(i),
                    int(j),
                    int(iterations[x]),
                    int(untimed[x]),
                    loops[x],
                    elapsed_s=float(elapsed[x]),
                    runq_wait_s=waits[x],
                    cond=cond,
                    cond_info=info,
                )
            )
        start = self.clock
        self.clock += float(elapsed.max()) + 0.01
        return (start, self.clock), out


def record(
    path: Path, n: int, sizes: str, trials: int, limit: int, budget_s: float, seed: int, power: float = 0.0
) -> dict:
    """Write the map file: every round of every size, or the first `limit` (0: all, or as many of the
    first size as fit in budget_s / sizes when budget_s > 0, then as many of each other size); with
    `power`, every node's simulated meter sampled every `power` seconds."""
    mopts = map_options(sizes, trials)
    rounds = map_rounds(mopts, n)
    plan = make_plan(mopts, n, rounds=rounds)
    began = time.perf_counter()
    w = open_writer(path, mopts, n, rounds, plan, power)
    open_s = time.perf_counter() - began
    opened_bytes = path.stat().st_size
    synth = Synth(n, trials, seed)
    meters = Meters(n, power, seed) if power else None
    s_count, n_rounds = len(mopts.sizes_bytes), len(rounds)
    per_size = min(limit, n_rounds) if limit else n_rounds
    store = []
    for s, size in enumerate(mopts.sizes_bytes):
        started = time.perf_counter()
        for r in range(per_size):
            window, results = synth.round_results(rounds[r], size)
            t = time.perf_counter()
            w.store_round(s, r, window, results)
            store.append(time.perf_counter() - t)
            if meters is not None and (r + 1) % POWER_BATCH_ROUNDS == 0:
                meters.append(w, synth.clock)
            if s == 0 and not limit and budget_s and time.perf_counter() - started > budget_s / s_count:
                per_size = r + 1
                break
    partial = per_size < n_rounds
    if meters is not None:
        meters.append(w, synth.clock + 1.0)
    t = time.perf_counter()
    span = {"elapsed_s": synth.clock - T0}  # the synthetic map's duration, as its rounds' windows
    if partial:
        note = f"bench/map_scale.py: the first {per_size} of {n_rounds} rounds per size"
        w.finish("interrupted", note, **span)
    else:
        w.finish("complete", "", **span)
    finish_s = time.perf_counter() - t
    size_bytes = path.stat().st_size
    added = (size_bytes - opened_bytes) * n_rounds / per_size + opened_bytes
    ms = np.array(store) * 1e3
    return {
        "nodes": n,
        "sizes": list(mopts.sizes_bytes),
        "trials": trials,
        "rounds_per_size": n_rounds,
        "recorded_per_size": per_size,
        "partial": partial,
        "pairs_per_round": int(round_lengths(rounds).max()),
        "power_interval_s": power,
        "power_append_s": meters.seconds if meters is not None else 0.0,
        "open_s": open_s,
        "finish_s": finish_s,
        "store_ms_median": float(np.median(ms)),
        "store_ms_p95": float(np.percentile(ms, 95)),
        "store_ms_max": float(ms.max()),
        "store_total_s": float(ms.sum() / 1e3),
        "store_total_full_s": float(np.median(ms) / 1e3 * s_count * n_rounds),
        "file_bytes": size_bytes,
        "file_bytes_linear": int(added) if partial else size_bytes,
        "plan_file_bytes": plan.file_bytes,
        "map_data_bytes": map_data_bytes(int(round_lengths(rounds).sum()), s_count, trials, n_rounds, n),
    }


def timed_child(cmd: list[str], log, timeout_s: float, cap_bytes: int = 0) -> dict:
    """Run `cmd` (output into the open file `log`; with `cap_bytes`, under that address-space cap):
    its exit code, wall time and peak memory. The peak is GNU time's %M when /usr/bin/time exists
    (os.wait4's ru_maxrss of a child forked from this process counts this process's memory at the
    fork), else that ru_maxrss."""
    gnu_time = Path("/usr/bin/time")
    with tempfile.NamedTemporaryFile(prefix="map_scale_peak_", suffix=".txt") as peak:
        full = [str(gnu_time), "-f", "%M", "-o", peak.name, *cmd] if gnu_time.exists() else cmd

        def limit() -> None:
            resource.setrlimit(resource.RLIMIT_AS, (cap_bytes, cap_bytes))

        began = time.perf_counter()
        proc = subprocess.Popen(
            full, stdout=log, stderr=subprocess.STDOUT, preexec_fn=limit if cap_bytes else None
        )
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() > began + timeout_s:
                proc.kill()
                pid, status, usage = os.wait4(proc.pid, 0)
                break
            time.sleep(0.02)
        proc.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - began
        kib = usage.ru_maxrss  # KiB on Linux
        words = Path(peak.name).read_text().split() if gnu_time.exists() else []
        if words and words[-1].isdigit():
            kib = int(words[-1])
    return {"wall_s": wall, "peak_mib": kib / 1024.0, "exit": proc.returncode}


def analyze(path: Path, out: Path, timeout_s: float) -> dict:
    """`python -m npmpi_analysis` on the file with every output, in a child: wall time, peak memory,
    exit code, the first lines it printed, the outputs made."""
    cmd = [sys.executable, "-m", "npmpi_analysis", str(path), "--force"]
    cmd += ["--json", str(out / "map.json"), "--csv", str(out / "map.csv")]
    cmd += ["--plots", str(out / "plots"), "--report", str(out / "map.html")]
    log = out / "console.txt"
    with open(log, "wb") as f:
        got = timed_child(cmd, f, timeout_s)
    lines = log.read_text(errors="replace").splitlines()
    made = sorted(p.name for p in out.iterdir() if p.name != "console.txt")
    plots = out / "plots"
    return {
        "command": " ".join(cmd),
        **got,
        "first_lines": [ln if len(ln) <= 160 else ln[:157] + "..." for ln in lines[:6]],
        "outputs": made,
        "plots": len(list(plots.iterdir())) if plots.is_dir() else 0,
    }


def plan_child(n: int, sizes: str, trials: int, sample_k: int) -> dict:
    """In the child: the schedule's and the plan's times at n members (--pairs all, and sample:K)."""
    out: dict = {"nodes": n}
    mopts = map_options(sizes, trials)
    t = time.perf_counter()
    rounds = map_rounds(mopts, n)
    out["map_rounds_s"] = time.perf_counter() - t
    t = time.perf_counter()
    plan = make_plan(mopts, n, rounds=rounds)
    out["make_plan_s"] = time.perf_counter() - t
    out.update(rounds=plan.rounds, plan_duration_s=plan.duration_s, plan_file_bytes=plan.file_bytes)
    del rounds
    if sample_k:
        smopts = map_options(sizes, trials, f"sample:{sample_k}:1")
        t = time.perf_counter()
        sample = map_rounds(smopts, n)  # sample_rounds
        out["sample_rounds_s"] = time.perf_counter() - t
        t = time.perf_counter()
        splan = make_plan(smopts, n, rounds=sample)
        out["sample_plan_s"] = time.perf_counter() - t
        out.update(sample_k=sample_k, sample_rounds=splan.rounds, sample_file_bytes=splan.file_bytes)
        out["sample_duration_s"] = splan.duration_s
    return out


def plan_at(n: int, sizes: str, trials: int, sample_k: int, cap_gib: float, timeout_s: float) -> dict:
    """`plan_child` in a child process under an address-space cap: its figures, or why it failed;
    its wall time and peak memory either way."""
    cmd = [sys.executable, __file__, "--plan-child", str(n), "--sizes", sizes, "--trials", str(trials)]
    cmd += ["--sample-k", str(sample_k)]
    with tempfile.TemporaryFile() as f:
        out = {"nodes": n, **timed_child(cmd, f, timeout_s, int(cap_gib * GIB)), "cap_gib": cap_gib}
        f.seek(0)
        text = f.read().decode(errors="replace")
    lines = [ln for ln in text.strip().splitlines() if ln.startswith("{")]
    if out["exit"] == 0 and lines:
        out.update(json.loads(lines[-1]))
    else:
        last = text.strip().splitlines()[-1] if text.strip() else ""
        out["error"] = "MemoryError" if "MemoryError" in text else (last or f"exit {out['exit']}")
    return out


def gib(n: float) -> str:
    """Bytes as MiB below 1 GiB, else GiB."""
    return f"{n / MIB:.1f} MiB" if n < GIB else f"{n / GIB:.2f} GiB"


def table(maps: list[dict], plans: list[dict]) -> str:
    """The figures as markdown."""
    rows = [
        "| nodes | rounds recorded / per size | store ms/round median / p95 / max | store total s "
        "(full map) | power: s, samples appended | file | analyze s | peak MiB | exit |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for m in maps:
        a = m.get("analysis") or {}
        if m["partial"]:
            file = (
                f"{gib(m['file_bytes'])} written; full map: {gib(m['plan_file_bytes'])} (plan), "
                f"{gib(m['file_bytes_linear'])} (linear, extrapolated)"
            )
            total = f"{m['store_total_s']:.1f} ({m['store_total_full_s']:.1f}, extrapolated)"
        else:
            file = f"{gib(m['file_bytes'])} (actual)"
            total = f"{m['store_total_s']:.1f}"
        power = "none"
        if m.get("power_interval_s"):
            power = f"{m['power_append_s']:.1f}, a node's every {m['power_interval_s']:g} s"
        analysed = f"{a['wall_s']:.1f}" + (" (partial map)" if m["partial"] else "") if a else "-"
        rows.append(
            f"| {m['nodes']:,} | {m['recorded_per_size']} / {m['rounds_per_size']} | "
            f"{m['store_ms_median']:.1f} / {m['store_ms_p95']:.1f} / {m['store_ms_max']:.1f} | {total} | "
            f"{power} | {file} | {analysed} | {a.get('peak_mib', 0):.0f} | {a.get('exit', '-')} |"
        )
    if plans:
        head = (
            "| members | map_rounds s | make_plan s | sample_rounds s | plan | child wall s, peak MiB, exit |"
        )
        rows += ["", head, "|---|---|---|---|---|---|"]
    for p in plans:
        child = f"{p['wall_s']:.1f}, {p['peak_mib']:.0f}, {p['exit']}"
        if "error" in p:
            what = f"failed: {p['error']} (cap {p['cap_gib']:g} GiB)"
            rows.append(f"| {p['nodes']:,} | - | - | - | {what} | {child} |")
            continue
        sample = f"{p['sample_rounds_s']:.2f} (K={p['sample_k']})" if "sample_rounds_s" in p else "-"
        what = f"{p['rounds']} rounds, {p['plan_duration_s'] / 3600:.1f} h, {gib(p['plan_file_bytes'])}"
        times = f"{p['map_rounds_s']:.2f} | {p['make_plan_s']:.3f}"
        rows.append(f"| {p['nodes']:,} | {times} | {sample} | {what} | {child} |")
    return "\n".join(rows)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", default="1024", help="members of the map(s), comma-separated (default 1024)")
    ap.add_argument("--sizes", default="1,4194304", help="the map's --sizes (default 1,4194304)")
    ap.add_argument("--trials", type=int, default=7)
    ap.add_argument(
        "--rounds-limit", type=int, default=None, help="record the first K rounds per size (0: all)"
    )
    ap.add_argument(
        "--budget-s", type=float, default=240.0, help="without --rounds-limit: the recording's time per map"
    )
    ap.add_argument(
        "--power-interval-s",
        type=float,
        default=1.0,
        help="a simulated meter on every node, sampled this often (0: a map without power)",
    )
    ap.add_argument("--no-analyze", action="store_true", help="skip npmpi-analyze")
    ap.add_argument("--analyze-timeout-s", type=float, default=900.0)
    ap.add_argument(
        "--plan-nodes", default="16384", help="members for the plan's timing, comma-separated ('': none)"
    )
    ap.add_argument("--sample-k", type=int, default=3, help="also time --pairs sample:K (0: not)")
    ap.add_argument("--plan-cap-gib", type=float, default=8.0, help="the plan child's address-space cap")
    ap.add_argument("--dir", default=None, help="where the map files go (default: a temporary directory)")
    ap.add_argument("--keep", action="store_true", help="keep the map files and the analysis' outputs")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", dest="json_out", default=None, help="write the figures as JSON")
    ap.add_argument("--plan-child", type=int, default=0, help=argparse.SUPPRESS)
    ns = ap.parse_args(argv)
    if not ns.power_interval_s >= 0:  # NaN too
        ap.error(f"--power-interval-s {ns.power_interval_s:g}: a sample interval in seconds, or 0 for none")
    return ns


def run_map(ns, n: int, where: Path) -> dict:
    """One map: recorded, then analysed; its files deleted unless --keep."""
    path = where / f"map-{n}.h5"
    limit = ns.rounds_limit or 0
    budget = 0.0 if ns.rounds_limit is not None else ns.budget_s
    print(f"recording {n} nodes into {path} ...", file=sys.stderr, flush=True)
    m = record(path, n, ns.sizes, ns.trials, limit, budget, ns.seed, ns.power_interval_s)
    if not ns.no_analyze:
        out = where / f"analysis-{n}"
        out.mkdir(exist_ok=True)
        print(f"analysing {path} ...", file=sys.stderr, flush=True)
        m["analysis"] = analyze(path, out, ns.analyze_timeout_s)
    if not ns.keep:
        path.unlink()
    return m


def main(argv: list[str] | None = None) -> int:
    ns = parse(argv)
    if ns.plan_child:
        print(json.dumps(plan_child(ns.plan_child, ns.sizes, ns.trials, ns.sample_k)))
        return 0
    nodes = [int(x) for x in ns.nodes.split(",") if x]
    plan_nodes = [int(x) for x in ns.plan_nodes.split(",") if x]
    with tempfile.TemporaryDirectory(prefix="map_scale_", dir=ns.dir) as tmp:
        where = Path(tmp)
        if ns.keep:
            where = Path(tempfile.mkdtemp(prefix="map_scale_", dir=ns.dir))
        maps = [run_map(ns, n, where) for n in nodes]
    plans = []
    for n in plan_nodes:
        print(f"planning {n} members ...", file=sys.stderr, flush=True)
        plans.append(plan_at(n, ns.sizes, ns.trials, ns.sample_k, ns.plan_cap_gib, ns.analyze_timeout_s))
    print(table(maps, plans))
    for m in maps:
        a = m.get("analysis")
        if a:
            made = f"outputs {a['outputs']}, plots {a['plots']}"
            print(f"\n{m['nodes']} nodes: npmpi-analyze exit {a['exit']}, {made}")
            print("\n".join("  " + line for line in a["first_lines"]))
    if ns.keep:
        print(f"\nfiles kept in {where}")
    if ns.json_out:
        Path(ns.json_out).write_text(json.dumps({"maps": maps, "plans": plans}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    if "--plan-child" in sys.argv:  # a child of the bench: its figures go to the bench's table
        sys.exit(main())
    import keep_results  # bench/keep_results.py: the output kept in bench/results/

    sys.exit(keep_results.run(main, "map_scale"))
