"""The seam for benchmark kinds: a kind written outside npmpi (tests/support/kinds/ring_kind.py) registers by
name, runs under mpirun with a power rank, and writes rows the unchanged analysis reads; the
registry, the measuring groups and the file's kind; and its own numbers added to the analysis through
the analysis's seam (tests/support/kinds/ring_analysis.py; docs/architecture.md, "Adding a benchmark
kind")."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest
from conftest import run_mpi

from npmpi.core.errors import UsageError
from npmpi.core.layout import LayoutError, Words, compute_layout, node_layout

KINDS_DIR = Path(__file__).resolve().parent / "support" / "kinds"
RING_ENV = {"NPMPI_KINDS": "ring=ring_kind:KIND", "PYTHONPATH": str(KINDS_DIR)}


@pytest.mark.mpi
@pytest.mark.slow
def test_a_kind_from_outside_runs_with_a_power_rank_and_the_analysis_reads_it(tmp_path):
    out = tmp_path / "ring.h5"
    # a node of known power: the estimate at 120 W whatever its CPUs do
    meter = "estimate:idle_w=120,max_w=120"
    args = ["ring", "--sizes", "1,4K,256K", "--quick", "--meter", meter, "--baseline", "1", "-o", str(out)]
    proc = run_mpi(args, np=3, cwd=tmp_path, env=RING_ENV)
    assert proc.returncode == 0, proc.stderr
    assert "2 measuring ranks" in proc.stdout and "status complete" in proc.stdout
    with h5py.File(out, "r") as f:
        a = f.attrs
        assert a["kind"] == "ring" and a["format_version"] == "1.11" and a["status"] == "complete"
        assert a["bytes_per_iteration_factor"] == 2 and a["one_way_divisor"] == 1  # 2 members, one hop
        roles = [r.decode() if isinstance(r, bytes) else r for r in f["layout/role"][:]]
        assert sorted(roles) == ["power", "ring", "ring"]
        members = [r for r, role in enumerate(roles) if role == "ring"]
        assert list(a["member_ranks"]) == members and 0 in members
        pp = f["pingpong"]
        assert list(pp["size_bytes"][:]) == [1, 4096, 256 * 1024]
        assert pp["data_verified"][:].all()
        member = pp["member_trial_s"][:]
        assert member.shape == (3, 2, 3) and np.all(member > 0)
        # a trial's time is the slowest member's
        assert np.allclose(pp["trial_s"][:], member.max(axis=1))
        iterations, sizes, best = pp["iterations"][:], pp["size_bytes"][:], pp["trial_s"][:].min(axis=1)
        assert len(f["power/node0/channel0/power_w"]) > 5
    js = tmp_path / "ring.json"
    ana = subprocess.run(
        [sys.executable, "-m", "npmpi_analysis", str(out), "--json", str(js), "-q"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert ana.returncode == 0, ana.stderr
    doc = json.loads(js.read_text())
    rows = doc["runs"][0]["sizes"]
    # the unchanged analysis: bandwidth = F i 8 m / t with the kind's F, latency t / (D i)
    for row, m, i, t in zip(rows, sizes, iterations, best, strict=True):
        assert row["size_bytes"] == m and row["best_trial_s"] == pytest.approx(t, rel=1e-12)
        assert row["bandwidth_peak_bit_s"] == pytest.approx(2 * i * 8 * m / t, rel=1e-9)
        assert row["one_way_s"] == pytest.approx(t / i, rel=1e-9)
        # energy per bit: the node's 120 W over the bits of the mean trial
        assert row["power_w"] == pytest.approx(120, rel=1e-9)
        per_bit = 1e12 * row["power_w"] / row["bandwidth_mean_bit_s"]
        assert row["energy_pj_bit"] == pytest.approx(per_bit, rel=1e-6)
        assert row["energy_sigma_pj_bit"] > 0
        assert not any(key.startswith("ring_") for key in row)  # nothing added: the kind is not registered
    # the kind's own numbers, registered through the analysis's seam (ring_analysis.py), beside the
    # very same rows: one step = the best trial over its iterations, each link a message a step
    env = {**os.environ, "PYTHONPATH": str(KINDS_DIR), "NPMPI_ANALYSIS_KINDS": "ring=ring_analysis:KIND"}
    ana = subprocess.run(
        [sys.executable, "-m", "npmpi_analysis", str(out), "--json", str(tmp_path / "own.json")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
    )
    assert ana.returncode == 0, ana.stderr
    assert "ring of 2 ranks: one step = every member's message one hop" in ana.stdout
    own = json.loads((tmp_path / "own.json").read_text())["runs"][0]
    assert own["summary"]["ring"] == {"members": 2}
    for row, before, m, i, t in zip(own["sizes"], rows, sizes, iterations, best, strict=True):
        assert {k: v for k, v in row.items() if not k.startswith("ring_")} == before
        assert row["ring_step_s"] == pytest.approx(t / i, rel=1e-12)
        assert row["ring_link_bit_s"] == pytest.approx(8 * m * i / t, rel=1e-9)
        assert row["ring_energy_per_step_j"] == pytest.approx(120 * t / i, rel=1e-9)


@pytest.mark.mpi
def test_an_unregistered_word_and_a_malformed_registration_are_one_line(tmp_path):
    proc = run_mpi(["ring", "--quick"], np=2, cwd=tmp_path)  # not registered: the run refuses the word
    assert proc.returncode == 2 and "ring" in proc.stderr and "Traceback" not in proc.stderr
    proc = run_mpi(["ring"], np=2, cwd=tmp_path, env={"NPMPI_KINDS": "ring=no module"})
    assert (
        proc.returncode == 2 and "NPMPI_KINDS: 'ring=no module' is not NAME=module:attribute" in proc.stderr
    )
    assert "Traceback" not in proc.stderr


@pytest.mark.mpi
def test_a_kind_s_layout_errors_are_in_its_words(tmp_path):
    proc = run_mpi(["ring"], np=1, cwd=tmp_path, env=RING_ENV)
    assert proc.returncode == 2
    assert (
        "ring needs 2 measuring ranks: 1 node, 1 rank given; run e.g. mpirun -np 2 python -m npmpi ring"
        in (proc.stderr)
    )


def test_measuring_groups_default_to_the_pairs_and_name_their_members():
    run = compute_layout(["a", "a", "b", "b"], ["ha", "ha", "hb", "hb"], power=True)
    assert run.groups == (run.pair,) == ((0, 2),) and run.members == (0, 2)
    assert run.group_of(2) == 0 and run.group_of(1) is None
    bare = node_layout(["a"] * 4, ["h"] * 4, power=True)
    assert bare.pair is None and bare.groups == () and bare.capable == [0, 1, 2]
    words = Words(needs="x needs 4 measuring ranks", least=4, command="python -m npmpi x …")
    with pytest.raises(
        LayoutError, match="x needs 4 measuring ranks and power needs one extra rank per node"
    ):
        node_layout(["a"] * 4, ["h"] * 4, power=True, words=words)


def test_the_registry_names_the_built_in_kinds_and_takes_registered_ones(monkeypatch):
    from npmpi import kinds

    monkeypatch.setenv("NPMPI_KINDS", "ring=ring_kind:KIND")
    table = kinds.registry()
    assert table[""] == "npmpi.run.kind:KIND" and table["map"] == "npmpi.map.kind:KIND"
    assert table["ring"] == "ring_kind:KIND" and "calibrate" in table and "meters" in table
    monkeypatch.setenv("NPMPI_KINDS", "map=ring_kind:KIND")  # a registered kind never replaces a built-in
    assert kinds.registry()["map"] == "npmpi.map.kind:KIND"
    with pytest.raises(kinds.KindRegistryError, match="cannot load no_such_module:KIND"):
        kinds.load("no_such_module:KIND")


def test_a_group_kind_s_options_are_checked_in_one_line():
    from npmpi.kinds.options import sizes_arg

    assert sizes_arg(None)[0] == 1 and sizes_arg(None)[-1] == 1 << 20
    assert sizes_arg("64K,1") == (1, 65536)
    for bad, words in (("1,1", "give each size once"), ("2G", "outside 0 B to 1G"), ("", "is empty")):
        with pytest.raises(UsageError, match=words):
            sizes_arg(bad)
