"""The sweep's iteration counts and stop rule against NetPIPE 3.7's main loop (src/netpipe.c),
transcribed below, with the transport replaced by a known timing model on both sides; and the
defaults that make npmpi's method NetPIPE's (buffers, STOPTM, the --max-round-trip alias)."""

from __future__ import annotations

from pathlib import Path

import pytest

from npmpi.core.buffers import ARRANGEMENT_NETPIPE, ARRANGEMENT_SEPARATE
from npmpi.core.config import DEFAULT_MAX_ONE_WAY_S
from npmpi.core.errors import UsageError
from npmpi.core.messages import StopFlag
from npmpi.core.schedule import netpipe_repeats, netpipe_schedule
from npmpi.persize.transmitter import Transmitter, schedule_for
from npmpi.run.options import parse_options
from npmpi.runfile.format import SizeResult

DATA = Path(__file__).parent / "data"

MAXINT = 1_000_000_000


def one_way_model(size: int) -> float:
    """A transport's one-way time: 0.3 us latency, 4 GB/s."""
    return 0.3e-6 + size / 4e9


def netpipe_37_loop(start, end, pert_p, runtm, trials, stoptm, probe_one_way, model):
    """NetPIPE 3.7's main loop, statement by statement: (size, nrepeat) of every test.

    tlast seeds from the latency probe; nrepeat is computed before args.bufflen moves on to the
    new size; the loop condition `tlast < STOPTM` is only tested before a base point."""
    out = []
    inc = start // 2 if start > 1 else 1
    nq = 1 if start > 1 else 0
    bufflen = start
    tlast = probe_one_way
    length = start
    while tlast < stoptm and length <= end:
        if nq > 2:
            inc = inc + inc if nq % 2 else inc
        perts = (-pert_p, 0, pert_p) if pert_p > 0 and inc > pert_p + 1 else (0,)
        for pert in perts:
            nrepeat = int(max(runtm / (bufflen / (bufflen - inc + 1.0) * tlast), trials))
            bufflen = length + pert
            out.append((bufflen, nrepeat))
            tlast = model(bufflen)  # the best of the trials: the model has no noise
        length += inc
        nq += 1
    return out


class ModelTransmitter(Transmitter):
    """Rank 0's decisions with the MPI traffic replaced by the timing model: every trial of a size
    takes iterations x (round trip or window) of model time, the first trial being the best."""

    def __init__(self, opts, model) -> None:
        self.opts, self.model, self.stop = opts, model, StopFlag()
        self.on_row = lambda index, row: None
        self.unit = {"pingpong": 2, "stream": opts.window, "bidir": 1}[opts.mode]

    def probe_round_trip_s(self) -> float:
        return self.unit * self.model(self.opts.lower_bytes)

    def measure_size(self, size: int, iterations: int) -> SizeResult:
        best = iterations * self.unit * self.model(size)
        trial_s = [best * (1 + 0.5 * k) for k in range(self.opts.trials)]  # a median far from the best
        return SizeResult(size, iterations, 2, trial_s, [0.0] * len(trial_s), [0.0] * len(trial_s))


def sweep(argv, model=one_way_model):
    opts = parse_options(argv)
    outcome = ModelTransmitter(opts, model).sweep(schedule_for(opts))
    return opts, outcome, [(r.size_bytes, r.iterations) for r in outcome.rows]


@pytest.mark.parametrize(
    "argv,start,end,p,runtm,trials",
    [
        ([], 1, 8 << 20, 3, 0.05, 7),
        (["--trials", "3", "--target-time", "0.1"], 1, 8 << 20, 3, 0.1, 3),  # Debian's NPopenmpi
        (["-l", "1000", "-u", "1M", "-p", "0", "--quick"], 1000, 1 << 20, 0, 0.004, 3),
    ],
)
def test_iterations_are_netpipes_nrepeat_size_by_size(argv, start, end, p, runtm, trials):
    opts, outcome, got = sweep(argv)
    assert (opts.lower_bytes, opts.upper_bytes, opts.perturbation_bytes) == (start, end, p)
    want = netpipe_37_loop(start, end, p, runtm, trials, 1.0, one_way_model(start), one_way_model)
    assert got == want
    assert outcome.stopped_early == "" and len(got) == len(schedule_for(opts))


def npopenmpi_record() -> list[tuple[int, float, int]]:
    """(bytes, best one-way seconds from the Mbps column, repetitions printed) of a real NPopenmpi run."""
    rows = []
    for line in (DATA / "npopenmpi37_shm_nrepeat.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            nbytes, mbps, _seconds, repeats = line.split()
            rows.append((int(nbytes), int(nbytes) * 8 / (float(mbps) * 2**20), int(repeats)))
    return rows


def test_repetitions_are_those_debians_npopenmpi_printed():
    # Debian's build: RUNTM 0.10 s, TRIALS 3; each count from the size before it (the first one
    # follows NetPIPE's own latency probe, which np.out does not record)
    rows = npopenmpi_record()
    points = netpipe_schedule(1, 1 << 20, 3)
    assert [n for n, _, _ in rows] == [p.size_bytes for p in points[: len(rows)]]
    for k in range(1, len(rows)):
        prev_bytes, prev_t, _ = rows[k - 1]
        assert netpipe_repeats(0.1, prev_bytes, points[k].increment_bytes, prev_t, 3, MAXINT) == rows[k][2]
    # and the sweep itself, with NPopenmpi's times as the transport
    times = {n: t for n, t, _ in rows}
    upper = rows[-2][0] - 3  # the record ends inside the group 8189, 8192, 8195
    _, _, got = sweep(["--trials", "3", "--target-time", "0.1", "-u", str(upper)], model=times.__getitem__)
    assert got[1:] == [(n, r) for n, _, r in rows[1:-1]]


def test_the_floor_is_the_number_of_trials():
    # 5 ms one way: 0.05 / 5e-3 = 10 round trips at most, from 2 B on under the floor of 7 trials x 2
    _, _, got = sweep(["--trials", "12", "-u", "64"], model=lambda n: 5e-3)
    assert {i for _, i in got} == {12}


def test_stop_rule_is_on_the_one_way_time_after_a_whole_perturbation_group():
    def slow_from_24(size):  # 24 B is the base point of the group 21, 24, 27
        return 0.6 if size >= 24 else 1e-6

    _, outcome, got = sweep(["-u", "1K", "--max-one-way", "0.5"], model=slow_from_24)
    # NetPIPE finishes the group (24 and 27 measured), then stops before the base point 32
    assert [s for s, _ in got][-4:] == [19, 21, 24, 27]
    assert "27 B" in outcome.stopped_early and "--max-one-way 0.5" in outcome.stopped_early
    # the limit is compared with the one-way time, not the round trip (1.2 s here)
    _, outcome, got = sweep(["-u", "1K", "--max-one-way", "0.7"], model=slow_from_24)
    assert outcome.stopped_early == "" and got[-1][0] == 1027
    # reaching the limit is enough (NetPIPE continues only while tlast < STOPTM)
    _, outcome, _ = sweep(["-u", "1K", "--max-one-way", "0.6"], model=slow_from_24)
    assert "27 B" in outcome.stopped_early


def test_stop_rule_and_iterations_use_a_streams_time_per_message():
    # a window of 4 messages per iteration: NetPIPE's nrepeat counts messages (its floor too), so
    # iterations are nrepeat / 4 rounded up; the stop compares the time of one message
    _, _, got = sweep(["--mode", "stream", "--window", "4", "-u", "64", "-p", "0"])
    want = netpipe_37_loop(1, 64, 0, 0.05, 7, 1.0, one_way_model(1), one_way_model)
    assert got == [(n, -(-r // 4)) for n, r in want]
    # where NetPIPE sends its floor of 7 messages, 2 windows of 4 carry them
    _, _, got = sweep(["--mode", "stream", "--window", "4", "-u", "8", "-p", "0"], model=lambda n: 0.05)
    assert {i for _, i in got} == {2}
    _, outcome, got = sweep(
        ["--mode", "stream", "--window", "4", "-u", "64", "-p", "0", "--max-one-way", "0.5"],
        model=lambda n: 0.3 if n < 8 else 0.6,
    )
    assert got[-1][0] == 8 and "8 B" in outcome.stopped_early


def test_max_one_way_default_is_netpipes_stoptm_and_the_old_name_means_a_round_trip():
    assert parse_options([]).max_one_way_s == DEFAULT_MAX_ONE_WAY_S == 1.0
    assert parse_options(["--max-one-way", "0.25"]).max_one_way_s == 0.25
    # --max-round-trip keeps its meaning: a round-trip limit, i.e. half of it one way
    assert parse_options(["--max-round-trip", "3"]).max_one_way_s == 1.5
    # the old option name stopped a ping-pong where the new one does with half the value
    slow = lambda n: 0.6 if n >= 24 else 1e-6  # noqa: E731
    _, old, got_old = sweep(["-u", "1K", "--max-round-trip", "1.2"], model=slow)
    _, new, got_new = sweep(["-u", "1K", "--max-one-way", "0.6"], model=slow)
    assert got_old == got_new and old.stopped_early == new.stopped_early != ""


@pytest.mark.parametrize(
    "argv,fragment",
    [
        (["--max-one-way", "1", "--max-round-trip", "2"], "--max-one-way and --max-round-trip"),
        (["--max-one-way", "0"], "--max-one-way 0"),
        (["--max-round-trip", "-1"], "--max-round-trip -1"),
        (["--max-one-way", "soon"], "invalid time"),
    ],
)
def test_stop_option_errors_are_one_line(argv, fragment):
    with pytest.raises(UsageError) as e:
        parse_options(argv)
    assert fragment in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize(
    "argv,arrangement",
    [
        ([], ARRANGEMENT_NETPIPE),
        (["--pairs", "2"], ARRANGEMENT_NETPIPE),
        (["--buffers", "separate"], ARRANGEMENT_SEPARATE),
        (["--mode", "stream"], ARRANGEMENT_SEPARATE),
        (["--mode", "bidir"], ARRANGEMENT_SEPARATE),
        (["--async"], ARRANGEMENT_SEPARATE),
        (["--cache-cold"], ARRANGEMENT_SEPARATE),
    ],
)
def test_default_buffers_are_netpipes_where_they_are_defined(argv, arrangement):
    assert parse_options(argv).buffers == arrangement
