"""`python -m npmpi map`: the schedules, the map file's figures against hand-computed ones, and real
maps of 3, 4 and 8 ranks on this host (complete, with power, stopped by Ctrl-C, refused usage)."""

from __future__ import annotations

import csv
import itertools
import json
import os
import signal
import subprocess

import h5py
import numpy as np
import pytest
from conftest import VENV
from fakes.cpu_sysfs import CPU, ConditionsTree, moving, unreadable
from support.mapcells import dense_map
from support.reliability import Job

from npmpi.conditions.paths import ROOT_ENV
from npmpi.core.errors import UsageError
from npmpi.map.options import DEFAULT_MAP_SIZES, parse_map_options
from npmpi.map.schedule import circle_rounds, make_rounds, round_matrix, serial_rounds
from npmpi.runfile.maprows import derived
from npmpi.runfile.mapwriter import MapWriter, PairResult

# ---- the schedules (pure)


@pytest.mark.parametrize("n", range(2, 65))
def test_circle_rounds_meet_every_pair_once_with_no_member_twice_in_a_round(n):
    rounds = circle_rounds(n)
    assert len(rounds) == (n - 1 if n % 2 == 0 else n)
    seen = [p for pairs in rounds for p in pairs]
    assert sorted(seen) == list(itertools.combinations(range(n), 2))  # every pair exactly once
    for pairs in rounds:
        members = [m for p in pairs for m in p]
        assert len(members) == len(set(members))  # nobody in two pairs of a round
        assert len(pairs) == n // 2  # a bye (one member idle) only when n is odd
        assert all(0 <= i < j < n for i, j in pairs)
    if n % 2:  # every member sits out exactly one round
        byes = [next(m for m in range(n) if all(m not in p for p in pairs)) for pairs in rounds]
        assert sorted(byes) == list(range(n))


@pytest.mark.parametrize("n", [2, 3, 8, 17, 64])
def test_serial_rounds_and_the_round_matrix(n):
    rounds = serial_rounds(n)
    assert len(rounds) == n * (n - 1) // 2 and all(len(pairs) == 1 for pairs in rounds)
    assert sorted(p for pairs in rounds for p in pairs) == list(itertools.combinations(range(n), 2))
    m = round_matrix(make_rounds("rounds", n), n)
    assert (m == m.T).all() and (np.diag(m) == -1).all()
    off = m[~np.eye(n, dtype=bool)]
    assert off.min() == 0 and off.max() == len(circle_rounds(n)) - 1
    with pytest.raises(ValueError):
        circle_rounds(1)


# ---- options


def test_options_defaults_and_one_line_refusals():
    m = parse_map_options([])
    assert m.sizes_bytes == DEFAULT_MAP_SIZES == (1, 65536, 4194304)
    assert m.schedule == "rounds" and not m.per_rank and m.run.trials == 7
    q = parse_map_options(["--quick", "--sizes", "4M,1,64K", "--schedule", "serial", "--per-rank"])
    assert q.sizes_bytes == (1, 65536, 4 << 20) and q.run.trials == 3 and q.run.target_time_s == 0.004
    assert q.schedule == "serial" and q.per_rank
    for argv, words in (
        (["--sizes", "1,x"], "invalid sizes"),
        (["--sizes", "0"], "outside 1 B"),
        (["--sizes", "4M,1,64K,1"], r"1 \(1 B\) is given more than once"),
        (["--schedule", "ring"], "unknown schedule"),
        (["--kernel", "fortran"], "unknown kernel"),
        (["--trials", "0"], "--trials 0"),
        (["--window", "8"], "only applies to --mode stream"),
    ):
        with pytest.raises(UsageError, match=words) as info:
            parse_map_options(argv)
        assert "\n" not in str(info.value)


def test_iterations_follow_netpipes_rule_with_the_pairs_own_time():
    from npmpi.map.pair import iterations_for

    base = parse_map_options([]).run  # 7 trials, target 0.05 s
    assert iterations_for(base, 1, 1e-5) == 5000  # 0.05 s / 10 us per message
    assert iterations_for(base, 4 << 20, 0.036) == 7  # a slow link: the floor, the trials
    assert iterations_for(base, 1, 0.0) == 50000  # no time measured: NetPIPE's 1 us guard
    stream = parse_map_options(["--mode", "stream", "--window", "64"]).run
    assert iterations_for(stream, 65536, 1e-5) == 79  # 5000 messages in windows of 64


# ---- the file's figures, hand-computed


def test_map_writer_stores_one_way_times_bytes_and_derived_figures(tmp_path):
    sizes = [1, 1000]
    rounds = circle_rounds(3)  # 3 rounds, one bye each
    spec = {
        "attrs": {
            "schedule": "rounds",
            "per_rank": True,
            "kernel": "python",
            "mode": "pingpong",
            "window": 1,
        },
        "hosts": ["a", "b", "c"],
        "ranks": [0, 1, 2],
        "sizes": sizes,
        "rounds_matrix": round_matrix(rounds, 3),
        "n_rounds": 3,
    }
    w = MapWriter(tmp_path / "m.h5", {"kernel": "python"}, {"host": ["a", "b", "c"]}, 2, map_spec=spec)
    r01, r12 = int(spec["rounds_matrix"][0, 1]), int(spec["rounds_matrix"][1, 2])
    # pair (0, 1) at 1 B: 100 round trips per trial, trials of 2.0 ms and 1.0 ms -> best one way 5 us
    w.store_round(0, r01, (10.0, 10.5), [PairResult(0, 1, 100, 30, np.array([2e-3, 1e-3]))])
    # pair (1, 2) at 1000 B: 10 round trips; one trial only (a stop): NaN for the other
    w.store_round(1, r12, (20.0, 21.0), [PairResult(1, 2, 10, 4, np.array([4e-3, np.nan]))])
    w.finish("interrupted", "test")
    with h5py.File(tmp_path / "m.h5") as f:
        g = f["map"]
        assert g.attrs["status"] == "interrupted" and f.attrs["status"] == "interrupted"
        assert g.attrs["rounds_completed"] == 2 and g.attrs["n_rounds"] == 3
        assert f.attrs["format_version"] == "2.0" and g["trial_s"].shape == (2, 3, 2)  # 3 pairs: rows
        cells = dense_map(g)
        t = cells["trial_s"]
        assert t.shape == (2, 3, 3, 2)
        assert t[0, 0, 1] == pytest.approx([1e-5, 5e-6]) and t[0, 1, 0] == pytest.approx([1e-5, 5e-6])
        assert t[1, 2, 1, 0] == pytest.approx(2e-4) and np.isnan(t[1, 2, 1, 1])
        assert np.isnan(t[0, 1, 2]).all() and np.isnan(t[1, 0, 1]).all()  # not measured
        assert cells["iterations"][0, 1, 0] == 100 and cells["iterations"][1, 1, 2] == 10
        # bytes: 2 directions x size x (untimed + iterations x trials run)
        assert cells["bytes_moved"][0, 0, 1] == 2 * 1 * (30 + 100 * 2)
        assert cells["bytes_moved"][1, 2, 1] == 2 * 1000 * (4 + 10 * 1)
        lat, bw = cells["latency_s"], cells["bandwidth_bit_s"]
        assert lat[0, 1] == lat[1, 0] == pytest.approx(5e-6) and np.isnan(np.diag(lat)).all()
        assert bw[0, 0, 1] == pytest.approx(8 / 5e-6) and bw[1, 1, 2] == pytest.approx(8000 / 2e-4)
        assert np.isnan(bw[1, 0, 1]) and np.isnan(lat[1, 2])  # 1000 B is not the latency size
        np.testing.assert_array_equal(cells["round"], spec["rounds_matrix"])
        start = np.full((2, 3), np.nan)
        start[0, r01], start[1, r12] = 10.0, 20.0
        np.testing.assert_array_equal(g["window_start_unix_s"][:], start)
        assert g["window_end_unix_s"][1, r12] == 21.0


# ---- real maps


def check_complete_map(path, n: int, sizes: list[int], trials: int, per_rank: bool = True):
    """Shapes, symmetry, NaN diagonal, every pair measured once per size, derived figures recomputed."""
    with h5py.File(path) as f:
        assert f.attrs["status"] == "complete"
        g = f["map"]
        rounds = n - 1 if n % 2 == 0 else n
        assert g.attrs["status"] == "complete" and g.attrs["schedule"] == "rounds"
        assert bool(g.attrs["per_rank"]) is per_rank and g.attrs["kernel"] == "python"
        assert g.attrs["mode"] == "pingpong" and g.attrs["n_rounds"] == rounds
        assert g.attrs["rounds_completed"] == rounds * len(sizes)
        s = len(sizes)
        assert list(g["size_bytes"][:]) == sizes
        assert g["hosts"].shape == (n,) and g["ranks"].dtype == np.int32
        assert g["trial_s"].shape == (s, n * (n - 1) // 2, trials)  # a row per pair (format 2.0)
        cells = dense_map(g)
        assert cells["round"].tolist() == round_matrix(circle_rounds(n), n).tolist()
        t = cells["trial_s"]
        assert t.shape == (s, n, n, trials)
        off = ~np.eye(n, dtype=bool)
        np.testing.assert_array_equal(t, t.transpose(0, 2, 1, 3))
        assert np.isnan(t[:, ~off]).all() and np.isfinite(t[:, off]).all() and (t[:, off] > 0).all()
        it, moved = cells["iterations"], cells["bytes_moved"]
        assert (it[:, off] >= trials).all() and (it == it.transpose(0, 2, 1)).all()
        size = np.asarray(sizes)[:, None, None]
        assert (moved[:, off] >= (2 * size * it * trials)[:, off]).all()
        lat, bw = derived(g["size_bytes"][:], t)
        assert np.isnan(np.diag(lat)).all() and np.isfinite(lat[off]).all()
        assert np.isfinite(bw[:, off]).all() and (bw[:, off] > 0).all()
        start, end = g["window_start_unix_s"][:], g["window_end_unix_s"][:]
        assert start.shape == end.shape == (s, rounds)
        assert (end > start).all()
        order = np.column_stack([start.ravel(), end.ravel()]).ravel()
        assert (np.diff(order) >= 0).all()  # rounds one after another, in size then round order
        return {k: g[k][:] for k in ("hosts", "ranks")}


def _tree(tmp_path) -> ConditionsTree:
    """A fake sysfs tree with every core the ranks may run on (the fake one's figures, whatever core)."""
    tree = ConditionsTree(tmp_path / "fake-root").node()
    for n in sorted(os.sched_getaffinity(0)):
        tree.cpu(n, cur_khz=2_000_000)
    tree.net("eth0", 10, 20)
    return tree


def _conditions(path) -> tuple[dict, dict]:
    """(COND_DATASETS name -> [S, N, N, 2], str(rank) -> text) of a map file."""
    with h5py.File(path) as f:
        g = f["map"]
        cells = dense_map(g)
        cond = {k[len("cond_") :]: v for k, v in cells.items() if k.startswith("cond_")}
        return cond, json.loads(g["conditions_json"][()])["ranks"]


def _own_cycles(info: dict) -> bool:
    """Whether the ranks' frequency came from this machine's cycles counter, not the fake tree."""
    return any(i["cpu_freq_source"].startswith("perf") for i in info.values())


def check_moving_conditions(path, csv_path, n: int) -> None:
    """A map measured under `moving`: each side's frequency the tree's (2.0 or 2.4 GHz), its core's
    throttle events counted (NaN where the rank changed cores), and every CSV row flagged exactly
    when either side's frequency moved more than 5 % or either side throttled."""
    cond, info = _conditions(path)
    off = ~np.eye(n, dtype=bool)
    assert sorted(info) == [str(r) for r in range(n)] and all(
        i["nic_counters"] == ["eth0"] for i in info.values()
    )
    freq, low, high = (cond[k][:, off] for k in ("cpu_freq_hz", "cpu_freq_min_hz", "cpu_freq_max_hz"))
    if not _own_cycles(info):
        assert np.isfinite(freq).all() and ((freq >= 2.0e9) & (freq <= 2.4e9)).all()
        assert set(np.unique(np.r_[low.ravel(), high.ravel()])) <= {2.0e9, 2.4e9}
    throttled = cond["core_throttle_count"][:, off]
    assert np.all(np.isnan(throttled) | (throttled >= 0)) and (throttled > 0).any()
    assert np.isnan(cond["cpu_freq_hz"][:, ~off]).all() and (cond["nic_tx_bytes"][:, off] == 0).all()
    sizes = list(h5py.File(path)["map/size_bytes"][:])
    with open(csv_path, newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == len(sizes) * n * (n - 1) // 2
    names = [f"{os.uname().nodename}:{r}" for r in range(n)]
    for row in rows:
        k, i, j = sizes.index(int(row["size_bytes"])), names.index(row["host_a"]), names.index(row["host_b"])
        with np.errstate(invalid="ignore"):
            moved = ((cond["cpu_freq_max_hz"] - cond["cpu_freq_min_hz"]) / cond["cpu_freq_hz"])[
                k, i, j
            ] > 0.05
        hot = (
            np.nan_to_num(cond["core_throttle_count"][k, i, j] + cond["package_throttle_count"][k, i, j]) > 0
        )
        want = [w for w, on in (("frequency moved", moved.any()), ("throttled", hot.any())) if on]
        assert row["conditions_flag"] == ", ".join(want), row
        assert float(row["transmitter_cpu_freq_ghz"]) == pytest.approx(cond["cpu_freq_hz"][k, i, j, 0] / 1e9)
        assert row["wire_bytes_per_payload_byte"] == "" and row["wire_warning"] == ""  # one node: no wire
    assert any(row["conditions_flag"] for row in rows)


@pytest.mark.mpi
@pytest.mark.timeout(120)
def test_four_rank_quick_map_is_complete(npmpi_run, tmp_path):
    """A complete map, each side's conditions recorded under a fake tree whose frequency moves and
    whose cores throttle while the map runs, and the analysis's flags of them."""
    tree = _tree(tmp_path)
    with moving(tree, sorted(os.sched_getaffinity(0))):
        proc = npmpi_run(
            ["map", "--per-rank", "--quick", "--confirm", "0", "-o", "map.h5"],
            np=4,
            env={ROOT_ENV: str(tree.root)},
        )
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    got = check_complete_map(tmp_path / "map.h5", 4, list(DEFAULT_MAP_SIZES), 3)
    assert got["ranks"].tolist() == [0, 1, 2, 3]
    with h5py.File(tmp_path / "map.h5") as f:  # each rank's run-queue wait over every trial
        g = f["map"]
        assert g["runq_wait_s"].shape == (*g["trial_s"].shape, 2) and g["runq_wait_s"].fletcher32
        cells = dense_map(g)
        wait, one_way, it = cells["runq_wait_s"], cells["trial_s"], cells["iterations"]
    off = ~np.eye(4, dtype=bool)
    loop = (2 * one_way * it[..., None])[:, off]  # ping-pong: two one-way times per iteration
    assert np.isfinite(wait[:, off]).all() and (wait[:, off] >= 0).all()
    if len(os.sched_getaffinity(0)) < 4:  # 4 ranks spinning in pairs on fewer cores: some trial waits
        assert np.nanmax(wait[:, off].max(axis=-1) / loop) > 0.05
    host = os.uname().nodename
    assert [h.decode() for h in got["hosts"]] == [f"{host}:{r}" for r in range(4)]
    assert "rounds in" in proc.stdout and "status complete" in proc.stdout
    # the "done when": the analysis draws the heatmaps and writes the report of a real map
    analysis = subprocess.run(
        [str(VENV / "bin" / "npmpi-analyze"), "map.h5", "--plots", "plots", "--report", "map.html",
         "--csv", "map.csv"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert analysis.returncode == 0, analysis.stdout + analysis.stderr
    assert "outliers" in analysis.stdout and (tmp_path / "map.html").stat().st_size > 0
    assert any(p.suffix == ".png" for p in (tmp_path / "plots").iterdir())
    check_moving_conditions(tmp_path / "map.h5", tmp_path / "map.csv", 4)
    assert "  conditions flag: " in analysis.stdout and "  conditions flagged: " in analysis.stdout


@pytest.mark.mpi
@pytest.mark.timeout(180)
def test_eight_rank_map_on_one_host(npmpi_run, tmp_path):
    """8 ranks, under a fake tree whose cores' frequency and throttle files cannot be read: the map
    completes, each side's frequency and throttling recorded unknown and each rank's reason kept."""
    tree = _tree(tmp_path)
    for n in sorted(os.sched_getaffinity(0)):
        unreadable(tree.root / CPU / f"cpu{n}/cpufreq/scaling_cur_freq")
        unreadable(tree.root / CPU / f"cpu{n}/thermal_throttle/core_throttle_count")
    proc = npmpi_run(
        ["map", "--per-rank", "--quick", "--confirm", "0", "--sizes", "1,64K", "-o", "map8.h5"],
        np=8,
        timeout=150,
        env={ROOT_ENV: str(tree.root)},
    )
    assert proc.returncode == 0, proc.stderr
    check_complete_map(tmp_path / "map8.h5", 8, [1, 65536], 3)
    cond, info = _conditions(tmp_path / "map8.h5")
    assert np.isnan(cond["core_throttle_count"]).all() and sorted(info) == [str(r) for r in range(8)]
    if _own_cycles(info):
        return  # this machine's cycles counter gives the frequency: the unreadable files are not read
    assert np.isnan(cond["cpu_freq_hz"]).all()
    for text in info.values():
        assert text["cpu_freq_source"] == "unknown", text
        assert text["cpu_freq_reason"].startswith("unknown, because the CPU cycles counter does not exist")
        assert text["cpu_freq_reason"].endswith("cpufreq gives no scaling_cur_freq for its core")


@pytest.mark.mpi
@pytest.mark.timeout(120)
def test_odd_map_with_a_power_rank(npmpi_run, tmp_path):
    """3 members (3 rounds with a bye each) and the node's power rank: /power as a run writes it."""
    trace = tmp_path / "trace.csv"
    trace.write_text("time_s,power_w\n0,120\n1,120\n")
    args = [
        "map",
        "--per-rank",
        "--quick",
        "--confirm",
        "0",
        "--sizes",
        "1,64K",
        "--meter",
        f"replay:{trace},interval=0.05",
    ]
    proc = npmpi_run([*args, "--baseline", "0.3", "-o", "p.h5"], np=4)
    assert proc.returncode == 0, proc.stderr
    check_complete_map(tmp_path / "p.h5", 3, [1, 65536], 3)
    with h5py.File(tmp_path / "p.h5") as f:
        assert [r.decode() for r in f["layout/role"][:]] == ["map", "map", "map", "power"]
        node = f["power/node0"]
        assert node.attrs["power_rank"] == 3 and "clock_offset_end_s" in node.attrs
        assert len(node["channel0/power_w"]) > 5 and np.allclose(node["channel0/power_w"][:], 120.0)
        p = f["power"].attrs
        assert p["baseline_end_unix_s"] <= f["map/window_start_unix_s"][0, 0]
        assert p["baseline_after_start_unix_s"] >= f["map/window_end_unix_s"][-1, -1]


def test_map_layout_members_roles_and_refusals():
    from npmpi.core.layout import compute_layout
    from npmpi.map.kind import map_layout, member_names

    # two nodes of 2 ranks with power: the lowest rank of each node measures, the highest samples
    lay = compute_layout(["a", "a", "b", "b"], ["ha", "ha", "hb", "hb"], power=True)
    mapped, members = map_layout(lay, per_rank=False)
    assert members == [0, 2] and mapped.roles == ("map", "power", "map", "power")
    assert member_names(mapped, members, False) == ["ha", "hb"]
    # one host, 4 ranks, no power: one member unless every rank is mapped
    one = compute_layout(["a"] * 4, ["h"] * 4, power=False)
    with pytest.raises(UsageError, match="a map needs 2 measuring ranks, 1 found") as info:
        map_layout(one, per_rank=False)
    assert "--per-rank" in str(info.value) and "\n" not in str(info.value)
    mapped, members = map_layout(one, per_rank=True)
    assert members == [0, 1, 2, 3] and set(mapped.roles) == {"map"}
    assert member_names(mapped, members, True) == ["h:0", "h:1", "h:2", "h:3"]
    # a node whose only rank samples its meters has no member
    bare = compute_layout(["a", "a", "a", "b"], ["ha", "ha", "ha", "hb"], power=True)
    with pytest.raises(UsageError, match=r"node 1 \(hb\) has only its power rank"):
        map_layout(bare, per_rank=False)


# a 4-rank map long enough to be stopped after its second size (65536 B printed)
LONG_MAP = ["map", "--per-rank", "--sizes", "1,64K,1M,4M", "--trials", "10", "--target-time", "0.01"]


@pytest.mark.mpi
@pytest.mark.slow
@pytest.mark.timeout(120)
def test_ctrl_c_keeps_every_completed_round(tmp_path, capsys):
    name = f"stop-{os.getpid()}.h5"
    args = [*LONG_MAP, "-o", name]
    job = Job(args, 4, tmp_path, name)
    try:
        assert job.wait_until(lambda: "65536 B" in job.stdout, 90), job.stderr[-2000:]
        job.proc.send_signal(signal.SIGINT)  # Ctrl-C at mpirun: every rank gets SIGTERM
        job.wait(20)
        left = job.leftovers()
    finally:
        job.close()
    assert job.proc.returncode != 0 and left == []
    assert "Traceback" not in job.stdout + job.stderr
    with h5py.File(tmp_path / name) as f:
        g = f["map"]
        assert f.attrs["status"] == "interrupted" and g.attrs["status"] == "interrupted"
        assert "SIGTERM" in f.attrs["status_message"] or "SIGINT" in f.attrs["status_message"]
        done = int(g.attrs["rounds_completed"])
        assert 6 <= done <= 12  # both sizes printed before the signal
        start = g["window_start_unix_s"][:].ravel()
        assert np.isfinite(start[:done]).all() and np.isnan(start[done:]).all()
        t = dense_map(g)["trial_s"]
        assert np.isfinite(t[:2][:, ~np.eye(4, dtype=bool)]).all()  # the sizes before are whole
        assert np.isnan(t[:, 0, 0]).all()
    analyse_stopped_map(capsys, tmp_path / name, tmp_path / "out")


def analyse_stopped_map(capsys, path, out) -> None:
    """npmpi-analyze (text, JSON, CSV, report) on a stopped map: exit 0, a notice, the sizes reached
    measured and the rest blank (before issue 28: refused as 'damaged or forged')."""
    import json

    from npmpi_analysis.cli import main

    out.mkdir()
    capsys.readouterr()
    files = ["--json", str(out / "m.json"), "--csv", str(out / "m.csv"), "--report", str(out / "m.html")]
    code = main([str(path), *files])
    got = capsys.readouterr()
    assert code == 0 and "Traceback" not in got.out + got.err, got.err
    assert "notice:" in got.out and "6/6 at 1 B" in got.out and "6/6 at 64 KiB" in got.out, got.out
    assert "/6 at 4 MiB" in got.out
    assert json.loads((out / "m.json").read_text()) and (out / "m.html").stat().st_size > 0
    assert len((out / "m.csv").read_text().splitlines()) > 12  # both sizes' 6 pairs at least


@pytest.mark.mpi
@pytest.mark.slow
@pytest.mark.timeout(120)
def test_sigkill_of_a_member_keeps_every_completed_round(tmp_path, capsys):
    name = f"kill-{os.getpid()}.h5"
    args = [*LONG_MAP, "-o", name]
    job = Job(args, 4, tmp_path, name)
    try:
        assert job.wait_until(lambda: "65536 B" in job.stdout, 90), job.stderr[-2000:]
        pids = job.rank_pids()
        os.kill(pids[2], signal.SIGKILL)
        job.wait(30)
        left = job.leftovers()
    finally:
        job.close()
    assert job.proc.returncode != 0 and left == []
    with h5py.File(tmp_path / name) as f:
        g = f["map"]
        assert f.attrs["status"] in ("running", "interrupted", "failed")
        done = int(g.attrs["rounds_completed"])
        assert done >= 6  # both sizes printed before the kill
        cells = dense_map(g)
        rounds = cells["round"]
        start, end = g["window_start_unix_s"][:].ravel(), g["window_end_unix_s"][:].ravel()
        assert np.isfinite(start[:done]).all() and (end[:done] > start[:done]).all()
        t = cells["trial_s"]
        for k in range(done):  # every pair of every completed round is whole
            s, r = divmod(k, 3)
            assert np.isfinite(t[s][rounds == r]).all()
    analyse_stopped_map(capsys, tmp_path / name, tmp_path / "out")
