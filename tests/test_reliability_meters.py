"""Meters that misbehave under a real `mpirun -np 3`: the sweep goes on, faults are kept with their
times in /power/node0/channel0/faults, and samples resume once the device answers again.

The Watts Up? emulator runs in this process on a pseudo-terminal that the power rank opens
through a symlink (as /dev/serial/by-id names a meter), so "plugging it back" is a new emulator
behind the same name. The RAPL tree is a fake powercap directory whose counters a thread moves.
A power rank killed outright ends the job (Open MPI ends a job when one of its processes dies):
the file keeps every completed size and mpirun says which rank died and how.
"""

from __future__ import annotations

import os
import re
import signal
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from fakes.sysfs import FakePowercap
from fakes.wattsup_emulator import WattsUpEmulator
from support.reliability import Job, analyze_in_process, assert_analysed_with_a_notice, check_run_file

from npmpi.power.sampler import REOPEN_AFTER_S

pytestmark = [pytest.mark.mpi, pytest.mark.slow]

# 79 sizes of 1 B to 64 KiB, 3 trials of 0.04 s: at least 79 * 3 * 0.04 = 9.5 s of sweep, long enough
# for a fault, REOPEN_AFTER_S and samples after the recovery
SWEEP = ["-u", "64K", "--trials", "3", "--target-time", "0.04", "--baseline", "0.5"]
SWEEP_BYTES = (1, 64 * 1024, 3)
FAULT_AT_ROW = 5
JOB_TIMEOUT_S = 150


def _point(link: Path, target: str) -> None:
    """Make `link` name `target` at once (as udev renames a serial device)."""
    tmp = link.with_name(link.name + ".new")
    tmp.unlink(missing_ok=True)
    os.symlink(target, tmp)
    os.replace(tmp, link)


def _finish(job: Job) -> None:
    job.wait(JOB_TIMEOUT_S)
    assert job.proc.returncode == 0, job.stderr[-3000:]
    assert "Traceback" not in job.stdout + job.stderr


def _channel(tmp_path: Path, name: str):
    run = check_run_file(tmp_path / name, *SWEEP_BYTES, at_least_rows=79)
    assert run.status == "complete"
    (ch,) = run.power[0].channels
    return run, ch


def _first_fault(ch, fragments: str | tuple[str, ...], after: float = 0.0) -> float:
    """Time of the first fault whose message holds one of `fragments`, at or after `after` (a repeat
    is stored once with its first and last time: its last time, if only that is after `after`)."""
    fragments = (fragments,) if isinstance(fragments, str) else fragments
    last = ch.fault_extra["last_time_unix_s"]
    for t, t_last, message in zip(ch.fault_time_unix_s, last, ch.fault_message, strict=True):
        if any(f in message for f in fragments):
            if t >= after:
                return float(t)
            if t_last >= after:
                return float(t_last)
    faults = list(zip(ch.fault_time_unix_s.tolist(), ch.fault_message, strict=True))
    pytest.fail(f"no fault {fragments!r} after {after}: {faults}")


def _report(capsys, text: str) -> None:
    with capsys.disabled():  # shown with -s: the observed bounds in docs/reliability.md
        print(f"\n{text}")


def _samples_between(ch, start: float, end: float) -> int:
    return int(np.sum((ch.time_unix_s > start) & (ch.time_unix_s < end)))


@pytest.mark.timeout(240)
def test_wattsup_garbage_then_unplugged_then_back(tmp_path, capsys):
    link = tmp_path / "wattsup-serial"
    first = WattsUpEmulator([100.0, 150.0], cycle=True, time_scale=0.1).start()
    second = None
    _point(link, first.path)
    name = "wattsup-unplug.h5"
    job = Job(["--meter", f"wattsup:{link}", *SWEEP, "-o", name], 3, tmp_path, name)
    try:
        assert job.wait_for_rows(FAULT_AT_ROW), job.stderr[-3000:]
        first.inject(b"\x00\xff\xfe noise without packet framing \x13\x11")  # dropped, not a fault
        time.sleep(0.5)
        garbage_at = time.time()
        first.inject(b"#d,-,18,12x,ab;")  # a framed record with garbage fields: a fault
        time.sleep(REOPEN_AFTER_S + 1.5)  # the meter reopens the device and samples again
        unplugged_at = time.time()
        first.unplug()
        time.sleep(REOPEN_AFTER_S + 1.0)  # at least one reopen fails while it is unplugged
        second = WattsUpEmulator([120.0], time_scale=0.1).start()
        replugged_at = time.time()
        _point(link, second.path)
        assert job.proc.poll() is None, "the sweep ended before the meter came back: make it longer"
        _finish(job)
    finally:
        job.close()
        first.close()
        if second is not None:
            second.close()
    _run, ch = _channel(tmp_path, name)
    t_garbage = _first_fault(ch, "garbage", garbage_at - 0.5)
    t_back_1 = _first_fault(ch, "meter is back", t_garbage)
    t_unplug = _first_fault(ch, "disconnected", unplugged_at - 0.5)
    t_back_2 = _first_fault(ch, "meter is back", replugged_at)
    _report(
        capsys,
        f"wattsup garbage: fault after {t_garbage - garbage_at:.2f} s, "
        f"back {t_back_1 - t_garbage:.2f} s later; unplug: fault after {t_unplug - unplugged_at:.2f} s, "
        f"back {t_back_2 - replugged_at:.2f} s after replug",
    )
    assert t_garbage < t_back_1 < t_unplug < t_back_2
    assert t_back_2 - replugged_at < REOPEN_AFTER_S + 5
    assert _samples_between(ch, t_back_1, t_unplug) > 3  # sampled again after the garbage
    assert _samples_between(ch, t_back_2, np.inf) > 3  # and after the new device appeared
    assert 120.0 in ch.power_w[ch.time_unix_s > t_back_2]  # from the second meter
    assert _samples_between(ch, t_unplug + 0.5, t_back_2 - 0.5) == 0  # nothing while unplugged
    assert "npmpi: meter" in job.stderr and "disconnected" in job.stderr
    code, out, err = analyze_in_process(capsys, tmp_path / name)
    assert code in (0, 1) and "Traceback" not in out + err


@pytest.mark.timeout(240)
def test_wattsup_stalls_then_streams_again(tmp_path, capsys):
    emulator = WattsUpEmulator([100.0], time_scale=0.1).start()
    name = "wattsup-stall.h5"
    job = Job(["--meter", f"wattsup:{emulator.path}", *SWEEP, "-o", name], 3, tmp_path, name)
    try:
        assert job.wait_for_rows(FAULT_AT_ROW), job.stderr[-3000:]
        stalled_at = time.time()
        emulator.stall()
        time.sleep(5.0)  # three silent intervals of 1 s make the meter report a stall
        resumed_at = time.time()
        emulator.resume()
        assert job.proc.poll() is None, "the sweep ended before the meter resumed: make it longer"
        _finish(job)
    finally:
        job.close()
        emulator.close()
    _run, ch = _channel(tmp_path, name)
    t_stall = _first_fault(ch, ("no record", "stalled"), stalled_at)
    first_after = ch.time_unix_s[ch.time_unix_s > resumed_at].min(initial=np.inf)
    _report(
        capsys,
        f"wattsup stall: fault after {t_stall - stalled_at:.2f} s, "
        f"samples again {first_after - resumed_at:.2f} s after it resumed",
    )
    assert stalled_at + 2 < t_stall < resumed_at
    assert _samples_between(ch, stalled_at + 0.5, resumed_at) == 0
    assert _samples_between(ch, resumed_at, np.inf) > 3
    assert _samples_between(ch, 0, stalled_at) > 3


class MovingRapl:
    """Two package counters advancing at 25 W each, with pauses for the test's tampering."""

    def __init__(self, base: Path) -> None:
        self.tree = FakePowercap(base, packages=2)
        self.lock = threading.Lock()
        self.frozen: set[str] = set()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._burn, daemon=True)
        self.thread.start()

    def _burn(self) -> None:
        last = time.monotonic()
        while not self.stop.wait(0.02):
            now = time.monotonic()
            with self.lock:
                for key in ("package-0", "package-1"):
                    if key not in self.frozen:
                        self.tree.zone(key).advance_j(25.0 * (now - last))
            last = now

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=10)


@pytest.mark.timeout(240)
def test_rapl_counter_goes_back_then_becomes_unreadable(tmp_path, capsys):
    rapl = MovingRapl(tmp_path / "sys")
    energy = rapl.tree.zone("package-0").energy_file
    hidden = energy.with_name("energy_uj.away")
    name = "rapl-faults.h5"
    job = Job(["--meter", f"rapl:{rapl.tree.root}", *SWEEP, "-o", name], 3, tmp_path, name)
    try:
        assert job.wait_for_rows(FAULT_AT_ROW), job.stderr[-3000:]
        time.sleep(0.5)
        reset_at = time.time()
        with rapl.lock:
            rapl.tree.zone("package-0").reset(0)  # far more than a wrap explains: a reset
        time.sleep(REOPEN_AFTER_S + 1.5)
        revoked_at = time.time()
        with rapl.lock:
            rapl.frozen.add("package-0")
            if os.geteuid() == 0:  # mode 0 does not stop root: put a directory in the file's place
                os.replace(energy, hidden)
                energy.mkdir()
            else:
                os.chmod(energy, 0)
        time.sleep(REOPEN_AFTER_S + 1.0)  # at least one reopen fails
        restored_at = time.time()
        with rapl.lock:
            if os.geteuid() == 0:
                energy.rmdir()
                os.replace(hidden, energy)
            else:
                os.chmod(energy, 0o444)
            rapl.frozen.discard("package-0")
        assert job.proc.poll() is None, "the sweep ended before the counter was readable again"
        _finish(job)
    finally:
        job.close()
        rapl.close()
    _run, ch = _channel(tmp_path, name)
    t_reset = _first_fault(ch, "jumped back", reset_at - 0.5)
    t_back_1 = _first_fault(ch, "meter is back", t_reset)
    t_revoked = _first_fault(ch, "energy_uj", revoked_at - 0.5)
    t_back_2 = _first_fault(ch, "meter is back", restored_at)
    _report(
        capsys,
        f"rapl reset: fault after {t_reset - reset_at:.2f} s, back {t_back_1 - t_reset:.2f} s later; "
        f"unreadable: fault after {t_revoked - revoked_at:.2f} s, "
        f"back {t_back_2 - restored_at:.2f} s after restore",
    )
    assert t_reset < t_back_1 < t_revoked < t_back_2
    assert _samples_between(ch, t_back_1, t_revoked) > 5
    assert _samples_between(ch, t_revoked + 0.3, t_back_2 - 0.3) == 0
    after = ch.time_unix_s > t_back_2
    assert after.sum() > 5
    # two packages at 25 W each once both counters are read again
    assert np.median(ch.power_w[after]) == pytest.approx(50.0, rel=0.3)
    assert np.all(ch.power_w[np.isfinite(ch.power_w)] >= 0)


@pytest.mark.timeout(120)
def test_power_rank_killed_outright_ends_the_job_and_keeps_the_sizes(tmp_path, capsys):
    """Documented behaviour: Open MPI ends the job when a rank dies; the file keeps every completed
    size and the samples collected up to the last one; mpirun names the rank and the signal."""
    name = "power-killed.h5"
    job = Job(
        ["--quick", "-u", "256K", "--meter", "estimate", "--baseline", "0.3", "-o", name], 3, tmp_path, name
    )
    try:
        assert job.wait_for_rows(10), job.stderr[-3000:]
        pids = job.rank_pids()
        printed = job.rows_printed()
        killed_at = time.monotonic()
        os.kill(pids[2], signal.SIGKILL)
        ended = job.wait(30)
        left = job.leftovers()
    finally:
        job.close()
    assert job.proc.returncode != 0 and left == []
    _report(capsys, f"power rank killed: job ended in {ended - killed_at:.2f} s, exit {job.proc.returncode}")
    assert ended - killed_at < 30
    assert "rank 2" in job.stderr and "signal 9" in job.stderr, job.stderr
    assert "Traceback" not in job.stdout + job.stderr
    run = check_run_file(tmp_path / name, 1, 256 * 1024, 3, at_least_rows=printed)
    assert run.status in ("running", "interrupted")
    (ch,) = run.power[0].channels
    assert len(ch.time_unix_s) > 0
    assert_analysed_with_a_notice(*analyze_in_process(capsys, tmp_path / name))


@pytest.mark.timeout(150)
def test_power_rank_stopped_mid_sweep_gives_a_recorded_gap_and_flagged_sizes(tmp_path, capsys):
    """SIGSTOP of the power rank for 5 s (within the 10 s rank 0 waits for it before going on without
    it: tests/test_reliability_frozen.py): the heartbeat in its next batch shows rank 0 the span its
    sampling did not run; the file records a gap fault with the span, the analysis flags the sizes."""
    name = "power-stopped.h5"
    job = Job(
        ["--quick", "-u", "256K", "--meter", "estimate", "--baseline", "0.3", "-o", name], 3, tmp_path, name
    )
    stop_s = 5.0
    try:
        assert job.wait_for_rows(8), job.stderr[-3000:]
        pids = job.rank_pids()
        stopped_at = time.time()
        os.kill(pids[2], signal.SIGSTOP)
        time.sleep(stop_s)
        resumed_at = time.time()
        os.kill(pids[2], signal.SIGCONT)
        _finish(job)
    finally:
        job.close()
    run = check_run_file(tmp_path / name, 1, 256 * 1024, 3, at_least_rows=20)
    assert run.status == "complete"
    (ch,) = run.power[0].channels
    gaps = [k for k, kind in enumerate(ch.fault_extra["kind"]) if kind == "gap"]
    assert len(gaps) == 1, list(zip(ch.fault_message, ch.fault_extra["kind"], strict=True))
    start, end = ch.fault_time_unix_s[gaps[0]], ch.fault_extra["last_time_unix_s"][gaps[0]]
    _report(
        capsys,
        f"power rank stopped {resumed_at - stopped_at:.2f} s: gap recorded from {start - stopped_at:+.2f} s "
        f"to {end - resumed_at:+.2f} s around the stop and the resume",
    )
    assert stopped_at - 1.0 < start <= stopped_at + 0.05 and resumed_at - 0.05 <= end < resumed_at + 1.0
    assert "did not run for" in ch.fault_message[gaps[0]] and "did not run for" in job.stderr
    assert "1 distinct meter fault(s), 1 occurrence(s)" in job.stdout, job.stdout[-2000:]
    # rank 0 noticed while it waited, before the power rank answered
    assert re.search(r"the power rank of node 0 \(rank 2\) has not answered for 1\.\d s", job.stderr), (
        job.stderr
    )
    waited = re.search(r"the power rank of node 0 \(rank 2\) answered after (\d+\.\d) s", job.stderr)
    assert waited and 1.0 < float(waited.group(1)) <= stop_s + 0.5, job.stderr
    _report(capsys, f"rank 0 waited {waited.group(1)} s for the stopped power rank's answer")
    assert _samples_between(ch, start + 0.01, end - 0.01) == 0
    code, out, err = analyze_in_process(capsys, tmp_path / name)
    assert code == 0 and "Traceback" not in out + err, err
    assert "flagged 'recorded gap':" in out and "did not run for" in out, out
    from npmpi_analysis.numbers.analyse import analyse_run

    a = analyse_run(run, "stopped")
    flags = a.flag_names()
    inside = (a.window_end_unix_s >= start) & (a.window_start_unix_s <= end)
    assert inside.any()
    assert all(flags[k] == "recorded gap" for k in np.flatnonzero(inside))
    assert all(a.power.gap_reasons[k] for k in np.flatnonzero(inside))
