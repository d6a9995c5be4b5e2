"""Real meters' backends under a real `mpirun -np 3`, each reading a fake of its real interface."""

from __future__ import annotations

import itertools
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
from fakes.sysfs import FakePowercap

from npmpi.runfile.reader import load_run

pytestmark = pytest.mark.mpi

EMULATOR = [sys.executable, "-m", "fakes.wattsup_emulator"]


def check_samples_cover_the_run(run, ch):
    t = ch.time_unix_s
    pp = run.pingpong
    # stamped at receipt: records that arrive together (a Watts Up? under load) share their time
    assert len(t) >= 5 and np.all(np.diff(t) >= 0) and len(np.unique(t)) > len(t) // 2
    assert t[0] >= pp.trial_start_unix_s.min() - 5 and t[-1] <= pp.trial_end_unix_s.max() + 5
    assert t[-1] >= pp.trial_end_unix_s.max() - 1.0  # sampled to the end of the sweep


def test_wattsup_emulator_on_a_pty(npmpi_run, tmp_path):
    tests_dir = str(__import__("pathlib").Path(__file__).parent)
    emu = subprocess.Popen(
        [*EMULATOR, "--trace", "100,150", "--cycle", "--time-scale", "0.1"],
        cwd=tests_dir,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        pty = emu.stdout.readline().strip()
        assert pty.startswith("/dev/"), pty
        proc = npmpi_run(
            ["--quick", "-u", "256K", "--meter", f"wattsup:{pty}", "--baseline", "0.5", "-o", "r.h5"],
            np=3,
            timeout=120,
        )
    finally:
        emu.terminate()
        emu.wait(timeout=10)
        emu.stdout.close()
    assert proc.returncode == 0, proc.stderr
    run = load_run(tmp_path / "r.h5")
    (ch,) = run.power[0].channels
    assert ch.attrs["kind"] == "wattsup" and ch.label == "measured"
    check_samples_cover_the_run(run, ch)
    assert set(np.unique(ch.power_w)) <= {100.0, 150.0} and len(np.unique(ch.power_w)) == 2
    assert np.allclose(ch.volts, 120.0)
    assert np.allclose(ch.amps, ch.power_w / 120.0, rtol=0.01)  # the emulator's power factor is 1
    assert len(ch.fault_message) == 0
    import h5py

    with h5py.File(tmp_path / "r.h5") as f:
        cg = f["power/node0/channel0"]
        spaced = cg["time_spaced_unix_s"][:]
        # the second time line: records spaced apart, never after their receipt
        assert len(spaced) == len(ch.time_unix_s) and np.all(np.diff(spaced) > 0)
        assert np.all(spaced <= ch.time_unix_s)
        # every record parsed was stored; the emulator sends nothing else
        assert cg.attrs["packets_good"] == len(spaced)
        assert cg.attrs["packets_malformed"] == 0 and cg.attrs["bytes_dropped"] == 0


def test_rapl_tree_with_a_moving_counter(npmpi_run, tmp_path):
    # 50 J counters wrap every 2 s at 25 W; max_w=100 tells the meter that a 0.1 s read interval
    # cannot miss a wrap (the shortest wrap period is then 0.5 s)
    tree = FakePowercap(tmp_path / "sys", packages=2, max_range_uj=50_000_000)
    stop = threading.Event()
    watts_per_package = 25.0
    log = [(time.time(), 0.0)]  # (wall clock, joules added to both packages so far)

    def burn():  # the hardware's side: both package counters advance at a known power
        last = time.monotonic()
        while not stop.wait(0.02):
            now = time.monotonic()
            for key in ("package-0", "package-1"):
                tree.zone(key).advance_j(watts_per_package * (now - last))
            log.append((time.time(), log[-1][1] + 2 * watts_per_package * (now - last)))
            last = now

    worker = threading.Thread(target=burn, daemon=True)
    worker.start()
    try:
        proc = npmpi_run(
            [
                "--quick",
                "-u",
                "256K",
                "--meter",
                f"rapl:{tree.root},max_w=100",
                "--baseline",
                "1",
                "-o",
                "r.h5",
            ],
            np=3,
            timeout=120,
        )
    finally:
        stop.set()
        worker.join()
    assert proc.returncode == 0, proc.stderr
    run = load_run(tmp_path / "r.h5")
    (ch,) = run.power[0].channels
    assert ch.attrs["kind"] == "rapl" and ch.label == "measured"
    check_samples_cover_the_run(run, ch)
    # two packages at 25 W each, counted across several wraps of the 50 J counters: the meter's
    # energy between two readings is what the counters gained meanwhile. A loaded machine may starve
    # the writing thread: the counters then stand still and jump when it catches up, which the meter
    # rightly refuses as more than max_w allows; it reopens, and energy_j starts again from 0
    # (docs/meters.md). So compare each stretch between reopenings with what was really written.
    t, e = ch.time_unix_s, ch.energy_j
    written_t, written_j = np.array(log).T

    def shown(when: float) -> float:  # what the counters held at that moment: the last write before it
        return float(written_j[max(np.searchsorted(written_t, when, side="right") - 1, 0)])

    for fault in ch.fault_message:
        assert any(k in fault for k in ("more than max_w", "counter reset", "not moved", "resumed")), fault
    # a repeated fault is stored once (its first and last time): every reopening also shows in
    # energy_j, which starts again from the first interval's joules
    restarts = np.flatnonzero(np.diff(e) < 0) + 1
    resumed = [k for k, m in enumerate(ch.fault_message) if "resumed" in m]
    recorded = [ch.fault_time_unix_s[k] for k in resumed] + [
        ch.fault_extra["last_time_unix_s"][k] for k in resumed
    ]
    starts = sorted({0, *restarts.tolist(), *np.searchsorted(t, recorded).tolist(), len(e)})
    total = 0.0
    for a, b in itertools.pairwise(starts):
        if b - a < 2:
            continue
        gained = shown(t[b - 1]) - shown(t[a])
        assert np.all(np.diff(e[a:b]) >= 0)
        assert e[b - 1] - e[a] == pytest.approx(gained, rel=0.1, abs=2.0)
        total += gained
    assert total > 20  # several wraps of a 50 J counter pair
    assert np.all(ch.power_w >= 0) and np.nanmax(ch.power_w) > 0
