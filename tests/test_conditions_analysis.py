"""The conditions in the run file and the analysis (docs/file-format.md, "Conditions of the
measurement"), on synthetic run files: the datasets and attribute read back, GHz and the flag
(frequency moved, throttled) beside pJ/bit, the nodes' settings in the summary, wire bytes per
payload byte and energy per wire bit, the warnings of a crossing pair, damaged conditions."""

from __future__ import annotations

import csv
import io
import json
import math

import h5py
import numpy as np
import pytest
from npmpi_analysis.cli import main
from npmpi_analysis.numbers.analyse import analyse_run, size_rows
from npmpi_analysis.numbers.conditions import FREQ_MOVED_FRACTION
from npmpi_analysis.report import size_table, summary_text
from npmpi_analysis.synthetic import SynthChannel, SynthNode, write_run

from npmpi.runfile.attrseal import seal
from npmpi.runfile.reader import load_run

T0 = 1_000.0
NAN = math.nan
SETTINGS = {"cpu": 3, "governor": "performance", "boost": False, "scaling_max_freq_hz": 3.0e9}
INFO = [
    {"rank": 0, "cpu": 3, "cpu_freq_source": "perf cycles", "cpu_freq_reason": "", "nic_counters": ["eth0"],
     "settings_before": SETTINGS, "settings_after": SETTINGS},
    {"rank": 1, "cpu": 5, "cpu_freq_source": "unknown", "cpu_freq_reason": "unknown, because no counter",
     "nic_counters": ["eth0"], "settings_before": SETTINGS,
     "settings_after": {**SETTINGS, "governor": "powersave"}},
]  # fmt: skip


def _write(tmp_path, name="r.h5", tx=((1e6, 1e6), (2e6, 2e6), (0.0, 0.0)), power=True):
    """Three sizes of 1000 B, 100 iterations, 2 trials (ping-pong: 2 x 100 x 1000 x 2 = 400 kB each):
    the first steady at 3 GHz, the second moved 2.5-3 GHz, the third throttled; on two nodes."""
    cpu = {
        "ranks": [0, 1],
        "cpu_user_s": [[0.1, 0.1]] * 3,
        "cpu_system_s": [[0.0, 0.0]] * 3,
        "cpu_wall_s": [[0.2, 0.2]] * 3,
    }
    cond = {
        "cpu_freq_hz": [[3e9, NAN], [2.75e9, NAN], [3e9, NAN]],
        "cpu_freq_min_hz": [[2.99e9, NAN], [2.5e9, NAN], [3e9, NAN]],
        "cpu_freq_max_hz": [[3.01e9, NAN], [3e9, NAN], [3e9, NAN]],
        "core_throttle_count": [[0, NAN], [0, NAN], [2, NAN]],
        "package_throttle_count": [[0, NAN], [0, NAN], [1, NAN]],
        "nic_tx_bytes": [list(t) for t in tx],
        "nic_rx_bytes": [list(t) for t in tx],
        "info": INFO,
    }
    t = np.arange(T0 - 5, T0 + 20, 0.25)
    nodes = [
        SynthNode([SynthChannel(t, np.full(len(t), 100.0), sample_interval_s=0.25)], host=h) for h in "ab"
    ]
    return write_run(
        tmp_path / name,
        [1000] * 3,
        [100] * 3,
        [[0.1, 0.1]] * 3,
        [[T0 + 2 * k, T0 + 2 * k + 0.5] for k in range(3)],
        nodes=nodes if power else None,
        cpu=cpu,
        conditions=cond,
        attrs={"all_pair_ranks": np.array([0, 1])},
    )


def test_the_file_carries_the_conditions(tmp_path):
    run = load_run(_write(tmp_path))
    c = run.pingpong.conditions
    assert c.ranks.tolist() == [0, 1] and c.values["cpu_freq_hz"].shape == (3, 2)
    assert c.rank_info(1)["settings_after"]["governor"] == "powersave"
    assert c.rank_info(0)["settings_before"]["governor"] == "performance"
    with h5py.File(run.path) as f:
        assert "conditions" in f.attrs and f["pingpong/nic_tx_bytes"].attrs["ranks"].tolist() == [0, 1]


def test_flags_ghz_and_wire_bytes_by_hand(tmp_path):
    a = analyse_run(load_run(_write(tmp_path)), "r")
    rows = size_rows(a)
    assert [r["cpu_freq_ghz"] for r in rows] == pytest.approx([3.0, 2.75, 3.0])
    # (3 - 2.5) / 2.75 = 18 % > 5 %: moved; 0.02 / 3 < 5 %: steady; throttled: 3 events
    assert FREQ_MOVED_FRACTION == 0.05
    assert [r["conditions_flag"] for r in rows] == ["", "frequency moved", "throttled"]
    assert rows[2]["rank0_throttle_count"] == 3 and math.isnan(rows[0]["rank1_cpu_freq_ghz"])
    # the pair crosses nodes a and b: each node's NIC sent its bytes once; payload 2 x 100 x 1000 x 2
    payload = 400_000
    assert rows[0]["wire_bytes_per_payload_byte"] == pytest.approx(2e6 / payload)
    assert rows[0]["energy_pj_wire_bit"] == pytest.approx(rows[0]["energy_pj_bit"] / (2e6 / payload))
    assert any("moved less than 0.5 byte per payload byte" in n and "1000 B" in n for n in a.notices)
    assert any("more than 4 bytes per payload byte" in n for n in a.notices)
    table = size_table(a)
    header = table.splitlines()[0].split()
    assert header.index("GHz") > header.index("pJ/bit") and "conditions" in header
    assert "frequency moved" in table and "throttled" in table
    text = summary_text(a)
    assert "conditions on a: governor performance; scaling_max_freq_hz 3 GHz; boost False" in text
    assert "conditions changed on b during the run: governor performance -> powersave" in text
    assert "core frequency on b: unknown, because no counter" in text
    assert "1 size(s) whose core frequency moved more than 5% within them, 1 that throttled" in text


def test_csv_json_and_html_carry_them(tmp_path, capsys):
    path = _write(tmp_path)
    out = tmp_path / "out"
    assert (
        main([str(path), "--csv", f"{out}.csv", "--json", f"{out}.json", "--report", f"{out}.html", "-q"])
        == 0
    )
    rows = list(csv.DictReader(io.StringIO((tmp_path / "out.csv").read_text())))
    assert (
        float(rows[1]["cpu_freq_ghz"]) == pytest.approx(2.75)
        and rows[1]["conditions_flag"] == "frequency moved"
    )
    assert {"wire_bytes_per_payload_byte", "energy_pj_wire_bit", "rank0_cpu_freq_ghz"} <= set(rows[0])
    doc = json.loads((tmp_path / "out.json").read_text())
    cond = doc["runs"][0]["summary"]["conditions"]
    assert cond["flagged_sizes"] == {"frequency moved": 1, "throttled": 1}
    assert [n["host"] for n in cond["nodes"]] == ["a", "b"]
    assert doc["runs"][0]["sizes"][2]["rank0_throttle_count"] == 3
    html = (tmp_path / "out.html").read_text()
    assert "GHz" in html and "throttled" in html and "conditions on a" in html


def test_a_file_without_them_and_a_damaged_one(tmp_path, capsys):
    old = write_run(tmp_path / "old.h5", [8], [10], [[1e-4]], [[T0]])
    a = analyse_run(load_run(old), "old")
    assert a.conditions is None and "cpu_freq_ghz" not in size_rows(a)[0]
    assert "GHz" not in size_table(a)
    bad = _write(tmp_path, "bad.h5", power=False)
    with h5py.File(bad, "a") as f:
        f["pingpong/nic_tx_bytes"][0, 0] = -5.0
        f.attrs["conditions"] = "{not json"
        seal(f)  # as a writer would have written it
    run = load_run(bad)
    assert run.pingpong.conditions is None
    assert any("nic_tx_bytes holds negative" in n and "conditions left out" in n for n in run.notices)
    with h5py.File(bad, "a") as f:
        f["pingpong/nic_tx_bytes"][0, 0] = 5.0
    run = load_run(bad)
    assert run.pingpong.conditions.info == {}
    assert any("attribute conditions is not the expected JSON" in n for n in run.notices)
    assert main([str(bad)]) == 0


def test_values_no_machine_reads_are_unknown_with_a_notice(tmp_path, capsys):
    """A file written before the readers were bounded (or forged): 1e18 Hz (shown 1e9 GHz), 1 kHz
    (1e-6 GHz), 8.2e31 throttle events, 6e25 NIC bytes are unknown with one notice; a cycles
    counter's 0.5 MHz (user-mode cycles over running time) and real figures are kept."""
    path = _write(tmp_path, tx=((6e25, 1e6), (2e6, 2e6), (0.0, 0.0)))
    with h5py.File(path, "a") as f:
        pp = f["pingpong"]
        pp["cpu_freq_hz"][0, 0] = 1e18
        pp["cpu_freq_max_hz"][0, 0] = 1e18
        pp["cpu_freq_min_hz"][1, 1] = 1e3  # 1 kHz: 1e-6 GHz
        pp["cpu_freq_hz"][1, 1] = 5e5  # rank 1's source is no cycles counter: refused
        pp["core_throttle_count"][2, 0] = 8.2e31
        info = json.loads(f.attrs["conditions"])
        info["ranks"]["0"]["refused"] = ["cpu3's scaling_cur_freq read 1e+09 GHz, outside any core's"]
        f.attrs["conditions"] = json.dumps(info)
        seal(f)
    a = analyse_run(load_run(path), "r")
    rows = size_rows(a)
    assert math.isnan(rows[0]["cpu_freq_ghz"]) and math.isnan(rows[0]["rank0_cpu_freq_max_ghz"])
    assert math.isnan(rows[1]["rank1_cpu_freq_min_ghz"]) and math.isnan(rows[1]["rank1_cpu_freq_ghz"])
    assert math.isnan(rows[2]["rank0_throttle_count"]) and rows[2]["conditions_flag"] == ""
    assert math.isnan(rows[0]["nic_tx_bytes"]) and math.isnan(rows[0]["wire_bytes_per_payload_byte"])
    assert rows[1]["cpu_freq_ghz"] == pytest.approx(2.75)  # the rest as before
    (said,) = [n for n in a.notices if "no machine reads" in n]
    assert said.startswith(
        "conditions: 7 value(s) no machine reads left unknown (cpu_freq_hz 1e+09 GHz at 1000 B (rank 0)"
    )
    assert "a core runs at 1 MHz to 10 GHz" in said
    table = size_table(a)
    assert " ?  " in table and "1e+09" not in table
    assert "conditions refused on a: cpu3's scaling_cur_freq read 1e+09 GHz" in summary_text(a)
    assert main([str(path), "--csv", str(tmp_path / "o.csv"), "-q"]) == 0
    assert "6e+25" not in (tmp_path / "o.csv").read_text() and "1e+09" not in (tmp_path / "o.csv").read_text()
    cycles = _write(tmp_path, "cycles.h5")
    with h5py.File(cycles, "a") as f:
        f["pingpong/cpu_freq_min_hz"][1, 0] = 5e5  # rank 0's source: perf cycles
        seal(f)
    a = analyse_run(load_run(cycles), "c")
    assert size_rows(a)[1]["rank0_cpu_freq_min_ghz"] == pytest.approx(5e-4)
    assert not any("no machine reads" in n for n in a.notices)
