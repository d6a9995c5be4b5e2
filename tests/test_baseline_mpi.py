"""Real `mpirun -np 3` jobs: quiet baselines before and after the sweep, and delayed samples."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import time

import numpy as np
import pytest
from npmpi_analysis.numbers.analyse import analyse_run
from npmpi_analysis.numbers.compute import FLAG_NONE, float_attr
from npmpi_analysis.numbers.timeline import node_to_rank0
from support.launcher import local_mpi_env, npmpi_command

from npmpi.runfile.reader import load_run

pytestmark = pytest.mark.mpi

IDLE_W, MAX_W = 40.0, 120.0  # the estimate meter's default model


def test_no_rank_spins_during_the_baselines(npmpi_run, tmp_path):
    proc = npmpi_run(["--quick", "--meter", "estimate", "--baseline", "3", "-o", "r.h5"], np=3, timeout=180)
    assert proc.returncode == 0, proc.stderr
    run = load_run(tmp_path / "r.h5")
    pa = run.power_attrs
    cpu = run.layout["baseline_cpu_s"]
    assert cpu.shape == (3, 2)
    lengths = [
        pa["baseline_end_unix_s"] - pa["baseline_start_unix_s"],
        pa["baseline_after_end_unix_s"] - pa["baseline_after_start_unix_s"],
    ]
    assert lengths == pytest.approx([3.0, 3.0], abs=0.3)
    assert pa["baseline_after_start_unix_s"] >= run.pingpong.trial_end_unix_s.max()
    # each window opens one reading's span (0.1 s here) after the work before it, so no reading of a
    # baseline averages the clock-offset exchanges or the last size (npmpi.power.baseline.settle_s)
    interval = run.power[0].channels[0].attrs["sample_interval_s"]
    measured = run.power[0].attrs["clock_offset_start_measured_unix_s"]
    assert pa["baseline_start_unix_s"] - measured >= interval
    assert pa["baseline_after_start_unix_s"] - run.pingpong.trial_end_unix_s.max() >= interval
    for column, length in enumerate(lengths):
        # every rank, the reflector and the power rank included, used under 5 % of a core
        assert np.all(cpu[:, column] < 0.05 * length), (column, cpu[:, column])
    # the samples reach the end of the baseline after the sweep
    t = run.power[0].channels[0].time_unix_s
    assert t.max() >= pa["baseline_after_end_unix_s"] - 0.5
    a = analyse_run(run, "r")
    node = run.power[0].attrs
    for which, idle, prefix in (
        ("before", a.power.idle_before_w, "baseline"),
        ("after", a.power.idle_after_w, "baseline_after"),
    ):
        busy = node[f"{prefix}_system_busy_fraction"]
        assert 0 <= busy <= 1
        # the model's idle given what the whole machine did meanwhile (other users' work included)
        model = IDLE_W + (MAX_W - IDLE_W) * busy
        assert idle == pytest.approx(model, abs=6.0), (which, busy)
    busiest = max(node["baseline_system_busy_fraction"], node["baseline_after_system_busy_fraction"])
    if busiest > 0.05:
        pytest.skip(
            f"the machine was {busiest:.0%} busy with other work during a baseline: the idle power is "
            "that of a busy machine, not the model's idle figure (checked against the utilisation above)"
        )
    assert a.power.idle_w == pytest.approx(IDLE_W, abs=5.0)


def test_a_delayed_meter_gives_every_size_its_own_samples(npmpi_run, tmp_path):
    # a trace whose every value differs, so a sample borrowed from elsewhere would show
    t = np.arange(0.0, 60.0, 0.05)
    (tmp_path / "trace.csv").write_text(
        "time_s,power_w\n" + "".join(f"{x:.2f},{100 + x + 10 * np.sin(7 * x):.6f}\n" for x in t)
    )
    delay = 2.0
    cal = {
        "format": "npmpi-calibration",
        "version": 1,
        "created_utc": "test",
        "results": [
            {
                "host": socket.gethostname(),
                "kind": "replay",
                "spec": "x",
                "delay_s": delay,
                "uncertainty_s": 0.05,
            }
        ],
    }
    (tmp_path / "cal.json").write_text(json.dumps(cal))
    meter = "replay:trace.csv,interval=0.1,loop=0"
    # sizes of 0.3 s to 0.6 s (three trials of 0.1 s and 0.2 s): several samples each
    sizes = ["-l", "1K", "-u", "16K", "-p", "0", "--trials", "3", "--target-time", "0.1"]
    args = [*sizes, "--meter", meter, "--calibration", "cal.json", "--baseline", "1"]
    proc = npmpi_run([*args, "-o", "r.h5"], np=3, timeout=180)
    assert proc.returncode == 0, proc.stderr
    run = load_run(tmp_path / "r.h5")
    (ch,) = run.power[0].channels
    assert ch.attrs["meter_delay_s"] == delay
    pa = run.power_attrs
    after0, after1 = pa["baseline_after_start_unix_s"], pa["baseline_after_end_unix_s"]
    # the baseline after the sweep lasts the delay, 3 sigma and two sample intervals, more than --baseline
    assert after1 - after0 == pytest.approx(delay + 3 * 0.05 + 2 * 0.1, abs=0.15)
    a = analyse_run(run, "r")
    node = a.power.nodes[0]
    # on rank 0's clock, as the analysis puts them: the offset linear between its start and end
    # measurements (the start's alone moved a sample across a window's edge when the end's differed)
    na = run.power[0].attrs
    stamps = node_to_rank0(
        ch.time_unix_s,
        float_attr(na, "clock_offset_start_s"),
        float_attr(na, "clock_offset_start_measured_unix_s"),
        float_attr(na, "clock_offset_end_s"),
        float_attr(na, "clock_offset_end_measured_unix_s"),
    )
    starts, ends = a.window_start_unix_s, a.window_end_unix_s
    assert stamps.max() >= ends[-1] + delay  # the samples describing the last size were taken
    for k in range(a.sizes):
        assert node.sizes.flag[k] != FLAG_NONE and node.sizes.count[k] >= 1, k
        own = ch.power_w[(stamps - delay >= starts[k]) & (stamps - delay <= ends[k])]
        # a window shorter than the interval (a probe on a loaded machine can choose iterations that
        # make trials far shorter than --target-time) takes the nearest samples too, as one with none
        if len(own) and ends[k] - starts[k] >= 0.1:  # its own samples, reported `delay` later
            assert a.power.job_w[k] == pytest.approx(own.mean(), rel=1e-9), k
        else:  # a window shorter than the interval: the nearest samples, within 1.5 intervals
            near = np.abs(stamps - delay - 0.5 * (starts[k] + ends[k])) <= 0.5 * (ends[k] - starts[k]) + 0.15
            assert near.any() and np.min(ch.power_w[near]) <= a.power.job_w[k] <= np.max(ch.power_w[near])
    # idle after the sweep: the samples stamped from `delay` after its start (those before describe
    # the last sizes), up to its end
    idle = ch.power_w[(stamps >= after0 + delay) & (stamps <= after1)]
    assert len(idle) >= 2
    assert a.power.idle_after_w == pytest.approx(idle.mean(), rel=1e-9)
    first = ch.power_w[(stamps >= after0) & (stamps < after0 + delay)]
    assert len(first) >= 10 and not np.isclose(a.power.idle_after_w, ch.power_w[stamps >= after0].mean())


def test_a_stop_during_the_baseline_ends_every_rank(tmp_path):
    cmd = npmpi_command(3, ["--quick", "--meter", "estimate", "--baseline", "20", "-o", "r.h5"])
    proc = subprocess.Popen(
        cmd, cwd=tmp_path, env=local_mpi_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if "idle baseline power" in proc.stdout.readline():
            break
    time.sleep(0.5)
    proc.send_signal(signal.SIGTERM)
    try:
        proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail("the job did not end within 30 s of SIGTERM during the baseline")
    run = load_run(tmp_path / "r.h5")
    assert run.status == "interrupted" and len(run.pingpong) == 0
    pa = run.power_attrs
    # the baseline ended at the signal, every rank reported, and no baseline followed
    assert pa["baseline_end_unix_s"] - pa["baseline_start_unix_s"] < 10
    assert np.all(np.isfinite(run.layout["baseline_cpu_s"][:, 0]))
    assert "baseline_after_start_unix_s" not in pa


def test_a_baseline_window_opens_after_the_longest_reading_span():
    from npmpi.power.baseline import MAX_SETTLE_S, settle_s

    nodes = [
        {"channels": [{"sample_interval_s": 0.1, "averaging_s": 0.0}]},
        {"channels": [{"sample_interval_s": 0.5, "averaging_s": 1.0}, {"sample_interval_s": None}]},
    ]
    assert settle_s(nodes) == 1.0
    assert settle_s([{"channels": [{"sample_interval_s": 60.0}]}]) == MAX_SETTLE_S
    assert settle_s([]) == 0.0
