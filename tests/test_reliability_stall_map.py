"""A frozen map member has an end: rank 0's stall watchdog in a map (npmpi/map/stall.py).

A 4-rank map (`--per-rank`, `--stall-timeout 3`) with rank 1 stopped by SIGSTOP once the first
size's rounds are done: the job ends by itself within the bound and a margin, with one line naming
rank 1 and the round, no traceback, no process left, and a map file `failed` with every completed
round, which npmpi-analyze reads; a live round longer than --stall-timeout does not trip it.
calibrate (npmpi/calibrate/loadstall.py) with load rank 1 stopped during the load: one line naming
it, no file left. The round's expected time and the option's bad values are tested in process.
The stopped process is SIGCONTed and killed by the test whatever happens.
"""

from __future__ import annotations

import re
import sys

import h5py
import numpy as np
import pytest
from support.reliability import Job, analyze_in_process, freeze_until_the_end, run_without_tripping

from npmpi.core.errors import UsageError
from npmpi.map.options import parse_map_options
from npmpi.map.stall import WAIT_READY, RoundProgress
from npmpi.persize.watchdog import STALL_FACTOR

STALL_S = 3.0
MARGIN_S = 12.0  # rank 0's wait starts up to a round before the stop; mpirun's abort; a loaded machine
SIZES = "1,1K,4K,16K,64K,256K,1M"


def test_a_round_is_expected_to_take_its_trials_or_its_messages_and_no_less_than_the_last():
    p = RoundProgress(trials=3, target_time_s=0.02, both=False)
    assert p.expected_round_s(1024) == pytest.approx(6 * 0.02)  # probe, warm-up, end and 3 trials
    p.learn(1024, 0.5, [np.array([0.02, 0.03, np.nan])], [10])  # 3 ms per iteration
    assert p.expected_round_s(1024) == pytest.approx(0.5)  # the last round at this size took 0.5 s
    assert p.expected_round_s(1 << 20) == pytest.approx(6 * 0.003 * 1024)  # one message is 3 s now
    assert RoundProgress(3, 0.02, both=True).expected_round_s(1) == pytest.approx(12 * 0.02)
    p.wait(1024, 2, WAIT_READY)
    p.label = "round 4 of 21"
    assert p.bound_s(3.0) == pytest.approx(max(3.0, STALL_FACTOR * 0.5))
    assert p.describe(p.current) == "round 4 of 21 at 1024 B (the wait for it to be ready)"
    assert p.bound_s(0.0) == 0.0


@pytest.mark.parametrize("value", ["-1", "0.5", "1e9", "nan", "inf", "x"])
def test_a_bad_stall_timeout_in_a_map_is_one_line(value):
    with pytest.raises(UsageError) as info:
        parse_map_options(["--stall-timeout", value])
    assert "--stall-timeout" in str(info.value) and "\n" not in str(info.value)
    assert parse_map_options(["--stall-timeout", "0"]).run.stall_timeout_s == 0.0


@pytest.mark.mpi
@pytest.mark.timeout(120)
def test_a_frozen_map_member_ends_the_map_with_one_line_and_a_failed_file(tmp_path, capsys):
    name = "stalled-map.h5"
    args = ["map", "--per-rank", "--sizes", SIZES, "--trials", "3", "--target-time", "0.02", "--confirm", "0"]
    job = Job([*args, "--stall-timeout", f"{STALL_S:g}", "-o", name], 4, tmp_path, name)
    took, errors = freeze_until_the_end(
        job, lambda: "rounds; one-way" in job.stdout, 1, STALL_S + MARGIN_S + 30
    )
    assert len(errors) == 1, job.stderr[-3000:]
    line = errors[0]
    assert "stopped answering" in line and re.search(r"rank 1\b", line), line
    assert re.search(r"during round \d+ of 21 at \d+ B", line), line
    assert "completed rounds are in" in line and "aborting all ranks" in line, line
    assert job.proc.returncode != 0
    with h5py.File(tmp_path / name) as f:
        assert f.attrs["status"] == "failed" and f["map"].attrs["status"] == "failed", dict(f.attrs)
        assert line.startswith(f"npmpi: error: {f.attrs['status_message']}; ")
        assert f.attrs["stall_timeout_s"] == STALL_S and f.attrs["stall_bound_s"] >= STALL_S
        assert f.attrs["stall_bound_factor"] == STALL_FACTOR
        rounds = int(f["map"].attrs["rounds_completed"])
    assert 3 <= rounds < 21 and f"; {rounds} completed rounds are in" in line, (rounds, line)
    code, out, err = analyze_in_process(capsys, tmp_path / name)
    assert code == 0 and "Traceback" not in out + err, err
    assert "stopped answering" in out, out[-2000:]
    print(f"\nfrozen map member: job ended {took:.1f} s after the SIGSTOP\n{line}", file=sys.stderr)
    assert took < STALL_S + MARGIN_S


@pytest.mark.mpi
@pytest.mark.timeout(90)
def test_a_round_longer_than_the_stall_timeout_does_not_trip_it(tmp_path):
    """One round of 2 trials of 0.6 s with --stall-timeout 1: the bound follows the round (20 x its
    expected 3 s), not the floor. The reflector starts each trial 0.4 s late (fault injection), so
    the round outlasts the floor whatever the probe made of a loaded machine (it may pick fewer
    iterations than 0.6 s of an idle one)."""
    name = "slow-live-map.h5"
    args = ["map", "--per-rank", "--sizes", "1", "--trials", "2", "--target-time", "0.6", "--confirm", "0"]
    late = {"NPMPI_FAULT_MAP_TRIAL_DELAY": "1:0.4"}
    with run_without_tripping([*args, "--stall-timeout", "1"], tmp_path, name, 60, 1.0, late) as f:
        assert float(np.nanmax(f["map/pair_window_s"][()])) > 1.0  # the round outlasted the floor


@pytest.mark.mpi
@pytest.mark.timeout(120)
def test_a_frozen_load_rank_ends_calibrate_with_one_line_and_no_file(tmp_path):
    """3 ranks (load ranks 0 and 1, power rank 2), rank 1 stopped during the load: rank 0 waits for
    it after its own load and the meters' last reports, then names it within the bound."""
    name = "stalled-cal.json"
    args = ["calibrate", "--meter", "estimate", "--duration", "5", "--burst-min", "0.1", "--burst-max", "0.1"]
    job = Job([*args, "--max-delay", "1", "--stall-timeout", f"{STALL_S:g}", "-o", name], 3, tmp_path, name)
    took, errors = freeze_until_the_end(
        job, lambda: "calibrating" in job.stdout, 1, 5 + 2 + STALL_S + MARGIN_S + 30
    )
    assert len(errors) == 1, job.stderr[-3000:]
    line = errors[0]
    assert line.startswith("npmpi: error: rank 1 (") and "stopped answering" in line, line
    # stopped as the load starts: rank 0 names it at the load's start (before: hung in the start's
    # barrier, 1 run in 4) or at its end
    assert re.search(r"the wait for the (start|end) of its load", line), line
    assert "no calibration is written" in line, line
    assert job.proc.returncode != 0
    assert sorted(p.name for p in tmp_path.iterdir()) == [], "a calibration or its temporary was left"
    print(f"\nfrozen load rank: calibrate ended {took:.1f} s after the SIGSTOP\n{line}", file=sys.stderr)
    assert took < 5 + 2 + STALL_S + MARGIN_S  # the load, the meters' last reports, the bound


def test_a_bad_stall_timeout_in_calibrate_is_one_line():
    from npmpi.calibrate.command import parse_calibrate_options

    with pytest.raises(UsageError) as info:
        parse_calibrate_options(["--meter", "estimate", "--stall-timeout", "0.5"])
    assert str(info.value).startswith("--stall-timeout 0.5: give 0")
    assert parse_calibrate_options(["--meter", "estimate", "--stall-timeout", "0"]).stall_timeout == 0.0
