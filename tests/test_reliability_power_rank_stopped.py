"""A power rank stopped for good during the sweep (issue 45, class 7): the file says what failed.

Rank 0 waits a bounded time for a stopped power rank, then goes on without its power (issue 28); the
stopped process can never reach MPI_Finalize, so the job ends with MPI_Abort, exit 1. Before, the
file said `complete` all the same and `npmpi-analyze` refused it for want of the idle power after the
sweep. Now the file is `failed` with every size, its `status_message` (and the one error line) names
the power rank, when its samples end and what is missing; the analysis uses the power there is (the
samples up to the stop, the baseline before) and names the recorded gap in a notice, exit 0. An
empty baseline that no recorded gap explains is still a problem (exit 1).
"""

from __future__ import annotations

import re
import sys
from types import SimpleNamespace

import h5py
import numpy as np
import pytest
from support.reliability import Job, analyze_in_process, freeze_until_the_end

from npmpi.persize.transmitter import SweepOutcome
from npmpi.power.rank import LOST_AFTER_MIN_S
from npmpi.power.recording import PowerSession, final_power
from npmpi.runfile.faults import KIND_GAP, FaultRecord, Heartbeat

T0 = 1_700_000_000.0
GAP_MESSAGE = (
    "the power rank of node 0 (rank 3) did not answer for 10.0 s (stopped or hung): the run went on "
    "without its power: no samples from then to the end"
)


class _Collector:
    """PowerCollector's side final_power uses, with rank 3 (node 0) given up on."""

    def __init__(self, last_tick: float) -> None:
        self.power_ranks = [3]
        beat = Heartbeat(0.1, "estimate on node 0")
        beat.last_tick = last_tick
        self.heartbeats = {(0, 0): beat}
        self.lost = {3: (last_tick + 10.0, GAP_MESSAGE.split(": no samples")[0])}
        self.baselines: list[float] = []

    def collect(self, *_):
        return 0

    def baseline(self, seconds, stop, during=""):
        self.baselines.append(seconds)
        return SimpleNamespace(start_unix_s=0.0, end_unix_s=1.0, cpu_s=[0.0] * 4, system_busy=[0.0] * 4)

    def clock_offsets(self):
        return []


class _Writer:
    def set_group_attrs(self, *_a, **_k):
        pass

    def set_baseline_cpu(self, *_a):
        pass

    def flush(self):
        pass


def test_a_sweep_gone_on_without_its_power_rank_is_failed_and_says_what_is_missing():
    """The outcome final_power leaves (the file's status and message, the exit code)."""
    rows = [SimpleNamespace(trial_end_unix_s=[T0 + k + 0.5]) for k in range(10)]  # sizes end at T0+k+0.5
    outcome = SweepOutcome(status="complete", rows=rows)
    collector = _Collector(last_tick=T0 + 6.0)  # sizes 6 to 9 end after the last samples
    layout = SimpleNamespace(power_ranks=[3], hosts=["n0", "n0", "n0", "n0"])
    nodes = [{"channels": [{"sample_interval_s": 0.1}]}]
    console = SimpleNamespace(note=lambda text: None)
    opts = SimpleNamespace(baseline_s=1.0)
    final_power(PowerSession(_Writer(), collector, layout, nodes, opts, None, console, None), outcome)
    assert collector.baselines == [1.0]  # the other nodes' baseline is still taken
    assert (outcome.status, outcome.exit_code) == ("failed", 1), outcome
    message = outcome.message
    assert "power rank of node 0 (rank 3)" in message and "(n0)" in message
    assert "its samples end at 22:13:26 UTC" in message, message  # T0 + 6 s
    assert "the last 4 of the 10 sizes" in message and "idle baseline after the sweep" in message
    assert "every size was measured and is kept" in message


def _synthetic_stopped_run(path, gap: bool):
    """A run whose power rank stopped 4 s into its 8 sizes (one second each): samples every 0.5 s
    up to then and in the baseline before, none after; with `gap`, the gap fault to the end that
    rank 0 records for a power rank it went on without."""
    from npmpi_analysis.synthetic import SynthChannel, SynthNode, write_run

    start = T0 + 5.0  # the baseline before: T0 to T0+4
    stop_at, end = start + 4.0, start + 8.0
    t = np.arange(T0, stop_at, 0.5)
    faults = [FaultRecord(stop_at, end + 3.5, 1, GAP_MESSAGE, KIND_GAP)] if gap else []
    channel = SynthChannel(t, np.full(len(t), 100.0), kind="estimate", sample_interval_s=0.5, faults=faults)
    return write_run(
        path,
        [2**k for k in range(8)],
        [100] * 8,
        [[0.3, 0.3] for _ in range(8)],
        [[start + k, start + k + 0.5] for k in range(8)],
        nodes=[SynthNode([channel], host="n0")],
        baseline=(T0, T0 + 4.0),
        baseline_after=(end + 0.5, end + 3.0),
        status="failed",
    )


def test_the_analysis_uses_the_power_there_is_and_names_the_gap(tmp_path, capsys):
    path = _synthetic_stopped_run(tmp_path / "stopped.h5", gap=True)
    code, out, err = analyze_in_process(capsys, path)
    assert code == 0, err
    assert "Traceback" not in out + err and "no idle power" not in out + err
    notice = [ln for ln in out.splitlines() if "baseline window after the sweep" in ln]
    assert len(notice) == 1 and "a recorded gap covers it" in notice[0], out
    assert "did not answer for 10.0 s" in notice[0] and "the baseline before the sweep alone" in notice[0]
    assert "idle 100" in out, out  # the baseline before


def test_an_empty_baseline_no_gap_explains_is_still_a_problem(tmp_path, capsys):
    path = _synthetic_stopped_run(tmp_path / "silent.h5", gap=False)
    code, _out, err = analyze_in_process(capsys, path)
    assert code == 1 and "no sample in or near the baseline window after the sweep: no idle power" in err


@pytest.mark.mpi
@pytest.mark.slow
@pytest.mark.timeout(180)
def test_the_issues_stopped_power_rank_leaves_a_failed_file_that_is_analysed(tmp_path, capsys):
    """The issue's case: `-np 4 --meter estimate --stall-timeout 3`, the power rank (found from the
    layout the console prints) SIGSTOPped once 4 sizes are printed."""
    name = "stopped-power.h5"
    args = ["--quick", "-u", "64K", "--meter", "estimate", "--baseline", "0.3", "--stall-timeout", "3"]
    job = Job([*args, "-o", name], 4, tmp_path, name)
    header = re.compile(r"^power: node 0 \(.*\), rank (\d+):", re.M)
    try:
        assert job.wait_until(lambda: header.search(job.stdout), 90), job.stdout[-2000:] + job.stderr[-2000:]
    except BaseException:
        job.close()
        raise
    rank = int(header.search(job.stdout).group(1))
    took, errors = freeze_until_the_end(job, lambda: job.rows_printed() >= 4, rank, LOST_AFTER_MIN_S + 40)
    assert job.proc.returncode == 1, job.stderr[-2000:]
    assert len(errors) == 1, job.stderr[-3000:]
    line = errors[0]
    assert f"the power rank of node 0 (rank {rank}) did not answer" in line, line
    assert "its samples end at" in line and "idle baseline after the sweep" in line, line
    assert re.search(r"; (\d+) completed sizes are in .*stopped-power\.h5 — aborting all ranks", line), line
    assert re.search(r"\d+ sizes in [\d.]+ s, status failed: ", job.stdout), job.stdout[-1000:]
    with h5py.File(tmp_path / name) as f:
        assert f.attrs["status"] == "failed", dict(f.attrs)
        message = str(f.attrs["status_message"])
        assert f"rank {rank}" in message and "every size was measured and is kept" in message, message
        sizes = f["pingpong/size_bytes"][:]
        assert sizes[-1] == 64 * 1024 + 3 and f.attrs["sizes_completed"] == len(sizes)  # the whole sweep
        assert f"; {len(sizes)} completed sizes are in" in line
        assert f["power/node0/channel0/power_w"].shape[0] > 0  # the samples up to the stop
    code, out, err = analyze_in_process(capsys, tmp_path / name)
    assert code == 0, err
    assert "a recorded gap covers it" in out and "the run is failed: the power rank" in out, out[-3000:]
    print(
        f"\nstopped power rank (rank {rank}): job ended {took:.1f} s after the SIGSTOP; {line}",
        file=sys.stderr,
    )
