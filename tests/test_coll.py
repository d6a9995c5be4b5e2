"""`python -m npmpi coll`: every op under mpirun with a power rank, its file and the analysis's
columns (OSU's latency across ranks, algbw/busbw, energy per operation) against the formulas and
against known power (a meter replaying constant watts; a synthetic file of two nodes of known
watts), a wrong result as a failed size, and bad input as one line and exit 2. Each op on 2 and 4
ranks in both kernels without a job per case: tests/inprocess/test_coll_steps.py."""

from __future__ import annotations

import math

import h5py
import numpy as np
import pytest
from conftest import run_mpi
from npmpi_analysis.coll.report import coll_cells, coll_heading
from npmpi_analysis.html_report import html_report
from npmpi_analysis.numbers.analyse import analyse_run, size_rows
from npmpi_analysis.synthetic import SynthChannel, SynthNode, write_run

from npmpi.coll.kind import KIND
from npmpi.coll.ops import OPS, check_choice, default_sizes, expected, pattern, size_problem
from npmpi.core.errors import UsageError
from npmpi.core.layout import node_layout
from npmpi.core.units import parse_size_bytes
from npmpi.runfile.reader import load_run

QUICK = ["--quick", "--baseline", "0", "--check", "-q", "--meter", "estimate"]
WATTS = 77.0  # the replayed node's constant power


def rows_of(path):
    run = load_run(path)
    a = analyse_run(run, "c")
    return run, a, size_rows(a)


def osu_latency(member_trial_s, iterations):
    """Each rank's mean time per operation; (avg, min, max) over the ranks, by hand."""
    out = []
    for k, i in enumerate(iterations):
        per_rank = [np.mean(member_trial_s[k, r]) / i for r in range(member_trial_s.shape[1])]
        out.append((sum(per_rank) / len(per_rank), min(per_rank), max(per_rank)))
    return out


@pytest.mark.mpi
@pytest.mark.slow
@pytest.mark.parametrize(
    "op, np_, sizes, kernel",
    [
        ("alltoall", 5, "4,4K", "python"),
        ("reduce_scatter", 5, "16,4K", "c"),
        ("bcast", 3, "1,4K", "c"),
        ("reduce", 3, "1,4K", "python"),
        ("allgather", 3, "1,4K", "c"),
        ("barrier", 3, None, "python"),
    ],
)
def test_every_op_runs_checked_with_a_power_rank(tmp_path, op, np_, sizes, kernel):
    args = ["coll", "--op", op, "--kernel", kernel, *QUICK, "-o", "c.h5"] + (
        ["--sizes", sizes] if sizes else []
    )
    proc = run_mpi(args, np=np_, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    n = np_ - 1
    with h5py.File(tmp_path / "c.h5", "r") as f:
        a = f.attrs
        assert (
            a["kind"] == "coll" and a["status"] == "complete" and a["coll_op"] == op and a["kernel"] == kernel
        )
        assert a["coll_ranks"] == n and len(a["member_ranks"]) == n and 0 in a["member_ranks"]
        assert a["coll_checked"] and f["pingpong/data_verified"][:].all()
        assert a["bytes_per_iteration_factor"] == (n if op in ("allgather", "alltoall") else 1)
        assert a["coll_bus_factor"] == pytest.approx(OPS[op].bus_factor(n))
        want = [0] if op == "barrier" else [parse_size_bytes(s) for s in sizes.split(",")]
        assert list(f["pingpong/size_bytes"][:]) == want
        assert f["pingpong/member_trial_s"].shape == (len(want), n, 3)
    run, _, rows = rows_of(tmp_path / "c.h5")
    for row, (avg, least, most) in zip(
        rows, osu_latency(run.pingpong.member_trial_s, run.pingpong.iterations), strict=True
    ):
        assert row["latency_avg_s"] == pytest.approx(avg, rel=1e-9)
        assert (row["latency_min_s"], row["latency_max_s"]) == pytest.approx((least, most), rel=1e-9)
        assert row["busbw_bit_s"] == pytest.approx(row["algbw_bit_s"] * OPS[op].bus_factor(n), rel=1e-12)
        assert row["energy_per_op_j"] == pytest.approx(row["power_w"] * row["time_per_op_s"], rel=1e-12)


@pytest.mark.mpi
def test_the_first_size_s_trials_last_the_target_time_as_the_others(tmp_path):
    """The first size's iterations come from a probe of it that is not kept (before: 20 steps per
    trial, stored, mostly the members' start: 23 µs for a 4 B allreduce on 4 ranks whose 256 B took 7).

    Judged on 7 trials against bounds with a margin of 10 both ways: the old first size's trials
    lasted 0.5 ms of the 0.05 s asked. The probe takes the best of its 7 trials of 20 steps, and each
    size here is judged by its best trial; with 3 trials, a burst of another job over the probe or
    the first size's trials made them 0.2 ms or 1.5 s (seen on this 2-core machine in CI, once in
    four runs of the suite, and often with a second job beside)."""
    args = ["coll", "--op", "allreduce", "--kernel", "c", "--sizes", "4,8", "--trials", "7"]
    proc = run_mpi([*args, "--target-time", "0.05", "-o", "c.h5"], np=3, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    with h5py.File(tmp_path / "c.h5", "r") as f:
        assert list(f["pingpong/size_bytes"][:]) == [4, 8]  # the probe is no row
        iterations, trials = f["pingpong/iterations"][:], f["pingpong/trial_s"][:]
    # the trials last about --target-time, as the size after it (the old 20 stored steps of 23 us
    # lasted 0.5 ms): the iterations are the probe's choice, fewer on a loaded machine (12 seen with
    # other jobs on the 2 cores, 300 or more on a quiet one) and at least NetPIPE's floor, the trials
    best = trials.min(axis=1)
    assert 0.005 < np.median(trials[0]) < 0.5 and 0.005 < np.median(trials[1]) < 0.5, trials
    assert iterations[0] >= 7
    per_op = best / iterations  # each size's best trial per operation
    assert per_op[0] < 3 * per_op[1], per_op


@pytest.mark.mpi
@pytest.mark.slow
def test_energy_per_operation_is_the_known_power_times_the_time_of_one(tmp_path):
    """A node replaying a constant 77 W: J/op = 77 W x t / ops exactly, t the mean of each trial's
    slowest rank; pJ per bus bit = 77 W / (n busbw) with allreduce's 2(n-1)/n (every rank's bits, as
    every node's energy); the power above idle is zero."""
    (tmp_path / "trace.csv").write_text(f"time_s,power_w\n0,{WATTS}\n100000,{WATTS}\n")
    args = ["coll", "--op", "allreduce", "--dtype", "float32", "--sizes", "4,64K", "--quick", "--check"]
    args += ["--meter", "replay:trace.csv,interval=0.02", "--baseline", "0.3", "-q", "-o", "c.h5"]
    proc = run_mpi(args, np=5, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    run, a, rows = rows_of(tmp_path / "c.h5")
    pp = run.pingpong
    assert a.kind_figures is not None and a.power is not None and run.attrs["coll_bus_factor"] == 1.5
    for k, row in enumerate(rows):
        trials = pp.trial_s[k]
        assert np.allclose(trials, pp.member_trial_s[k].max(axis=0))  # the slowest member's trial
        t = np.mean(trials) / pp.iterations[k]
        sigma_t = np.std(trials, ddof=1) / math.sqrt(len(trials)) / pp.iterations[k]
        assert row["power_w"] == pytest.approx(WATTS, rel=1e-9)
        assert row["energy_per_op_j"] == pytest.approx(WATTS * t, rel=1e-9)
        assert row["energy_per_op_sigma_j"] == pytest.approx(WATTS * sigma_t, rel=1e-6, abs=1e-15)
        algbw = 8 * pp.size_bytes[k] / t
        assert row["algbw_bit_s"] == pytest.approx(algbw, rel=1e-9)
        assert row["busbw_bit_s"] == pytest.approx(1.5 * algbw, rel=1e-9)
        assert row["energy_pj_bus_bit"] == pytest.approx(
            1e12 * WATTS / (4 * 1.5 * algbw), rel=1e-9
        )  # 4 ranks'
        assert row["energy_pj_bit"] == pytest.approx(1e12 * WATTS / (4 * algbw), rel=1e-9)
        assert row["node0_energy_per_op_j"] == pytest.approx(row["energy_per_op_j"], rel=1e-12)
        assert abs(row["dynamic_energy_per_op_j"]) <= max(
            row["dynamic_energy_per_op_sigma_j"], 1e-12 * WATTS * t
        )


T0 = 1_000.0
TRIALS = [[0.10, 0.11, 0.12], [0.20, 0.22, 0.21]]


def synthetic_nodes() -> list[SynthNode]:
    """Two nodes of 60 W and 90 W from T0 - 1 (idle 40 W and 50 W before)."""
    stamps = np.arange(T0 - 4, T0 + 8, 0.01)
    return [
        SynthNode([SynthChannel(stamps, np.where(stamps < T0 - 1, idle, busy), sample_interval_s=0.01)])
        for idle, busy in ((40.0, 60.0), (50.0, 90.0))
    ]


def synthetic_coll(path, ranks: int = 2, scale: float = 1.0):
    """A coll file of allreduce on `ranks` ranks, two nodes of 60 W and 90 W while it runs (idle 40 W
    and 50 W before), trials TRIALS x `scale` of 1000 and 500 iterations at 1 KiB and 4 KiB."""
    nodes = synthetic_nodes()
    trials = [[t * scale for t in row] for row in TRIALS]
    starts = [[T0, T0 + 0.5, T0 + 1.0], [T0 + 2, T0 + 2.5, T0 + 3.0]]
    ends = [[s + d for s, d in zip(ss, dd, strict=True)] for ss, dd in zip(starts, trials, strict=True)]
    attrs = {"kind": "coll", "mode": "coll", "bytes_per_iteration_factor": 1, "one_way_divisor": 1}
    attrs |= {"coll_op": "allreduce", "coll_ranks": ranks, "coll_bus_factor": 2 * (ranks - 1) / ranks}
    attrs |= {"coll_bus_factor_formula": "2(n-1)/n"}
    return write_run(
        path, [1024, 4096], [1000, 500], trials, starts, ends, nodes=nodes, baseline=(T0 - 3.5, T0 - 1.5),
        attrs=attrs,
    )  # fmt: skip


def test_energy_per_bit_counts_every_rank_s_bits_as_a_pair_counts_both_directions(tmp_path):
    """The same two nodes (60 W and 90 W), the same trials: a ping-pong of 1000 round trips of 1 KiB
    and a 2-rank allreduce of 1000 operations of 1 KiB each move 1 KiB each way per iteration, so they
    cost the same per bit (before: the collective's bits were one rank's, against every node's
    energy: 2x the pair's here, n x in general); 4 ranks move twice the bits of 2 in the same time."""
    from npmpi_analysis.numbers.size_comparison import comparison_blocks

    pair = write_run(
        tmp_path / "p.h5", [1024], [1000], [TRIALS[0]], [[T0, T0 + 0.5, T0 + 1.0]],
        nodes=synthetic_nodes(), baseline=(T0 - 3.5, T0 - 1.5),
    )  # fmt: skip
    _, pa, (pair_row,) = rows_of(pair)
    _, ca, rows = rows_of(synthetic_coll(tmp_path / "c.h5"))
    t = np.mean(TRIALS[0]) / 1000
    assert pair_row["energy_pj_bit"] == pytest.approx(1e12 * 150.0 * t / (2 * 8 * 1024), rel=1e-9)
    assert rows[0]["energy_pj_bit"] == pytest.approx(pair_row["energy_pj_bit"], rel=1e-9)
    assert rows[0]["energy_pj_bus_bit"] == pytest.approx(pair_row["energy_pj_bit"], rel=1e-9)  # factor 1
    blocks = {title: rows for title, _, rows in comparison_blocks([pa, ca])}
    assert blocks["energy per bit (pJ/bit)"][0][-1] == "1"
    _, _, four = rows_of(synthetic_coll(tmp_path / "c4.h5", ranks=4))
    assert four[0]["energy_pj_bit"] == pytest.approx(rows[0]["energy_pj_bit"] / 2, rel=1e-9)
    assert four[0]["energy_pj_bus_bit"] == pytest.approx(four[0]["energy_pj_bit"] / 1.5, rel=1e-9)


def test_energy_per_operation_sums_every_node_s_known_power(tmp_path):
    """Two nodes of 60 W and 90 W while the op runs (idle 40 W and 50 W before): J/op = 150 W x t,
    the dynamic part 60 W x t, each node its own; sigma from the trials' spread alone."""
    trials = TRIALS
    path = synthetic_coll(tmp_path / "c.h5")
    _, a, rows = rows_of(path)
    for k, (row, i) in enumerate(zip(rows, [1000, 500], strict=True)):
        t, sigma_t = np.mean(trials[k]) / i, np.std(trials[k], ddof=1) / math.sqrt(3) / i
        assert row["power_w"] == pytest.approx(150.0)
        assert row["energy_per_op_j"] == pytest.approx(150.0 * t, rel=1e-9)
        assert row["energy_per_op_sigma_j"] == pytest.approx(150.0 * sigma_t, rel=1e-6)
        assert row["dynamic_energy_per_op_j"] == pytest.approx(60.0 * t, rel=1e-9)
        assert (row["node0_energy_per_op_j"], row["node1_energy_per_op_j"]) == pytest.approx((60 * t, 90 * t))
        # 2 ranks, bus factor 1: every rank's bus bits are 2 x 8 m
        assert row["energy_pj_bus_bit"] == pytest.approx(
            1e12 * 150.0 * t / (2 * 8 * [1024, 4096][k]), rel=1e-9
        )
        assert row["energy_pj_bit"] == pytest.approx(row["energy_pj_bus_bit"], rel=1e-9)
        assert math.isnan(row["latency_avg_s"])  # no member times in this file: no OSU latency, never a guess
        assert math.isnan(row["dynamic_energy_per_op_bound_j"])  # 60 W above idle: a figure
    assert a.summary()["collective"]["op"] == "allreduce"
    heading = coll_heading(a)
    assert "allreduce on 2 ranks" in heading and "busbw = algbw x 2(n-1)/n = 1" in heading
    headers, cells = coll_cells(a, pm="+-")
    assert cells[0][:2] == ["1024", "1000"] and "uJ/op +- σ" in headers
    assert cells[0][headers.index("uJ/op +- σ")].startswith(f"{150 * 0.11 / 1000 * 1e6:.4g} +- ")
    page = html_report([a], [], []).decode()
    assert "busbw = algbw x 2(n-1)/n" in page and "pJ/bus bit" in page


def test_the_figures_of_collectives_and_of_energy_against_ranks(tmp_path):
    from npmpi_analysis.figures.run import all_plots

    runs = [
        analyse_run(load_run(synthetic_coll(tmp_path / f"r{n}.h5", n, n / 2)), f"r{n}") for n in (2, 4, 8)
    ]
    plots = {p.name: p for p in all_plots(runs)}
    assert "collectives" in plots and "simulated" in plots["collectives"].caveat.lower()
    (ax,) = plots["collectives_energy_vs_ranks"].figure.axes
    lines = {label: bars.lines[0] for bars, label in zip(*ax.get_legend_handles_labels(), strict=True)}
    assert sorted(lines) == ["allreduce 1024 B", "allreduce 4096 B"]
    x, y = lines["allreduce 1024 B"].get_data()
    # 150 W x the mean trial / 1000 iterations, the trials scaled by n / 2
    assert list(x) == [2, 4, 8] and np.allclose(y, [150 * 0.11 * n / 2 / 1000 * 1e6 for n in (2, 4, 8)])
    assert all_plots(runs[:1]) and "collectives_energy_vs_ranks" not in {p.name for p in all_plots(runs[:1])}


@pytest.mark.mpi
@pytest.mark.slow
def test_a_wrong_result_fails_its_size_and_keeps_the_ones_before(tmp_path):
    args = ["coll", "--op", "allreduce", "--dtype", "int32", "--sizes", "16,1K,64K", *QUICK, "-o", "c.h5"]
    proc = run_mpi(args, np=3, cwd=tmp_path, env={"NPMPI_FAULT_CORRUPT_SIZE": "1024"})
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.count("npmpi: error: result check failed at message size 1024 B on rank ") == 1
    with h5py.File(tmp_path / "c.h5", "r") as f:
        assert f.attrs["status"] == "failed" and list(f["pingpong/size_bytes"][:]) == [16]


@pytest.mark.mpi
def test_too_few_ranks_and_an_unequal_share_are_one_line_on_every_rank(tmp_path):
    proc = run_mpi(["coll", "--meter", "estimate"], np=2, cwd=tmp_path)
    assert proc.returncode == 2 and "coll needs 2 measuring ranks" in proc.stderr
    proc = run_mpi(["coll", "--op", "reduce_scatter", "--sizes", "8"], np=3, cwd=tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.count("8 B does not split into 3 equal shares") == 1


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--op", "gather"], "--op 'gather': unknown; choose one of allreduce"),
        (["--dtype", "half"], "--dtype 'half': unknown"),
        (["--reduce-op", "avg"], "--reduce-op 'avg': unknown"),
        (["--reduce-op", "bxor", "--dtype", "float64"], "MPI defines it on integers only"),
        (["--dtype", "float64", "--sizes", "12"], "12 B is not a whole number of 8-byte items"),
        (["--op", "barrier", "--sizes", "64"], "--op barrier moves no data"),
        (["--sizes", "0"], "0 B is no collective"),
        (["--kernel", "fortran"], "--kernel 'fortran': choose python or c"),
    ],
)
def test_bad_input_is_one_line(argv, words):
    with pytest.raises(UsageError, match=words.replace("(", r"\(").replace(")", r"\)")):
        KIND.parse(["--quick", *argv])


def test_a_share_per_rank_is_checked_once_the_ranks_are_known():
    opts = KIND.parse(["--op", "reduce_scatter", "--sizes", "18,48"])
    layout = node_layout(["h"] * 4, ["h"] * 4, power=False)
    with pytest.raises(UsageError, match="18 B does not split into 4 equal shares"):
        KIND.groups(layout, opts)
    assert KIND.groups(node_layout(["h"] * 3, ["h"] * 3, power=False), opts).groups == ((0, 1, 2),)


def test_osu_sizes_and_the_table():
    assert default_sizes(OPS["allreduce"], 1, 4) == tuple(1 << k for k in range(21))  # 1 B to 1 MiB
    assert default_sizes(OPS["allreduce"], 4, 4)[0] == 4 and default_sizes(OPS["barrier"], 4, 4) == (0,)
    assert default_sizes(OPS["reduce_scatter"], 4, 4)[0] == 16


def test_reduce_scatters_default_sizes_split_into_whole_shares_at_any_rank_count():
    """Before: powers of two from n items, which 3, 5, 6 … ranks cannot split: the Python kernel
    refused the first size, the C kernel reduced n x floor(m/n) bytes and reported m."""
    assert default_sizes(OPS["reduce_scatter"], 1, 3)[:5] == (6, 9, 18, 33, 66)
    assert default_sizes(OPS["reduce_scatter"], 8, 4) == tuple(1 << k for k in range(5, 21))  # unchanged
    for n in (3, 5, 6, 7, 12):
        for itemsize in (1, 4, 8):
            sizes = default_sizes(OPS["reduce_scatter"], itemsize, n)
            assert all(s % (n * itemsize) == 0 for s in sizes) and len(sizes) >= 14, (n, itemsize)
    opts = KIND.parse(["--op", "reduce_scatter"])
    assert KIND.groups(node_layout(["h"] * 3, ["h"] * 3, power=False), opts).groups == ((0, 1, 2),)
    (series,) = KIND.series(opts, 3)
    assert series.sizes == default_sizes(OPS["reduce_scatter"], 1, 3)
    assert size_problem(OPS["alltoall"], 4, 3, [4, 8]) is None
    assert [OPS[o].bus_factor(4) for o in OPS] == [1.5, 0.75, 0.75, 1, 1, 0.75, 0]
    check_choice("allreduce", "int32", "band")
    # allgather: rank r's block lands at r everywhere; alltoall: block s of rank r comes from rank s
    dt = np.dtype("i4")
    got = expected(OPS["allgather"], None, 1, 3, 2, dt)
    assert list(got) == [*pattern(0, 2, dt), *pattern(1, 2, dt), *pattern(2, 2, dt)]
    got = expected(OPS["alltoall"], None, 1, 3, 2, dt)
    assert list(got) == [*pattern(0, 6, dt)[2:4], *pattern(1, 6, dt)[2:4], *pattern(2, 6, dt)[2:4]]


@pytest.mark.mpi
@pytest.mark.slow
@pytest.mark.timeout(150)
def test_a_member_frozen_mid_collective_ends_the_job_with_one_line_and_a_failed_file(tmp_path):
    """SIGSTOP a member (C kernel: the others wait inside MPI_Allreduce with the GIL released): rank
    0's stall watchdog ends the job within the bound, one line naming the rank, every size before
    kept (tests/test_reliability_stall.py for the run)."""
    from support.reliability import Job, freeze_until_the_end

    args = ["coll", "--op", "allreduce", "--kernel", "c", "--trials", "3", "--target-time", "0.1"]
    args += ["--sizes", "1K,2K,4K,8K,16K,32K,64K,128K,256K,512K,1M"]
    args += ["--stall-timeout", "3", "-o", "frozen-coll.h5"]
    job = Job(args, 3, tmp_path, "frozen-coll.h5")
    took, errors = freeze_until_the_end(job, lambda: job.rows_printed() >= 3, 2, 60)
    assert len(errors) == 1 and "stopped answering" in errors[0] and "completed sizes are in" in errors[0]
    # inside the collective rank 0 waits for every member at once: it names them all, never one guess;
    # stopped between trials, rank 2 is the one whose readiness or results rank 0 waits for
    inside = "npmpi: error: one of the measuring ranks 1, 2 (inside a step of the whole group"
    assert errors[0].startswith((inside, "npmpi: error: rank 2 (")), errors
    assert not errors[0].startswith("npmpi: error: rank 1"), errors
    with h5py.File(tmp_path / "frozen-coll.h5", "r") as f:
        assert f.attrs["status"] == "failed" and "stopped answering" in str(f.attrs["status_message"])
        assert f["pingpong/size_bytes"].shape[0] == job.rows_printed() >= 3
        assert took < f.attrs["stall_bound_s"] + 12, (took, f.attrs["stall_bound_s"])  # mpirun's abort, load
