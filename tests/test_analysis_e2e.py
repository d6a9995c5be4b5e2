"""A real `mpirun -np 3` run with the estimate meter, then npmpi-analyze on its file."""

from __future__ import annotations

import csv
import json
import subprocess
import sys

import pytest
from support.launcher import local_mpi_env, npmpi_command

pytestmark = pytest.mark.mpi


def test_real_run_is_analysed_end_to_end(tmp_path):
    run = tmp_path / "run.h5"
    args = ["--quick", "-u", "64K", "--meter", "estimate", "--baseline", "0.5", "-q", "-o", str(run)]
    try:
        cmd = npmpi_command(3, args)
    except FileNotFoundError as exc:
        pytest.fail(str(exc))
    try:
        proc = subprocess.run(
            cmd, cwd=tmp_path, env=local_mpi_env(), capture_output=True, text=True, timeout=120, check=False
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"mpirun hung: {' '.join(cmd)}")
    assert proc.returncode == 0, proc.stderr

    out = tmp_path / "out"
    analyze = [
        sys.executable,
        "-m",
        "npmpi_analysis",
        str(run),
        "--csv",
        str(out / "run.csv"),
        "--json",
        str(out / "run.json"),
        "--np-out",
        str(out / "np.out"),
        "--plots",
        str(out / "plots"),
        "--report",
        str(out / "report.html"),
    ]
    out.mkdir()
    res = subprocess.run(analyze, capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode == 0, res.stderr
    assert res.stderr == ""
    text = res.stdout
    assert "peak bandwidth:" in text and "correlation bandwidth vs energy rate:" in text
    assert "power: ESTIMATED, not measured" in text
    assert "node 0 " in text and "idle " in text

    rows = list(csv.DictReader((out / "run.csv").read_text().splitlines()))
    assert len(rows) > 20 and int(rows[0]["size_bytes"]) == 1
    assert all(float(r["power_w"]) > 0 for r in rows if r["power_w"])
    summary = json.loads((out / "run.json").read_text())["runs"][0]["summary"]
    assert summary["status"] == "complete" and summary["sizes_analysed"] == len(rows)
    assert summary["hosts"] and summary["mpi_library_version"]
    assert summary["idle_power_w"] is not None and summary["peak_energy_rate_bit_j"] > 0
    # trials of a few ms with a 0.1 s meter: flagged, not averaged over nothing
    assert summary["flagged_sizes"].get("short", 0) > 0
    assert len((out / "np.out").read_text().splitlines()) == len(rows)
    figures = sorted(p.stem for p in (out / "plots").glob("*.png"))
    # one node: no stacked per-node power (it would repeat the job's); the ranks' CPU (format 1.7)
    assert (
        len(figures) == 10 and "model" in figures and "power_time" in figures and "power_nodes" not in figures
    )
    assert "cpu_per_kib" in figures and all(r["cpu_us_per_kib"] for r in rows[1:])
    page = (out / "report.html").read_text()
    assert page.count("<img ") == 10 and "ESTIMATED, not measured" in page
