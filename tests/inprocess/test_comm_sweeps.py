"""Sweeps run in-process on communicators, in mpi4py's test style: this file runs on every rank of
`mpirun -np 4 python -m pytest tests/inprocess` (tests/test_inprocess.py launches it), never in
the plain pytest run. Every assertion is on data every rank holds (npmpi.persize.benchmark.sweep returns
rank 0's outcome everywhere, per-rank figures are allgathered), so a failure fails every rank alike
and no rank is left waiting in a collective.
"""

from __future__ import annotations

import os
import time

import numpy as np
import pytest
from mpi4py import MPI

from npmpi.core.modes import mode_factors
from npmpi.core.schedule import netpipe_repeats, netpipe_schedule
from npmpi.persize.benchmark import sweep
from npmpi.persize.transmitter import MAX_ITERATIONS
from npmpi.run.options import parse_options

WORLD = MPI.COMM_WORLD
TINY = ["-u", "4K", "-p", "0", "--trials", "2", "--repeats", "6"]
TINY_SIZES = [p.size_bytes for p in netpipe_schedule(1, 4096, 0)]
MODES = ["pingpong", "stream", "bidir"]
KERNELS = ["python", "c"]

pytestmark = pytest.mark.skipif(
    WORLD.Get_size() != 4, reason="runs under mpirun -np 4 (tests/test_inprocess.py)"
)


@pytest.fixture
def halves():
    """COMM_WORLD split in two 2-rank communicators: {0, 1} and {2, 3}, each sweeping at once."""
    comm = WORLD.Split(WORLD.Get_rank() // 2, WORLD.Get_rank())
    yield comm
    comm.Free()


def all_ranks(value) -> list:
    return WORLD.allgather(value)


def check_rows(outcome, sizes=TINY_SIZES, iterations=6, trials=2) -> None:
    assert outcome.status == "complete", outcome.message
    assert [r.size_bytes for r in outcome.rows] == sizes
    for row in outcome.rows:
        assert row.iterations == iterations and len(row.trial_s) == trials
        assert row.data_verified and min(row.trial_s) > 0


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("mode", MODES)
def test_async_cache_cold_and_integrity_on_both_halves_at_once(halves, mode, kernel):
    """Every mode with --async and --cache-cold through both kernels, checking every message, on
    two 2-rank communicators sweeping at the same time (messages never cross between them)."""
    window = ["--window", "16"] if mode == "stream" else []
    cold = ["--async", "--cache-cold", "--cache-pool", "64K", "--integrity"]
    opts = parse_options([*TINY, "--mode", mode, *window, "--kernel", kernel, *cold])
    outcome = sweep(halves, opts)
    outcomes = all_ranks(
        (outcome.status, outcome.message, [(r.size_bytes, r.data_verified) for r in outcome.rows])
    )
    for status, message, rows in outcomes:
        assert status == "complete", message
        assert rows == [(s, True) for s in TINY_SIZES]


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize(
    "args",
    [
        ["--mode", "bidir", "--window", "8"],  # osu_bibw's loop, a region per message
        ["--mode", "bidir", "--window", "8", "--buffers", "osu"],  # osu_bibw -b single
        ["--mode", "stream", "--window", "8", "--buffers", "osu"],  # osu_bw -b single
    ],
    ids=["bidir-window", "bidir-window-osu", "stream-osu"],
)
def test_windows_each_way_and_osu_buffers_on_both_halves_at_once(halves, args, kernel):
    """A window each way (osu_bibw) and OSU's one buffer per side through both kernels, every
    message checked (--integrity), on two 2-rank communicators at once (--repeats counts windows)."""
    opts = parse_options([*TINY, *args, "--kernel", kernel, "--integrity"])
    assert opts.window == 8 and opts.messages_per_iteration == 8
    outcome = sweep(halves, opts)
    for status, message, rows in all_ranks(
        (
            outcome.status,
            outcome.message,
            [(r.size_bytes, r.data_verified, r.iterations) for r in outcome.rows],
        )
    ):
        assert status == "complete", message
        assert rows == [(s, True, 6) for s in TINY_SIZES]


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("mode", MODES)
def test_tcp_on_both_halves_at_once(halves, mode, kernel):
    """--protocol tcp through benchmark.sweep: each 2-rank communicator's pair opens its own
    connection (on a Split, ranks numbered within it), every mode, cache-cold, every message checked."""
    window = ["--window", "16"] if mode == "stream" else []
    cold = ["--cache-cold", "--cache-pool", "64K", "--integrity"]
    opts = parse_options([*TINY, "--protocol", "tcp", "--mode", mode, *window, "--kernel", kernel, *cold])
    outcome = sweep(halves, opts)
    for status, message, rows in all_ranks(
        (outcome.status, outcome.message, [(r.size_bytes, r.data_verified) for r in outcome.rows])
    ):
        assert status == "complete", message
        assert rows == [(s, True) for s in TINY_SIZES]


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("mode", MODES)
def test_two_pairs_on_the_world(mode, kernel):
    """--pairs 2 on four ranks: both pairs' times per trial, the aggregate the slowest pair's."""
    opts = parse_options([*TINY, "--mode", mode, "--kernel", kernel, "--pairs", "2"])
    outcome = sweep(WORLD, opts)
    check_rows(outcome)
    for row in outcome.rows:
        times = np.array(row.pair_trial_s)
        assert times.shape == (2, 2) and np.all(times > 0)
        assert np.array_equal(np.array(row.trial_s), times.max(axis=0))


def test_a_duplicate_keeps_its_messages_to_itself():
    """A sweep on a Dup leaves COMM_WORLD's pending receives (any source, any tag) untouched."""
    dup = WORLD.Dup()
    buf = np.zeros(1 << 16, dtype=np.uint8)
    pending = WORLD.Irecv(buf, MPI.ANY_SOURCE, MPI.ANY_TAG)
    outcome = sweep(dup, parse_options([*TINY, "--kernel", "c"]))
    matched = pending.Test()
    if not matched:
        pending.Cancel()
        pending.Wait()
    dup.Free()
    assert not any(all_ranks(matched))
    check_rows(outcome)


def test_the_iteration_rule_is_netpipes_from_the_previous_best_time(halves):
    """Without --repeats each size runs NetPIPE 3.7's nrepeat from the previous size's best trial."""
    opts = parse_options(["-u", "16K", "--trials", "3", "--target-time", "0.002"])
    outcome = sweep(halves, opts)
    assert outcome.status == "complete", outcome.message
    points = netpipe_schedule(opts.lower_bytes, opts.upper_bytes, opts.perturbation_bytes)
    assert [r.size_bytes for r in outcome.rows] == [p.size_bytes for p in points]
    unit = mode_factors(opts.mode, opts.window).one_way_factor
    for prev, row, point in zip(outcome.rows, outcome.rows[1:], points[1:], strict=False):
        prev_t = min(prev.trial_s) / (prev.iterations * unit)
        want = netpipe_repeats(
            opts.target_time_s, prev.size_bytes, point.increment_bytes, prev_t, 3, MAX_ITERATIONS
        )
        assert row.iterations == want, (row.size_bytes, row.iterations, want)


def test_ranks_without_a_role_wait_asleep():
    """One pair on four ranks: ranks 2 and 3 wait for the stop asleep, not in a spinning receive (one
    would take half a core or more: four ranks share two cores here). The sweep lasts about a second,
    so the waiting ranks' fixed costs (their part of the start, up to 0.09 s of CPU once in a loaded
    run) weigh little beside it."""
    opts = parse_options(["-u", "64K", "-p", "0", "--trials", "3", "--repeats", "200"])
    wall0, cpu0 = time.monotonic(), time.process_time()
    outcome = sweep(WORLD, opts)
    share = (time.process_time() - cpu0) / (time.monotonic() - wall0)
    shares = all_ranks(share)
    check_rows(
        outcome,
        sizes=[p.size_bytes for p in netpipe_schedule(1, 65536, 0)],
        iterations=200,
        trials=3,
    )
    assert max(shares[2:]) < 0.2, shares


@pytest.mark.parametrize(
    "mode,extra,who",
    [
        ("stream", ["--kernel", "c"], "rank 1 received wrong data from rank 0"),
        ("bidir", ["--cache-cold", "--cache-pool", "64K"], "rank 0 received wrong data from rank 1"),
        ("pingpong", ["--pairs", "2", "--buffers", "separate"], "rank 1 received wrong data from rank 2"),
    ],
)
def test_corrupted_data_fails_the_sweep_and_keeps_the_sizes_before(monkeypatch, mode, extra, who):
    monkeypatch.setenv("NPMPI_FAULT_CORRUPT_SIZE", "64")
    comm = WORLD if "--pairs" in extra else WORLD.Split(WORLD.Get_rank() // 2, WORLD.Get_rank())
    outcome = sweep(comm, parse_options([*TINY, "--mode", mode, *extra]))
    if comm is not WORLD:
        comm.Free()
    assert outcome.status == "failed" and outcome.exit_code == 1
    assert "data check failed at message size 64 B" in outcome.message and who in outcome.message
    assert [r.size_bytes for r in outcome.rows] == [s for s in TINY_SIZES if s < 64]
    assert os.environ["NPMPI_FAULT_CORRUPT_SIZE"] == "64"


@pytest.mark.parametrize("kernel", KERNELS)
def test_netpipe_buffers_check_every_message(halves, kernel):
    """NetPIPE's one buffer per size (the plain ping-pong default), every message checked."""
    outcome = sweep(halves, parse_options([*TINY, "--buffers", "netpipe", "--integrity", "--kernel", kernel]))
    check_rows(outcome)
    assert all(row.buffer_huge_page_bytes >= -1 for row in outcome.rows)


def test_fixed_repeats_still_give_the_stall_watchdog_a_time_per_iteration(halves, monkeypatch):
    """--repeats skip the probe the iteration rule needs, but a first look still runs: without a
    time per iteration the first size's warm-up was bounded by the bare --stall-timeout, and a
    warm-up longer than it (a loaded machine, a large --repeats) ended the run as a stall."""
    from npmpi.persize import transmitter

    seen = []
    start_size = transmitter.Transmitter._start_size

    def spy(self, size, iterations):
        warm = start_size(self, size, iterations)  # the warm-up's bound was set from the rate then
        seen.append(self.progress.rate[1])
        return warm

    monkeypatch.setattr(transmitter.Transmitter, "_start_size", spy)
    outcome = sweep(halves, parse_options(["-u", "1", "-p", "0", "--trials", "2", "--repeats", "100"]))
    check_rows(outcome, sizes=[1], iterations=100)
    firsts = [s[:1] for s in all_ranks(seen)]
    assert firsts[0] and firsts[0][0] > 0 and firsts[2] and firsts[2][0] > 0, firsts  # each half's rank 0
