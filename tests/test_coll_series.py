"""`python -m npmpi coll` with several series in one file: `--op all` and `--ranks 2,4` in both
kernels under mpirun with a power rank replaying known watts (each row's series, its own factors and
J/op = the known power x its time), `--iterations osu` with `--per-node` (OSU 7.4's counts, each call
timed), the analysis of a file of series (one run per op and rank count, against known power), and
the bad input of these options as one line (exit 2)."""

from __future__ import annotations

import json
import math

import h5py
import numpy as np
import pytest
from conftest import run_mpi
from npmpi_analysis.coll.numbers import series_runs
from npmpi_analysis.numbers.analyse import analyse_run, size_rows
from npmpi_analysis.synthetic import SynthChannel, SynthNode, write_run

from npmpi.coll.kind import KIND
from npmpi.coll.ops import OPS
from npmpi.coll.series import osu_counts
from npmpi.core.errors import UsageError
from npmpi.core.layout import node_layout
from npmpi.runfile.attrseal import seal
from npmpi.runfile.reader import load_run

WATTS = 77.0


def analysed(path):
    """(series label, analysis, rows) of every series of a coll file."""
    out = []
    for part, label in series_runs(load_run(path), "c"):
        a = analyse_run(part, label)
        out.append((label, a, size_rows(a)))
    return out


@pytest.mark.mpi
@pytest.mark.slow
@pytest.mark.parametrize("kernel", ["python", "c"])
def test_every_op_at_two_rank_counts_in_one_file_with_known_power(tmp_path, kernel):
    """--op all --ranks 2,8 on 8 measuring ranks (oversubscribed on a small machine; 4 ranks are
    tests/inprocess/test_coll_steps.py's) and a power rank replaying 77 W: 14 series in order, each
    row's series index, members beyond a series' ranks NaN, every result checked, and per series
    J/op = 77 W x the slowest member's mean trial / iterations, busbw with the factor at its ranks."""
    most = 8
    (tmp_path / "trace.csv").write_text(f"time_s,power_w\n0,{WATTS}\n100000,{WATTS}\n")
    args = ["coll", "--op", "all", "--ranks", f"2,{most}", "--sizes", "16,1K", "--kernel", kernel, "--quick"]
    args += ["--check", "--meter", "replay:trace.csv,interval=0.02", "--baseline", "0.3", "-q", "-o", "c.h5"]
    proc = run_mpi(args, np=most + 1, cwd=tmp_path, timeout=180)
    assert proc.returncode == 0, proc.stderr
    with h5py.File(tmp_path / "c.h5", "r") as f:
        table = json.loads(f.attrs["coll_series_json"])
        series = f["pingpong/coll_series"][:]
        members = f["pingpong/member_trial_s"][:]
        assert f.attrs["status"] == "complete" and f["pingpong/data_verified"][:].all()
        assert f.attrs["coll_op"] == ",".join(OPS) and f.attrs["coll_iterations"] == "target-time"
    assert [(s["op"], s["ranks"]) for s in table] == [(op, n) for op in OPS for n in (2, most)]
    assert list(series) == [i for i, s in enumerate(table) for _ in s["sizes"]]
    two = np.isin(series, [i for i, s in enumerate(table) if s["ranks"] == 2])
    assert np.isnan(members[two][:, 2:]).all() and np.isfinite(members[two][:, :2]).all()
    assert np.isfinite(members[~two]).all()  # a series of every rank: every member's times
    parts = analysed(tmp_path / "c.h5")
    assert [label for label, _, _ in parts] == [f"c-{op}-{n}" for op in OPS for n in (2, most)]
    for part, _ in series_runs(load_run(tmp_path / "c.h5"), "c"):  # each series' own ranks' CPU time
        n = part.attrs["coll_ranks"]
        assert list(part.pingpong.cpu.ranks) == list(range(n)) and part.pingpong.member_trial_s.shape[1] == n
    for label, a, rows in parts:
        op, n = a.attrs["coll_op"], a.attrs["coll_ranks"]
        pp = load_run(tmp_path / "c.h5").pingpong
        assert label == f"c-{op}-{n}" and a.kind_figures.bus_factor == pytest.approx(OPS[op].bus_factor(n))
        for row in rows:
            assert (row["coll_op"], row["coll_ranks"]) == (op, n)
            k = int(
                np.flatnonzero(
                    (pp.coll_series == a.attrs["coll_series"]) & (pp.size_bytes == row["size_bytes"])
                )[0]
            )
            t = np.mean(pp.trial_s[k]) / pp.iterations[k]
            assert row["power_w"] == pytest.approx(WATTS, rel=1e-9)
            assert row["energy_per_op_j"] == pytest.approx(WATTS * t, rel=1e-9)
            factor = n if OPS[op].algbw_ranks else 1
            assert row["algbw_bit_s"] == pytest.approx(8 * factor * row["size_bytes"] / t, rel=1e-9)
            per_rank = np.nanmean(pp.member_trial_s[k, :n], axis=1) / pp.iterations[k]
            assert row["latency_avg_s"] == pytest.approx(per_rank.mean(), rel=1e-9)


@pytest.mark.mpi
@pytest.mark.slow
def test_osu_iteration_counts_each_call_timed_on_the_ranks_per_node_asked(tmp_path):
    """--iterations osu --per-node 2 (C kernel): of 3 ranks that could measure, 2 do (the third idle),
    1000 timed calls after 100 up to 8 KiB and 100 after 10 above, each call timed with a barrier
    after it: a trial's time is the calls' sum, below its wall-clock span."""
    args = ["coll", "--op", "allreduce,barrier", "--per-node", "2", "--iterations", "osu", "--kernel", "c"]
    args += ["--sizes", "4,16K", "--trials", "2", "--check", "--meter", "estimate", "--baseline", "0"]
    proc = run_mpi([*args, "-q", "-o", "o.h5"], np=4, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    with h5py.File(tmp_path / "o.h5", "r") as f:
        a = f.attrs
        assert a["coll_iterations"] == "osu" and a["coll_per_node"] == 2 and list(a["member_ranks"]) == [0, 1]
        assert list(f["layout/role"][:].astype(str)) == ["coll", "coll", "idle", "power"]
        sizes = list(f["pingpong/size_bytes"][:])
        assert sizes == [4, 16384, 0]
        assert [osu_counts(s) for s in sizes] == [(1000, 100), (100, 10), (1000, 100)]
        assert list(f["pingpong/iterations"][:]) == [1000, 100, 1000]
        assert list(f["pingpong/warmup_iterations"][:]) == [100, 10, 100]
        span = f["pingpong/trial_end_unix_s"][:] - f["pingpong/trial_start_unix_s"][:]
        assert (f["pingpong/trial_s"][:] < span).all()  # the barriers after each call are not timed


def synthetic_series(path):
    """A coll file of two series, allreduce on 2 ranks (1 KiB) then on 4 (1 KiB, 4 KiB), while two
    nodes draw 60 W and 90 W (idle 40 W and 50 W before)."""
    t0 = 1_000.0
    stamps = np.arange(t0 - 4, t0 + 8, 0.01)
    nodes = [
        SynthNode([SynthChannel(stamps, np.where(stamps < t0 - 1, idle, busy), sample_interval_s=0.01)])
        for idle, busy in ((40.0, 60.0), (50.0, 90.0))
    ]
    trials = [[0.10, 0.11, 0.12], [0.20, 0.22, 0.21], [0.30, 0.33, 0.36]]
    starts = [[t0 + k * 2, t0 + k * 2 + 0.5, t0 + k * 2 + 1.0] for k in range(3)]
    ends = [[s + d for s, d in zip(ss, dd, strict=True)] for ss, dd in zip(starts, trials, strict=True)]
    table = [
        {"op": "allreduce", "ranks": n, "algbw_bytes_factor": 1, "bus_factor": 2 * (n - 1) / n,
         "bus_factor_formula": "2(n-1)/n", "mpi_function": "MPI_Allreduce", "size_meaning": "m"}
        for n in (2, 4)
    ]  # fmt: skip
    attrs = {"kind": "coll", "mode": "coll", "bytes_per_iteration_factor": 1, "one_way_divisor": 1}
    attrs |= {"coll_op": "allreduce", "coll_ranks": 4, "coll_series_json": json.dumps(table)}
    path = write_run(
        path, [1024, 1024, 4096], [1000, 1000, 500], trials, starts, ends, nodes=nodes,
        baseline=(t0 - 3.5, t0 - 1.5), attrs=attrs,
    )  # fmt: skip
    with h5py.File(path, "r+") as f:
        f["pingpong"].create_dataset("coll_series", data=np.array([0, 1, 1]), fletcher32=True)
    return path, trials


def test_a_file_of_series_is_one_analysis_per_series_with_its_own_factor_and_known_power(tmp_path):
    """Each series' J/op = 150 W x its own rows' t (60 W x t above idle), its bus factor at its ranks."""
    path, trials = synthetic_series(tmp_path / "s.h5")
    parts = analysed(path)
    assert [label for label, _, _ in parts] == ["c-allreduce-2", "c-allreduce-4"]
    got = [(row["coll_ranks"], row["size_bytes"], row) for _, _, rows in parts for row in rows]
    assert [(n, s) for n, s, _ in got] == [(2, 1024), (4, 1024), (4, 4096)]
    for k, ((n, size, row), i) in enumerate(zip(got, [1000, 1000, 500], strict=True)):
        t = np.mean(trials[k]) / i
        assert row["energy_per_op_j"] == pytest.approx(150.0 * t, rel=1e-9)
        assert row["dynamic_energy_per_op_j"] == pytest.approx(60.0 * t, rel=1e-9)
        assert row["energy_per_op_sigma_j"] == pytest.approx(
            150.0 * np.std(trials[k], ddof=1) / math.sqrt(3) / i, rel=1e-6
        )
        assert row["busbw_bit_s"] == pytest.approx(8 * size / t * 2 * (n - 1) / n, rel=1e-9)
    from npmpi_analysis.figures.run import all_plots

    plots = {p.name: p for p in all_plots([a for _, a, _ in parts])}
    (ax,) = plots["collectives_energy_vs_ranks"].figure.axes
    (label,) = ax.get_legend_handles_labels()[1]
    assert label == "allreduce 1024 B"
    per_bit = plots["collectives"].figure.axes[3]  # pJ per bus bit: 150 W / (n busbw), a line per series
    x, y = per_bit.get_legend_handles_labels()[0][1].lines[0].get_data()
    t = [np.mean(trials[k]) / i for k, i in ((1, 1000), (2, 500))]
    busbw = [8 * size / tk * 1.5 for size, tk in zip((1024, 4096), t, strict=True)]  # the 4-rank series'
    assert list(x) == [1024, 4096] and np.allclose(y, [1e12 * 150 / (4 * b) for b in busbw])


def test_the_analysis_command_splits_the_series(tmp_path):
    from npmpi_analysis.cli import main

    path, _ = synthetic_series(tmp_path / "s.h5")
    assert (
        main([str(path), "-q", "--csv", str(tmp_path / "s.csv"), "--report", str(tmp_path / "s.html")]) == 0
    )
    lines = (tmp_path / "s.csv").read_text().splitlines()
    header = lines[0].split(",")
    cells = [dict(zip(header, line.split(","), strict=False)) for line in lines[1:]]
    assert [(c["run"], c["coll_op"], c["coll_ranks"]) for c in cells] == [
        ("s-allreduce-2", "allreduce", "2"),
        ("s-allreduce-4", "allreduce", "4"),
        ("s-allreduce-4", "allreduce", "4"),
    ]
    assert "allreduce on 4 ranks" in (tmp_path / "s.html").read_text()


FOUR = node_layout(["h"] * 4, ["h"] * 4, power=False)
TWO_NODES = node_layout(["a", "a", "a", "b", "b", "b"], ["a", "a", "a", "b", "b", "b"], power=True)


@pytest.mark.parametrize(
    "argv, layout, words",
    [
        (["--op", "allreduce,gather"], None, "--op 'gather': unknown; choose one of allreduce"),
        (["--op", "all", "--reduce-op", "band", "--dtype", "float32"], None, "MPI defines it on integers"),
        (["--ranks", "1,2"], None, "--ranks '1,2': a collective needs 2 ranks or more"),
        (["--ranks", "2,x"], None, "--ranks '2,x': give rank counts such as 2,4,8"),
        (["--per-node", "0"], None, "--per-node 0: give 1 measuring rank per node or more"),
        (["--iterations", "fast"], None, "--iterations 'fast': choose target-time or osu"),
        (["--ranks", "2,8"], FOUR, "--ranks 2,8: 8 ranks asked for, 4 measuring ranks started"),
        (["--per-node", "3"], TWO_NODES, "--per-node 3: node 0 (a) has 2 rank(s) that can measure"),
        (
            ["--op", "all", "--ranks", "2,3", "--sizes", "16"],
            FOUR,
            "reduce_scatter: --sizes: 16 B does not split into 3 equal shares",
        ),
    ],
)
def test_bad_input_of_series_is_one_line(argv, layout, words):
    with pytest.raises(UsageError, match=words.replace("(", r"\(").replace(")", r"\)")):
        opts = KIND.parse(["--quick", *argv])
        KIND.groups(layout, opts)


def test_per_node_chooses_each_node_s_lowest_ranks():
    opts = KIND.parse(["--per-node", "1"])
    layout = KIND.groups(TWO_NODES, opts)
    assert layout.groups == ((0, 3),) and layout.roles[1] == "idle" and layout.roles[2] == "power"


@pytest.mark.mpi
@pytest.mark.slow
@pytest.mark.timeout(150)
def test_a_member_frozen_in_a_series_of_two_is_the_one_named(tmp_path):
    """--ranks 2,4: rank 1 stopped during the 2-rank series (ranks 2 and 3 waiting outside it) ends
    the job through the stall watchdog with one line naming rank 1 only, every size before kept."""
    from support.reliability import Job, freeze_until_the_end

    args = ["coll", "--op", "allreduce", "--ranks", "2,4", "--kernel", "c", "--trials", "3"]
    args += ["--target-time", "0.1", "--sizes", "1K,2K,4K,8K,16K,32K,64K,128K,256K,512K,1M"]
    args += ["--stall-timeout", "3", "-o", "frozen-series.h5"]
    job = Job(args, 4, tmp_path, "frozen-series.h5")
    _, errors = freeze_until_the_end(job, lambda: job.rows_printed() >= 3, 1, 60)
    assert len(errors) == 1 and "stopped answering" in errors[0], errors
    assert errors[0].startswith(("npmpi: error: one of the measuring ranks 1 (", "npmpi: error: rank 1 (")), (
        errors
    )
    with h5py.File(tmp_path / "frozen-series.h5", "r") as f:
        assert f.attrs["status"] == "failed" and f["pingpong/size_bytes"].shape[0] >= 3
        assert set(f["pingpong/coll_series"][:]) == {0}


def test_a_two_rank_allreduce_beside_a_pair_s_round_trip(tmp_path):
    """A coll file and a ping-pong run given together: per shared size, the pair's round trip (twice
    its one-way time) beside the time of one operation, best trial each; shown only for such a mix."""
    from npmpi_analysis.numbers.size_comparison import comparison_blocks

    path, _ = synthetic_series(tmp_path / "s.h5")
    (_, coll, _), _ = analysed(path)
    pair = analyse_run(
        load_run(write_run(tmp_path / "p.h5", [1024], [100], [[0.004, 0.003]], [[10.0, 11.0]])), "pair"
    )
    blocks = {title: rows for title, _, rows in comparison_blocks([pair, coll])}
    (row,) = blocks["round trip or operation (us)"]
    assert row[:3] == ["1024", f"{0.003 / 100 * 1e6:.5g}", f"{0.10 / 1000 * 1e6:.5g}"]
    assert "round trip or operation (us)" not in {t for t, _, _ in comparison_blocks([coll, coll])}


def test_a_c_kernel_that_cannot_time_each_call_is_refused_for_osu_iterations(monkeypatch):
    """--iterations osu with a C kernel built before its per-call loop: one line saying to rebuild."""
    from npmpi import _ckernel

    monkeypatch.delattr(_ckernel, "COLLECTIVE_PER_CALL")
    osu = KIND.parse(["--kernel", "c", "--iterations", "osu"])
    assert "cannot time each call as --iterations osu needs" in KIND.member_problem(None, osu, None)
    assert KIND.member_problem(None, KIND.parse(["--kernel", "c"]), None) is None


def _row(op: str, n: int, **changed) -> dict:
    """A series table's row as npmpi writes it (npmpi/coll/series.py), with `changed` keys."""
    o = OPS[op] if op in OPS else OPS["allreduce"]
    row = {"op": op, "ranks": n, "algbw_bytes_factor": n if o.algbw_ranks else 1,
           "bus_factor": float(o.bus_factor(n)), "bus_factor_formula": o.bus_factor_text,
           "mpi_function": f"MPI_{o.method}", "size_meaning": "m"}  # fmt: skip
    return {**row, **changed}


def forged(path, series=None, table=None, **root):
    """A coll file of len(series) rows of 1024 B (3 trials of 0.1 s, 1000 iterations), no power:
    `table` its coll_series_json and `series` each row's index; without them a one-op file
    (allreduce on 2 ranks) whose root attributes are the factors, `root` changing any."""
    n = len(series) if series is not None else 2
    attrs = {"kind": "coll", "mode": "coll", "bytes_per_iteration_factor": 1, "one_way_divisor": 1,
             "coll_op": "allreduce", "coll_ranks": 2, "coll_algbw_bytes_factor": 1, "coll_bus_factor": 1.0,
             "coll_bus_factor_formula": "2(n-1)/n"}  # fmt: skip
    if table is not None:
        attrs |= {"coll_series_json": json.dumps(table), "coll_bus_factor": math.nan}
    status = root.pop("status", None)
    starts = [[10.0 * k, 10.0 * k + 1, 10.0 * k + 2] for k in range(n)]
    path = write_run(path, [1024] * n, [1000] * n, [[0.1, 0.1, 0.1]] * n, starts, attrs={**attrs, **root})
    with h5py.File(path, "r+") as f:
        if series is not None:
            f["pingpong"].create_dataset("coll_series", data=np.array(series), fletcher32=True)
        if status is not None:
            f.attrs["status"] = status
            seal(f)
    return path


ALGBW = 8 * 1024 / 1e-4  # 1024 B per 0.1 ms operation


@pytest.mark.parametrize(
    "root, bus, said",
    [
        ({"coll_bus_factor": -1.0}, 1.0, "coll_bus_factor -1 -> 1"),
        ({"coll_bus_factor": 1e300}, 1.0, "coll_bus_factor 1e+300 -> 1"),
        ({"coll_bus_factor": 0.0}, 1.0, "coll_bus_factor 0 -> 1"),
        ({"coll_algbw_bytes_factor": 0}, 1.0, "coll_algbw_bytes_factor 0 -> 1"),
        ({"coll_algbw_bytes_factor": -5}, 1.0, "coll_algbw_bytes_factor -5 -> 1"),
        ({"coll_algbw_bytes_factor": "x"}, 1.0, "coll_algbw_bytes_factor x -> 1"),
        ({"coll_bus_factor_formula": "(n-1)/n"}, 1.0, "coll_bus_factor_formula '(n-1)/n' -> '2(n-1)/n'"),
        ({"coll_ranks": 4, "coll_bus_factor": 1.0}, 1.5, "coll_bus_factor 1 -> 1.5"),
    ],
)
def test_forged_root_factors_are_npmpi_s_for_the_op_with_a_notice(tmp_path, root, bus, said, capsys):
    """A one-op file's factors come from its op and rank count (npmpi/coll/ops.py); a stored value
    that disagrees is named beside the one used, and the heading shows the one used."""
    from npmpi_analysis.cli import main
    from npmpi_analysis.coll.report import coll_heading

    ((_, a, rows),) = analysed(forged(tmp_path / "f.h5", **root))
    assert rows[0]["algbw_bit_s"] == pytest.approx(ALGBW) and rows[0]["busbw_bit_s"] == pytest.approx(
        ALGBW * bus
    )
    (notice,) = [n for n in a.notices if "factors are not" in n]
    assert said in notice and notice.endswith(
        f"npmpi's for allreduce on {a.attrs['coll_ranks']} ranks are used"
    )
    assert f"algbw = 1 x size / t; busbw = algbw x 2(n-1)/n = {bus:g}" in coll_heading(a)
    assert main([str(tmp_path / "f.h5")]) == 0 and said in capsys.readouterr().out


@pytest.mark.parametrize(
    "changed, algbw, busbw, said",
    [
        ({"algbw_bytes_factor": 1e300}, ALGBW, ALGBW, "coll_algbw_bytes_factor 1e+300 -> 1"),
        ({"bus_factor": -1.0}, ALGBW, ALGBW, "coll_bus_factor -1 -> 1"),
        ({"bus_factor": "x"}, ALGBW, ALGBW, "coll_bus_factor x -> 1"),
    ],
)
def test_a_series_forged_factors_are_npmpi_s(tmp_path, changed, algbw, busbw, said):
    """A series' algbw_bytes_factor of 1e300 gave 2.6e307 bit/s; its own factors are checked too."""
    table = [_row("allreduce", 2, **changed), _row("allgather", 4)]
    parts = analysed(forged(tmp_path / "s.h5", [0, 1], table))
    (_, a, rows), (_, b, other) = parts
    assert rows[0]["algbw_bit_s"] == pytest.approx(algbw) and rows[0]["busbw_bit_s"] == pytest.approx(busbw)
    assert any(
        said.split(" ->")[0] in n and "npmpi's for allreduce on 2 ranks are used" in n for n in a.notices
    )
    assert other[0]["algbw_bit_s"] == pytest.approx(4 * ALGBW)  # allgather: S = n m
    assert not any("factors are not" in n for n in b.notices)


def test_an_unknown_op_keeps_sane_factors_and_says_the_others(tmp_path, capsys):
    """An op npmpi does not know: a bus factor of 1e300 is not used (busbw blank, a problem); an algbw
    factor of 1e300 leaves its rows out (a problem); the other series analysed; exit 1."""
    from npmpi_analysis.cli import main

    table = [
        _row("allreduce", 2),
        _row("frobnicate", 2, bus_factor=1e300),
        _row("twiddle", 2, algbw_bytes_factor=1e300),
    ]
    path = forged(tmp_path / "u.h5", [0, 1, 2], table)
    found: list[str] = []
    parts = series_runs(load_run(path), "u", found)
    assert [name for _, name in parts] == ["u-allreduce-2", "u-frobnicate-2"]
    assert any(
        "frobnicate on 2 ranks (an op npmpi does not know): coll_bus_factor = 1e+300" in p for p in found
    )
    assert any("twiddle on 2 ranks" in p and "its rows are left out" in p for p in found)
    a = analyse_run(parts[1][0], "f")
    assert math.isnan(size_rows(a)[0]["busbw_bit_s"]) and size_rows(a)[0]["algbw_bit_s"] == pytest.approx(
        ALGBW
    )
    assert main([str(path), "-q"]) == 1
    err = capsys.readouterr().err
    assert err.count("its rows are left out") == 1 and "Traceback" not in err
    one = forged(tmp_path / "one.h5", [0, 0], [_row("twiddle", 2, algbw_bytes_factor=0)])
    assert main([str(one), "-q"]) == 1
    assert (
        "twiddle on 2 ranks (an op npmpi does not know): coll_algbw_bytes_factor = 0"
        in capsys.readouterr().err
    )


def test_rows_of_series_the_table_does_not_hold_are_said(tmp_path, capsys):
    """A one-entry series table in a 6-series, 10-row file was 'complete; 2 sizes analysed'."""
    from npmpi_analysis.cli import main

    path = forged(tmp_path / "t.h5", [0, 1, 2, 3, 4, 5, 0, 1, 2, 3], [_row("allreduce", 2)])
    assert main([str(path), "-q"]) == 1
    err = capsys.readouterr().err
    assert "t.h5: 8 of its 10 rows belong to series 1, 2, 3, 4, 5, which its series table" in err
    assert "(coll_series_json) of 1 does not hold: those rows are left out" in err


@pytest.mark.parametrize("status", ["weird", "", 5])
def test_a_status_no_writer_gives_is_said(tmp_path, status, capsys):
    from npmpi_analysis.cli import main

    path = forged(tmp_path / "w.h5", status=status)
    assert main([str(path)]) == 0
    out = capsys.readouterr().out
    assert (
        f"the file's status {str(status)!r} is none a writer gives (running, complete, interrupted, failed)"
        in out
    )
    assert (
        main([str(forged(tmp_path / "ok.h5"))]) == 0
        and "is none a writer gives" not in capsys.readouterr().out
    )
