"""A cluster map's conditions in-process: each side of a pair stored in /map/cond_* (transmitter,
reflector) with the ranks' text in /map/conditions_json, and what the analysis makes of them (each
side's GHz, the flags, wire bytes per payload byte of a pair across nodes and its warning, the text's
lines); an older map without them, and damaged ones, read as before. The real maps under mpirun with
fake sysfs trees are in tests/test_map.py."""

from __future__ import annotations

import json
import math
from collections import Counter

import h5py
import numpy as np
import pytest
from npmpi_analysis.map.analyse import analyse_map
from npmpi_analysis.map.conditions import pair_columns
from npmpi_analysis.map.load import load_map
from npmpi_analysis.map.report import json_bytes, pair_rows, summary_text
from npmpi_analysis.map.synthetic import MapTruth, write_map
from support.mapcells import dense_map, row

from npmpi.map.pair import receive_report
from npmpi.map.schedule import round_matrix, serial_rounds
from npmpi.runfile.format import COND_DATASETS
from npmpi.runfile.mapwriter import COND_PREFIX, COND_TEXT, MapWriter, PairResult

FIELDS = ("time_unix_s", "power_w", "energy_j_of_counters")
HOSTS = ["h0", "h1", "h2"]
ITERATIONS, TRIALS, SIZE = 100, 2, 1000
PAYLOAD = SIZE * ITERATIONS * TRIALS * 2  # ping-pong: both directions of every iteration


def side(ghz: float, low: float | None = None, core: float = 0, package: float = 0, tx: float = 0):
    """One side's COND_DATASETS values: mean, lowest and highest GHz, throttle events, NIC bytes."""
    low = ghz if low is None else low
    return [ghz * 1e9, low * 1e9, ghz * 1e9, core, package, tx, tx]


def info(rank: int, source: str = "cpufreq scaling_cur_freq (sampled)", reason: str = "") -> dict:
    return {"rank": rank, "cpu": rank, "cpu_freq_source": source, "cpu_freq_reason": reason,
            "nic_counters": ["eth0"], "settings_before": {"governor": "performance"},
            "settings_after": {"governor": "performance"}}  # fmt: skip


def writer(path, hosts: list[str], sizes: list[int], directions: str = "one") -> MapWriter:
    """A serial ping-pong map's writer over `hosts` at `sizes`, TRIALS trials."""
    rounds = serial_rounds(len(hosts))
    spec = {
        "attrs": {"schedule": "serial", "per_rank": False, "kernel": "c", "mode": "pingpong", "window": 1,
                  "directions": directions},
        "hosts": hosts, "ranks": list(range(len(hosts))), "sizes": sizes,
        "rounds_matrix": round_matrix(rounds, len(hosts)), "n_rounds": len(rounds),
    }  # fmt: skip
    return MapWriter(path, {"kernel": "c"}, {"host": hosts}, TRIALS, map_spec=spec)


def cond_map(path, directed: bool = False):
    """A serial 3-host ping-pong map at 1000 B: pair h0-h1 with its transmitter's frequency moving
    10 % (1.8 to 2.0 GHz) beside a steady 3 GHz reflector, h0-h2 with its reflector throttled, h1-h2
    whose NICs moved nothing; h0's and h1's figures read, h2's frequency unknown with its reason."""
    rounds = serial_rounds(3)
    w = writer(path, HOSTS, [SIZE], "both" if directed else "one")
    unknown = "unknown, because cpufreq gives no scaling_cur_freq for its core"
    sides = {
        (0, 1): ([side(2.0, 1.8, tx=PAYLOAD / 2), side(3.0, tx=PAYLOAD / 2)], [info(0), info(1)]),
        (0, 2): ([side(2.0, tx=PAYLOAD), side(math.nan, core=2, package=1, tx=PAYLOAD)], [info(0), info(2)]),
        (1, 2): ([side(2.0), side(math.nan)], [info(1), info(2, "unknown", unknown)]),
    }
    for r, [(i, j)] in enumerate(rounds):
        results = []
        for a, b in ((i, j), (j, i))[: 2 if directed else 1]:
            values, texts = sides[(i, j)] if a < b else (sides[(i, j)][0][::-1], sides[(i, j)][1][::-1])
            results.append(
                PairResult(
                    a,
                    b,
                    ITERATIONS,
                    10,
                    np.array([1e-3, 1e-3]),
                    directed,
                    0.1,
                    cond=np.array(values),
                    cond_info=texts,
                )
            )
        w.store_round(0, r, (10.0 * r, 10.0 * r + 1), results)
    w.finish("complete")
    return path


def test_each_side_is_stored_and_the_pairs_rows_show_its_figures_and_flags(tmp_path):
    path = cond_map(tmp_path / "c.h5")
    with h5py.File(path) as f:
        g = f["map"]
        stored = g[COND_PREFIX + "cpu_freq_hz"]
        assert stored.shape == (1, 3, 2) and list(stored.attrs["sides"]) == ["transmitter", "reflector"]
        assert stored.fletcher32  # a row per pair (3 pairs), not N x N cells
        cells = dense_map(g)
        freq = cells[COND_PREFIX + "cpu_freq_hz"]
        assert freq[0, 0, 1].tolist() == freq[0, 1, 0].tolist() == [2.0e9, 3.0e9]  # both cells of a pair
        assert cells[COND_PREFIX + "core_throttle_count"][0, 0, 2].tolist() == [0, 2]
        assert np.isnan(freq[0, 0, 0]).all()
        ranks = json.loads(g[COND_TEXT][()])["ranks"]
        assert sorted(ranks) == ["0", "1", "2"] and ranks["2"]["cpu_freq_source"] == "unknown"
    a = analyse_map(load_map(path, FIELDS), "c")
    rows = {(r["host_a"], r["host_b"]): r for r in pair_rows(a)}
    r01, r02, r12 = rows[("h0", "h1")], rows[("h0", "h2")], rows[("h1", "h2")]
    assert (r01["transmitter_cpu_freq_ghz"], r01["reflector_cpu_freq_ghz"]) == (2.0, 3.0)
    assert r01["conditions_flag"] == "frequency moved" and r02["conditions_flag"] == "throttled"
    assert r02["reflector_throttle_count"] == 3 and math.isnan(r02["reflector_cpu_freq_ghz"])
    assert r12["conditions_flag"] == ""
    assert r01["wire_bytes_per_payload_byte"] == pytest.approx(1.0) and r01["wire_warning"] == ""
    assert r02["wire_bytes_per_payload_byte"] == pytest.approx(2.0)  # both nodes' NICs sent
    assert r12["wire_bytes_per_payload_byte"] == 0 and "did not go through" in r12["wire_warning"]
    # a map with power: energy per wire bit is the pair's pJ/bit over its wire bytes per payload byte
    assert pair_columns(a.conditions, 0, 0, 2, SIZE, 150.0)["energy_pj_wire_bit"] == pytest.approx(75.0)
    assert math.isnan(pair_columns(a.conditions, 0, 1, 2, SIZE, 150.0)["energy_pj_wire_bit"])  # no wire
    assert "energy_pj_wire_bit" not in r01  # this map measured no power
    text = summary_text(a)
    assert "conditions flag: 1 pair-size(s) whose core frequency moved more than 5% within them, " \
        "1 that throttled" in text  # fmt: skip
    assert "conditions flagged: h0–h1 at 1000 B (frequency moved), h0–h2 at 1000 B (throttled)" in text
    assert "a pair meant to cross nodes moved less than 0.5 byte per payload byte" in text
    assert "at 1 pair-size(s): h1–h2 at 1000 B" in text
    assert "core frequency on h2: unknown, because cpufreq gives no scaling_cur_freq" in text
    doc = json.loads(json_bytes([a], []))["maps"][0]
    assert doc["cpu_freq_ghz"][0][0][1] == [2.0, 3.0] and doc["conditions_flag"][0][0][2] == "throttled"
    assert doc["summary"]["conditions"]["flagged_sizes"] == {"frequency moved": 1, "throttled": 1}


def test_pairs_of_one_round_sharing_a_node_give_no_wire_ratio(tmp_path):
    """--per-rank: entries 0, 1 on h0 and 2, 3 on h1; pairs 0-2 and 1-3 run in one round, so each
    node's NIC counts both pairs' bytes: no wire ratio for them (it would read 2), with a notice;
    0-1 and 2-3 (within a node) and a round of one crossing pair keep theirs."""
    hosts = ["h0", "h0", "h1", "h1"]
    rounds = [[(0, 2), (1, 3)], [(0, 3)], [(1, 2)], [(0, 1), (2, 3)]]
    spec = {
        "attrs": {"schedule": "rounds", "per_rank": True, "kernel": "c", "mode": "pingpong", "window": 1,
                  "directions": "one"},
        "hosts": hosts, "ranks": [0, 1, 2, 3], "sizes": [SIZE],
        "rounds_matrix": round_matrix(rounds, 4), "n_rounds": len(rounds),
    }  # fmt: skip
    w = MapWriter(tmp_path / "r.h5", {"kernel": "c"}, {"host": hosts}, TRIALS, map_spec=spec)
    for r, pairs in enumerate(rounds):
        tx = PAYLOAD * len(pairs) / 2  # each node's NIC: every crossing pair of the round, half each
        results = [
            PairResult(i, j, ITERATIONS, 10, np.array([1e-3, 1e-3]), False, 0.1,
                       cond=np.array([side(2.0, tx=tx), side(2.0, tx=tx)]), cond_info=[info(i), info(j)])
            for i, j in pairs
        ]  # fmt: skip
        w.store_round(0, r, (10.0 * r, 10.0 * r + 1), results)
    w.finish("complete")
    a = analyse_map(load_map(tmp_path / "r.h5", FIELDS), "r")
    names = ["h0:0", "h0:1", "h1:2", "h1:3"]
    rows = {(names.index(r["host_a"]), names.index(r["host_b"])): r for r in pair_rows(a)}
    assert math.isnan(rows[(0, 2)]["wire_bytes_per_payload_byte"])
    assert math.isnan(rows[(1, 3)]["wire_bytes_per_payload_byte"])
    assert rows[(0, 3)]["wire_bytes_per_payload_byte"] == pytest.approx(1.0)  # alone in its round
    assert rows[(1, 2)]["wire_bytes_per_payload_byte"] == pytest.approx(1.0)
    assert "not given for 2 pair-size(s) across nodes whose node carried another pair" in summary_text(a)


def test_small_messages_are_mostly_headers_not_far_more_than_their_payload():
    """A crossing map over veth measured 90 to 150 wire bytes per payload byte at 1 B (a frame's
    headers are about 67 bytes): not a warning there; 5 at 1000 B, or 120 at 64 KiB, is."""
    from npmpi_analysis.numbers.conditions import wire_warning

    assert wire_warning(150.0, 1) == "" and wire_warning(1.004, 262144) == ""
    assert "more than 4 bytes per payload byte" in wire_warning(5.0, 1000)
    assert "more than 4 bytes" in wire_warning(120.0, 65536) and "did not go" in wire_warning(0.1, 1)


def test_a_stream_maps_directions_keep_their_own_sides(tmp_path):
    """Each direction is its own measurement: cell (i, j) holds i's side as transmitter."""
    path = cond_map(tmp_path / "d.h5", directed=True)
    with h5py.File(path) as f:
        freq = dense_map(f["map"])[COND_PREFIX + "cpu_freq_hz"]
        assert freq[0, 0, 1].tolist() == [2.0e9, 3.0e9] and freq[0, 1, 0].tolist() == [3.0e9, 2.0e9]
    rows = {(r["host_a"], r["host_b"]): r for r in pair_rows(analyse_map(load_map(path, FIELDS), "d"))}
    assert rows[("h1", "h0")]["transmitter_cpu_freq_ghz"] == 3.0 and len(rows) == 6


def test_an_older_map_without_conditions_reads_and_analyses_as_before(tmp_path):
    truth = MapTruth(hosts=HOSTS, size_bytes=[1, 65536])
    a = analyse_map(load_map(write_map(tmp_path / "old.h5", truth), FIELDS), "old")
    assert a.conditions is None and not any("condition" in n for n in a.notices + a.problems)
    assert not {"conditions_flag", "transmitter_cpu_freq_ghz"} & set(pair_rows(a)[0])
    assert (
        "conditions" not in summary_text(a)
        and "cpu_freq_ghz" not in json.loads(json_bytes([a], []))["maps"][0]
    )
    path = cond_map(tmp_path / "c.h5")  # a map whose conditions were taken out: as an older one
    with h5py.File(path, "a") as f:
        for name in [*(COND_PREFIX + n for n in COND_DATASETS), COND_TEXT]:
            del f["map"][name]
    a = analyse_map(load_map(path, FIELDS), "c")
    assert a.conditions is None and "conditions_flag" not in pair_rows(a)[0]


@pytest.mark.parametrize(
    "damage, says",
    [
        ("missing", "some of the conditions datasets (cond_*) are missing: conditions left out"),
        (
            "negative",
            "holds negative, infinite or impossible values: the map's conditions (cond_*) are left out",
        ),
        (
            "shape",
            "expected (1, 3, 2): the map's conditions (cond_*) are left out",
        ),
    ],
)
def test_damaged_conditions_are_left_out_with_a_notice_and_the_map_analysed(tmp_path, damage, says):
    path = cond_map(tmp_path / "c.h5")
    with h5py.File(path, "a") as f:
        g = f["map"]
        name = COND_PREFIX + "nic_tx_bytes"
        if damage == "negative":
            g[name][0, row(g, 0, 1)] = [-5.0, 1.0]
        else:
            del g[name]
            if damage == "shape":
                g.create_dataset(name, data=np.zeros((1, 3, 3)))
    a = analyse_map(load_map(path, FIELDS), "c")
    assert a.conditions is None and any(says in n for n in a.notices), a.notices
    assert np.isfinite(a.best_s[0, 0, 1])


def test_a_damaged_text_leaves_the_figures_and_says_so(tmp_path):
    path = cond_map(tmp_path / "c.h5")
    with h5py.File(path, "a") as f:
        f["map"][COND_TEXT][()] = "{not json"
    a = analyse_map(load_map(path, FIELDS), "c")
    assert any(f"/map/{COND_TEXT} cannot be used" in n for n in a.notices), a.notices
    assert pair_rows(a)[0]["transmitter_cpu_freq_ghz"] == 2.0


class _Comm:
    """Rank 0's view of one transmitter's report (COND_TAG), for receive_report."""

    def __init__(self, got) -> None:
        self.got = got

    def Iprobe(self, source, tag):
        return True

    def recv(self, source, tag):
        return self.got


def test_a_malformed_report_is_unknown_on_both_sides_with_the_reason():
    good = ([side(2.0), side(3.0)], [info(0), info(1)])
    assert receive_report(_Comm(good), 1) == good
    wrong = [side(2.0), ["x"] * len(COND_DATASETS)]
    for bad in (
        None,
        ([side(2.0)], [info(0)]),
        ([side(2.0), [1.0]], [info(0), info(1)]),
        "x",
        (5, 6),
        (wrong, [{}, {}]),
    ):
        values, texts = receive_report(_Comm(bad), 1)
        assert np.isnan(values).all() and len(values) == 2
        assert all(t["cpu_freq_reason"].endswith("report of the conditions was malformed") for t in texts)


def test_a_side_that_ran_no_trial_is_nan_and_keeps_the_ranks_text(tmp_path):
    """A stop before a pair's first trial: its cells NaN, the ranks' text that of their last
    measured pair (not 'no trial ran')."""
    from npmpi.map.pair import NO_TRIAL, no_trial

    w = writer(tmp_path / "s.h5", HOSTS[:2], [1, SIZE])
    measured = PairResult(0, 1, ITERATIONS, 10, np.array([1e-3, 1e-3]))
    measured.cond, measured.cond_info = np.array([side(2.0), side(3.0)]), [info(0), info(1)]
    w.store_round(0, 0, (1.0, 2.0), [measured])
    values, text = no_trial()
    assert np.isnan(values).all() and text["cpu_freq_reason"] == NO_TRIAL
    stopped = PairResult(0, 1, ITERATIONS, 10, np.array([np.nan, np.nan]))
    stopped.cond, stopped.cond_info = np.array([values, values]), [dict(text, rank=0), dict(text, rank=1)]
    w.store_round(1, 0, (3.0, 4.0), [stopped])
    w.finish("interrupted", "test")
    with h5py.File(tmp_path / "s.h5") as f:
        freq = dense_map(f["map"])[COND_PREFIX + "cpu_freq_hz"]
        assert freq[0, 0, 1].tolist() == [2.0e9, 3.0e9] and np.isnan(freq[1]).all()
        ranks = json.loads(f["map"][COND_TEXT][()])["ranks"]
    assert ranks["1"]["cpu_freq_source"] == "cpufreq scaling_cur_freq (sampled)"


def test_suspects_measured_again_keep_their_conditions(tmp_path):
    """/map/confirm_cond_* [K, 2]: each re-measured pair's sides, read (checked); what they say
    beside a finding: tests/test_map_truth.py."""
    from npmpi.map.confirm import ROLE_REFERENCE, ROLE_SUSPECT

    path = tmp_path / "c.h5"
    rounds = serial_rounds(3)
    w = writer(path, HOSTS, [SIZE])
    for r, [(i, j)] in enumerate(rounds):
        w.store_round(
            0, r, (10.0 * r, 10.0 * r + 1), [PairResult(i, j, ITERATIONS, 10, np.array([1e-3, 1e-3]))]
        )
    again = PairResult(0, 1, ITERATIONS, 10, np.array([1e-3, 1e-3]))
    again.cond = np.array([side(2.0, core=4), side(3.0)])
    reference = PairResult(1, 2, ITERATIONS, 10, np.array([1e-3, 1e-3]))  # a result without conditions
    rows = [(0, (50.0, 51.0), [again], ROLE_SUSPECT), (0, (51.0, 52.0), [reference], ROLE_REFERENCE)]
    w.store_confirmations(rows, 1, 0.1, 1, 0)
    w.finish("complete")
    m = load_map(path, FIELDS)
    got = m.confirm_cond
    assert got["cpu_freq_hz"].tolist()[0] == [2.0e9, 3.0e9]
    assert got["core_throttle_count"][0].tolist() == [4, 0]
    assert np.isnan(got["cpu_freq_hz"][1]).all() and m.confirm is not None


def test_a_flipped_bit_in_the_conditions_is_a_problem_and_the_map_analysed_without_them(tmp_path):
    path = cond_map(tmp_path / "c.h5")
    with h5py.File(path) as f:
        info = f["map"][COND_PREFIX + "cpu_freq_hz"].id.get_chunk_info(0)
    data = bytearray(path.read_bytes())
    data[info.byte_offset + 3] ^= 0x10
    path.write_bytes(bytes(data))
    a = analyse_map(load_map(path, FIELDS), "c")
    assert a.conditions is None and np.isfinite(a.best_s[0, 0, 1])
    assert any("/map/cond_cpu_freq_hz fails its checksum" in p and "left out" in p for p in a.problems), (
        a.problems
    )


def test_values_no_machine_reads_are_unknown_with_a_notice(tmp_path):
    """A map written before the readers were bounded (or forged): a transmitter at 1e6 GHz, a
    throttle count of 1e15 and 1e17 NIC bytes in a pair's milliseconds are unknown, with a notice;
    the pair's other figures stay."""
    path = cond_map(tmp_path / "c.h5")
    with h5py.File(path, "a") as f:
        g = f["map"]
        g[COND_PREFIX + "cpu_freq_hz"][0, row(g, 0, 1), 0] = 1e15  # the pair's row: both its cells
        g[COND_PREFIX + "core_throttle_count"][0, row(g, 0, 2), 1] = 1e15
        g[COND_PREFIX + "nic_tx_bytes"][0, row(g, 0, 2), 1] = 1e17
    a = analyse_map(load_map(path, FIELDS), "c")
    rows = {(r["host_a"], r["host_b"]): r for r in pair_rows(a)}
    r01, r02 = rows[("h0", "h1")], rows[("h0", "h2")]
    assert math.isnan(r01["transmitter_cpu_freq_ghz"]) and r01["reflector_cpu_freq_ghz"] == 3.0
    assert math.isnan(r02["reflector_throttle_count"]) and math.isnan(r02["wire_bytes_per_payload_byte"])
    (said,) = [n for n in a.notices if "no machine reads" in n]
    assert said.startswith(
        "conditions: 3 value(s) no machine reads left unknown "  # each value of the file once
        "(cpu_freq_hz 1e+06 GHz at h0–h1 at 1000 B (transmitter)"
    )
    doc = json.loads(json_bytes([a], []))["maps"][0]
    assert doc["cpu_freq_ghz"][0][0][1][0] is None and doc["cpu_freq_ghz"][0][0][1][1] == 3.0


@pytest.mark.parametrize("directed", [False, True])
def test_the_wire_figures_made_a_block_of_rows_at_a_time_are_the_same(tmp_path, monkeypatch, directed):
    """Each pair's NIC bytes, payload and their ratio are made a block of rows of the matrices at a
    time (a 4,096-node map's temporaries were 2 GB): a row at a time gives every number of the
    whole at once, and the cells named are the same."""
    from npmpi_analysis.map import conditions

    m = load_map(cond_map(tmp_path / "c.h5", directed), FIELDS)
    whole = analyse_map(m, "c").conditions
    assert np.isfinite(whole.wire_ratio).any()
    monkeypatch.setattr(conditions, "WIRE_BLOCK", 1 * 3)
    rows = analyse_map(m, "c").conditions
    for name in ("wire_tx_bytes", "wire_ratio"):
        assert np.array_equal(
            np.asarray(getattr(rows, name)), np.asarray(getattr(whole, name)), equal_nan=True
        )
    assert [rows.places[k] for k in range(len(rows.places))] == [
        whole.places[k] for k in range(len(whole.places))
    ]


@pytest.mark.parametrize("directed", [False, True])
@pytest.mark.parametrize("late", [False, True])
def test_a_rows_maps_conditions_kept_as_rows_give_the_dense_matrices_numbers(tmp_path, directed, late):
    """A rows map's conditions are figured on its rows and kept as them (map/pairmatrix.py, half the
    memory of the dense matrices): every matrix, every pair row, the flags, the warnings and the
    CSV are those the dense matrices give, and so are a stopped map's (its late round left out)."""
    from npmpi_analysis.map.csv_rows import csv_bytes
    from npmpi_analysis.map.pairmatrix import PairMatrix

    path = cond_map(tmp_path / "c.h5", directed)
    full = analyse_map(load_map(path, FIELDS), "c")  # before it is made a stopped map
    if late:
        with h5py.File(path, "a") as f:
            f.attrs["status"] = f["map"].attrs["status"] = "interrupted"
            f["map"].attrs["rounds_completed"] = 2
    m = load_map(path, FIELDS)
    assert all(isinstance(v, PairMatrix) for v in m.cond.values())
    rows = analyse_map(m, "c")
    m.cond = {k: np.asarray(v) for k, v in m.cond.items()}  # the dense matrices, as a dense map's
    dense = analyse_map(m, "c")
    assert isinstance(rows.conditions.wire_ratio, PairMatrix)
    assert not isinstance(dense.conditions.wire_ratio, PairMatrix)
    for name in ("freq_hz", "throttle", "flags", "wire_tx_bytes", "wire_ratio"):
        a, b = np.asarray(getattr(rows.conditions, name)), getattr(dense.conditions, name)
        assert a.dtype == b.dtype and np.array_equal(a, b, equal_nan=a.dtype != object), name
    assert json.dumps(pair_rows(rows)) == json.dumps(pair_rows(dense))  # NaN as NaN
    assert csv_bytes([rows]) == csv_bytes([dense])
    assert json_bytes([rows], []) == json_bytes([dense], [])
    assert summary_text(rows) == summary_text(dense)
    assert list(rows.conditions.figures.flags) == list(dense.conditions.figures.flags)
    assert rows.conditions.figures.flags.counts() == Counter(dense.conditions.figures.flags)
    assert rows.conditions.figures.warnings == dense.conditions.figures.warnings
    gone = full.round == 2 if late else np.zeros_like(full.round, dtype=bool)  # the round left out
    for got, was in (
        (rows.conditions.freq_hz, full.conditions.freq_hz),
        (rows.conditions.throttle, full.conditions.throttle),
        (rows.mean_bit_s, full.mean_bit_s),
        (rows.sigma_bit_s, full.sigma_bit_s),
    ):
        got, was = np.asarray(got), np.asarray(was)
        assert np.isnan(got[:, gone]).all() and (np.isfinite(was[:, gone]).any() or not late)
        assert np.array_equal(got[:, ~gone], was[:, ~gone], equal_nan=True)
    assert (np.asarray(rows.bytes_moved)[:, gone] == 0).all()
    assert np.array_equal(np.asarray(rows.bytes_moved)[:, ~gone], np.asarray(full.bytes_moved)[:, ~gone])


def _forged(path):
    """cond_map's file with a value no machine reads in three datasets, the later datasets' in the
    earlier rows (a block of rows at a time finds them in another order than the datasets')."""
    with h5py.File(path, "a") as f:
        g = f["map"]
        g[COND_PREFIX + "nic_tx_bytes"][0, row(g, 0, 1), 1] = 1e17
        g[COND_PREFIX + "core_throttle_count"][0, row(g, 0, 2), 1] = 1e15
        g[COND_PREFIX + "cpu_freq_hz"][0, row(g, 1, 2), 0] = 1e15
    return path


@pytest.mark.parametrize("damage", ["forged", "negative", "none"])
def test_a_rows_maps_conditions_read_a_block_of_rows_at_a_time_are_those_read_whole(
    tmp_path, monkeypatch, damage
):
    """A rows map's conditions are read, bounded and folded a block of rows at a time (the seven
    datasets whole were 1.9 GB at 4,096 nodes): a row a block gives the same matrices, the same
    notice (values named in the datasets' order) and the same error (the first dataset's)."""
    from npmpi_analysis.map import condrows

    path = cond_map(tmp_path / "c.h5")
    if damage == "forged":
        _forged(path)
    elif damage == "negative":
        with h5py.File(path, "a") as f:
            g = f["map"]
            g[COND_PREFIX + "nic_rx_bytes"][0, row(g, 0, 1), 0] = -1.0  # the first row, a later dataset
            g[COND_PREFIX + "cpu_freq_min_hz"][0, row(g, 1, 2), 1] = -1.0  # the last row, an earlier one
    whole = load_map(path, FIELDS)
    monkeypatch.setattr(condrows, "BLOCK_BYTES", 16)  # a row a block
    blocks = load_map(path, FIELDS)
    assert blocks.notices == whole.notices and blocks.problems == whole.problems
    if damage == "negative":
        assert whole.cond is None and not whole.cond_info
        (said,) = [n for n in whole.notices if "conditions (cond_*) are left out" in n]
        assert said.startswith("/map/cond_cpu_freq_min_hz holds negative")
        return
    assert whole.cond.keys() == blocks.cond.keys()
    for name in whole.cond:
        assert np.array_equal(blocks.cond[name].rows, whole.cond[name].rows, equal_nan=True), name
    if damage == "forged":
        (said,) = [n for n in whole.notices if "no machine reads" in n]
        assert (
            "(cpu_freq_hz 1e+06 GHz at h1–h2 at 1000 B (transmitter); core_throttle_count 1e+15 events"
            in said
        )
        assert "; nic_tx_bytes 1e+17 bytes at h0–h1 at 1000 B (reflector))" in said


def _pp_rows(tmp_path):
    """The saved 4-member map (2 sizes, 1 B and 64 KiB, with conditions) as rows."""
    from pathlib import Path

    from support.mapcells import to_rows

    to_rows(Path(__file__).parent / "data" / "maps" / "map_1_11_pp.h5", tmp_path / "m.h5")
    return tmp_path / "m.h5"


@pytest.mark.parametrize("rows_a_block", [False, True])
def test_values_no_machine_reads_at_a_later_size_are_named_at_it(tmp_path, monkeypatch, rows_a_block):
    """A value no machine reads in the second size's rows is named at that size, read whole or a
    row a block."""
    from npmpi_analysis.map import condrows

    from npmpi.runfile.attrseal import seal_all

    path = _pp_rows(tmp_path)
    with h5py.File(path, "a") as f:
        g = f["map"]
        g[COND_PREFIX + "nic_tx_bytes"][1, 2, 0] = 1e17
        pair = [f"vm:{int(e)}" for e in g["pair"][2]]
        seal_all(f)
    if rows_a_block:
        monkeypatch.setattr(condrows, "BLOCK_BYTES", 16)
    m = load_map(path, FIELDS)
    (said,) = [n for n in m.notices if "no machine reads" in n]
    assert f"(nic_tx_bytes 1e+17 bytes at {pair[0]}–{pair[1]} at 65536 B (transmitter))" in said, said
    assert math.isnan(m.cond["nic_tx_bytes"].rows[1, 2, 0]) and m.cond["nic_tx_bytes"].rows[0, 2, 0] >= 0


@pytest.mark.parametrize("what", ["soft link", "group"])
def test_a_condition_that_is_not_a_dataset_of_the_file_is_a_problem(tmp_path, what):
    """/map/cond_nic_tx_bytes replaced by a link to the received bytes, or by a group: the map's
    conditions are left out with the problem said (never the received bytes read as sent)."""
    from npmpi.runfile.attrseal import seal_all

    path = _pp_rows(tmp_path)
    with h5py.File(path, "a") as f:
        g = f["map"]
        del g[COND_PREFIX + "nic_tx_bytes"]
        if what == "group":
            g.create_group(COND_PREFIX + "nic_tx_bytes")
        else:
            g[COND_PREFIX + "nic_tx_bytes"] = h5py.SoftLink("/map/" + COND_PREFIX + "nic_rx_bytes")
        seal_all(f)
    m = load_map(path, FIELDS)
    assert m.cond is None and not m.cond_info
    (said,) = [p for p in m.problems if "conditions (cond_*) are left out" in p]
    assert "/map/cond_nic_tx_bytes is not a dataset stored in this file" in said


@pytest.mark.parametrize("rows_a_block", [False, True])
def test_a_torn_chunk_after_an_impossible_value_is_the_problem_said(tmp_path, monkeypatch, rows_a_block):
    """One dataset with an impossible value in its first row and a chunk failing its checksum in
    the second size: the damage is what is said (a problem), as when the dataset was read whole
    and then checked."""
    from npmpi_analysis.map import condrows

    from npmpi.runfile.attrseal import seal_all

    path = _pp_rows(tmp_path)
    name = COND_PREFIX + "nic_rx_bytes"
    with h5py.File(path, "a") as f:
        g = f["map"]
        data = g[name][()]
        del g[name]
        data[0, 0, 0] = -1.0
        ds = g.create_dataset(name, data=data, chunks=(1, 1, 2), fletcher32=True)
        offset = ds.id.get_chunk_info_by_coord((1, 5, 0)).byte_offset
        seal_all(f)
    with open(path, "r+b") as fh:
        fh.seek(offset)
        byte = fh.read(1)
        fh.seek(offset)
        fh.write(bytes([byte[0] ^ 0xFF]))
    if rows_a_block:
        monkeypatch.setattr(condrows, "BLOCK_BYTES", 16)
    m = load_map(path, FIELDS)
    assert m.cond is None
    (said,) = [p for p in m.problems if "conditions (cond_*) are left out" in p]
    assert "/map/cond_nic_rx_bytes fails its checksum (Fletcher-32)" in said
    assert not [n for n in m.notices if "impossible values" in n]
