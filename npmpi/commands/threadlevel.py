"""Which MPI thread level each rank asks for, decided before MPI starts.

Open MPI (4.1 measured, docs/netpipe-comparison.md) adds about 20-25 ns to every shared-memory
message once a process asks for more than MPI_THREAD_SINGLE, so ranks that run no other thread ask
for SINGLE, as NetPIPE's MPI_Init does. A power rank runs one sampling thread per meter channel;
those threads never call MPI, which is MPI_THREAD_FUNNELED. The level is asked for before MPI starts, when
roles are not known yet: the rank the launcher numbers last on its node (its local rank, which
Open MPI 5 does not give in world-rank order under --oversubscribe or --map-by core) asks for
FUNNELED, and the layout then makes the rank that got FUNNELED its node's power rank (layout.py),
so the pair gets what --thread-level says under any placement. World rank 0 always measures and
never asks for FUNNELED. When nothing tells, every other rank that could sample asks for
FUNNELED. The level each rank got is stored in the run file (/layout/thread_level).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

from npmpi.core.config import THREAD_LEVEL_AUTO

SINGLE = "single"
FUNNELED = "funneled"
LEVEL_NAMES = {0: SINGLE, 1: FUNNELED, 2: "serialized", 3: "multiple"}  # MPI_THREAD_* values


def _int(env: Mapping[str, str], name: str) -> int | None:
    value = env.get(name, "").strip()
    return int(value) if re.fullmatch(r"[0-9]{1,9}", value, re.ASCII) else None  # '²'.isdigit() is True


def _slurm_tasks_on_node(spec: str, node: int) -> int | None:
    """Entry `node` of a Slurm tasks-per-node list such as '2(x3),1'."""
    counts: list[int] = []
    for part in spec.split(","):
        m = re.fullmatch(r"\s*([0-9]{1,9})(?:\(x([0-9]{1,9})\))?\s*", part, re.ASCII)
        if not m:
            return None
        counts += [int(m.group(1))] * int(m.group(2) or 1)
    return counts[node] if 0 <= node < len(counts) else None


def local_position(env: Mapping[str, str] | None = None) -> tuple[int, int] | None:
    """(local rank, ranks on this node) as the launcher states them before MPI starts, or None.

    Open MPI's mpirun (OMPI_COMM_WORLD_LOCAL_*), MPICH's Hydra (MPI_LOCALRANKID/MPI_LOCALNRANKS),
    Slurm's srun (SLURM_LOCALID and the step's tasks per node)."""
    env = os.environ if env is None else env
    pairs = (
        ("OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"),
        ("MPI_LOCALRANKID", "MPI_LOCALNRANKS"),
    )
    for rank_name, size_name in pairs:
        rank, size = _int(env, rank_name), _int(env, size_name)
        if rank is not None and size is not None and rank < size:
            return rank, size
    rank, node = _int(env, "SLURM_LOCALID"), _int(env, "SLURM_NODEID")
    spec = env.get("SLURM_STEP_TASKS_PER_NODE", "")
    if rank is not None and node is not None and spec and "SLURM_STEP_ID" in env:
        size = _slurm_tasks_on_node(spec, node)
        if size is not None and rank < size:
            return rank, size
    return None


def world_rank(env: Mapping[str, str] | None = None) -> int | None:
    """This process's rank in MPI_COMM_WORLD as the launcher states it before MPI starts, or None."""
    env = os.environ if env is None else env
    for name in ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"):
        rank = _int(env, name)
        if rank is not None:
            return rank
    return _int(env, "SLURM_PROCID") if "SLURM_STEP_ID" in env else None


def requested_level(choice: str, samples_here: bool, env: Mapping[str, str] | None = None) -> str:
    """The level this process asks MPI for: `choice` unless 'auto'; with 'auto', FUNNELED when this
    process may become its node's power rank with meters to sample, else SINGLE."""
    if choice != THREAD_LEVEL_AUTO:
        return choice
    if not samples_here or world_rank(env) == 0:
        return SINGLE  # rank 0 is always the transmitter
    where = local_position(env)
    if where is None:
        return FUNNELED
    rank, size = where
    return FUNNELED if rank == size - 1 else SINGLE


def level_name(provided: int) -> str:
    return LEVEL_NAMES.get(provided, str(provided))


def level_problem(provided: int, runs_threads: bool, choice: str) -> str | None:
    """A usage problem when a rank with sampling threads got less than FUNNELED by the user's choice."""
    if runs_threads and provided < 1 and choice != THREAD_LEVEL_AUTO:
        return (
            f"--thread-level {choice}: this power rank runs meter threads, which needs at least "
            "MPI_THREAD_FUNNELED; use --thread-level auto (the default) or funneled"
        )
    return None
