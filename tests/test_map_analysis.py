"""The analysis of cluster maps (`npmpi-analyze map.h5`), in process, on synthetic map files.

The files are written in the layout `python -m npmpi map` writes (npmpi_analysis.map.synthetic:
/power by the run file's own writer, /layout per rank, /map with its datasets and attributes),
with injected truths: a slow link, a slow node, jitter, unmeasured rounds, known node powers.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re

import h5py
import numpy as np
import pytest
from npmpi_analysis.cli import main
from npmpi_analysis.map.analyse import analyse_map
from npmpi_analysis.map.load import load_map
from npmpi_analysis.map.outliers import LOW, detect
from npmpi_analysis.map.synthetic import T0, MapTruth, circle_rounds, serial_rounds, write_map
from npmpi_analysis.synthetic import SynthChannel, SynthNode

FIELDS = ("time_unix_s", "power_w", "energy_j_of_counters")
SIZES = [1, 65536, 4 << 20]


def hosts(n: int) -> list[str]:
    return [f"h{i}" for i in range(n)]


def analysed(path, **truth):
    """Write a map with this truth and analyse it."""
    n = truth.pop("n")
    write_map(path, MapTruth(hosts(n), **truth))
    return analyse_map(load_map(path, FIELDS), "map")


def sentences(a) -> list[str]:
    return [f.sentence for f in a.outliers]


# ---------------------------------------------------------------- the schedules of the synthetic maps


@pytest.mark.parametrize("n", [2, 3, 4, 7, 8])
def test_synthetic_rounds_cover_each_pair_once_and_no_node_twice_in_a_round(n):
    rounds, r = circle_rounds(n)
    assert r == (n - 1 if n % 2 == 0 else n)
    upper = rounds[np.triu_indices(n, 1)]
    assert (upper >= 0).all() and (rounds == rounds.T).all() and (np.diag(rounds) == -1).all()
    for k in range(r):
        assert ((rounds == k).sum(axis=1) <= 1).all()  # every node in at most one pair per round
    serial, rs = serial_rounds(n)
    assert rs == n * (n - 1) // 2 and sorted(serial[np.triu_indices(n, 1)].tolist()) == list(range(rs))


# ---------------------------------------------------------------- outliers


@pytest.mark.parametrize("n", [3, 4, 8])
def test_one_slow_link_is_named_exactly(tmp_path, n):
    a = analysed(tmp_path / "m.h5", n=n, slow_links={(1, 2): 0.12}, jitter=0.02)
    said = sentences(a)
    assert len(said) == 3, said
    assert re.fullmatch(r"link h1–h2: latency 8\.\d\dx the median at 1 B", said[0])
    assert re.fullmatch(r"link h1–h2: bandwidth 0\.1\dx the median at 64 KiB", said[1])
    assert re.fullmatch(r"link h1–h2: bandwidth 0\.1\dx the median at 4 MiB", said[2])
    assert {f.names for f in a.outliers} == {("h1", "h2")}
    assert {f.metric for f in a.outliers} == {"latency", "bandwidth"}
    bw = [f for f in a.outliers if f.metric == "bandwidth"]
    assert [f.size_bytes for f in bw] == [65536, 4 << 20]
    for f in bw:  # the ratio is the injected 0.12 within the jitter
        assert f.ratio == pytest.approx(0.12, rel=0.05)


@pytest.mark.parametrize("n", [3, 4, 8])
def test_one_slow_node_is_named_and_its_links_are_not(tmp_path, n):
    a = analysed(tmp_path / "m.h5", n=n, slow_nodes={n - 1: 0.5}, jitter=0.02)
    node = f"h{n - 1}"
    assert all(f.kind == "node" and f.names == (node,) for f in a.outliers), sentences(a)
    bw = [f for f in a.outliers if f.metric == "bandwidth" and f.size_bytes == 4 << 20]
    assert len(bw) == 1
    assert bw[0].sentence.startswith(f"node {node}: every link 0.")
    assert bw[0].sentence.endswith("the median bandwidth at 4 MiB — the node, not a link")
    assert bw[0].ratio == pytest.approx(0.5, rel=0.05)
    assert len(a.outliers) == 3  # latency, 64 KiB and 4 MiB; no link of it


@pytest.mark.parametrize("n", [4, 8])
def test_a_link_far_slower_than_its_slow_nodes_other_links_is_named_too(tmp_path, n):
    # a node at 0.7x (all its links) whose link to h1 is also broken (0.03x more): both are named
    node = n - 1
    a = analysed(tmp_path / "m.h5", n=n, slow_nodes={node: 0.7}, slow_links={(1, node): 0.03}, jitter=0.02)
    bw = [f for f in a.outliers if f.metric == "bandwidth" and f.size_bytes == 4 << 20]
    assert {(f.kind, f.names) for f in bw} == {("node", (f"h{node}",)), ("link", ("h1", f"h{node}"))}
    link = next(f for f in bw if f.kind == "link")
    assert link.sentence.startswith(f"link h1–h{node}: bandwidth 0.02x the median at 4 MiB")
    assert link.ratio == pytest.approx(0.7 * 0.03, rel=0.1)


def test_a_slow_node_exact_sentence(tmp_path):
    a = analysed(tmp_path / "m.h5", n=8, slow_nodes={4: 0.5})
    assert "node h4: every link 0.50x the median bandwidth at 4 MiB — the node, not a link" in sentences(a)
    assert "node h4: every link's latency 2.00x the median at 1 B — the node, not a link" in sentences(a)


@pytest.mark.parametrize("n", [3, 4, 8])
def test_a_uniform_map_names_nothing(tmp_path, n):
    assert analysed(tmp_path / "m.h5", n=n).outliers == []


@pytest.mark.parametrize("n", [3, 4, 8])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_jitter_alone_names_nothing(tmp_path, n, seed):
    assert analysed(tmp_path / "m.h5", n=n, jitter=0.05, seed=seed).outliers == []


def test_noise_only_matrices_never_name_anything():
    """±5 % uniform noise on 200 random maps of 3 to 16 nodes: no link or node is named."""
    rng = np.random.default_rng(18)
    for _ in range(200):
        n = int(rng.integers(3, 17))
        x = 10e9 * (1 + 0.05 * rng.uniform(-1, 1, (n, n)))
        x = np.triu(x, 1) + np.triu(x, 1).T
        np.fill_diagonal(x, np.nan)
        found = detect(x, LOW)
        assert not found.nodes and not found.links


def test_a_very_slow_link_among_very_noisy_links_is_named():
    """Links spread by factors (±50 %): a link 50x slow is still named (the MAD of the logarithms),
    the noisy ones are not."""
    rng = np.random.default_rng(5)
    for _ in range(50):
        n = 8
        x = 20e9 * np.exp(rng.uniform(np.log(0.5), np.log(1.5), (n, n)))
        x = np.triu(x, 1) + np.triu(x, 1).T
        np.fill_diagonal(x, np.nan)
        x[1, 2] = x[2, 1] = 0.4e9  # 100 Mbit/s-ish against 20 Gbit/s
        found = detect(x, LOW)
        assert not found.nodes and [(i, j) for i, j, *_ in found.links] == [(1, 2)]


def test_a_slow_link_beside_a_slow_node_is_named_too():
    n = 8
    x = np.full((n, n), 10.0)
    x[2, :] = x[:, 2] = 5.0  # node 2
    x[5, 6] = x[6, 5] = 3.0  # link 5-6
    np.fill_diagonal(x, np.nan)
    found = detect(x, LOW)
    assert [k for k, *_ in found.nodes] == [2]
    assert [(i, j) for i, j, *_ in found.links] == [(5, 6)]
    assert found.links[0][2] == pytest.approx(0.3)


def test_a_node_with_all_but_one_slow_link_is_named_as_the_node():
    n = 8
    x = np.full((n, n), 10.0)
    x[3, :] = x[:, 3] = 5.0
    x[3, 7] = x[7, 3] = 9.8  # one of its 7 links is normal
    np.fill_diagonal(x, np.nan)
    found = detect(x, LOW)
    assert [(k, slow, links) for k, _, _, slow, links in found.nodes] == [(3, 6, 7)]
    assert found.links == []


# ---------------------------------------------------------------- partial maps


def test_an_interrupted_map_is_analysed_and_says_so(tmp_path, capsys):
    n = 4
    measured = np.ones((3, 3), dtype=bool)
    measured[2, 1:] = False  # the last size stopped after its first round
    path = tmp_path / "part.h5"
    write_map(path, MapTruth(hosts(n), slow_links={(0, 2): 0.3}), status="interrupted", measured=measured)
    assert main([str(path)]) == 0
    out = capsys.readouterr().out
    assert "status: interrupted" in out
    assert "pairs measured: 6/6 at 1 B, 6/6 at 64 KiB, 2/6 at 4 MiB" in out
    assert "the map was interrupted" in out and "Unmeasured pairs are blank" in out
    a = analyse_map(load_map(path, FIELDS), "part")
    assert np.isnan(a.bandwidth_bit_s[2]).sum() == n + 8  # the diagonal and 4 unmeasured pairs
    assert [f.sentence for f in a.outliers if f.size_bytes == 65536] == [
        "link h0–h2: bandwidth 0.30x the median at 64 KiB"
    ]


def test_a_slow_node_of_a_partial_map_is_said_on_its_measured_links(tmp_path):
    measured = np.ones((3, 7), dtype=bool)
    measured[2, 3:] = False  # 4 MiB stopped after 3 of 7 rounds
    path = tmp_path / "part.h5"
    write_map(path, MapTruth(hosts(8), slow_nodes={5: 0.5}), status="interrupted", measured=measured)
    a = analyse_map(load_map(path, FIELDS), "part")
    said = [f.sentence for f in a.outliers if f.size_bytes == 4 << 20]
    assert said == ["node h5: every measured link 0.50x the median bandwidth at 4 MiB — the node, not a link"]
    assert [f.links for f in a.outliers if f.size_bytes == 4 << 20] == [3]


def test_sizes_stored_in_any_order_and_the_files_derived_matrices_checked(tmp_path):
    path = tmp_path / "m.h5"
    write_map(path, MapTruth(hosts(3), size_bytes=[65536, 1], slow_links={(0, 1): 0.5}))
    with h5py.File(path, "a") as f:
        bw = f["map/bandwidth_bit_s"][:]
        bw[0, 1, 2] *= 1.01  # the writer's matrix disagrees with its trials by 1 %
        f["map/bandwidth_bit_s"][...] = bw
    a = analyse_map(load_map(path, FIELDS), "m")
    assert a.size_bytes.tolist() == [1, 65536]
    assert a.latency_s[0, 2] == pytest.approx(2e-6 + 8 / 10e9)  # the latency at 1 B
    assert a.bandwidth_bit_s[1, 1, 2] == pytest.approx(8 * 65536 / (2e-6 + 8 * 65536 / 10e9))
    assert [f.sentence for f in a.outliers] == [
        "link h0–h1: latency 2.00x the median at 1 B",
        "link h0–h1: bandwidth 0.50x the median at 64 KiB",
    ]
    assert any(
        "/map/bandwidth_bit_s differs from the value computed from /map/trial_s in 1 place(s) (up to 1 %)"
        in n
        for n in a.notices
    )


# ---------------------------------------------------------------- power and energy per bit

NODE_W = [100.0, 110.0, 120.0, 130.0]
IDLE_W = 40.0
SWING_W = 5.0  # inside a round the readings alternate P ± 5 W: sigma_p of one node is 5 W


def power_map(path, n=4, per_rank=False, label="simulated", sizes=(1, 65536, 4 << 20), boot_ids=None):
    """A 4-node map whose node i draws NODE_W[i] ± 5 W (alternating readings every 0.1 s) in every
    round it measures in, IDLE_W otherwise; round windows 1 s long starting between readings."""
    truth = MapTruth(["vm"] * n if per_rank else hosts(n), list(sizes), jitter=0.03, seed=3)
    _, r = circle_rounds(n)
    s = len(truth.size_bytes)
    t0 = T0 + 0.05
    t = np.arange(T0 - 5.0, T0 + s * r * 1.5 + 5.0, 0.1)
    sign = np.where(np.arange(len(t)) % 2 == 0, 1.0, -1.0)
    nodes = []
    for i in range(1 if per_rank else n):
        p = np.full(len(t), IDLE_W)
        for k in range(s * r):
            inside = (t >= t0 + k * 1.5) & (t <= t0 + k * 1.5 + 1.0)
            p[inside] = NODE_W[i] + SWING_W * sign[inside]
        host = "vm" if per_rank else f"h{i}"
        attrs = {"boot_id": boot_ids[i]} if boot_ids else {}
        nodes.append(
            SynthNode([SynthChannel(t, p, label=label, sample_interval_s=0.1)], host=host, attrs=attrs)
        )
    end = t0 + s * r * 1.5
    write_map(
        path, truth, per_rank=per_rank, nodes=nodes, t0=t0, window_s=1.0, gap_s=0.5,
        baseline=(T0 - 4.0, T0 - 1.0), baseline_after=(end + 1.0, end + 4.0),
    )  # fmt: skip
    return path


def test_energy_per_bit_of_a_pair_by_hand(tmp_path):
    path = power_map(tmp_path / "p.h5")
    a = analyse_map(load_map(path, FIELDS), "p")
    k, i, j = 2, 0, 1  # 4 MiB, pair h0-h1
    with h5py.File(path) as f:
        trials = f["map/trial_s"][k, i, j]
        moved = int(f["map/bytes_moved"][k, i, j])
    assert moved == 2 * (4 << 20) * 100 * 3
    bits = 8 * moved
    b = bits / 1.0  # moved in its round's 1 s window
    rel = np.std(trials, ddof=1) / math.sqrt(3) / np.mean(trials)  # sigma_b / b of its trials
    p, sigma_p = 210.0, math.sqrt(5.0**2 + 5.0**2)
    e = a.energy
    assert e.power_w[k, i, j] == pytest.approx(p, rel=1e-9)
    assert e.power_sigma_w[k, i, j] == pytest.approx(sigma_p, rel=1e-6)
    assert e.energy_pj_bit[k, i, j] == pytest.approx(210.0 / 20132659200 * 1e12, rel=1e-9)  # 10430.8
    assert e.energy_pj_bit[k, i, j] == pytest.approx(10430.8, abs=0.1)
    assert e.energy_sigma_pj_bit[k, i, j] == pytest.approx(1e12 / b * math.hypot(sigma_p, p * rel), rel=1e-6)
    assert e.dynamic_pj_bit[k, i, j] == pytest.approx((210.0 - 80.0) / bits * 1e12, rel=1e-9)
    assert e.dynamic_sigma_pj_bit[k, i, j] == pytest.approx(
        1e12 / b * math.hypot(sigma_p, (p - 80.0) * rel), rel=1e-6
    )
    assert e.energy_pj_bit[k, j, i] == e.energy_pj_bit[k, i, j]  # symmetric
    # pair h2-h3 draws 120 + 130 W
    assert e.power_w[k, 2, 3] == pytest.approx(250.0, rel=1e-9)
    assert a.caveat == "SIMULATED, not measured"


def test_ranks_sharing_a_node_split_its_power(tmp_path):
    path = power_map(tmp_path / "pr.h5", per_rank=True)
    a = analyse_map(load_map(path, FIELDS), "pr")
    assert a.names == ["vm:0", "vm:1", "vm:2", "vm:3"]
    e = a.energy
    # 4 ranks of one 100 W node measured in every round: each pair gets 2/4 of it
    assert e.power_w[2][np.triu_indices(4, 1)] == pytest.approx([50.0] * 6, rel=1e-9)
    assert any("split equally" in n for n in a.notices)
    # the ranks share one host: whatever is named may be contention between a round's pairs
    assert any("4 mapped ranks share a host (vm)" in n and "not the network" in n for n in a.notices)
    one_per_node = analyse_map(load_map(power_map(tmp_path / "pn.h5"), FIELDS), "pn")
    assert not any("share a host" in n for n in one_per_node.notices)


def test_a_pair_of_two_nodes_of_one_machine_counts_its_power_once(tmp_path):
    boots = ["b-one", "b-one", "b-two", "b-three"]  # h0 and h1: network namespaces of one host
    a = analyse_map(load_map(power_map(tmp_path / "m.h5", label="measured", boot_ids=boots), FIELDS), "m")
    assert a.energy.power_w[2, 0, 1] == pytest.approx(100.0, rel=1e-9)  # h0's reading once, not 210 W
    assert a.energy.power_w[2, 2, 3] == pytest.approx(250.0, rel=1e-9)  # two machines: summed
    assert any("node 0 (h0), node 1 (h1) are one machine" in n for n in a.notices)


# ---------------------------------------------------------------- the command: outputs


def test_outputs_of_a_map_with_power(tmp_path, capsys):
    path = power_map(tmp_path / "p.h5", sizes=(1, 4 << 20))  # 7 figures: their drawing is the time
    out_dir = tmp_path / "figs"
    args = [str(path), "--plots", str(out_dir), "--report", str(tmp_path / "r.html")]
    args += ["--csv", str(tmp_path / "m.csv"), "--json", str(tmp_path / "m.json")]
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "latency (us, one-way, best trial) at 1 B:" in text
    assert "bandwidth (Gbit/s, 10^9 bit/s, best trial) at 4 MiB:" in text
    assert "energy per bit (pJ/bit) at 4 MiB [power SIMULATED, not measured]:" in text
    assert "power: SIMULATED, not measured" in text and "none named" in text
    names = sorted(p.stem for p in out_dir.iterdir())
    assert names == sorted(
        ["map_latency", "map_model_alpha", "map_model_beta", "map_model_energy_per_bit"]
        + [f"map_{w}_{s}" for w in ("bandwidth", "energy", "dynamic_energy") for s in ("1", "4M")]
    )
    page = (tmp_path / "r.html").read_text()
    assert page.count('<img src="data:image/png;base64,') == 10
    assert page.count("Power is SIMULATED, not measured") >= 5  # the page and every energy figure
    rows = list(csv.DictReader(io.StringIO((tmp_path / "m.csv").read_text())))
    assert len(rows) == 2 * 6
    row = next(r for r in rows if (r["host_a"], r["host_b"], r["size_bytes"]) == ("h0", "h1", str(4 << 20)))
    assert float(row["energy_pj_bit"]) == pytest.approx(10430.8, abs=0.1)
    assert float(row["power_w"]) == pytest.approx(210.0)
    assert row["power_label"] == "SIMULATED, not measured"
    doc = json.loads((tmp_path / "m.json").read_text())
    m = doc["maps"][0]
    assert m["latency_s"][0][0] is None and m["latency_s"][0][1] == pytest.approx(2e-6, rel=0.05)
    assert m["energy_pj_bit"][1][0][1] == pytest.approx(10430.8, abs=0.1)
    assert m["summary"]["hosts"] == hosts(4) and doc["thresholds"]["k_mad"] == 3.5


def test_report_holds_the_sentences_and_boxes(tmp_path, capsys):
    path = tmp_path / "slow.h5"
    write_map(path, MapTruth(hosts(4), slow_links={(1, 2): 0.12}))
    assert main([str(path), "--report", str(tmp_path / "r.html"), "--json", str(tmp_path / "m.json")]) == 0
    out = capsys.readouterr().out
    assert "    link h1–h2: bandwidth 0.12x the median at 4 MiB" in out
    page = (tmp_path / "r.html").read_text()
    assert "<li>link h1–h2: bandwidth 0.12x the median at 4 MiB</li>" in page
    assert page.count('<img src="data:image/png;base64,') == 6  # latency, bandwidth at 3 sizes, model
    assert "no power data in this file" in page
    doc = json.loads((tmp_path / "m.json").read_text())
    found = doc["maps"][0]["outliers"]
    assert {(f["kind"], tuple(f["names"]), f["size_bytes"]) for f in found} == {
        ("link", ("h1", "h2"), 1),
        ("link", ("h1", "h2"), 65536),
        ("link", ("h1", "h2"), 4 << 20),
    }


def test_two_maps_compared_name_the_repaired_link(tmp_path, capsys):
    before, after = tmp_path / "before.h5", tmp_path / "after.h5"
    write_map(before, MapTruth(hosts(8), slow_links={(2, 5): 0.25}, jitter=0.03, seed=1))
    write_map(after, MapTruth(hosts(8), jitter=0.03, seed=2))
    assert main([str(before), str(after), "--json", str(tmp_path / "c.json")]) == 0
    out = capsys.readouterr().out
    assert "comparison after / before (after / before, per link):" in out
    changed = [line.strip() for line in out.splitlines() if "its value before" in line]
    assert len(changed) == 3, changed  # latency, 64 KiB, 4 MiB
    assert re.fullmatch(
        r"link h2–h5: latency 0\.2\dx its value before at 1 B \(the median link 1\.0\dx\)", changed[0]
    )
    assert re.fullmatch(
        r"link h2–h5: bandwidth [34]\.\d\dx its value before at 4 MiB \(the median link [01]\.\d\dx\)",
        changed[2],
    )
    doc = json.loads((tmp_path / "c.json").read_text())
    assert "divided by the median link's, is below 0.8 or above 1.25" in doc["thresholds"]["change_rule"]
    comp = doc["comparison"][0]
    assert comp["before"] == "before" and comp["after"] == "after"
    assert {tuple(c["names"]) for c in comp["changes"]} == {("h2", "h5")}
    assert comp["bandwidth_ratio"][2][2][5] == pytest.approx(4.0, rel=0.08)
    assert comp["bandwidth_ratio"][2][0][1] == pytest.approx(1.0, rel=0.08)


@pytest.mark.parametrize("common", [0, 1])
def test_two_maps_with_fewer_than_two_hosts_in_common_say_so(tmp_path, capsys, common):
    """Maps of other hosts (or one host in common) are each analysed, and their comparison says
    that nothing is compared, with no matrix and no heat map of it (an internal error before)."""
    before, after = tmp_path / "before.h5", tmp_path / "after.h5"
    write_map(before, MapTruth(hosts(4), seed=1))
    write_map(after, MapTruth([f"x{k}" for k in range(4 - common)] + hosts(4)[:common], seed=2))
    argv = [str(before), str(after), "--json", str(tmp_path / "c.json"), "--plots", str(tmp_path / "p")]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "comparison after / before (after / before, per link):" in out
    assert "notice: fewer than two hosts in common: nothing to compare" in out
    assert "bandwidth after / before at" not in out
    assert not list((tmp_path / "p").glob("map_change_*")) and list((tmp_path / "p").glob("map_latency_*"))
    assert json.loads((tmp_path / "c.json").read_text())["comparison"][0]["changes"] == []


def test_two_maps_compared_name_a_repaired_node(tmp_path):
    from npmpi_analysis.map.outliers import compare_maps

    before = analysed(tmp_path / "b.h5", n=4, slow_nodes={3: 0.5})
    after = analysed(tmp_path / "a.h5", n=4)
    change = compare_maps(before, after)
    bw = [f.sentence for f in change.findings if f.metric == "bandwidth" and f.size_bytes == 4 << 20]
    assert bw == [
        "node h3: every link's bandwidth 2.00x its value before at 4 MiB (the median link 1.00x) — the node, "
        "not a link"
    ]
    same = compare_maps(after, analysed(tmp_path / "c.h5", n=4, jitter=0.05))
    assert same.findings == []


# ---------------------------------------------------------------- bad input


def damage(path, how: str) -> None:
    with h5py.File(path, "a") as f:
        g = f["map"]
        if how == "missing":
            del g["round"]
        elif how == "shape":
            del g["iterations"]
            g.create_dataset("iterations", data=np.ones((3, 5, 5), dtype=np.int64))
        elif how == "asymmetric":
            r = g["round"][:]
            r[0, 1] = (r[0, 1] + 1) % 3
            g["round"][...] = r
        elif how == "negative":
            t = g["trial_s"][:]
            t[1, 0, 1, 0] = -1.0
            g["trial_s"][...] = t
        elif how == "windows":
            del g["window_end_unix_s"]
            g.create_dataset("window_end_unix_s", data=np.zeros((3, 4)))
        elif how == "not a group":
            del f["map"]
            f.create_dataset("map", data=np.zeros(3))
        elif how == "text sizes":
            del g["size_bytes"]
            g.create_dataset(
                "size_bytes", data=np.array(["1", "2", "3"], dtype=object), dtype=h5py.string_dtype()
            )


@pytest.mark.parametrize(
    "how, says",
    [
        ("missing", "dataset /map/round is missing"),
        ("shape", "/map/iterations has shape (3, 5, 5), expected (3, 4, 4)"),
        ("asymmetric", "/map/round is not symmetric"),
        ("negative", "/map/trial_s holds a non-positive"),
        ("windows", "/map/window_end_unix_s has shape (3, 4), expected (3, 3)"),
        ("not a group", "/map is not a group"),
        ("text sizes", "/map/size_bytes has shape (3,) and type object"),
    ],
)
def test_a_damaged_map_gives_one_line_and_exit_1(tmp_path, capsys, how, says):
    path = tmp_path / "bad.h5"
    write_map(path, MapTruth(hosts(4)))
    damage(path, how)
    assert main([str(path)]) == 1
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"npmpi-analyze: error: {path}: "), err
    assert says in lines[0] and "Traceback" not in err + out and "internal error" not in err


def test_a_damaged_power_part_leaves_the_map_analysed(tmp_path, capsys):
    path = power_map(tmp_path / "p.h5")
    with h5py.File(path, "a") as f:
        del f["power/node1/channel0/power_w"]
    assert main([str(path)]) == 1
    out, err = capsys.readouterr()
    assert "/power/node1/channel0/power_w is missing" in err and "analysed without power" in err
    assert "bandwidth (Gbit/s, 10^9 bit/s, best trial) at 4 MiB:" in out


def test_usage_errors_for_maps(tmp_path, capsys):
    from npmpi_analysis.synthetic import write_run

    m = tmp_path / "m.h5"
    write_map(m, MapTruth(hosts(3)))
    run = write_run(tmp_path / "run.h5", [1], [10], [[1e-3]], [[T0]])
    assert main([str(m), str(run)]) == 2
    assert "analyse cluster maps and sweep runs separately" in capsys.readouterr().err
    assert main([str(m), "--np-out", str(tmp_path / "np.out")]) == 2
    assert "a cluster map has none" in capsys.readouterr().err
    (tmp_path / "m.csv").write_text("keep")
    assert main([str(m), "--csv", str(tmp_path / "m.csv")]) == 2
    assert (tmp_path / "m.csv").read_text() == "keep"
