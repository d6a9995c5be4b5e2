"""A map's plan before its first round and its time limit (npmpi/map/plan.py, issue 44): the plan's
rounds, duration and file size (per size and ordered pair as the writer stores them, checked against
files the writer wrote); the refusal of a file the output's disk cannot hold (a faked free space,
in process and under mpirun); --max-minutes (the clock's rule, a real map stopped after its first
round whose file the analysis reads as an interrupted map) and its bad values; and the plan's
estimate against a real 4-rank map's duration."""

from __future__ import annotations

import os
import re

import h5py
import numpy as np
import pytest
from support.mapcells import map_spec

from npmpi.core.errors import UsageError
from npmpi.map.options import parse_map_options
from npmpi.map.plan import (
    DISK_FREE_ENV,
    RoundClock,
    disk_problem,
    format_bytes,
    make_plan,
    plan_line,
)
from npmpi.map.schedule import circle_rounds
from npmpi.runfile.format import COND_DATASETS
from npmpi.runfile.maprows import row_datasets
from npmpi.runfile.mapwriter import MapWriter, PairResult, map_data_bytes

# ---- the plan (pure)


def test_the_plan_counts_rounds_sizes_trials_and_bytes_per_size_and_pair():
    plan = make_plan(parse_map_options(["--sizes", "1,4M"]), 64)
    assert (plan.rounds, len(plan.sizes), plan.trials, plan.total_rounds) == (63, 2, 7, 126)
    # the writer's datasets per size and row (a pair): 24 x trials + 136 bytes (304 at 7 trials)
    per_row = sum(int(np.prod(tail)) * np.dtype(dt).itemsize for _, tail, dt, _, _ in row_datasets(7))
    assert per_row == 24 * 7 + 136 == 304
    rows = 64 * 63 // 2  # a round-trip map: one row per pair, not N x N cells
    assert 2 * rows * 304 <= map_data_bytes(rows, 2, 7, 63, 64) < 2 * rows * 304 * 1.05
    # a ping-pong trial lasts 2 x the target (a round trip per iteration): 7.1 trials, the probe
    pair_s = (7 + 0.1) * 2 * 0.05 + 0.3 * 0.05
    assert pair_s < plan.round_s < pair_s + 0.05
    line = plan_line(plan)
    assert line.startswith("map plan: 63 rounds x 2 sizes x 7 trials (64 members, one rank per node)")
    assert re.search(r"\), about 9\d s and 1\.\d MiB \(file\);", line) and "\n" not in line
    assert "suspects, if any, measured again after it: up to" in line
    # a stream map measures each direction apart: twice the work per round
    both = make_plan(parse_map_options(["--mode", "stream"]), 64)
    one = make_plan(parse_map_options(["--mode", "stream", "--directions", "one"]), 64)
    assert both.directions == 2 and one.directions == 1 and both.round_s > 1.5 * one.round_s
    # power: each channel's samples over the duration, in whole chunks of 4096 rows
    power = [{"channels": [{"sample_interval_s": 0.01, "extra_sample_fields": ["open_epoch"]}]}]
    with_power = make_plan(parse_map_options(["--sizes", "1,4M", "--baseline", "2"]), 64, power)
    assert with_power.duration_s > plan.duration_s + 4  # the idle baselines before and after
    samples = with_power.duration_s / 0.01
    assert with_power.file_bytes - with_power.map_bytes >= 6 * 8 * samples


def _pair(rng, i: int, j: int, trials: int) -> PairResult:
    """A pair's result with every field a real round reports (times, waits, conditions)."""
    times = rng.uniform(1e-3, 2e-3, trials)
    waits = rng.uniform(0, 1e-4, (trials, 2))
    cond = rng.uniform(1e9, 2e9, (2, len(COND_DATASETS)))
    info = [{"rank": i, "cpu": 0}, {"rank": j, "cpu": 1}]
    return PairResult(i, j, 100, 20, times, elapsed_s=0.01, runq_wait_s=waits, cond=cond, cond_info=info)


def _full_map_file(path, n: int, sizes: list[int], trials: int) -> int:
    """A map file whose every round is stored (each pair's trials, waits and conditions): its size."""
    rounds = circle_rounds(n)
    spec = map_spec([f"h{k}" for k in range(n)], sizes, rounds)
    w = MapWriter(path, {"kernel": "python"}, {"host": spec["hosts"]}, trials, map_spec=spec)
    rng = np.random.default_rng(1)
    for s in range(len(sizes)):
        for r, pairs in enumerate(rounds):
            results = [_pair(rng, i, j, trials) for i, j in pairs]
            w.store_round(s, r, (100.0 + r, 100.5 + r), results)
    w.finish("complete")
    return os.path.getsize(path)


def test_the_plans_bytes_grow_with_the_pairs_as_the_writers_file_does(tmp_path):
    """The part that grows with a map (per size and ordered pair) planned within 15 % of what the
    writer stores: the files of 4 and 24 members, every round written."""
    sizes, trials = [1, 65536, 4 << 20], 7
    small = _full_map_file(tmp_path / "s.h5", 4, sizes, trials)
    large = _full_map_file(tmp_path / "l.h5", 24, sizes, trials)
    argv = ["--sizes", "1,64K,4M", "--trials", str(trials)]
    planned = (
        make_plan(parse_map_options(argv), 24).map_bytes - make_plan(parse_map_options(argv), 4).map_bytes
    )
    assert planned == pytest.approx(large - small, rel=0.15), (planned, large - small)


# ---- the disk


def test_a_map_that_will_not_fit_the_disk_is_refused_in_one_line(tmp_path, monkeypatch):
    plan = make_plan(parse_map_options([]), 8)
    out = str(tmp_path / "m.h5")
    monkeypatch.setenv(DISK_FREE_ENV, "1000")
    problem = disk_problem(out, plan)
    assert problem is not None and "\n" not in problem
    assert problem.startswith(f"--output {out}: the map's file will be about {format_bytes(plan.file_bytes)}")
    assert "1000 B free" in problem and "choose another location" in problem
    monkeypatch.setenv(DISK_FREE_ENV, str(10 * 2**30))
    assert disk_problem(out, plan) is None
    monkeypatch.delenv(DISK_FREE_ENV)  # the real free space, through shutil.disk_usage
    monkeypatch.setattr("shutil.disk_usage", lambda d: type("U", (), {"free": 2048})())
    assert "has 2 KiB free" in disk_problem(out, plan)


@pytest.mark.mpi
@pytest.mark.timeout(60)
def test_mpirun_refuses_the_map_before_any_measurement(npmpi_run, tmp_path):
    proc = npmpi_run(
        ["map", "--per-rank", "--quick", "-o", "big.h5"], np=3, env={DISK_FREE_ENV: "4096"}, timeout=50
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("npmpi")]  # not mpirun's own
    assert len(lines) == 1 and lines[0].startswith("npmpi: error: --output big.h5: the map's file will be")
    assert "has 4 KiB free" in lines[0]
    assert "Traceback" not in proc.stdout + proc.stderr and "round" not in proc.stdout
    assert list(tmp_path.iterdir()) == []  # the reserved output released: nothing left


# ---- the time limit


def test_the_clock_stops_before_a_round_that_would_end_past_the_limit():
    plan = make_plan(parse_map_options(["--max-minutes", "1", "--sizes", "1,4M"]), 4)
    assert plan.limit_s == 60.0
    clock = RoundClock(plan, started=1000.0)
    assert not clock.stop_before(0, 0, now=2000.0)  # the first round always runs
    assert clock.expected_s(0) == plan.round_s  # nothing measured yet: the plan
    clock.learn(0, 20.0)
    assert clock.expected_s(0) == 20.0 and clock.expected_s(1) == pytest.approx(20.0)  # scaled as size 0
    assert not clock.stop_before(0, 1, now=1039.0)  # 39 + 20 <= 60
    assert clock.stop_before(0, 2, now=1041.0)  # 41 + 20 > 60: it would end past the limit
    assert clock.stop_message(2) == "stopped at the time limit (--max-minutes 1) after 2 of 6 rounds"
    unlimited = RoundClock(make_plan(parse_map_options([]), 4), started=0.0)
    assert not unlimited.stop_before(0, 5, now=1e9)
    assert "--max-minutes 1 stops it after about" in plan_line(
        make_plan(parse_map_options(["--max-minutes", "1", "--target-time", "5"]), 4)
    )


@pytest.mark.parametrize(
    "value, words",
    [
        ("0", "--max-minutes 0: give a time limit above 0"),
        ("-1", "--max-minutes -1: give a time limit above 0"),
        ("x", "invalid minutes 'x': expected a plain decimal number"),
        ("1e400", "invalid minutes '1e400'"),
        ("nan", "invalid minutes 'nan'"),
    ],
)
def test_bad_max_minutes_are_refused_in_one_line(value, words):
    with pytest.raises(UsageError, match=words) as info:
        parse_map_options(["--max-minutes", value])
    assert "\n" not in str(info.value)


@pytest.mark.mpi
@pytest.mark.timeout(60)
def test_mpirun_refuses_a_bad_max_minutes_on_every_rank(npmpi_run, tmp_path):
    proc = npmpi_run(["map", "--per-rank", "--max-minutes", "0", "-o", "m.h5"], np=3, timeout=50)
    assert proc.returncode == 2 and "Traceback" not in proc.stdout + proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("npmpi")]  # not mpirun's own
    assert lines == ["npmpi: error: --max-minutes 0: give a time limit above 0 and at most 1e+07 minutes"]
    assert not any(tmp_path.glob("*.h5"))


@pytest.mark.mpi
@pytest.mark.timeout(90)
def test_a_tiny_time_limit_stops_the_map_after_its_first_round(npmpi_run, tmp_path, capsys):
    """--max-minutes 0.01 (0.6 s) and rounds of about 1.3 s: the first round runs, none after it;
    exit 0, the file `interrupted` with the reason, and npmpi-analyze reads it as an interrupted map."""
    args = ["map", "--per-rank", "--sizes", "1,64K", "--trials", "3", "--target-time", "0.2"]
    proc = npmpi_run([*args, "--max-minutes", "0.01", "-o", "lim.h5"], np=4, timeout=80)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    assert "--max-minutes 0.01 stops it after about 1 of 6 rounds" in proc.stdout
    why = "stopped at the time limit (--max-minutes 0.01) after 1 of 6 rounds"
    assert why in proc.stderr and "status interrupted" in proc.stdout
    with h5py.File(tmp_path / "lim.h5") as f:
        g = f["map"]
        assert f.attrs["status"] == g.attrs["status"] == "interrupted"
        assert f.attrs["status_message"] == g.attrs["status_message"] == why
        assert g.attrs["rounds_completed"] == 1 and g.attrs["planned_rounds"] == 6
        assert g.attrs["time_limit_s"] == pytest.approx(0.6)
        start = g["window_start_unix_s"][:].ravel()
        assert np.isfinite(start[0]) and np.isnan(start[1:]).all()
    from npmpi_analysis.cli import main

    capsys.readouterr()
    code = main([str(tmp_path / "lim.h5")])
    got = capsys.readouterr()
    assert code == 0 and "Traceback" not in got.out + got.err, got.err
    assert f"status: interrupted ({why})" in got.out
    assert "notice: the map was interrupted: " + why in got.out and "2/6 at 1 B" in got.out
    assert "  plan: 6 rounds, about " in got.out and "actual: 1 rounds in " in got.out


# ---- the estimate against a real map


@pytest.mark.mpi
@pytest.mark.timeout(90)
def test_the_plan_is_near_a_real_maps_duration_and_file(npmpi_run, tmp_path):
    """4 ranks, 3 sizes, 3 trials of 0.05 s: about 3 s of rounds, planned before the first.

    The file's size is planned within 25 % (10 % here, deterministic). The duration: within 10 %
    in most runs here (3.12 s planned; 2.7-3.3 s taken), but 4 ranks spinning in two pairs on 2
    cores shared with other jobs make a pair's trials up to 3 x longer than its probe said (a
    round lasts as long as its slowest pair): 3.97 s, 5.5 s of a 4 s plan seen under a load of 5.
    Asserted: within 50 % (the 25 % aimed at holds on an idle host); the figures are printed."""
    args = ["map", "--per-rank", "--trials", "3", "--target-time", "0.05", "--confirm", "0"]
    proc = npmpi_run([*args, "-o", "plan.h5"], np=4, timeout=80)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    plan = [ln for ln in proc.stdout.splitlines() if ln.startswith("map plan: ")]
    assert len(plan) == 1 and plan[0].startswith("map plan: 3 rounds x 3 sizes x 3 trials (4 members")
    out = proc.stdout
    assert out.index("map plan: ") < out.index("1 B (1): 3 rounds")  # before the first round's line
    path = tmp_path / "plan.h5"
    with h5py.File(path) as f:
        g = f["map"]
        planned_s, actual_s = float(g.attrs["planned_duration_s"]), float(f.attrs["elapsed_s"])
        planned_bytes = int(g.attrs["planned_file_bytes"])
        assert g.attrs["planned_rounds"] == g.attrs["rounds_completed"] == 9
        assert g.attrs["time_limit_s"] == 0.0
    actual_bytes = os.path.getsize(path)
    figures = (
        f"planned {planned_s:.2f} s, took {actual_s:.2f} s; planned {planned_bytes} B, wrote {actual_bytes} B"
    )
    print(figures)
    assert planned_s == pytest.approx(actual_s, rel=0.5), figures
    assert planned_bytes == pytest.approx(actual_bytes, rel=0.25), figures


def test_samples_are_collected_less_often_when_a_collection_takes_long(monkeypatch):
    """Rank 0 writes every node's batch of samples at each collection (0.7 ms a node: 2.9 s at
    4,096 nodes, more than the 2 s between collections). A collection taking 3 s is followed by
    one 30 s later, not 2 s (rank 0's share of time on samples at most COLLECT_SHARE), a quick one
    by one 2 s later, and every size's last round still collects."""
    from types import SimpleNamespace

    from npmpi.map import recording
    from npmpi.map.recording import COLLECT_EVERY_S, COLLECT_SHARE, MapRecording, collect_interval_s

    assert collect_interval_s(0.05) == COLLECT_EVERY_S
    assert collect_interval_s(2.9) == pytest.approx(2.9 / COLLECT_SHARE)
    assert collect_interval_s(float("nan")) == COLLECT_EVERY_S
    clock = [0.0]
    took = {"s": 3.0}
    started: list[float] = []

    def collect(next_gap_s):
        assert next_gap_s == COLLECT_EVERY_S  # the power ranks' quiet: as before
        started.append(clock[0])
        clock[0] += took["s"]

    monkeypatch.setattr(recording, "time", SimpleNamespace(monotonic=lambda: clock[0]))
    rounds = 200
    fake = SimpleNamespace(
        writer=SimpleNamespace(store_round=lambda *a: None),
        coordinator=SimpleNamespace(rounds=[None] * rounds),
        collector=SimpleNamespace(collect=collect),
        last_collect=0.0,
        collect_every_s=COLLECT_EVERY_S,
        _size_line=lambda s: None,
        _progress=lambda done: None,
    )
    for r in range(rounds):  # rounds of 1 s
        clock[0] += 1.0
        MapRecording.on_round(fake, 0, r, (0.0, 1.0), [])
    gaps = np.diff(started)
    assert len(started) >= 5 and started[-1] == pytest.approx(clock[0] - took["s"])  # the size's end
    assert gaps[:-1].min() >= 3.0 / COLLECT_SHARE, gaps  # 30 s from a collection's end to the next
    assert took["s"] * len(started) / clock[0] <= 1.2 * COLLECT_SHARE  # the last one's extra
    started.clear()
    took["s"] = 0.01
    for r in range(60):
        clock[0] += 1.0
        MapRecording.on_round(fake, 1, r, (0.0, 1.0), [])
    assert started[0] - clock[0] + 60 >= 3.0 / COLLECT_SHARE - 1  # 30 s after the last long one
    assert np.diff(started)[:-1].max() <= COLLECT_EVERY_S + 1.0  # then quick: every 2 s (a round's step)
