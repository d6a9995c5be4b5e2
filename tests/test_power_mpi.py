"""Real `mpirun -np 3` jobs with a power rank: samples, baseline, clock offsets, meter errors."""

from __future__ import annotations

import signal
import subprocess
import time

import numpy as np
import pytest
from support.launcher import local_mpi_env, npmpi_command

from npmpi.runfile.reader import load_run

pytestmark = pytest.mark.mpi

QUICK = ["--quick", "-u", "64K"]


def one_error_line(proc) -> str:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("npmpi: error:")]
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    return lines[0]


def test_estimate_meter_samples_cover_the_run(npmpi_run, tmp_path):
    proc = npmpi_run([*QUICK, "--meter", "estimate", "--baseline", "0.5", "-o", "r.h5"], np=3)
    assert proc.returncode == 0, proc.stderr
    run = load_run(tmp_path / "r.h5")
    assert run.status == "complete"
    assert list(run.layout["role"]) == ["transmitter", "reflector", "power"]
    assert len(run.power) == 1
    node = run.power[0]
    assert node.attrs["power_rank"] == 2 and node.host == run.layout["host"][2]
    # the same host: the offset is tiny, and its uncertainty (half the best round trip) is positive
    for which in ("start", "end"):
        assert abs(node.attrs[f"clock_offset_{which}_s"]) < 0.01
        assert 0 < node.attrs[f"clock_offset_{which}_uncertainty_s"] < 0.01
    (ch,) = node.channels
    assert ch.attrs["kind"] == "estimate" and ch.label == "estimated"
    assert ch.attrs["sample_interval_s"] == pytest.approx(0.1)
    t = ch.time_unix_s
    assert len(t) > 10 and np.all(np.diff(t) > 0)
    pp = run.pingpong
    # samples span the baseline and the whole sweep (to within one sample interval)
    b0, b1 = run.power_attrs["baseline_start_unix_s"], run.power_attrs["baseline_end_unix_s"]
    assert b1 - b0 == pytest.approx(0.5, abs=0.2)
    assert t[0] <= b0 + 0.2 and t[-1] >= pp.trial_end_unix_s.max() - 0.2
    assert np.sum((t >= b0) & (t <= b1)) >= 3
    assert np.all((ch.power_w >= 40) & (ch.power_w <= 120))  # the model's default bounds
    assert "power: node 0" in proc.stdout and "estimated" in proc.stdout


def test_replay_meter_and_per_node_override(npmpi_run, tmp_path):
    (tmp_path / "trace.csv").write_text("time_s,power_w\n0,200\n0.5,300\n1,200\n")
    proc = npmpi_run(
        [*QUICK, "--meter", "estimate", "--baseline", "0", "-o", "r.h5"],
        np=3,
        env={"NPMPI_METERS": "replay:trace.csv,interval=0.1"},
    )
    assert proc.returncode == 0, proc.stderr
    run = load_run(tmp_path / "r.h5")
    (ch,) = run.power[0].channels
    assert ch.attrs["kind"] == "replay" and ch.label == "simulated"
    assert run.power[0].attrs["meter_specs"] == ["replay:trace.csv,interval=0.1"]
    assert np.all((ch.power_w >= 200) & (ch.power_w <= 300)) and len(ch.power_w) > 5
    assert "baseline_start_unix_s" not in run.power_attrs


def test_power_needs_an_extra_rank(npmpi_run, tmp_path):
    line = one_error_line(npmpi_run([*QUICK, "--meter", "estimate"], np=2, timeout=60))
    assert "power needs one extra rank per node: 1 node, 2 ranks given; run e.g. mpirun -np 3" in line
    assert list(tmp_path.iterdir()) == []


def test_a_missing_meter_stops_before_the_sweep(npmpi_run, tmp_path):
    line = one_error_line(npmpi_run([*QUICK, "--meter", "replay:nope.csv"], np=3, timeout=60))
    assert "node 0" in line and "nope.csv does not exist" in line
    assert list(tmp_path.iterdir()) == []


def test_meter_optional_goes_on_without_it(npmpi_run, tmp_path):
    proc = npmpi_run(
        [
            *QUICK,
            "--meter",
            "replay:nope.csv",
            "--meter",
            "estimate",
            "--meter-optional",
            "--baseline",
            "0",
            "-o",
            "r.h5",
        ],
        np=3,
    )
    assert proc.returncode == 0, proc.stderr
    run = load_run(tmp_path / "r.h5")
    assert [c.attrs["kind"] for c in run.power[0].channels] == ["estimate"]
    assert "nope.csv" in run.power[0].attrs["meters_skipped"][0]
    assert "skipped (--meter-optional)" in proc.stdout


def test_sigterm_with_a_power_rank(tmp_path):
    cmd = npmpi_command(3, ["--meter", "estimate", "--baseline", "0", "-o", "r.h5"])
    proc = subprocess.Popen(
        cmd, cwd=tmp_path, env=local_mpi_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.stdout.readline().startswith("  5:"):
            break
    proc.send_signal(signal.SIGTERM)
    try:
        proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail("the job did not end within 30 s of SIGTERM")
    run = load_run(tmp_path / "r.h5")
    assert run.status == "interrupted" and len(run.pingpong) >= 6
    assert len(run.power[0].channels[0].time_unix_s) > 0


def test_a_counter_that_cannot_be_measured_is_refused_once(npmpi_run, tmp_path, capsys):
    """A RAPL counter of 1 J (a wrap every millisecond at 1 kW) is refused at open in one line (exit
    2); with --meter-optional the run goes on without power and is analysed as bandwidth only."""
    from fakes.sysfs import FakePowercap

    tree = FakePowercap(tmp_path / "sys", max_range_uj=1_000_000)
    spec = f"rapl:{tree.root}"
    line = one_error_line(npmpi_run([*QUICK, "--meter", spec, "-o", "refused.h5"], np=3))
    assert "max_energy_range_uj=1000000" in line and "cannot be measured" in line
    proc = npmpi_run([*QUICK, "--meter", spec, "--meter-optional", "--baseline", "0", "-o", "r.h5"], np=3)
    assert proc.returncode == 0, proc.stderr
    assert sum("max_energy_range_uj" in ln for ln in (proc.stdout + proc.stderr).splitlines()) <= 1
    run = load_run(tmp_path / "r.h5")
    assert run.power[0].channels == [] and "cannot be measured" in run.power[0].attrs["meters_skipped"][0]
    from npmpi_analysis.cli import main

    capsys.readouterr()
    code = main([str(tmp_path / "r.h5")])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "notice: no power: every meter was skipped (--meter-optional)" in out
    assert "cannot be measured" in out and "Traceback" not in out + err
