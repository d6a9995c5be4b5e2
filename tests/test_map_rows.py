"""A map's pairs as rows (format 2.0, npmpi/runfile/maprows.py; issue 44): maps of today's dense
layout (format 1.11, saved in tests/data/maps by the analysis before the rows) give every number
they gave; the same measurements as rows give the same numbers; the file grows with the pairs
measured; the rows read in blocks; a map too large for this machine refused in one line."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import h5py
import numpy as np
import pytest
from support.mapcells import analyze_in, dense_map, map_spec, to_rows

from npmpi.core.errors import RunFileError
from npmpi.map.schedule import circle_rounds
from npmpi.runfile.format import SAMPLE_FIELDS
from npmpi.runfile.mapwriter import MapWriter, PairResult

DATA = Path(__file__).parent / "data" / "maps"
SAVED = ["pp", "st"]  # 4 members with a simulated meter and re-measured suspects; 5 streaming both ways


def _analyse(capsys, tmp_path: Path, name: str) -> tuple[str, str, dict]:
    """npmpi-analyze NAME --json --csv in tmp_path: (text less the 'wrote' line, CSV, JSON)."""
    code, out, err = analyze_in(tmp_path, capsys, [name, "--json", "out.json", "--csv", "out.csv", "--force"])
    assert code == 0 and "Traceback" not in out + err, err
    text = "".join(ln + "\n" for ln in out.splitlines() if not ln.startswith("wrote "))
    return text, (tmp_path / "out.csv").read_text(), json.loads((tmp_path / "out.json").read_text())


@pytest.mark.parametrize("which", SAVED)
def test_saved_dense_maps_give_every_number_they_gave(tmp_path, capsys, which):
    """Outputs saved from the analysis before the rows (text, CSV, JSON), byte for byte."""
    name = f"map_1_11_{which}.h5"
    shutil.copy(DATA / name, tmp_path / name)
    text, csv, doc = _analyse(capsys, tmp_path, name)
    assert text == (DATA / f"old_{which}.txt").read_text()
    assert csv == (DATA / f"old_{which}.csv").read_text()
    assert doc == json.loads((DATA / f"old_{which}.json").read_text())


@pytest.mark.parametrize("which", SAVED)
def test_the_same_measurements_as_rows_give_the_same_numbers(tmp_path, capsys, which):
    name = f"map_1_11_{which}.h5"
    to_rows(DATA / name, tmp_path / name)
    with h5py.File(tmp_path / name) as f:
        g = f["map"]
        n = len(g["hosts"])
        rows = n * (n - 1) // 2 * (2 if which == "st" else 1)
        assert g["trial_s"].shape[1] == rows and "round" not in g and f.attrs["format_version"] == "2.0"
    text, csv, doc = _analyse(capsys, tmp_path, name)
    old = json.loads((DATA / f"old_{which}.json").read_text())
    for d in (doc, old):  # the file's size differs: the rows are smaller
        d["maps"][0]["summary"].get("plan", {}).pop("file_bytes", None)
    assert csv == (DATA / f"old_{which}.csv").read_text()
    assert doc == old

    def unplanned(t: str) -> list[str]:
        return [ln for ln in t.splitlines() if not ln.startswith("  plan: ")]

    assert unplanned(text) == unplanned((DATA / f"old_{which}.txt").read_text())


def test_rows_read_in_small_blocks_give_the_same_matrices(tmp_path, monkeypatch):
    from npmpi_analysis.map import rows as map_rows
    from npmpi_analysis.map.load import load_map

    to_rows(DATA / "map_1_11_st.h5", tmp_path / "m.h5")
    whole = load_map(tmp_path / "m.h5", SAMPLE_FIELDS)
    monkeypatch.setattr(map_rows, "BLOCK_BYTES", 100)  # a row or two at a time
    small = load_map(tmp_path / "m.h5", SAMPLE_FIELDS)
    for name in ("trial_s", "iterations", "bytes_moved", "pair_window_s", "round"):
        np.testing.assert_array_equal(getattr(whole, name), getattr(small, name))
    with h5py.File(DATA / "map_1_11_st.h5") as f:
        dense = dense_map(f["map"])
    np.testing.assert_array_equal(whole.trial_s, dense["trial_s"])
    assert whole.rows is not None and whole.runq_wait_s is None  # the map's own waits: not read


def test_a_map_measured_one_way_is_summed_up_as_read_to_the_dense_maps_numbers(tmp_path, monkeypatch):
    """Each pair's trials of a rows map measured one way are summed up block by block as they are
    read (map/rows.read_trial_rows), never held whole: in blocks of a row or two, the same summaries
    as the dense matrix's (map/trials.dense_summaries), a stalled trial and an unmeasured pair too."""
    from npmpi_analysis.map import rows as map_rows
    from npmpi_analysis.map.load import load_map
    from npmpi_analysis.map.trials import STALL_RATIO, dense_summaries

    to_rows(DATA / "map_1_11_pp.h5", tmp_path / "m.h5")
    with h5py.File(tmp_path / "m.h5", "r+") as f:
        t = f["map/trial_s"]
        row = t[0, 1]
        row[2] = row[0] * STALL_RATIO * 1e4  # a stalled trial: 10^4 x 10 x its best, seconds longer
        t[0, 1] = row
        t[1, 2] = np.nan  # a pair never measured at the second size
        dense = dense_map(f["map"])
    whole = load_map(tmp_path / "m.h5", SAMPLE_FIELDS)
    monkeypatch.setattr(map_rows, "BLOCK_BYTES", 100)
    small = load_map(tmp_path / "m.h5", SAMPLE_FIELDS)
    want = dense_summaries(dense["trial_s"], dense["iterations"])
    assert whole.trial_s is None and small.trial_s is None and whole.trials == dense["trial_s"].shape[3]
    assert int(want["trials_stalled"].sum()) == 2 and int((want["trials_run"][1] == 0).sum()) == 4 + 2
    assert "sum_s" not in whole.trial_stats  # the trials' total bounds the conditions, then is dropped
    for name in whole.trial_stats:
        np.testing.assert_array_equal(whole.trial_stats[name], want[name], err_msg=name)
        np.testing.assert_array_equal(small.trial_stats[name], want[name], err_msg=name)


@pytest.mark.parametrize("value", [-1.0, np.inf, 0.0])
def test_an_impossible_time_in_the_rows_is_refused_in_one_line(tmp_path, value):
    from npmpi_analysis.map.load import load_map

    to_rows(DATA / "map_1_11_pp.h5", tmp_path / "m.h5")
    with h5py.File(tmp_path / "m.h5", "r+") as f:
        t = f["map/trial_s"]
        row = t[1, 3]
        row[1] = value
        t[1, 3] = row
        i, j = sorted(int(x) for x in f["map/pair"][3])
        size = int(f["map/size_bytes"][1])
    with pytest.raises(
        RunFileError, match=rf"non-positive, infinite or impossible time .* for hosts {i}, {j} at {size} B"
    ):
        load_map(tmp_path / "m.h5", SAMPLE_FIELDS)


def _writer(path: Path, n: int, sizes: list[int], trials: int) -> tuple[MapWriter, list]:
    rounds = circle_rounds(n)
    spec = map_spec([f"h{k}" for k in range(n)], sizes, rounds)
    return MapWriter(path, {"kernel": "python"}, {"host": spec["hosts"]}, trials, map_spec=spec), rounds


def test_the_file_grows_with_the_pairs_measured(tmp_path):
    """A row per pair and size: the per-pair datasets of 64 members hold 2,016 rows, not 4,096 cells,
    and a round is written as one slice of each."""
    w, rounds = _writer(tmp_path / "m.h5", 64, [1, 4096], 7)
    rng = np.random.default_rng(3)
    for s in range(2):
        for r, pairs in enumerate(rounds):
            w.store_round(
                s, r, (r, r + 0.5), [PairResult(i, j, 10, 2, rng.uniform(1, 2, 7)) for i, j in pairs]
            )
    w.finish("complete")
    with h5py.File(tmp_path / "m.h5") as f:
        g = f["map"]
        assert g["trial_s"].shape == (2, 64 * 63 // 2, 7) and g["pair"].shape == (2016, 2)
        assert g["trial_s"].chunks == (1, 64, 7)  # a round's 32 rows, at least 64 rows a chunk
        assert np.isfinite(g["trial_s"][()]).all()
        stored = sum(g[k].id.get_storage_size() for k in g if isinstance(g[k], h5py.Dataset))
    assert stored < 2 * 2016 * 304 * 1.02  # 24 x 7 + 136 bytes per size and row at most


def test_a_map_too_large_for_this_machine_is_refused_in_one_line(tmp_path):
    from npmpi_analysis.map.load import load_map

    w, _ = _writer(tmp_path / "m.h5", 4, [1], 3)
    w.finish("complete")
    n = 60_000
    with h5py.File(tmp_path / "m.h5", "r+") as f:  # forged: 60,000 members (the rows not grown)
        g = f["map"]
        for name in ("hosts", "ranks"):
            del g[name]
        g.create_dataset(
            "hosts", data=np.array([f"h{k}" for k in range(n)], dtype=object), dtype=h5py.string_dtype()
        )
        g.create_dataset("ranks", data=np.arange(n, dtype=np.int32))
    with pytest.raises(RunFileError) as info:
        load_map(tmp_path / "m.h5", SAMPLE_FIELDS)
    said = str(info.value)
    assert "a map of 60000 members and 1 size(s) makes" in said and "GiB of N x N matrices" in said
    assert "analyse the file on a machine with more memory" in said and "\n" not in said


def test_what_a_map_reads_of_its_file_is_bounded_by_this_machines_memory(tmp_path, monkeypatch):
    """A map's power samples are read whole (a 4,096-node map's at 1 Hz: 0.6 GiB): the guard on what
    is read of the file grows to a third of the free memory, as the matrices' rule, and refuses a
    file over it in one line."""
    from npmpi_analysis.map import rows as map_rows
    from npmpi_analysis.map.load import load_map

    shutil.copy(DATA / "map_1_11_pp.h5", tmp_path / "m.h5")  # power samples: 4 nodes' simulated meter
    monkeypatch.setattr(map_rows, "MAX_READ_BYTES", 1000)
    monkeypatch.setattr(map_rows, "available_bytes", lambda: 3 << 30)
    assert load_map(tmp_path / "m.h5", SAMPLE_FIELDS).power
    monkeypatch.setattr(map_rows, "available_bytes", lambda: 0)
    with pytest.raises(RunFileError) as info:
        load_map(tmp_path / "m.h5", SAMPLE_FIELDS)
    assert "over the 9.31e-07 GiB npmpi-analyze reads of a file" in str(info.value) and "\n" not in str(
        info.value
    )


def test_one_notice_per_node_is_said_a_few_times_and_counted(tmp_path):
    """A notice each of thousands of nodes says (no clock offset recorded) is printed for the first
    three and counted, as a run's; the JSON keeps every one."""
    from npmpi_analysis.map.analyse import analyse_map
    from npmpi_analysis.map.load import load_map
    from npmpi_analysis.map.report import json_bytes, summary_text
    from npmpi_analysis.map.synthetic import MapTruth, write_map
    from npmpi_analysis.synthetic import SynthChannel, SynthNode

    hosts = [f"h{k}" for k in range(8)]
    t = np.arange(1.7e9 - 5, 1.7e9 + 40, 0.5)
    nodes = [SynthNode([SynthChannel(t, np.full(len(t), 100.0))], host=h, offset_start_s=None) for h in hosts]
    write_map(
        tmp_path / "m.h5", MapTruth(hosts, size_bytes=[1, 4096]), nodes=nodes, baseline=(1.7e9 - 5, 1.7e9)
    )
    a = analyse_map(load_map(tmp_path / "m.h5", SAMPLE_FIELDS), "m")
    said = [n for n in a.notices if "no clock offset recorded" in n]
    text = summary_text(a)
    assert len(said) == 8 and sum("no clock offset recorded" in ln for ln in text.splitlines()) == 3
    assert "  notice: … and 5 more like the last one" in text.splitlines()
    assert (
        len([n for n in json.loads(json_bytes([a], []))["maps"][0]["notices"] if "no clock offset" in n]) == 8
    )


def test_a_newer_maps_format_is_refused_with_what_to_do(tmp_path):
    from npmpi_analysis.map.load import load_map

    w, _ = _writer(tmp_path / "m.h5", 4, [1], 3)
    w.finish("complete")
    with h5py.File(tmp_path / "m.h5", "r+") as f:
        f.attrs["format_version"] = "3.0"
    with pytest.raises(
        RunFileError, match=r"written by a newer npmpi \(format 3\.0; this reader knows 2\.x\)"
    ):
        load_map(tmp_path / "m.h5", SAMPLE_FIELDS)


def test_the_csv_built_by_columns_is_the_csv_of_the_rows(tmp_path):
    """Two maps at once (one with power, conditions and models; one streaming each direction apart,
    without power): the columns' CSV is byte for byte the rows' (outfiles.rows_csv_bytes)."""
    from npmpi_analysis.map.analyse import analyse_map
    from npmpi_analysis.map.csv_rows import csv_bytes
    from npmpi_analysis.map.load import load_map
    from npmpi_analysis.map.report import pair_rows
    from npmpi_analysis.outfiles import rows_csv_bytes

    analyses = []
    for which in SAVED:
        shutil.copy(DATA / f"map_1_11_{which}.h5", tmp_path / f'{which},"x".h5')  # a label to quote
        analyses.append(analyse_map(load_map(tmp_path / f'{which},"x".h5', SAMPLE_FIELDS), f'{which},"x"'))
    assert analyses[0].energy is not None and analyses[1].energy is None
    want = rows_csv_bytes([r for a in analyses for r in pair_rows(a)])
    assert csv_bytes(analyses) == want and want.count(b"\n") == 1 + 2 * 6 + 2 * 20


def test_each_nodes_reference_by_order_statistics_is_the_partitions():
    """Above EXACT_NODES the median and MAD of the links not touching each node come from the links
    sorted once (npmpi/map/stats.py `_without_each`): the same figures as a partition per node, on
    matrices with gaps, a slow node and ties; and the same nodes and links named."""
    from npmpi.map import stats as st

    rng = np.random.default_rng(44)
    for n, slow in ((40, None), (301, 3), (300, 7)):
        x = np.round(rng.lognormal(0, 0.3, (n, n)), 3)  # rounded: ties
        x = np.triu(x, 1) + np.triu(x, 1).T
        x[rng.random((n, n)) < 0.05] = np.nan
        x = np.fmin(x, x.T)
        if slow is not None:
            x[slow, :] *= 0.1
            x[:, slow] *= 0.1
        ok = np.triu(np.ones((n, n), dtype=bool), 1) & np.isfinite(x) & (x > 0)
        fast = st._without_each(x, ok)
        for k in range(n):
            others = ok.copy()
            others[k, :] = others[:, k] = False
            med, mad = st.stats(x[others])
            got = fast(k)
            assert got[0] == med and got[1] == pytest.approx(mad, rel=1e-12, abs=0), (n, k)
        partition = st.detect(x, st.LOW)
        saved = st.EXACT_NODES
        try:
            st.EXACT_NODES = 10**9  # every node by partition
            slow_way = st.detect(x, st.LOW)
        finally:
            st.EXACT_NODES = saved
        assert [v[0] for v in partition.nodes] == [v[0] for v in slow_way.nodes]
        assert partition.links == slow_way.links
        assert (slow is None) == (not partition.nodes)


def test_a_heatmap_of_more_than_256_hosts_shows_each_blocks_worst_link():
    """600 hosts: 200 x 200 cells of 3 x 3 links, a slow link's cell its bandwidth (the lowest), a
    slow latency's the highest; a box moved to its cell; the caption and title say so."""
    from npmpi_analysis.map.figures import WORSE_HIGH, WORSE_LOW, heatmap, worst_blocks

    n = 600
    x = np.full((n, n), 10.0)
    np.fill_diagonal(x, np.nan)
    x[301, 7] = x[7, 301] = 2.0
    low, names, boxes = worst_blocks(x, [f"h{k}" for k in range(n)], [(7, 301)], 3, WORSE_LOW)
    assert low.shape == (200, 200) and low[100, 2] == low[2, 100] == 2.0 and low[0, 0] == 10.0
    assert names[:2] == ["h0", "h3"] and boxes == [(2, 100)]
    high, _, _ = worst_blocks(np.where(np.isnan(x), np.nan, 1.0 / x), names * 3, [], 3, WORSE_HIGH)
    assert (
        high[100, 2] == 0.5
        and np.isnan(worst_blocks(np.full((4, 4), np.nan), list("abcd"), [], 2, "low")[0]).all()
    )
    plot = heatmap("m", x, [f"h{k}" for k in range(n)], "Bandwidth", "Gbit/s", "Caption.", boxes=[(7, 301)])
    assert "(3 x 3 links a cell)" in plot.figure.axes[0].get_title()
    assert "Each cell is the worst of up to 3 x 3 links" in plot.caption


def test_a_map_too_large_for_its_matrices_in_the_text_names_its_lowest_nodes(tmp_path):
    """20 hosts (over the 16 whose matrices the text shows): the hosts line shortened and the nodes of
    lowest median link bandwidth named, h3 (0.9x: too little for the statistic to name it) first."""
    from npmpi_analysis.map.analyse import analyse_map
    from npmpi_analysis.map.load import load_map
    from npmpi_analysis.map.report import summary_text
    from npmpi_analysis.map.synthetic import MapTruth, write_map

    truth = MapTruth(hosts=[f"h{k}" for k in range(20)], size_bytes=[1, 65536], slow_nodes={3: 0.9})
    text = summary_text(analyse_map(load_map(write_map(tmp_path / "m.h5", truth), SAMPLE_FIELDS), "m"))
    assert "  hosts (20): h0, h1, h2, h3, h4, h5, h6, h7, …, h18, h19\n" in text
    line = next(ln for ln in text.splitlines() if ln.startswith("  lowest median link bandwidth at 64 KiB"))
    assert line.endswith(
        "(each node's links, to the median link): h3 0.90x, h0 1.00x, h1 1.00x, h2 1.00x, h4 1.00x"
    )


def test_a_rows_map_of_no_trials_is_refused_in_one_line(tmp_path):
    from npmpi_analysis.map.load import load_map

    to_rows(DATA / "map_1_11_pp.h5", tmp_path / "m.h5")
    with h5py.File(tmp_path / "m.h5", "r+") as f:
        shape = f["map/trial_s"].shape
        del f["map/trial_s"]
        f["map/trial_s"] = np.zeros((*shape[:2], 0))
    with pytest.raises(RunFileError, match=r"/map/trial_s has 0 trials per pair: expected 1 to"):
        load_map(tmp_path / "m.h5", SAMPLE_FIELDS)
