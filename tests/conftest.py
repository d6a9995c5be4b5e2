"""Shared fixtures: launching real mpirun jobs of npmpi with a timeout."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.launcher import local_mpi_env, npmpi_command, sweep_stale_session_dirs

REPO = Path(__file__).resolve().parents[1]
DATA = Path(__file__).resolve().parent / "data"
# the environment running the tests (scripts/test.sh runs them with NPMPI_VENV's, default .venv)
VENV = Path(sys.prefix)
# a bench a test runs keeps no results in bench/results/ (bench/keep_results.py)
os.environ.setdefault("NPMPI_BENCH_RESULTS", "")


def built_env(name: str) -> Path:
    """An environment built separately for one test (e.g. .venv-mpich): beside the running one."""
    return VENV.parent / name


def run_mpi(
    args: list[str], np: int = 2, cwd: Path | None = None, timeout: float = 120, env: dict | None = None
) -> subprocess.CompletedProcess:
    """Run `mpirun -np N python -m npmpi ARGS`; a hang fails the test instead of the suite."""
    try:
        cmd = npmpi_command(np, args)
    except FileNotFoundError as exc:
        pytest.fail(str(exc))
    try:
        return subprocess.run(
            cmd, cwd=cwd, env=local_mpi_env(env), capture_output=True, text=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"mpirun hung for more than {timeout} s: {' '.join(cmd)}\n{exc.stdout}\n{exc.stderr}")


@pytest.fixture(autouse=True)
def _no_stale_open_mpi_session_dirs():
    """Before every test: the session directories of killed mpiruns removed (a later mpirun given the
    same process id would fail to start: support.launcher.sweep_stale_session_dirs)."""
    sweep_stale_session_dirs()


@pytest.fixture
def npmpi_run(tmp_path):
    """Call as npmpi_run(args, np=2, ...) with the job's working directory in tmp_path."""

    def _run(args: list[str], np: int = 2, timeout: float = 120, env: dict | None = None):
        return run_mpi(args, np=np, cwd=tmp_path, timeout=timeout, env=env)

    return _run


# tests/inprocess/ runs on every rank of one mpirun job (tests/test_inprocess.py), never here
collect_ignore = [] if os.environ.get("NPMPI_IN_MPIRUN") == "1" else ["inprocess"]
