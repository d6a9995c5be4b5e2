"""Fabric meters (--fabric-meter): options, opening, the run file's /power/fabric, and the energy per
bit of the nodes, the fabric and their total, against hand-computed figures and one real run."""

from __future__ import annotations

import csv
import io
import json
import math
import subprocess
import sys

import numpy as np
import pytest
from npmpi_analysis.html_report import html_report
from npmpi_analysis.numbers.analyse import analyse_run, size_rows
from npmpi_analysis.report import csv_bytes, json_bytes, summary_text
from npmpi_analysis.synthetic import SynthChannel, SynthNode, write_run

from npmpi.core.errors import UsageError
from npmpi.core.layout import compute_layout
from npmpi.kinds.roles import Roles
from npmpi.meters import parse_meter_spec
from npmpi.power.fabric import fabric_rank, open_fabric
from npmpi.run.options import parse_options
from npmpi.runfile.reader import load_run

# ---------------------------------------------------------------- a hand-computed run
# One size of 1 MiB, 100 round trips per trial, two trials of 0.5 s in [10, 11]: b = 2 * 100 * 8 *
# 2^20 / 0.5 bit/s. Power steps: before the sweep (baseline [0, 2]), during it, after it (baseline
# [20, 22]); readings every 0.1 s, instantaneous, constant within each stretch, so every σ_p is 0
# and the only uncertainty is the idle's spread between the two baselines, (I_a - I_b)² / 12.
B = 2 * 100 * 8 * 2**20 / 0.5
NODE_W = (100.0, 150.0, 110.0)  # before, during, after
FABRIC_W = (20.0, 35.0, 24.0)


def _steps(levels):
    t = np.arange(0.0, 25.0, 0.1)
    return t, np.where(t < 5, levels[0], np.where(t < 15, levels[1], levels[2]))


def _write(path, fabric=True, fabric_label="simulated"):
    t, node_w = _steps(NODE_W)
    _, fab_w = _steps(FABRIC_W)
    node = SynthNode([SynthChannel(t, node_w, label="measured", sample_interval_s=0.1)], host="n0")
    fab = SynthNode([SynthChannel(t, fab_w, label=fabric_label, sample_interval_s=0.1)], host="n0")
    return write_run(
        path,
        [2**20],
        [100],
        [[0.5, 0.5]],
        [[10.0, 10.5]],
        nodes=[node],
        baseline=(0.0, 2.0),
        baseline_after=(20.0, 22.0),
        fabric=fab if fabric else None,
    )


def _pj(watts: float) -> float:
    return 1e12 * watts / B


def test_nodes_fabric_and_total_energy_per_bit_by_hand(tmp_path):
    a = analyse_run(load_run(_write(tmp_path / "f.h5")), "f")
    assert a.bw.mean_bit_s[0] == pytest.approx(B)
    parts = a.fabric.parts
    # the nodes' part is the job's power as without a fabric
    assert parts["nodes"].energy_pj_bit[0] == pytest.approx(_pj(150)) == pytest.approx(a.energy_pj_bit[0])
    assert parts["fabric"].energy_pj_bit[0] == pytest.approx(_pj(35))
    assert parts["total"].energy_pj_bit[0] == pytest.approx(_pj(185))
    # idle: the mean of the two baselines, σ = |I_a - I_b| / sqrt(12); the total's from its own sums
    expect = {"nodes": (100, 110), "fabric": (20, 24), "total": (120, 134)}
    for name, (before, after) in expect.items():
        p = parts[name]
        assert p.idle_before[0] == pytest.approx(before) and p.idle_after[0] == pytest.approx(after)
        assert p.idle[0] == pytest.approx((before + after) / 2)
        assert p.idle[1] == pytest.approx(abs(after - before) / math.sqrt(12))
        active = p.power_w[0]
        assert p.dynamic_pj_bit[0] == pytest.approx(_pj(active - (before + after) / 2))
        assert p.dynamic_sigma_pj_bit[0] == pytest.approx(_pj(abs(after - before) / math.sqrt(12)))
    assert parts["fabric"].dynamic_pj_bit[0] == pytest.approx(_pj(13))
    assert parts["total"].dynamic_pj_bit[0] == pytest.approx(_pj(58))
    assert parts["fabric"].energy_sigma_pj_bit[0] == pytest.approx(0, abs=1e-9)


def test_fabric_columns_summary_rows_and_labels(tmp_path):
    a = analyse_run(load_run(_write(tmp_path / "f.h5")), "f")
    (row,) = list(csv.DictReader(io.StringIO(csv_bytes([a]).decode())))
    assert float(row["fabric_power_w"]) == pytest.approx(35)
    assert float(row["total_energy_pj_bit"]) == pytest.approx(_pj(185))
    assert float(row["fabric_dynamic_energy_pj_bit"]) == pytest.approx(_pj(13))
    assert row["fabric_power_label"] == "SIMULATED, not measured"
    assert row["total_power_label"] == "partly SIMULATED, not all measured"
    doc = json.loads(json_bytes([a]))
    s = doc["runs"][0]["summary"]
    assert s["fabric"]["channels"][0]["label"] == "simulated" and s["fabric"]["power_rank"] == 2
    assert s["energy_parts"]["size_bytes"] == 2**20
    assert s["energy_parts"]["fabric"]["idle_before_power_w"] == pytest.approx(20)
    assert s["energy_parts"]["total"]["energy_pj_bit"] == pytest.approx(_pj(185))
    text = summary_text(a)
    rows = {line.split()[0]: line for line in text.splitlines() if line.startswith("    ")}
    assert {"nodes", "fabric", "total"} <= set(rows)
    assert rows["fabric"].endswith("SIMULATED, not measured") and rows["nodes"].endswith("measured")
    assert f"{_pj(185):.4g}" in rows["total"] and "upper bound" in text
    page = html_report([a], [], []).decode()
    assert "Energy per bit: nodes, fabric, total" in page and "SIMULATED, not measured" in page


def test_fabric_figure_carries_its_label(tmp_path):
    from npmpi_analysis.figures.fabric import plot_energy_parts

    a = analyse_run(load_run(_write(tmp_path / "f.h5", fabric_label="estimated")), "f")
    p = plot_energy_parts(a, several=False)
    assert p.name == "energy_per_bit_parts" and p.caveat == "partly ESTIMATED, not all measured"
    labels = [t.get_text() for t in p.figure.axes[0].get_legend().get_texts()]
    assert "fabric ± σ (ESTIMATED, not measured)" in labels and "nodes ± σ" in labels
    assert b"ESTIMATED" in p.render("png")


def test_old_file_without_fabric_reads_as_before(tmp_path):
    a = analyse_run(load_run(_write(tmp_path / "old.h5", fabric=False)), "old")
    assert a.fabric is None
    s = a.summary()
    assert "fabric" not in s and "energy_parts" not in s
    assert not any(k.startswith(("fabric_", "total_")) for k in size_rows(a)[0])
    text = summary_text(a)
    assert "  fabric (sampled by" not in text and "nodes + fabric" not in text
    from npmpi_analysis.figures.fabric import plot_energy_parts

    assert plot_energy_parts(a, several=False) is None


# ---------------------------------------------------------------- options and opening


def _usage(argv) -> str:
    with pytest.raises(UsageError) as exc:
        parse_options(argv)
    return str(exc.value)


def test_fabric_option_errors():
    assert _usage(["--fabric-rank", "2"]).startswith("--fabric-rank 2 only applies with --fabric-meter")
    assert _usage(["--fabric-meter", "nosuch"]).startswith("--fabric-meter nosuch: unknown meter 'nosuch'")
    assert "--fabric-meter estimate: unknown parameter 'bogus'" in _usage(
        ["--fabric-meter", "estimate:bogus=1"]
    )
    assert _usage(["--fabric-meter", "estimate", "--fabric-rank", "-1"]).startswith("--fabric-rank -1: give")
    # a secret inline is refused for a fabric meter as for a node's, without echoing it
    secret = _usage(["--meter", "estimate", "--fabric-meter", "snmp:127.0.0.1,community=s3cret-x"])
    assert secret.startswith("--fabric-meter snmp: community= may not be given") and "s3cret-x" not in secret
    opts = parse_options(
        ["--meter", "estimate", "--fabric-meter", "estimate", "--fabric-meter", "replay:t.csv"]
    )
    assert [s.text for s in opts.fabric_meters] == ["estimate", "replay:t.csv"] and opts.fabric_rank is None


def test_fabric_rank_must_be_a_power_rank():
    # two nodes of three ranks: the power ranks are each node's highest, 2 and 5
    layout = compute_layout(["a"] * 3 + ["b"] * 3, ["a"] * 3 + ["b"] * 3, power=True)
    assert fabric_rank(layout, ["estimate"], None) == 2
    assert fabric_rank(layout, ["estimate"], 5) == 5
    assert fabric_rank(layout, [], None) is None
    with pytest.raises(
        UsageError,
        match=r"--fabric-rank 3 is not a power rank; the power ranks of this "
        r"job are: 2 \(node 0\), 5 \(node 1\)",
    ):
        fabric_rank(layout, ["estimate"], 3)
    no_power = compute_layout(["a"] * 3, ["a"] * 3, power=False)
    with pytest.raises(UsageError, match="--fabric-meter needs the power ranks that --meter creates"):
        fabric_rank(no_power, ["estimate"], None)


def test_a_fabric_meter_that_cannot_open(tmp_path):
    layout = compute_layout(["a"] * 3, ["h"] * 3, power=True)
    roles = Roles(layout=layout, rank=2, host="h", meter_specs=[parse_meter_spec("estimate")])
    roles.power_info = {"specs": ["estimate"], "channels": [], "skipped": []}
    spec = parse_meter_spec(f"replay:{tmp_path / 'missing.csv'}")
    problem = open_fabric(roles, [spec], optional=False, sample_interval_s=None)
    assert problem.startswith("the fabric (sampled by rank 2 on h): --fabric-meter replay:")
    assert "does not exist" in problem and roles.samplers == []
    assert open_fabric(roles, [spec], optional=True, sample_interval_s=None) is None
    fabric = roles.power_info["fabric"]
    assert fabric["channels"] == [] and "--fabric-meter replay:" in fabric["skipped"][0]


# ---------------------------------------------------------------- real runs


@pytest.mark.mpi
def test_fabric_without_any_node_meter_is_a_usage_error(npmpi_run, tmp_path):
    proc = npmpi_run(["--quick", "-u", "8", "--fabric-meter", "estimate", "-o", "r.h5"], np=3, timeout=60)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("npmpi: error:")]
    assert len(lines) == 1 and "--fabric-meter needs the power ranks" in lines[0], proc.stderr
    assert not (tmp_path / "r.h5").exists()


@pytest.mark.mpi
def test_real_run_with_a_fabric_meter_is_analysed(npmpi_run, tmp_path):
    """Node power from the estimate model, the fabric replaying a constant 50 W: the fabric's energy
    per bit must be 50 W / b at every size, the total the nodes' plus the fabric's."""
    (tmp_path / "switch.csv").write_text("time_s,power_w\n0,50\n0.1,50\n")
    args = ["--quick", "-u", "256", "-p", "0", "--baseline", "0.5", "--meter", "estimate"]
    args += ["--fabric-meter", "replay:switch.csv", "-q", "-o", "r.h5"]
    proc = npmpi_run(args, np=3, timeout=90)
    assert proc.returncode == 0, proc.stderr
    run = load_run(tmp_path / "r.h5")
    assert [len(n.channels) for n in run.power] == [1] and run.power[0].channels[0].label == "estimated"
    (ch,) = run.fabric.channels
    assert ch.attrs["spec"] == "replay:switch.csv" and ch.label == "simulated"
    assert ch.attrs["sampled_by_rank"] == 2 and run.fabric.attrs["power_rank"] == 2
    assert len(ch.power_w) > 5 and np.all(ch.power_w == 50)
    assert run.fabric.attrs["clock_offset_end_s"] == run.power[0].attrs["clock_offset_end_s"]
    res = subprocess.run(
        [sys.executable, "-m", "npmpi_analysis", str(tmp_path / "r.h5"), "--json", str(tmp_path / "a.json")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert res.returncode == 0, res.stderr
    rows = [ln.split()[0] for ln in res.stdout.splitlines() if ln.startswith("    ")]
    assert {"nodes", "fabric", "total"} <= set(rows), res.stdout
    doc = json.loads((tmp_path / "a.json").read_text())["runs"][0]
    sized = [r for r in doc["sizes"] if r["fabric_power_w"] is not None]
    assert len(sized) == len(doc["sizes"]) > 5
    for r in sized:
        assert r["fabric_power_w"] == pytest.approx(50)
        assert r["fabric_energy_pj_bit"] == pytest.approx(1e12 * 50 / r["bandwidth_mean_bit_s"])
        assert r["total_power_w"] == pytest.approx(r["power_w"] + 50)
        assert r["total_energy_pj_bit"] == pytest.approx(r["energy_pj_bit"] + r["fabric_energy_pj_bit"])
    parts = doc["summary"]["energy_parts"]
    assert parts["fabric"]["idle_before_power_w"] == pytest.approx(50)
    assert parts["fabric"]["idle_after_power_w"] == pytest.approx(50)
    assert parts["fabric"]["dynamic_energy_pj_bit"] == pytest.approx(0, abs=1e-6)
    assert parts["fabric"]["label"] == "SIMULATED, not measured"
    assert parts["total"]["label"] == "ESTIMATED/SIMULATED, not measured"


class _OneBatchComm:
    """Rank 0's view of one power rank answering a flush with a prepared batch (PowerCollector's calls)."""

    def __init__(self, batch):
        self.batch, self.sent = batch, []

    def Send(self, buf, dest, tag):
        self.sent.append((int(buf[0]), dest))

    def Iprobe(self, source, tag):
        return True

    def recv(self, source, tag):
        return self.batch


def test_rank0_stores_the_fabric_channels_after_the_nodes(tmp_path):
    """A batch holds the node's channel, then the fabric's: samples, a meter fault and a heartbeat gap
    land in /power/fabric/channel0, the node's in /power/node0/channel0."""
    from npmpi.power.rank import PowerCollector
    from npmpi.runfile.faults import FaultRecord
    from npmpi.runfile.writer import RunWriter

    def samples(t, w):
        t = np.asarray(t, dtype=float)
        nan = np.full(len(t), np.nan)
        return {"time_unix_s": t, "power_w": np.full(len(t), w), "energy_j": nan, "volts": nan, "amps": nan}

    node_ch = {"kind": "estimate", "spec": "estimate", "label": "estimated", "sample_interval_s": 0.1}
    fab_ch = {"kind": "replay", "spec": "replay:s.csv", "label": "simulated", "sample_interval_s": 0.1}
    layout = {"host": ["h", "h", "h"], "node_index": [0, 0, 0], "role": ["transmitter", "reflector", "power"]}
    w = RunWriter(tmp_path / "c.h5", {}, layout, 1)
    w.create_power({}, [{"host": "h", "node_index": 0, "power_rank": 2}], [[node_ch]])
    w.create_fabric({"power_rank": 2, "node_index": 0, "host": "h"}, [{**fab_ch, "sampled_by_rank": 2}])
    fault = FaultRecord(100.05, 100.05, 1, "switch did not answer", fault_id=0)
    ticks = np.array([100.0, 100.1, 104.0])  # 3.9 s without a pass: a gap (threshold 1 s at 0.1 s)
    batch = [
        (samples([100.0, 100.1], 80.0), [], np.array([100.0, 100.1]), {}),
        (samples([100.0, 100.1, 104.0], 50.0), [fault], ticks, {}),
    ]
    comm = _OneBatchComm(batch)
    collector = PowerCollector(comm, [2], [[node_ch]], (0, [fab_ch]))
    collector.writer = w
    assert collector.collect() == 5
    w.finish("complete")
    run = load_run(tmp_path / "c.h5")
    assert list(run.power[0].channels[0].power_w) == [80.0, 80.0]
    (ch,) = run.fabric.channels
    assert list(ch.power_w) == [50.0, 50.0, 50.0] and ch.attrs["sampled_by_rank"] == 2
    assert ch.fault_message[0] == "switch did not answer"
    assert list(ch.fault_extra["kind"]) == ["meter", "gap"]
    assert "replay:s.csv of the fabric on node 0" in ch.fault_message[1]
    assert run.power[0].channels[0].fault_message == []
    assert collector.faults_total == 2
