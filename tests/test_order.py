"""`--order random` (npmpi/core/order.py): the sizes of a run or a coll measured in a seeded
permutation, each size's iterations from the sizes measured nearest it, the seed stored
(size_order_seed) and the same seed giving the same order; the analysis reads the rows in size
order; bad values refused in one line."""

from __future__ import annotations

import csv
from types import SimpleNamespace

import h5py
import numpy as np
import pytest
from conftest import run_mpi

from npmpi.core.errors import UsageError
from npmpi.core.order import NO_SEED, RateBook, order_seed, ordered


def opts(order="random", seed=7):
    return SimpleNamespace(size_order=order, size_order_seed=seed)


def test_the_order_is_a_seeded_permutation_and_ascending_is_untouched():
    items = list(range(40))
    one, again, other = ordered(items, opts()), ordered(items, opts()), ordered(items, opts(seed=8))
    assert sorted(one) == items and one != items
    assert one == again and one != other
    assert ordered(items, opts(), stream=1) != one  # a coll file's series: each its own
    assert ordered(items, opts("ascending", None)) == items
    assert order_seed(opts("ascending", None)) == NO_SEED and order_seed(opts()) == 7
    drawn = order_seed(opts(seed=None))
    assert drawn >= 0 and order_seed(opts(seed=None)) == drawn  # drawn once per process


def test_the_rate_book_interpolates_between_measured_sizes():
    book = RateBook()
    assert book.estimate(64) == 0.0
    book.add(8, 2e-6)
    book.add(1024, 4e-6)
    assert book.estimate(8) == 2e-6 and book.estimate(1) == 2e-6  # below the smallest: its time
    assert book.estimate(516) == pytest.approx(3e-6)  # halfway: the straight line
    assert book.estimate(4096) == pytest.approx(16e-6)  # above the largest: scaled by the size ratio
    book.add(1024, 5e-6)  # measured again: the later time
    assert book.estimate(1024) == 5e-6
    book.add(2048, 0.0)  # no time: not kept
    assert book.estimate(2048) == pytest.approx(10e-6)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--order", "sideways"], "--order 'sideways': give ascending or random"),
        (["--order-seed", "3"], "--order-seed orders the sizes at random: give it with --order random"),
        (["--order", "random", "--order-seed", "-1"], "--order-seed -1: give a seed from 0 to 2^63 - 1"),
    ],
)
def test_bad_order_values_are_one_line(argv, message):
    from npmpi.run.options import parse_options

    with pytest.raises(UsageError) as err:
        parse_options(argv)
    assert str(err.value) == message


@pytest.mark.mpi
def test_a_random_run_measures_its_sizes_out_of_order_and_the_analysis_in_order(tmp_path):
    from npmpi_analysis.cli import main

    args = ["-u", "4K", "--quick", "--order", "random", "--order-seed", "11"]
    for name in ("a.h5", "b.h5"):
        proc = run_mpi([*args, "-q", "-o", name], np=2, cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
    with h5py.File(tmp_path / "a.h5", "r") as a, h5py.File(tmp_path / "b.h5", "r") as b:
        assert a.attrs["size_order"] == "random" and a.attrs["size_order_seed"] == 11
        assert a.attrs["format_version"] == "1.11"
        sizes, starts = a["pingpong/size_bytes"][:], a["pingpong/trial_start_unix_s"][:, 0]
        assert list(sizes) == list(b["pingpong/size_bytes"][:])  # the same seed, the same order
    assert list(sizes) != sorted(sizes) and np.all(np.diff(starts) > 0)  # rows as measured, in time
    assert main([str(tmp_path / "a.h5"), "-q", "--csv", str(tmp_path / "a.csv")]) == 0
    rows = list(csv.DictReader((tmp_path / "a.csv").read_text().splitlines()))
    assert [int(r["size_bytes"]) for r in rows] == sorted(sizes)  # the analysis: by size
    by_size = dict(zip(sizes.tolist(), starts.tolist(), strict=True))
    assert all(float(r["window_start_unix_s"]) == pytest.approx(by_size[int(r["size_bytes"])]) for r in rows)


@pytest.mark.mpi
def test_a_random_coll_permutes_each_series(tmp_path):
    args = ["coll", "--op", "allreduce,bcast", "--sizes", "4,64,1K,16K,64K", "--quick", "--order", "random"]
    proc = run_mpi([*args, "-q", "-o", "c.h5"], np=3, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    with h5py.File(tmp_path / "c.h5", "r") as f:
        assert f.attrs["size_order"] == "random" and f.attrs["size_order_seed"] >= 0
        sizes, series = f["pingpong/size_bytes"][:], f["pingpong/coll_series"][:]
    for k in (0, 1):
        mine = list(sizes[series == k])
        assert sorted(mine) == [4, 64, 1024, 16384, 65536]
    assert any(list(sizes[series == k]) != sorted(sizes[series == k]) for k in (0, 1))
