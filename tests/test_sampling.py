"""How a sweep samples its sizes (npmpi/core/sampling.py), in-process: the seeded order (--order
random), the stopping rule of --precision on given trial times (a quiet size stops at --trials, a
noisy one goes on to the cap or --max-trials), each size's iterations from the nearest measured size,
the writer keeping /pingpong ascending with each row's measure_index, and bad values as one line."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest

from npmpi.coll.kind import KIND
from npmpi.core import sampling
from npmpi.core.errors import UsageError
from npmpi.run.options import parse_options
from npmpi.runfile.format import SizeResult
from npmpi.runfile.reader import load_run
from npmpi.runfile.writer import RunWriter

QUIET = [1.000, 1.001, 0.999, 1.000, 1.002, 0.998, 1.000]  # 7 trials within ±0.2 %
NOISY = [1.0, 1.6, 0.7, 1.3, 0.9, 1.5, 0.8]


def test_t_quantile_is_the_table_and_tends_to_the_normal_one():
    assert sampling.t975(1) == pytest.approx(12.706)
    assert sampling.t975(6) == pytest.approx(2.447)
    assert sampling.t975(30) == pytest.approx(2.042)
    assert sampling.t975(40) == pytest.approx(2.021, abs=2e-3)
    assert sampling.t975(120) == pytest.approx(1.980, abs=2e-3)
    assert sampling.t975(0) == math.inf


def test_relative_halfwidth_by_hand():
    times = [1.0, 2.0, 3.0]  # mean 2, s 1: 4.303 / sqrt(3) / 2
    assert sampling.relative_halfwidth(times) == pytest.approx(4.303 / math.sqrt(3) / 2)
    assert sampling.relative_halfwidth([1.0]) == math.inf


def test_a_quiet_size_stops_at_the_minimum_and_a_noisy_one_goes_on_to_the_cap():
    p, cap = 0.01, 10.0
    assert not sampling.should_stop(QUIET[:6], 0.0, 1.0, 7, p, cap)  # fewer than --trials
    assert sampling.should_stop(QUIET, 0.0, 1.0, 7, p, cap)  # 7 quiet trials: within 1 %
    noisy = list(NOISY)
    for k in range(30):  # within the cap the noisy size never reaches 1 %
        assert not sampling.should_stop(noisy, 0.0, 1.0 + k * 0.1, 7, p, cap)
        noisy.append(NOISY[k % len(NOISY)])
    assert sampling.should_stop(noisy, 0.0, cap, 7, p, cap)  # the cap's seconds since the first start


def test_the_rule_the_driver_calls_and_the_row_fields():
    opts = parse_options(["--precision", "1%", "--trials", "7", "--target-time", "0.01"])
    assert opts.precision == pytest.approx(0.01) and sampling.trials_bound(opts) == 100
    assert sampling.cap_s(opts) == pytest.approx(10 * 7 * 0.01)
    enough = sampling.stop_rule(opts)
    import time

    now = time.time()
    assert enough([(t, now) for t in QUIET])
    assert not enough([(t, now) for t in NOISY])
    ints, floats = sampling.precision_fields(opts, QUIET)
    assert ints == {"precision_reached": 1} and floats["precision_rel_halfwidth"] < 0.01
    assert sampling.precision_fields(parse_options([]), QUIET) == ({}, {})
    assert sampling.stop_rule(parse_options([])) is None
    assert sampling.trials_bound(parse_options([])) == 7


def test_the_same_seed_gives_the_same_order_and_ascending_is_the_identity():
    a = parse_options(["--order", "random", "--order-seed", "42"])
    b = parse_options(["--order", "random", "--order-seed", "42"])
    c = parse_options(["--order", "random", "--order-seed", "43"])
    order = sampling.measure_order(20, a)
    assert sorted(order) == list(range(20)) and order != list(range(20))
    assert order == sampling.measure_order(20, b) != sampling.measure_order(20, c)
    assert sampling.measure_order(20, parse_options([])) == list(range(20))
    drawn = parse_options(["--order", "random"])
    assert 0 <= drawn.order_seed <= sampling.MAX_SEED
    assert sampling.file_attrs(a) == {"size_order": "random", "size_order_seed": 42}
    # a coll file's series: the series-th permutation drawn from the one generator
    assert sampling.measure_order(5, a, 1, [20, 5]) == sampling.permutations([20, 5], 42)[1]


def test_iterations_under_random_order_follow_the_nearest_measured_size():
    measured = {64: 2e-6, 4096: 10e-6}
    assert sampling.nearest_time(100, measured) == pytest.approx(2e-6 * 100 / 64)
    assert sampling.nearest_time(3000, measured) == pytest.approx(10e-6)  # smaller: its time
    assert sampling.nearest_time(1024, measured) is None  # none within a factor of 2: a probe
    assert sampling.nearest_time(0, {1: 1e-6}) == pytest.approx(1e-6)


def _row(size: int, series: int | None = None) -> SizeResult:
    cols = {"coll_series": series} if series is not None else None
    return SizeResult(
        size, 10, 2, [size * 1e-6, size * 2e-6], [float(size)] * 2, [size + 1.0] * 2, row_columns=cols
    )


def test_the_writer_keeps_rows_ascending_and_stores_when_each_was_measured(tmp_path):
    path = tmp_path / "sorted.h5"
    w = RunWriter(path, {"kind": "run"}, {"hostname": ["a", "a"]}, 3, sort_rows=True)
    order = [16, 1, 1024, 4, 64]
    for size in order:
        w.append(_row(size))
    w.finish("complete")
    pp = load_run(path).pingpong
    assert pp.size_bytes.tolist() == sorted(order)
    assert pp.trial_start_unix_s[:, 0].tolist() == [float(s) for s in sorted(order)]  # rows moved whole
    assert np.isnan(pp.trial_s[:, 2]).all()  # the third trial never ran
    import h5py

    with h5py.File(path) as f:
        index = f["pingpong/measure_index"][:]
    assert [sorted(order)[i] for i in np.argsort(index)] == order


def test_a_coll_file_s_rows_go_in_their_place_within_their_series(tmp_path):
    path = tmp_path / "series.h5"
    w = RunWriter(path, {"kind": "run"}, {"hostname": ["a", "a"]}, 2, sort_rows=True)
    for size, series in [(64, 0), (1, 0), (16, 0), (8, 1), (2, 1)]:
        w.append(_row(size, series))
    w.finish("complete")
    import h5py

    with h5py.File(path) as f:
        assert f["pingpong/size_bytes"][:].tolist() == [1, 16, 64, 2, 8]
        assert f["pingpong/coll_series"][:].tolist() == [0, 0, 0, 1, 1]


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--precision", "0"], "--precision '0': give a relative precision above 0"),
        (["--precision", "-1"], "--precision '-1': give a relative precision above 0"),
        (["--precision", "abc"], "--precision 'abc': give a relative precision above 0"),
        (["--precision", "150%"], "--precision '150%': give a relative precision above 0"),
        (["--order", "sideways"], "--order 'sideways': give ascending or random"),
        (["--order-seed", "3"], "--order-seed needs --order random"),
        (["--max-trials", "50"], "--precision-cap and --max-trials need --precision"),
        (["--precision", "1%", "--max-trials", "1"], "--max-trials 1: give 2 to 10000 trials per size"),
        (["--precision", "1%", "--precision-cap", "0"], "--precision-cap 0: give a time above 0"),
    ],
)
def test_bad_values_are_refused_in_one_line(argv, words):
    for parse in (parse_options, KIND.parse):
        with pytest.raises(UsageError, match=words.replace("(", r"\(")):
            parse(argv)


def test_the_command_line_refuses_with_one_line_and_exit_2():
    for argv in (["--precision", "0"], ["coll", "--order", "sideways"]):
        out = subprocess.run(
            [sys.executable, "-m", "npmpi", *argv], capture_output=True, text=True, timeout=60, check=False
        )
        assert out.returncode == 2
        lines = (out.stdout + out.stderr).strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("npmpi: error: --"), lines
