"""A map that tells the truth, in process: each direction apart, energy over each pair's own
window, suspects measured again before they are named, colours on a fixed scale.

The files are written by the map's own writer (npmpi.runfile.mapwriter.MapWriter) or by the synthetic map
writer (npmpi_analysis.map.synthetic, power labelled simulated) with the 1.6 datasets added.
"""

from __future__ import annotations

import h5py
import numpy as np
import pytest
from npmpi_analysis.map.analyse import analyse_map
from npmpi_analysis.map.figures import RATIO_SPAN, WORSE_HIGH, WORSE_LOW, heatmap
from npmpi_analysis.map.load import load_map
from npmpi_analysis.map.report import outlier_lines, summary_text
from npmpi_analysis.map.synthetic import T0, MapTruth, circle_rounds, write_map
from npmpi_analysis.synthetic import SynthChannel, SynthNode
from support.mapcells import dense_map

from npmpi.core.errors import UsageError
from npmpi.map.confirm import ROLE_REFERENCE, ROLE_SUSPECT, find_suspects, reference_pairs
from npmpi.map.options import parse_map_options
from npmpi.map.schedule import round_matrix, serial_rounds
from npmpi.runfile.mapwriter import MapWriter, PairResult

FIELDS = ("time_unix_s", "power_w", "energy_j_of_counters")
HOSTS = ["h0", "h1", "h2", "h3"]


def test_directions_options():
    assert parse_map_options(["--mode", "stream"]).directions == "both"  # a stream's default
    assert parse_map_options(["--mode", "stream", "--directions", "one"]).directions == "one"
    assert parse_map_options([]).directions == "one"
    with pytest.raises(UsageError, match="measures the round trip"):
        parse_map_options(["--directions", "both"])
    with pytest.raises(UsageError, match="choose 'both' or 'one'"):
        parse_map_options(["--mode", "stream", "--directions", "up"])
    m = parse_map_options(["--confirm", "5", "--confirm-budget", "0.2"])
    assert (m.confirm_repeats, m.confirm_budget) == (5, 0.2)
    assert parse_map_options([]).confirm_repeats == 4 and parse_map_options([]).confirm_budget == 0.1
    with pytest.raises(UsageError, match="--confirm -1"):
        parse_map_options(["--confirm", "-1"])


def stream_map(path, slow=(3, 0), confirm=True):
    """A serial 4-host stream map of both directions at 1 B and 64 KiB, one direction `slow` at
    0.3x; with `confirm`, the slow direction and two reference links measured again."""
    sizes, n = [1, 65536], 4
    rounds = serial_rounds(n)
    spec = {
        "attrs": {"schedule": "serial", "per_rank": False, "kernel": "c", "mode": "stream", "window": 4},
        "hosts": HOSTS,
        "ranks": [0, 1, 2, 3],
        "sizes": sizes,
        "rounds_matrix": round_matrix(rounds, n),
        "n_rounds": len(rounds),
    }
    spec["attrs"]["directions"] = "both"
    w = MapWriter(path, {"kernel": "c"}, {"host": HOSTS}, 2, map_spec=spec)
    rng = np.random.default_rng(1)

    def result(i, j, s, factor=1.0):  # one-way 1 us + 8 size / 1 Gbit/s per message, windows of 4
        one_way = (1e-6 + 8 * sizes[s] / 1e9) / (factor if (i, j) == slow and s == 1 else 1.0)
        times = 4 * 100 * one_way * (1 + 0.02 * rng.random(2))
        return PairResult(i, j, 100, 10, times, directed=True, elapsed_s=0.1 + times.sum())

    for s in range(2):
        for r, pairs in enumerate(rounds):
            (i, j) = pairs[0]
            w.store_round(
                s, r, (100.0 * s + r, 100.0 * s + r + 1), [result(i, j, s, 0.3), result(j, i, s, 0.3)]
            )
    if confirm:
        rows = []
        for _ in range(2):
            rows.append((1, (300.0, 301.0), [result(0, 3, 1, 0.3), result(3, 0, 1, 0.3)], ROLE_SUSPECT))
            rows.append((1, (301.0, 302.0), [result(1, 2, 1), result(2, 1, 1)], ROLE_REFERENCE))
        w.store_confirmations(rows, 2, 0.1, 1, 0)
    w.finish("complete")
    return path


def test_a_stream_map_stores_each_direction_and_names_the_slow_one(tmp_path):
    path = stream_map(tmp_path / "s.h5")
    with h5py.File(path) as f:
        g = f["map"]
        cells = dense_map(g)
        bw = cells["bandwidth_bit_s"][1]
        assert bw[3, 0] < 0.35 * bw[0, 3]  # asymmetric: 3 -> 0 slow, 0 -> 3 not
        assert cells["pair_window_s"][1, 0, 3] == cells["pair_window_s"][1, 3, 0] > 0.1  # the later end
        assert list(g["confirm_role"][:]) == [0, 0, 1, 1] * 2 and g.attrs["confirm_repeats"] == 2
    a = analyse_map(load_map(path, FIELDS), "s")
    named = [(f.kind, f.names, f.confirmed) for f in a.outliers if f.metric == "bandwidth"]
    assert named == [("direction", ("h3", "h0"), True)]
    text = summary_text(a)
    assert "h3 → h0: bandwidth 0.30x the median direction at 64 KiB" in text
    assert "directions: each measured apart" in text


def test_a_finding_not_slow_when_measured_again_is_not_named(tmp_path):
    path = stream_map(tmp_path / "s.h5")
    with h5py.File(path, "r+") as f:  # the second measurement found 3 -> 0 as fast as the references
        t = f["map/confirm_trial_s"]
        t[...] = np.where(np.asarray(f["map/confirm_role"][:])[:, None] == 0, t[4:6].min(), t[...])
    a = analyse_map(load_map(path, FIELDS), "s")
    f = next(f for f in a.outliers if f.metric == "bandwidth")
    assert f.confirmed is False and f.confirm_ratio == pytest.approx(1.0, abs=0.05)
    lines = "\n".join(outlier_lines(a))
    assert "    none named" in lines
    assert "  not confirmed: h3 → h0: bandwidth 0.30x" in lines and "measured again: 0.98x" in lines


def test_a_confirmed_finding_says_what_moved_on_its_nodes_while_measured_again(tmp_path):
    """/map/confirm_cond_* of the suspect's re-measurement: h3 throttled and ran at 1.2 GHz while the
    references ran at 2.9, h0's frequency moved within one window; said beside the confirmed finding
    (text, HTML, JSON); a re-measurement where nothing moved says nothing."""
    import json

    from npmpi_analysis.map.html_report import html_report
    from npmpi_analysis.map.report import json_bytes

    path = stream_map(tmp_path / "s.h5")
    a = analyse_map(load_map(path, FIELDS), "s")
    assert [f.confirm_conditions for f in a.outliers] == [""] * len(a.outliers)  # nothing recorded
    with h5py.File(path, "r+") as f:
        g = f["map"]
        pairs, k = [tuple(p) for p in g["confirm_pair"][:]], len(g["confirm_pair"])
        freq, low, high, core = (np.full((k, 2), 2.9e9) for _ in range(4))
        core[:] = 0
        for row, (i, j) in enumerate(pairs):
            for side, entry in enumerate((i, j)):
                if entry == 3:  # h3 in the suspect's rows (both directions): hot and slow
                    freq[row, side] = low[row, side] = high[row, side] = 1.2e9
                    core[row, side] = 3
        low[1, 1] = 2.6e9  # h0 in the first window of 3 -> 0: 2.6-2.9 GHz around 2.9 (10 %)
        for name, v in (("cpu_freq_hz", freq), ("cpu_freq_min_hz", low), ("cpu_freq_max_hz", high),
                        ("core_throttle_count", core), ("package_throttle_count", 0 * core)):  # fmt: skip
            g[f"confirm_cond_{name}"][...] = v
    a = analyse_map(load_map(path, FIELDS), "s")
    (f,) = [f for f in a.outliers if f.metric == "bandwidth"]
    assert f.confirmed and f.names == ("h3", "h0") and pairs[1] == (3, 0)
    # the direction 3 -> 0 alone was the finding's: rows 1 and 5, 3 events each
    said = "h3 throttled (6 events); h0's core frequency moved more than 5% within a measurement; " \
        "h3's cores at 1.20 GHz, the reference pairs' at 2.90 GHz"  # fmt: skip
    assert f.confirm_conditions == said
    assert f"    {f.sentence}; while measured again: {said}" in outlier_lines(a)
    assert json.loads(json_bytes([a], []))["maps"][0]["outliers"][0]["confirm_conditions"] == said
    assert "h3 throttled (6 events)" in html_report([a], [], [], []).decode()


def test_an_older_map_without_confirmation_names_as_before(tmp_path):
    a = analyse_map(load_map(stream_map(tmp_path / "s.h5", confirm=False), FIELDS), "s")
    f = next(f for f in a.outliers if f.metric == "bandwidth")
    assert f.confirmed is None
    assert any(line == f"    {f.sentence}" for line in outlier_lines(a))


def test_suspects_most_severe_first_and_references_away_from_them():
    n, sizes = 6, np.array([1, 65536])
    best = np.full((2, n, n), 1e-5)
    best[1] = 8 * 65536 / 1e9
    for k in range(2):
        np.fill_diagonal(best[k], np.nan)
    best[1, 1, 4] = best[1, 4, 1] = best[1, 1, 4] / 0.2  # link 1-4 at 0.2x
    best[0, 2, :] *= 3  # node 2's latency 3x (less severe than the link)
    best[0, :, 2] *= 3
    found = find_suspects(best, sizes, directed=False)
    assert [(s.kind, s.metric) for s in found] == [("link", "bandwidth"), ("node", "latency")]
    assert found[0].pairs == [(1, 4)] and found[1].node == 2 and len(found[1].pairs) == 2
    assert all(2 in p for p in found[1].pairs)
    refs = reference_pairs(best[1], found[:1])
    assert len(refs) == 2 and not any({1, 4} & set(p) for p in refs)


def energy_map(path, own_windows=True):
    """A rounds map of 4 hosts, h3 slow: its pairs work the whole 1 s window, the others 0.2 s and
    then wait asleep. A node draws 200 W while its pair works, 80 W idle (simulated, every 10 ms)."""
    truth = MapTruth(HOSTS, [1, 65536], jitter=0.0)
    rounds, nr = circle_rounds(4)
    t = np.arange(T0 - 5.0, T0 + 2 * nr * 1.5 + 5.0, 0.01)
    busy = np.zeros((4, len(t)), dtype=bool)
    work = np.full((2, 4, 4), 0.2)
    work[:, 3, :] = work[:, :, 3] = 1.0
    for k in range(2 * nr):
        s, r = divmod(k, nr)
        for i in range(4):
            j = int(np.flatnonzero(rounds[i] == r)[0])
            busy[i] |= (t >= T0 + k * 1.5) & (t <= T0 + k * 1.5 + work[s, i, j])
    watts = np.where(busy, 200.0, 80.0)
    nodes = [
        SynthNode([SynthChannel(t, watts[i], label="simulated", sample_interval_s=0.01)], host=h)
        for i, h in enumerate(HOSTS)
    ]
    write_map(path, truth, nodes=nodes, t0=T0, window_s=1.0, gap_s=0.5, baseline=(T0 - 4, T0 - 1))
    if own_windows:
        with h5py.File(path, "r+") as f:
            f["map"].create_dataset("pair_window_s", data=work)
    return path


def test_energy_is_charged_over_each_pairs_own_window(tmp_path):
    a = analyse_map(load_map(energy_map(tmp_path / "e.h5"), FIELDS), "e")
    e = a.energy
    assert e.own_windows
    bits = 8 * 2 * 65536 * 100 * 3  # both directions, 100 iterations, 3 trials
    healthy = 400.0 * 0.2 / bits * 1e12  # as the serial schedule would see it: its own 0.2 s at 400 W
    slow = 400.0 * 1.0 / bits * 1e12  # 5x the time for the same bits: 1/5 the bandwidth, 5x the pJ/bit
    assert e.energy_pj_bit[1, 0, 1] == pytest.approx(healthy, rel=0.1)
    assert e.energy_pj_bit[1, 1, 2] == pytest.approx(healthy, rel=0.1)
    assert e.energy_pj_bit[1, 0, 3] == pytest.approx(slow, rel=0.1)
    assert "over its own window" in summary_text(a)
    # charged over the round, as before format 1.6: the healthy pair pays for h3's waiting
    old = analyse_map(load_map(energy_map(tmp_path / "o.h5", own_windows=False), FIELDS), "o").energy
    assert old.energy_pj_bit[1, 0, 1] > 2.4 * healthy


def test_heatmap_colours_are_the_ratio_to_the_median_on_a_fixed_scale():
    names = HOSTS
    uniform = np.full((4, 4), 0.95) + 0.02 * np.arange(16).reshape(4, 4) / 16  # 0.95-0.97 Gbit/s
    np.fill_diagonal(uniform, np.nan)
    plot = heatmap("u", uniform, names, "t", "Gbit/s", "c", worse=WORSE_LOW)
    image = plot.figure.axes[0].images[0]
    colours = image.cmap(image.norm(image.get_array()))[~np.isnan(uniform)]
    assert np.ptp(colours[:, :3], axis=0).max() < 0.05  # a uniform map looks uniform (pale)
    assert image.norm.vmin == pytest.approx(1 / RATIO_SPAN) and image.norm.vmax == pytest.approx(RATIO_SPAN)
    slow_bw = uniform.copy()
    slow_bw[0, 1] = 0.2
    high_lat = uniform.copy()
    high_lat[0, 1] = 5.0
    worse = []
    for x, way in ((slow_bw, WORSE_LOW), (high_lat, WORSE_HIGH)):
        im = heatmap("w", x, names, "t", "u", "c", worse=way).figure.axes[0].images[0]
        worse.append(im.cmap(im.norm(im.get_array()[0, 1])))
    assert worse[0] == pytest.approx(worse[1], abs=0.02)  # the same colour for worse on both
    assert worse[0][0] > worse[0][2] + 0.2 and worse[0][0] > worse[0][1] + 0.2  # red


def test_progress_lines_on_long_maps_and_none_with_quiet(monkeypatch):
    import io
    from types import SimpleNamespace

    from npmpi.commands.console import Console
    from npmpi.map import recording as maprecord

    now = [1000.0]
    monkeypatch.setattr(maprecord.time, "monotonic", lambda: now[0])
    for quiet in (False, True):
        out = io.StringIO()
        rec = maprecord.MapRecording.__new__(maprecord.MapRecording)
        rec.coordinator = SimpleNamespace(rounds=[[(0, 1)]] * 63)
        rec.mopts = SimpleNamespace(sizes_bytes=(1, 65536, 4 << 20))
        rec.console = Console(quiet=quiet, stream=out)
        rec.last_progress = rec.rounds_started = 1000.0
        now[0] = 1001.0
        rec._progress(10)  # under PROGRESS_EVERY_S since the start: nothing
        now[0] = 1000.0 + 63.0
        rec._progress(63)  # a third of 189 rounds in 63 s: 126 s left
        now[0] = 1000.0 + 64.0
        rec._progress(64)  # a second later: nothing
        rec._progress(189)  # the last round: nothing
        expected = "" if quiet else "round 63/189 (33 %), 63 s so far, about 126 s left\n"
        assert out.getvalue() == expected


def test_fabric_meter_options_of_a_map():
    m = parse_map_options(["--meter", "estimate", "--fabric-meter", "estimate", "--fabric-rank", "3"])
    assert [s.text for s in m.run.fabric_meters] == ["estimate"] and m.run.fabric_rank == 3
    with pytest.raises(UsageError, match="only applies with --fabric-meter"):
        parse_map_options(["--fabric-rank", "1"])
    with pytest.raises(UsageError, match="--fabric-meter"):
        parse_map_options(["--fabric-meter", "nosuchmeter"])


def test_the_csv_of_a_map_of_both_directions_has_a_row_per_direction(tmp_path):
    from npmpi_analysis.map.report import pair_rows

    a = analyse_map(load_map(stream_map(tmp_path / "s.h5"), FIELDS), "s")
    rows = [r for r in pair_rows(a) if r["size_bytes"] == 65536]
    assert len(rows) == 12
    by = {(r["host_a"], r["host_b"]): r["bandwidth_bit_s"] for r in rows}
    assert by[("h3", "h0")] < 0.35 * by[("h0", "h3")]


def test_the_default_budget_keeps_a_64_node_map_within_ten_percent():
    """A 64-node map at the defaults (63 rounds x 3 sizes, each pair 0.78 s: 147 s): however many
    suspects, the re-measurements chosen cost at most 10 % of it (their pairs' own windows and the
    references, 4 times)."""
    from types import SimpleNamespace

    from npmpi.map.confirm import DEFAULT_REPEATS, REFERENCES, Suspect, chosen_within_budget

    writer = SimpleNamespace(
        pair_seconds=lambda k, i, j, t=None: 0.78, median_pair_seconds=lambda k, t=None: 0.78
    )
    map_s = 63 * 3 * 0.78
    suspects = [Suspect("node", "bandwidth", k % 3, [(k, k + 1), (k, k + 2)], 50.0 - k, k) for k in range(40)]
    suspects += [Suspect("link", "latency", 0, [(k, k + 9)], 10.0 - k / 10, -1) for k in range(40)]
    chosen, skipped = chosen_within_budget(suspects, writer, DEFAULT_REPEATS, 0.1 * map_s)
    sizes = {s.size_index for s in chosen}
    cost = DEFAULT_REPEATS * 0.78 * (sum(len(s.pairs) for s in chosen) + REFERENCES * len(sizes))
    assert 0 < cost <= 0.1 * map_s and skipped == 80 - len(chosen) > 0


def test_a_maps_fabric_is_said_to_be_recorded_not_attributed(tmp_path):
    path = energy_map(tmp_path / "f.h5")
    with h5py.File(path, "r+") as f:
        f["power"].create_group("fabric")
    m = load_map(path, FIELDS)
    assert any("/power/fabric (--fabric-meter) is recorded" in n for n in m.notices)


def test_a_latency_suspect_whose_trials_scatter_when_measured_again_is_not_named():
    """Measured again, link 1-2 stays slow in both cases; named only when its trials are steady (a
    slow link's delay) and not when they scatter (ranks waiting for a CPU on a busy host)."""
    from types import SimpleNamespace

    from npmpi_analysis.map.confirmed import STEADY, confirm_findings
    from npmpi_analysis.map.outliers import Finding

    def judged(suspect_us):
        trials = np.array([suspect_us, [12.0, 12.5, 13.0], [12.2, 12.1, 14.0]]) * 1e-6
        confirm = {
            "confirm_pair": np.array([(1, 2), (0, 3), (0, 1)]),
            "confirm_size_bytes": np.array([1, 1, 1]),
            "confirm_trial_s": trials,
            "confirm_role": np.array([ROLE_SUSPECT, ROLE_REFERENCE, ROLE_REFERENCE]),
        }
        f = Finding("link", ("h1", "h2"), "latency", 1, 20.0, 240e-6, 12e-6, "link h1–h2: latency", mad=0.1)
        confirm_findings(SimpleNamespace(names=["h0", "h1", "h2", "h3"], outliers=[f]), confirm)
        return f

    steady = judged([240.0, 250.0, 245.0])
    assert steady.confirmed is True and steady.confirm_scatter is None
    assert steady.confirm_ratio == pytest.approx(240 / 12.1, rel=0.01)
    low, high = 111.0, 1495.0
    assert low < STEADY * 831.0  # best trial below STEADY x the median
    scattered = judged([low, 831.0, high])
    assert scattered.confirmed is False
    assert scattered.confirm_scatter == pytest.approx((low * 1e-6, high * 1e-6))
    lines = "\n".join(outlier_lines(SimpleNamespace(outliers=[scattered], map_attrs={"confirm_repeats": 3})))
    assert "not confirmed: link h1–h2: latency; measured again its trials scattered 111-1495 us" in lines
    from npmpi_analysis.map.report import _finding

    assert _finding(scattered)["confirm_scatter_s"] == pytest.approx([low * 1e-6, high * 1e-6])
    assert _finding(steady)["confirm_scatter_s"] is None
