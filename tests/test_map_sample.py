"""`python -m npmpi map --pairs sample:K`, the daily check: the sampled schedule (K partners per
member, disjoint rounds, seeded, every pair of switches covered with --topology), its refusals, the
plan line, the outlier rule on unmeasured pairs, and a real sampled map of 4 ranks and its analysis."""

from __future__ import annotations

import itertools
import json
import socket
import subprocess

import h5py
import numpy as np
import pytest
from conftest import VENV
from support.mapcells import dense_map

from npmpi.core.errors import UsageError
from npmpi.core.layout import compute_layout
from npmpi.map.kind import KIND, sample_problem
from npmpi.map.options import parse_map_options
from npmpi.map.plan import make_plan, plan_line
from npmpi.map.schedule import map_rounds, round_matrix, sample_rounds, switch_pairs
from npmpi.map.stats import LOW, detect


def _partners(rounds, n):
    met = [set() for _ in range(n)]
    seen = []
    for pairs in rounds:
        members = [m for p in pairs for m in p]
        assert len(members) == len(set(members))  # nobody in two pairs of a round
        for i, j in pairs:
            assert 0 <= i < j < n
            met[i].add(j)
            met[j].add(i)
            seen.append((i, j))
    assert len(seen) == len(set(seen))  # no pair measured twice
    return met, set(seen)


@pytest.mark.parametrize("n", [2, 4, 6, 10, 16, 32])
def test_sample_of_an_even_map_gives_every_member_exactly_k_partners_in_k_rounds(n):
    for k in range(1, n):
        rounds = sample_rounds(n, k, seed=11)
        met, seen = _partners(rounds, n)
        assert len(rounds) == k and all(len(m) == k for m in met)
        assert len(seen) == n * k // 2


@pytest.mark.parametrize("n", [3, 5, 7, 9, 15])
def test_sample_of_an_odd_map_gives_every_member_k_partners_and_at_most_one_more(n):
    for k in range(1, n):
        rounds = sample_rounds(n, k, seed=3)
        met, _ = _partners(rounds, n)
        assert all(k <= len(m) <= k + 1 for m in met)
        assert len(rounds) <= k + 2 and len(rounds) <= n  # never more than the full map's rounds


def test_sample_is_reproducible_by_its_seed_and_another_seed_chooses_other_pairs():
    assert sample_rounds(16, 3, seed=20261128) == sample_rounds(16, 3, seed=20261128)
    picks = {tuple(map(tuple, sample_rounds(16, 3, seed=s))) for s in range(5)}
    assert len(picks) == 5


@pytest.mark.parametrize("n, spread", [(8, 4), (12, 3), (16, 8), (9, 3), (20, 5)])
def test_sample_with_switches_covers_every_pair_of_switches(n, spread):
    for switches in ([i % spread for i in range(n)], [i * spread // n for i in range(n)]):
        for k in (1, 2):
            rounds = sample_rounds(n, k, seed=5, switches=switches)
            met, seen = _partners(rounds, n)
            assert all(len(m) >= k for m in met)
            covered = {(min(switches[i], switches[j]), max(switches[i], switches[j])) for i, j in seen}
            assert switch_pairs(switches) <= covered
            assert len(rounds) < len(sample_rounds(n, n - 1, seed=5))  # fewer rounds than the full map


def test_switch_pairs_count_a_switch_with_itself_only_with_two_members():
    assert switch_pairs([0, 0, 1]) == {(0, 0), (0, 1)}
    assert switch_pairs([0, 1, 2]) == {(0, 1), (0, 2), (1, 2)}


def test_pairs_option_the_plan_line_and_serial_sample(tmp_path):
    assert parse_map_options([]).pairs_plan == "all" and parse_map_options([]).sample_k == 0
    mopts = parse_map_options(["--pairs", "sample:3:42"])
    assert (mopts.pairs_plan, mopts.sample_k, mopts.sample_seed) == ("sample:3", 3, 42)
    assert parse_map_options(["--pairs", "sample:2"]).sample_seed >= 20260101  # today's date
    plan = make_plan(mopts, 16)
    assert plan.rounds == 3 and plan.total_rounds == 9 and plan.sampled_pairs == 24
    assert "map plan: 3 rounds x 3 sizes" in plan_line(plan)
    assert "sampled: 3 partners per member, 24 of 120 pairs, the others not measured" in plan_line(plan)
    assert make_plan(parse_map_options([]), 16).rounds == 15
    serial = map_rounds(parse_map_options(["--pairs", "sample:3:42", "--schedule", "serial"]), 16)
    assert len(serial) == 24 and sorted(p for r in serial for p in r) == sorted(
        p for r in map_rounds(mopts, 16) for p in r
    )
    m = round_matrix(map_rounds(mopts, 16), 16)
    assert ((m >= 0).sum(axis=1) == 3).all()  # a pair never scheduled keeps -1


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--pairs", "sample:0"], "at least 1 partner"),
        (["--pairs", "sample:x"], "give 'all' or 'sample:K'"),
        (["--pairs", "sample"], "give 'all' or 'sample:K'"),
        (["--pairs", "sample:2:-1"], "give 'all' or 'sample:K'"),
        (["--pairs", "some"], "give 'all' or 'sample:K'"),
        (["--topology", "x.txt"], "only a sampled map uses it"),
    ],
)
def test_bad_pairs_are_refused_in_one_line(argv, words):
    with pytest.raises(UsageError, match=words) as info:
        parse_map_options(argv)
    assert "\n" not in str(info.value)


def test_topology_file_and_its_hosts(tmp_path):
    good = tmp_path / "topo.txt"
    good.write_text("# host switch\nha sw1\nhb sw1  # rack 1\n\nhc sw2\nhd sw2\n")
    mopts = parse_map_options(["--pairs", "sample:1:7", "--topology", str(good)])
    assert mopts.topology == (("ha", "sw1"), ("hb", "sw1"), ("hc", "sw2"), ("hd", "sw2"))
    rounds = map_rounds(mopts, 4, ["ha", "hb", "hc", "hd"])
    _, seen = _partners(rounds, 4)
    sw = [0, 0, 1, 1]
    assert switch_pairs(sw) <= {(sw[i], sw[j]) for i, j in seen}
    for text, words in [("ha sw1 extra\n", "line 1 is not 'host switch'"), ("# none\n", "no 'host switch'"),
                        ("ha sw1\nha sw2\n", "host ha is given two switches")]:  # fmt: skip
        bad = tmp_path / "bad.txt"
        bad.write_text(text)
        with pytest.raises(UsageError, match=words):
            parse_map_options(["--pairs", "sample:1", "--topology", str(bad)])
    with pytest.raises(UsageError, match=r"missing\.txt: no such file"):
        parse_map_options(["--pairs", "sample:1", "--topology", str(tmp_path / "missing.txt")])
    with pytest.raises(UsageError, match="is a directory"):
        parse_map_options(["--pairs", "sample:1", "--topology", str(tmp_path)])
    bad.write_bytes(b"ha \xff\n")
    with pytest.raises(UsageError, match="not UTF-8 text"):
        parse_map_options(["--pairs", "sample:1", "--topology", str(bad)])
    sample_problem(mopts, ["ha", "hb", "hc", "hd"])
    with pytest.raises(UsageError, match="host hd is not in this map"):
        sample_problem(mopts, ["ha", "hb", "hc"])
    with pytest.raises(UsageError, match="host he of this map has no 'host switch' line"):
        sample_problem(mopts, ["ha", "hb", "hc", "hd", "he"])
    lay = compute_layout(["a"] * 4, ["h"] * 4, power=False)
    with pytest.raises(UsageError, match=r"sample:4: this map has 4 members, so each has only 3 others"):
        KIND.groups(lay, parse_map_options(["--pairs", "sample:4", "--per-rank"]))


def test_outlier_rule_judges_only_measured_links():
    """A sample of 8 nodes, 2 partners each: node 5's two measured links are slow (the node is
    named on them: 'every measured link'); no unmeasured pair is named or counted."""
    n, rounds = 8, sample_rounds(8, 2, seed=1)
    x = np.full((n, n), np.nan)
    for i, j in (p for r in rounds for p in r):
        x[i, j] = x[j, i] = 10.0 * (0.3 if 5 in (i, j) else 1.0 + 0.01 * (i + j))
    found = detect(x, LOW)
    assert [k for k, *_ in found.nodes] == [5] and found.nodes[0][3:] == (2, 2)
    assert all(np.isfinite(x[i, j]) for i, j, *_ in found.links)
    x[np.isnan(x)] = 0.0  # unmeasured (not positive) is left out the same way
    assert [k for k, *_ in detect(x, LOW).nodes] == [5]


@pytest.mark.mpi
@pytest.mark.timeout(120)
def test_four_rank_sampled_map_and_its_analysis(npmpi_run, tmp_path):
    (tmp_path / "topo.txt").write_text(f"{socket.gethostname()} switch-a\n")
    proc = npmpi_run(
        ["map", "--per-rank", "--quick", "--sizes", "1,64K", "--confirm", "0", "--pairs", "sample:1:9",
         "--topology", "topo.txt", "-o", "map.h5"],
        np=4,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "map plan: 1 rounds x 2 sizes" in proc.stdout and "sampled: 1 partners per member" in proc.stdout
    expected = {p for r in sample_rounds(4, 1, seed=9) for p in r}
    with h5py.File(tmp_path / "map.h5") as f:
        g = f["map"]
        assert g.attrs["pairs_plan"] == "sample:1" and int(g.attrs["pairs_seed"]) == 9
        assert json.loads(g.attrs["topology_json"]) == {socket.gethostname(): "switch-a"}
        assert g.attrs["status"] == "complete" and int(g.attrs["n_rounds"]) == 1
        assert g["trial_s"].shape[1] == 2  # a row per measured pair: the sample's 2, not 4 x 4 cells
        finite = np.isfinite(dense_map(g)["trial_s"]).any(axis=(0, 3))
    measured = {(i, j) for i, j in itertools.combinations(range(4), 2) if finite[i, j] or finite[j, i]}
    assert measured == expected and len(measured) == 2
    analysis = subprocess.run(
        [str(VENV / "bin" / "npmpi-analyze"), "map.h5"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert analysis.returncode == 0, analysis.stdout + analysis.stderr
    assert (
        "sampled map: 1 partners per node; 2 of 6 pairs measured; the others not measured "
        "(not healthy, not slow); seed 9; pairs of switches measured: 1 of 1" in analysis.stdout
    )
    assert "not every pair was measured" not in analysis.stdout


@pytest.mark.mpi
@pytest.mark.timeout(60)
def test_sample_beyond_the_members_is_refused_on_every_rank(npmpi_run, tmp_path):
    proc = npmpi_run(["map", "--per-rank", "--quick", "--pairs", "sample:4", "-o", "map.h5"], np=4)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    lines = [ln for ln in (proc.stdout + proc.stderr).splitlines() if "sample:4" in ln]
    assert len(lines) == 1 and "each has only 3 others" in lines[0]
    assert not (tmp_path / "map.h5").exists()
