"""Nodes that are one machine (one kernel boot_id: network namespaces, containers): each records its
boot_id and machine-id, and the analysis counts the machine's power once, with a notice."""

from __future__ import annotations

import numpy as np
import pytest
from npmpi_analysis.numbers.analyse import analyse_run
from npmpi_analysis.synthetic import SynthChannel, SynthNode, write_run

from npmpi.power.nodemeters import machine_ids
from npmpi.runfile.reader import load_run

T0 = 2_000.0
BOOT = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"


def test_machine_ids_are_read_and_missing_files_give_empty(tmp_path):
    (tmp_path / "boot_id").write_text(BOOT + "\n")
    (tmp_path / "machine-id").write_text("5c0ffee0123456789abcdef012345678\n")
    ids = machine_ids(str(tmp_path / "boot_id"), str(tmp_path / "machine-id"))
    assert ids == {"boot_id": BOOT, "machine_id": "5c0ffee0123456789abcdef012345678"}
    assert machine_ids(str(tmp_path / "none"), str(tmp_path / "none")) == {"boot_id": "", "machine_id": ""}
    real = machine_ids()  # this host's: a UUID, as every Linux kernel gives
    assert len(real["boot_id"]) == 36 and real["boot_id"].count("-") == 4


def two_node_run(tmp_path, label: str, boots: tuple[str, str]):
    tmp_path.mkdir(exist_ok=True)
    t = T0 + np.arange(0.0, 20.0, 0.1)
    nodes = [
        SynthNode([SynthChannel(t, np.full(len(t), watts), label=label)], host=f"h{i}", attrs={"boot_id": b})
        for i, (watts, b) in enumerate(zip((120.0, 118.0), boots, strict=True))
    ]
    starts = [[T0 + 2.0 + 3 * k] for k in range(5)]
    path = write_run(tmp_path / f"{label}.h5", [8] * 5, [1] * 5, [[2.0]] * 5, starts, nodes=nodes)
    return analyse_run(load_run(path), label)


def test_two_nodes_of_one_machine_count_its_power_once(tmp_path):
    a = two_node_run(tmp_path, "measured", (BOOT, BOOT))
    assert a.power.job_w == pytest.approx([120.0] * 5)  # node 0's only, not 238 W
    assert [n.sizes.mean[0] for n in a.power.nodes] == pytest.approx([120.0, 118.0])  # each still shown
    (note,) = [n for n in a.notices if "one machine" in n]
    assert "node 0 (h0), node 1 (h1)" in note and "counts it once" in note
    # another machine: summed as before
    b = two_node_run(tmp_path / "other", "measured", (BOOT, BOOT.replace("0f", "aa")))
    assert b.power.job_w == pytest.approx([238.0] * 5) and not any("one machine" in n for n in b.notices)


def test_simulated_power_of_one_machine_is_summed_with_a_notice(tmp_path):
    a = two_node_run(tmp_path, "simulated", (BOOT, BOOT))
    assert a.power.job_w == pytest.approx([238.0] * 5)
    assert any("one machine" in n and "simulated" in n for n in a.notices)
