"""Thread levels follow roles under every placement a launcher may give (issue: Open MPI 5 numbers
local ranks out of world-rank order under --oversubscribe and --map-by core)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from support.launcher import local_mpi_env, mpirun_path

from npmpi.commands.threadlevel import requested_level
from npmpi.core.layout import compute_layout

MPI_TIMEOUT = 60

# what each rank asks for, then the roles the layout gives; rank 0 prints (role, level) per rank
PROBE = """
import json, mpi4py
from npmpi.commands.threadlevel import requested_level
mpi4py.rc.thread_level = requested_level("auto", True)
from mpi4py import MPI
from npmpi.kinds.roles import discover_roles
from npmpi.commands.threadlevel import level_name
roles = discover_roles(MPI, MPI.COMM_WORLD, ["estimate"])
rows = MPI.COMM_WORLD.gather((roles.role, level_name(MPI.Query_thread())), root=0)
if MPI.COMM_WORLD.Get_rank() == 0:
    print(json.dumps(rows))
"""

# Open MPI 5 on 2 cores, measured: (world rank, local rank) pairs of each placement below
PERMUTED = {"0": "0", "1": "2", "2": "1"}  # --oversubscribe, --map-by core, --map-by hwthread


def _env(world: str, local: str, size: str = "3") -> dict[str, str]:
    return {
        "OMPI_COMM_WORLD_RANK": world,
        "OMPI_COMM_WORLD_LOCAL_RANK": local,
        "OMPI_COMM_WORLD_LOCAL_SIZE": size,
    }


IN_ORDER = {"0": "0", "1": "1", "2": "2"}  # --map-by slot, --map-by node, --bind-to none
REVERSED = {"0": "2", "1": "1", "2": "0"}  # rank 0 numbered last (--rank-by may do it)


@pytest.mark.parametrize("local_of", [PERMUTED, IN_ORDER, REVERSED])
def test_the_rank_that_asked_for_funneled_samples_and_the_pair_gets_single(local_of):
    levels = [requested_level("auto", True, _env(w, local_of[w])) for w in ("0", "1", "2")]
    assert levels[0] == "single"  # rank 0 always measures, even numbered last on its node
    layout = compute_layout(["n"] * 3, ["h"] * 3, power=True, threaded=[lv == "funneled" for lv in levels])
    a, b = layout.pair
    assert (levels[a], levels[b]) == ("single", "single")
    power = layout.power_ranks[0]
    # rank 0 numbered last: nobody on the node asked for FUNNELED, the highest rank samples
    assert levels[power] == "funneled" or "funneled" not in levels
    assert layout.roles[power] == "power"


def test_two_nodes_each_sample_on_the_rank_that_got_funneled():
    threaded = [False, False, True, False, True, False]  # ranks 2 and 4 got FUNNELED
    layout = compute_layout(["a"] * 3 + ["b"] * 3, ["a"] * 3 + ["b"] * 3, power=True, threaded=threaded)
    assert layout.power_ranks == (2, 4) and layout.pair == (0, 3)
    plain = compute_layout(["a"] * 3 + ["b"] * 3, ["a"] * 3 + ["b"] * 3, power=True)
    assert plain.power_ranks == (2, 5)  # no levels known: the highest rank of each node, as before


@pytest.mark.mpi
@pytest.mark.timeout(MPI_TIMEOUT * 5)
@pytest.mark.parametrize(
    "placement",
    [
        ["--oversubscribe"],
        ["--map-by", "core:OVERSUBSCRIBE"],
        ["--map-by", "hwthread", "--oversubscribe"],
        ["--bind-to", "none", "--oversubscribe"],
        [],  # as the README writes it, with scripts/mpi-env.sh's settings
    ],
    ids=["oversubscribe", "map-by-core", "map-by-hwthread", "bind-to-none", "plain"],
)
def test_pair_single_power_funneled_under_each_placement(placement):
    mapping = {"PRTE_MCA_rmaps_default_mapping_policy": ":oversubscribe"}  # scripts/mpi-env.sh's
    env = local_mpi_env(None if placement else mapping)
    cmd = [mpirun_path(), "-np", "3", *placement, sys.executable, "-c", PROBE]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=MPI_TIMEOUT, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = json.loads(proc.stdout.strip().splitlines()[-1])
    levels = {role: [lv for r, lv in rows if r == role] for role, _ in rows}
    assert levels == {"transmitter": ["single"], "reflector": ["single"], "power": ["funneled"]}, rows
