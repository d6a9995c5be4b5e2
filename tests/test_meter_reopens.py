"""Readings of different openings of a meter never make one span: a synthetic counter that reopens
many times (its counter restarting at 0 each time), in a run file with and without each reading's
opening (format 1.6, and 1.5's compact fault record), and the real case: the Redfish meter sampling
the test BMC (tests/fakes/redfish_server.py) that sends strings or null every third answer."""

from __future__ import annotations

import time

import numpy as np
import pytest
from fakes.redfish_server import FakeBmc, make_ca_and_cert
from npmpi_analysis.cli import ANALYSED_SAMPLE_FIELDS
from npmpi_analysis.numbers.analyse import analyse_run
from npmpi_analysis.numbers.compute import FLAG_OK
from npmpi_analysis.numbers.energy_windows import counter_spans, segment_breaks
from npmpi_analysis.synthetic import SynthChannel, SynthNode, write_run
from test_meter_redfish import SECRET, USER, meter_for

from npmpi.power.sampler import ChannelSampler
from npmpi.runfile.faults import FaultRecord
from npmpi.runfile.reader import load_run

T0 = 5_000.0
LOW_W, HIGH_W = 180.0, 320.0


def truth_w(t):
    return 250.0 + 70.0 * np.sin(2 * np.pi * t / 2.3)


def truth_j(t):
    k = 2.3 / (2 * np.pi)
    return 250.0 * t - 70.0 * k * np.cos(t / k)


def reopening_counter():
    """Readings 0.25 s apart in openings of 1, 2, 1, 3, 1, 1, 2 readings (0.3 s between openings),
    each opening's counter starting at 0; (time, power, energy, epoch)."""
    t, e, epoch, now = [], [], [], 0.0
    for k, count in enumerate([1, 2, 1, 3, 1, 1, 2] * 6):
        first = now
        for _ in range(count):
            t.append(now)
            e.append(truth_j(now) - truth_j(first))
            epoch.append(k)
            now += 0.25
        now += 0.3
    t = np.array(t)
    return t, truth_w(t), np.array(e), np.array(epoch, dtype=float)


@pytest.fixture
def flaky_bmc(tmp_path, monkeypatch):
    """The test BMC sending strings or null every third answer, with a continuously integrated counter."""
    monkeypatch.setenv("NPMPI_REDFISH_USER", USER)
    monkeypatch.setenv("NPMPI_REDFISH_PASSWORD", SECRET)
    bmc = FakeBmc(tmp_path, username=USER, password=SECRET, certs=make_ca_and_cert(tmp_path / "pki"),
                  fault_every=3, exact_energy=True).start()  # fmt: skip
    yield bmc
    bmc.stop()


def test_epochs_break_every_opening_and_a_compact_record_breaks_its_whole_span():
    t, _p, e, epoch = reopening_counter()
    _lo, _hi, pw = counter_spans(t, e, segment_breaks(t, np.zeros(0), epoch))
    assert len(pw) == sum(c - 1 for c in [1, 2, 1, 3, 1, 1, 2] * 6)  # only spans inside one opening
    assert pw.min() >= LOW_W and pw.max() <= HIGH_W
    # 1.5's record: one row for 41 reopenings from the first to the last fault; every reading
    # inside it starts a stretch (no span at all rather than a span across an opening)
    brk = segment_breaks(t, np.array([t[0] + 0.1, t[-1] - 0.1]), None, [(t[0] + 0.1, t[-1] - 0.1)])
    assert brk.all()
    # as it was: a fault only at the record's first and last time joins openings into invented power
    old = counter_spans(t, e, segment_breaks(t, np.array([t[0] + 0.1, t[-1] - 0.1])))[2]
    assert old.min() < 100.0


@pytest.mark.parametrize("with_epochs", [True, False])
def test_sizes_over_many_reopenings_are_within_the_served_range_or_flagged(tmp_path, with_epochs):
    t, p, e, epoch = reopening_counter()
    faults = [FaultRecord(T0 + t[1] - 0.05, T0 + t[-1] - 0.05, 41, "PowerWatts.Reading is null")]
    ch = SynthChannel(
        T0 + t,
        p,
        kind="redfish",
        sample_interval_s=0.25,
        energy_j=e,
        faults=faults,
        attrs={"energy_from_counter": True, "energy_resolution_j": 0.36},
        open_epoch=epoch if with_epochs else None,
    )
    starts = T0 + np.arange(0.2, t[-1] - 0.8, 0.45)
    rows = [[s] for s in starts]
    path = write_run(tmp_path / "r.h5", [8] * len(rows), [1] * len(rows), [[0.4]] * len(rows), rows,
                     nodes=[SynthNode([ch])])  # fmt: skip
    run = load_run(path, ANALYSED_SAMPLE_FIELDS)
    assert ("open_epoch" in run.power[0].channels[0].extra) == with_epochs
    a = analyse_run(run, "r")
    w, flag = a.power.job_w, a.power.job_flag
    assert np.all(np.isnan(w) | ((w >= LOW_W - 0.5) & (w <= HIGH_W + 0.5))), w
    if with_epochs:  # the sizes the spans of one opening cover are right to the truth's curvature
        ok = flag == FLAG_OK
        exact = (truth_j(starts - T0 + 0.4) - truth_j(starts - T0)) / 0.4
        assert ok.sum() >= 5 and np.abs(w[ok] - exact[ok]).max() < 15.0


def test_a_bmc_sending_strings_or_null_every_third_answer_gives_power_in_its_served_range(
    flaky_bmc, monkeypatch, tmp_path
):
    monkeypatch.setattr("npmpi.power.sampler.REOPEN_AFTER_S", 0.05)
    bmc = flaky_bmc
    meter = meter_for(bmc, monkeypatch=monkeypatch)
    for _ in range(3):  # open: a faulty answer at open is a MeterError, and the sampler retries
        try:
            meter.open()
            break
        except Exception:  # the fake answered the open's first GET with null
            time.sleep(0.05)
    sampler = ChannelSampler(meter, 0.1, "node 0 (test)")
    sampler.start()
    time.sleep(3.0)
    sampler.stop()
    buf = sampler.drain()
    served = [float(w) for _, w, _ in bmc.served if w is not None]
    assert sum(1 for _, w, _ in bmc.served if w is None) >= 5 and len(buf.readings) >= 10
    epochs = np.array(buf.epochs, dtype=float)
    assert epochs[-1] >= 5 and np.all(np.diff(epochs) >= 0)  # one epoch per opening, in order
    t = np.array([r.time_unix_s for r in buf.readings])
    e = np.array([r.energy_j for r in buf.readings])
    _lo, _hi, pw = counter_spans(t, e, segment_breaks(t, np.zeros(0), epochs))
    # the counter's power between readings of one opening: the BMC's own, never below what it served
    # (its counter is the exact integral; power refreshed every 0.25 s: within the served range)
    # (the served watts sample the truth every 0.25 s: its peaks lie up to 1.7 W beyond them)
    low, high = min(served) - 2.0, max(served) + 2.0
    # (an opening's first answer is its counter's reference: with every third answer faulty, most
    # openings give one reading and no span; spans there are, are the BMC's own power)
    assert np.all((pw >= low) & (pw <= high)), (pw, low, high)
    # and per message size, through the run file and the analysis
    p = np.array([r.power_w for r in buf.readings])
    ch = SynthChannel(t, p, kind="redfish", sample_interval_s=0.1, energy_j=e, open_epoch=epochs,
                      attrs={"energy_from_counter": True, "energy_resolution_j": 0.36})  # fmt: skip
    starts = np.arange(t[0] + 0.05, t[-1] - 0.3, 0.25)
    rows = [[s] for s in starts]
    path = write_run(tmp_path / "b.h5", [8] * len(rows), [1] * len(rows), [[0.2]] * len(rows), rows,
                     nodes=[SynthNode([ch])])  # fmt: skip
    w = analyse_run(load_run(path, ANALYSED_SAMPLE_FIELDS), "b").power.job_w
    assert np.isfinite(w).sum() >= len(w) // 2
    assert np.all(np.isnan(w) | ((w >= low) & (w <= high))), (w, low, high)


@pytest.mark.mpi
def test_a_real_run_against_the_flaky_bmc_stores_openings_and_never_reads_below_what_it_served(
    flaky_bmc, npmpi_run, tmp_path
):
    """`mpirun -np 3 python -m npmpi --meter redfish:…` while the BMC sends strings or null every
    third answer: the file holds each reading's opening and every reopening's fault, and no size's
    power is outside what the BMC served (or it has none)."""
    env = {"NPMPI_REDFISH_USER": USER, "NPMPI_REDFISH_PASSWORD": SECRET}
    spec = f"redfish:127.0.0.1:{flaky_bmc.port},verify={flaky_bmc.ca}"
    tiny = [
        "-u",
        "64K",
        "-p",
        "0",
        "--trials",
        "3",
        "--repeats",
        "20",
        "--baseline",
        "1",
        "--sample-interval",
        "0.25",
    ]
    proc = npmpi_run(["--quick", *tiny, "--meter", spec, "-o", "r.h5"], np=3, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    run = load_run(tmp_path / "r.h5", ANALYSED_SAMPLE_FIELDS)
    (ch,) = run.power[0].channels
    epochs = ch.extra["open_epoch"]
    assert len(epochs) == len(ch.power_w) >= 5 and np.all(np.diff(epochs) >= 0) and epochs[-1] >= 2
    counts = ch.fault_extra["count"]
    assert sum(int(c) for c, m in zip(counts, ch.fault_message, strict=True) if "meter is back" in m) >= 2
    served = [float(w) for _, w, _ in flaky_bmc.served if w is not None]
    low, high = min(served) - 2.0, max(served) + 2.0
    a = analyse_run(run, "r")
    w = a.power.job_w
    assert np.isfinite(w).any() and np.all(np.isnan(w) | ((w >= low) & (w <= high))), (w, low, high)
