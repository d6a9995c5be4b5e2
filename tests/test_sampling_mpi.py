"""--order random and --precision under real mpirun (`-np 2`, a few sizes, short trials): the random
order really permutes (trial start times not monotone in size) and is the one its stored seed draws,
in both kernels; ascending keeps NetPIPE's order and no measure_index; --precision's stored fields
(trials run, precision_reached, the relative half-width) agree with the stored trial times; a coll
file of two series in random order; and the unchanged analysis reads every one of these files."""

from __future__ import annotations

import h5py
import numpy as np
import pytest
from conftest import run_mpi
from npmpi_analysis.numbers.analyse import analyse_run, size_rows

from npmpi.core import sampling
from npmpi.persize.transmitter import schedule_for
from npmpi.run.options import parse_options
from npmpi.runfile.reader import load_run

pytestmark = pytest.mark.mpi
SEED = 7  # a seed whose order of the sizes below is not ascending (checked in the test)
SWEEP = ["-l", "1", "-u", "256", "--perturbation", "0", "--trials", "3", "--target-time", "0.001", "-q"]


def _measured_sizes(path) -> tuple[list[int], list[int]]:
    """(sizes in the order measured by measure_index, by the first trial's start)."""
    with h5py.File(path) as f:
        sizes = f["pingpong/size_bytes"][:]
        index = f["pingpong/measure_index"][:]
        starts = f["pingpong/trial_start_unix_s"][:, 0]
    return sizes[np.argsort(index)].tolist(), sizes[np.argsort(starts)].tolist()


@pytest.mark.parametrize("kernel", ["python", "c"])
def test_random_order_permutes_and_its_stored_seed_reproduces_it(tmp_path, kernel):
    out = tmp_path / "random.h5"
    argv = [*SWEEP, "--order", "random", "--order-seed", str(SEED), "--kernel", kernel, "-o", str(out)]
    res = run_mpi(argv, cwd=tmp_path, timeout=90)
    assert res.returncode == 0, res.stderr
    points = [p.size_bytes for p in schedule_for(parse_options(argv))]
    with h5py.File(out) as f:
        assert f.attrs["size_order"] == "random" and int(f.attrs["size_order_seed"]) == SEED
        stored_seed = int(f.attrs["size_order_seed"])
        sizes = f["pingpong/size_bytes"][:].tolist()
    assert sizes == sorted(points)  # the rows are stored ascending
    expected = [points[i] for i in sampling.permutations([len(points)], stored_seed)[0]]
    assert expected != sorted(points)  # the seed permutes
    by_index, by_start = _measured_sizes(out)
    assert by_index == expected == by_start  # and the sizes were measured in its order
    run = load_run(out)
    assert np.all(np.diff(run.pingpong.size_bytes) > 0)
    assert len(size_rows(analyse_run(run, "random"))) == len(points)


def test_ascending_is_netpipe_s_order_and_unchanged(tmp_path):
    out = tmp_path / "ascending.h5"
    res = run_mpi([*SWEEP, "-o", str(out)], cwd=tmp_path, timeout=90)
    assert res.returncode == 0, res.stderr
    with h5py.File(out) as f:
        assert f.attrs["size_order"] == "ascending" and "size_order_seed" not in f.attrs
        assert "measure_index" not in f["pingpong"] and "precision_reached" not in f["pingpong"]
        assert f["pingpong/trial_s"].shape[1] == 3
        starts = f["pingpong/trial_start_unix_s"][:, 0]
    assert np.all(np.diff(starts) > 0)


def test_precision_stores_its_trials_and_whether_it_was_reached(tmp_path):
    out = tmp_path / "precision.h5"
    argv = [*SWEEP, "--precision", "2%", "--max-trials", "12", "--precision-cap", "0.2", "-o", str(out)]
    res = run_mpi(argv, cwd=tmp_path, timeout=90)
    assert res.returncode == 0, res.stderr
    with h5py.File(out) as f:
        assert f.attrs["precision"] == pytest.approx(0.02)
        assert f.attrs["precision_cap_s"] == pytest.approx(0.2)
        assert int(f.attrs["precision_max_trials"]) == 12
        trial_s = f["pingpong/trial_s"][:]
        reached = f["pingpong/precision_reached"][:]
        hw = f["pingpong/precision_rel_halfwidth"][:]
        starts, ends = f["pingpong/trial_start_unix_s"][:], f["pingpong/trial_end_unix_s"][:]
    assert trial_s.shape[1] == 12
    ran = (~np.isnan(trial_s)).sum(axis=1)
    assert np.all((ran >= 3) & (ran <= 12))
    for k in range(len(ran)):
        times = trial_s[k, : ran[k]]
        assert np.isnan(trial_s[k, ran[k] :]).all() and not np.isnan(times).any()
        assert hw[k] == pytest.approx(sampling.relative_halfwidth(times.tolist()))
        assert bool(reached[k]) == (hw[k] <= 0.02)
        if reached[k]:  # stopped at the first trial count where the interval was within 2 %
            assert ran[k] == 3 or sampling.relative_halfwidth(times[:-1].tolist()) > 0.02
        else:  # went on to --max-trials or to the cap (a trial's start past 0.2 s after the first)
            assert ran[k] == 12 or ends[k, ran[k] - 1] - starts[k, 0] >= 0.2
    assert len(size_rows(analyse_run(load_run(out), "precision"))) == len(ran)


def test_a_coll_file_in_random_order_with_precision(tmp_path):
    out = tmp_path / "coll.h5"
    argv = ["coll", "--op", "allreduce,bcast", "--sizes", "1,64,1K,4K", "--trials", "3"]
    argv += ["--target-time", "0.001", "--order", "random", "--order-seed", "3", "-q"]
    argv += ["--precision", "5%", "--max-trials", "8", "-o", str(out)]
    res = run_mpi(argv, cwd=tmp_path, timeout=90)
    assert res.returncode == 0, res.stderr
    with h5py.File(out) as f:
        assert f.attrs["size_order"] == "random" and int(f.attrs["size_order_seed"]) == 3
        sizes = f["pingpong/size_bytes"][:].tolist()
        series = f["pingpong/coll_series"][:].tolist()
        index = f["pingpong/measure_index"][:]
        assert f["pingpong/member_trial_s"].shape[2] == 8
        assert len(f["pingpong/precision_reached"]) == 8
    assert sizes == [1, 64, 1024, 4096] * 2 and series == [0] * 4 + [1] * 4
    first, second = sampling.permutations([4, 4], 3)
    assert [sizes[i] for i in np.argsort(index)] == [sizes[i] for i in first] + [sizes[i] for i in second]
    assert load_run(out).pingpong.coll_series.tolist() == series
