"""npmpi-analyze's bandwidth and one-way time for every mode (stream, bidir, several pairs), from the
run's bytes_per_iteration_factor and one_way_divisor; files without them are ping-pong runs."""

from __future__ import annotations

import numpy as np
import pytest
from npmpi_analysis.numbers import compute
from npmpi_analysis.numbers.analyse import analyse_run
from npmpi_analysis.report import summary_text
from npmpi_analysis.synthetic import write_run

from npmpi.core.modes import mode_factors as writer_factors
from npmpi.runfile.attrseal import unseal_all
from npmpi.runfile.reader import load_run

SIZES = [1000, 2000]
ITERS = [10, 5]
TRIALS = [[0.010, 0.012], [0.020, 0.025]]


def _attrs(mode: str, window: int = 1, pairs: int = 1) -> dict:
    f = writer_factors(mode, window, pairs)
    return {
        "mode": mode,
        "window": window,
        "pairs": pairs,
        "bytes_per_iteration_factor": f.bytes_per_iteration_factor,
        "one_way_divisor": f.one_way_factor,
    }


def test_files_without_the_attributes_are_ping_pong():
    assert compute.run_mode_factors({}) == (2, 2)
    assert compute.run_mode_factors({"mode": "pingpong"}) == (2, 2)
    assert compute.run_mode_factors({"bytes_per_iteration_factor": "junk"}) == (2, 2)
    assert compute.run_mode_factors({"bytes_per_iteration_factor": 0, "one_way_divisor": 0}) == (2, 2)
    assert compute.mode_label({}) == "ping-pong"


@pytest.mark.parametrize(
    "mode,window,pairs,factor,divisor",
    [
        ("pingpong", 1, 1, 2, 2),
        ("stream", 64, 1, 64, 64),
        ("stream", 8, 2, 16, 8),
        ("bidir", 1, 1, 2, 1),
        ("bidir", 1, 3, 6, 1),
    ],
)
def test_bandwidth_and_one_way_time_follow_the_factors(mode, window, pairs, factor, divisor):
    attrs = _attrs(mode, window, pairs)
    assert compute.run_mode_factors(attrs) == (factor, divisor)
    bw = compute.bandwidth(
        np.array(SIZES), np.array(ITERS), np.array(TRIALS), *compute.run_mode_factors(attrs)
    )
    size, iters, best = np.array(SIZES, float), np.array(ITERS, float), np.array([0.010, 0.020])
    np.testing.assert_allclose(bw.peak_bit_s, factor * iters * size * 8 / best)
    np.testing.assert_allclose(bw.one_way_s, best / (divisor * iters))
    np.testing.assert_allclose(bw.trial_bit_s[:, 1], factor * iters * size * 8 / np.array([0.012, 0.025]))
    mean_t = np.array([0.011, 0.0225])
    np.testing.assert_allclose(bw.mean_bit_s, factor * iters * size * 8 / mean_t)


def test_default_bandwidth_is_unchanged_for_ping_pong():
    old = compute.bandwidth(np.array(SIZES), np.array(ITERS), np.array(TRIALS))
    new = compute.bandwidth(np.array(SIZES), np.array(ITERS), np.array(TRIALS), 2, 2)
    for name in ("peak_bit_s", "mean_bit_s", "sigma_bit_s", "one_way_s", "min_bit_s"):
        np.testing.assert_array_equal(getattr(old, name), getattr(new, name))


def test_labels_say_what_was_measured():
    assert compute.mode_label(_attrs("stream", 64)) == "one-way stream (window 64)"
    assert compute.mode_label(_attrs("bidir")) == "bidirectional (both directions)"
    assert compute.mode_label(_attrs("pingpong", 1, 4)) == "ping-pong, aggregate of 4 pairs"


@pytest.mark.parametrize("mode,window,pairs", [("pingpong", 1, 1), ("stream", 64, 1), ("bidir", 1, 2)])
def test_analysis_of_a_run_file_uses_its_mode(tmp_path, mode, window, pairs):
    starts = [[1000.0 + 10 * k + j for j in range(2)] for k in range(2)]
    path = write_run(tmp_path / "r.h5", SIZES, ITERS, TRIALS, starts, attrs=_attrs(mode, window, pairs))
    a = analyse_run(load_run(path), "r")
    factor, divisor = (
        writer_factors(mode, window, pairs).bytes_per_iteration_factor,
        {
            "pingpong": 2,
            "stream": window,
            "bidir": 1,
        }[mode],
    )
    np.testing.assert_allclose(a.bw.peak_bit_s[0], factor * 10 * 1000 * 8 / 0.010)
    np.testing.assert_allclose(a.bw.one_way_s[0], 0.010 / (divisor * 10))
    assert f"mode: {compute.mode_label(_attrs(mode, window, pairs))}" in summary_text(a)


def test_an_older_file_without_mode_attributes(tmp_path):
    import h5py

    starts = [[1000.0 + 10 * k + j for j in range(2)] for k in range(2)]
    path = write_run(tmp_path / "old.h5", SIZES, ITERS, TRIALS, starts, attrs=_attrs("stream", 64))
    with h5py.File(path, "r+") as f:  # what a 1.1 file holds
        for key in ("window", "pairs", "bytes_per_iteration_factor", "one_way_divisor"):
            del f.attrs[key]
        f.attrs["mode"] = "pingpong"
        f.attrs["format_version"] = "1.1"
        unseal_all(f)  # a 1.1 file has no attribute checksums
    a = analyse_run(load_run(path), "old")
    np.testing.assert_allclose(a.bw.peak_bit_s[0], 2 * 10 * 1000 * 8 / 0.010)
    np.testing.assert_allclose(a.bw.one_way_s[0], 0.010 / 20)


@pytest.mark.parametrize(
    "mode,window,pipelined",
    [("pingpong", 1, False), ("bidir", 1, False), ("stream", 64, True), ("bidir", 64, True)],
)
def test_a_window_in_flight_gives_a_time_per_message_not_a_latency(tmp_path, mode, window, pipelined):
    """A stream's or windowed bidir's trial / (window x iterations) is 1 / the message rate of a
    pipeline: the summary and the table say "time per message" ("t/msg"), never "latency" (before:
    "latency: 0.1 us one-way" for a 64-message stream whose messages each took far longer)."""
    from npmpi_analysis.report import table_cells

    starts = [[1000.0 + k] for k in range(len(SIZES))]
    path = write_run(
        tmp_path / "w.h5", SIZES, ITERS, [[t[0]] for t in TRIALS], starts, attrs=_attrs(mode, window)
    )
    a = analyse_run(load_run(path), "w")
    text, headers = summary_text(a), table_cells(a)[0]
    assert ("time per message:" in text and "not a latency" in text) == pipelined
    assert ("latency:" in text and "one-way" in text) == (not pipelined)
    assert headers[4] == ("t/msg us" if pipelined else "latency us")


@pytest.mark.mpi
@pytest.mark.timeout(60)
def test_a_real_stream_run_is_analysed_as_a_stream(npmpi_run, tmp_path):
    args = ["-u", "1K", "-p", "0", "--trials", "2", "--repeats", "4", "--mode", "stream", "--window", "8"]
    proc = npmpi_run([*args, "-o", "s.h5"], timeout=60)
    assert proc.returncode == 0, proc.stderr
    run = load_run(tmp_path / "s.h5")
    a = analyse_run(run, "s")
    pp = run.pingpong
    best = np.nanmin(pp.trial_s, axis=1)
    np.testing.assert_allclose(a.bw.peak_bit_s, 8 * pp.iterations * pp.size_bytes * 8 / best)
    np.testing.assert_allclose(a.bw.one_way_s, best / (8 * pp.iterations))
    assert "one-way stream (window 8)" in summary_text(a)


# ---------------------------------------------------------------- np.out in every mode


@pytest.mark.parametrize(
    "mode,window,pairs,lines",
    [
        # 1000 B, 10 iterations, best 0.010 s. ping-pong: one way 0.0005 s, 1000 B one way
        # = 8000 bit / 0.0005 s = 16e6 bit/s = 15.258789 Mbps (2^20)
        ("pingpong", 1, 1, ["    1000 15.258789   0.00050000", "    2000 15.258789   0.00100000"]),
        # stream, window 64: 640 messages in 0.010 s, one message 15.625 us; Mbps as ping-pong x 2
        ("stream", 64, 1, ["    1000 488.281250   0.00001563", "    2000 488.281250   0.00003125"]),
        # bidir (NetPIPE -2): bytes column 2 x 1000, both directions: 16000 bit / 0.001 s
        ("bidir", 1, 1, ["    2000 15.258789   0.00100000", "    4000 15.258789   0.00200000"]),
        # two pairs of ping-pong: the aggregate (NetPIPE 5's rule), one pair's one-way time
        ("pingpong", 1, 2, ["    1000 30.517578   0.00050000", "    2000 30.517578   0.00100000"]),
        # two pairs of bidir: doubled bytes and both pairs' both directions
        ("bidir", 1, 2, ["    2000 30.517578   0.00100000", "    4000 30.517578   0.00200000"]),
    ],
)
def test_np_out_is_what_netpipe_writes_and_its_mbps_is_the_csv_bandwidth(
    tmp_path, mode, window, pairs, lines
):
    from npmpi_analysis.np_out import np_out_bytes
    from npmpi_analysis.numbers.analyse import size_rows

    starts = [[1000.0 + 10 * k + j for j in range(2)] for k in range(2)]
    trials = [[0.010, 0.012], [0.010, 0.0125]]  # 2000 B at half the iterations: the same rate
    path = write_run(tmp_path / "r.h5", SIZES, ITERS, trials, starts, attrs=_attrs(mode, window, pairs))
    a = analyse_run(load_run(path), "r")
    text = np_out_bytes(a).decode()
    assert text.splitlines() == lines
    for line, row in zip(text.splitlines(), size_rows(a), strict=True):
        assert float(line.split()[1]) == pytest.approx(row["bandwidth_peak_bit_s"] / 2**20, abs=1e-6)
