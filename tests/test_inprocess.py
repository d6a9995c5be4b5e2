"""One mpirun job runs tests/inprocess/ on 4 ranks: sweeps on COMM_WORLD, a Dup and Splits of it,
called in-process through npmpi.persize.benchmark.sweep (no job launch per case)."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from conftest import REPO
from support.launcher import local_mpi_env, mpirun_path

RANKS = 4
TIMEOUT_S = 240


@pytest.mark.mpi
@pytest.mark.timeout(TIMEOUT_S + 30)
def test_in_process_sweeps_pass_on_every_rank():
    mpirun = mpirun_path()
    if mpirun is None:
        pytest.fail("no mpirun: run scripts/setup.sh")
    cmd = [mpirun, "-np", str(RANKS), "--oversubscribe", "--bind-to", "none", sys.executable, "-m", "pytest"]
    cmd += [
        "tests/inprocess",
        "-q",
        "-p",
        "no:cacheprovider",
        "-o",
        "console_output_style=classic",
        "--color=no",
    ]
    try:
        proc = subprocess.run(
            cmd,
            cwd=REPO,
            env=local_mpi_env({"NPMPI_IN_MPIRUN": "1"}),
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"the in-process tests hung for {TIMEOUT_S} s:\n{exc.stdout}\n{exc.stderr}")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    summaries = re.findall(r"^=* ?(\d+) passed(?!,)", out, re.MULTILINE)
    assert len(summaries) == RANKS and len(set(summaries)) == 1, out  # every rank passed all, none skipped
    assert int(summaries[0]) >= 18, out
