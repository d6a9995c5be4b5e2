"""Bounds on everything that becomes a wait, and a stop signal in any phase (issue 28, items 3 and 6).

A calibration's delay and uncertainty, a meter's timeout and averaging span all turn into time the
job sleeps; each is bounded by what a meter can physically be, refused at start naming the field,
and the baseline after the sweep is bounded whatever a file or a meter claims. A stop signal during
the closing baseline leaves the file `interrupted`, never `complete`.
"""

from __future__ import annotations

import math
import re
import signal
from types import SimpleNamespace

import pytest

from npmpi.core.errors import UsageError
from npmpi.core.messages import StopFlag
from npmpi.meters import MeterError, check_meter_spec
from npmpi.persize.transmitter import SweepOutcome
from npmpi.power.baseline import MAX_AFTER_EXTENSION_S, after_baseline_s
from npmpi.power.calibration import MAX_METER_DELAY_S, check_calibration, largest_delay_s
from npmpi.power.recording import PowerSession, final_power

ENTRY = {
    "host": "h",
    "spec": "estimate",
    "kind": "estimate",
    "delay_s": 1.5,
    "uncertainty_s": 0.1,
    "quality": 0.9,
}


def _doc(**entry) -> dict:
    return {"format": "npmpi-calibration", "version": 1, "created_utc": "t", "results": [{**ENTRY, **entry}]}


@pytest.mark.parametrize(
    "field,value",
    [
        ("delay_s", 3600),  # the former maximum: an hour of baseline
        ("delay_s", 61),
        ("delay_s", 1e300),
        ("uncertainty_s", 1e300),  # was "recording 3e+300 s of idle power after the sweep"
        ("uncertainty_s", 61),
        ("uncertainty_s", -0.1),
        ("quality", 1e300),
    ],
)
def test_a_calibration_that_would_become_a_long_wait_is_refused_naming_the_field(field, value):
    check_calibration(_doc(), "--calibration c.json")
    with pytest.raises(UsageError, match=re.escape(f"results[0].{field} is {value!r}")):
        check_calibration(_doc(**{field: value}), "--calibration c.json")
    check_calibration(_doc(**{field: 0.5 if field != "quality" else -0.5}), "--calibration c.json")


def test_the_largest_accepted_calibration_gives_a_bounded_baseline():
    doc = _doc(delay_s=MAX_METER_DELAY_S, uncertainty_s=MAX_METER_DELAY_S)
    check_calibration(doc, "--calibration c.json")
    layout = SimpleNamespace(hosts=["h", "h", "h"], power_ranks=[2])
    nodes = [{"channels": [{"spec": "estimate", "kind": "estimate", "sample_interval_s": 0.1}]}]
    delay = largest_delay_s(doc, layout, nodes)
    assert delay == 4 * MAX_METER_DELAY_S
    assert after_baseline_s(3.0, nodes, delay) == pytest.approx(240.2)  # under MAX_AFTER_EXTENSION_S


@pytest.mark.parametrize("claim", [1e300, math.inf, math.nan])
def test_the_after_sweep_baseline_is_bounded_whatever_a_file_or_meter_claims(claim):
    nodes = [{"channels": [{"sample_interval_s": 1.0, "averaging_s": claim}]}]
    assert after_baseline_s(3.0, nodes, 0.0) <= MAX_AFTER_EXTENSION_S
    assert after_baseline_s(3.0, [{"channels": [{"sample_interval_s": 1.0}]}], claim) <= MAX_AFTER_EXTENSION_S
    assert after_baseline_s(10.0, [{"channels": [{"sample_interval_s": 1.0}]}], 2.0) == 10.0  # as asked
    assert after_baseline_s(1.0, [{"channels": [{"sample_interval_s": 1.0}]}], 2.0) == 4.0  # delay + 2 spans


@pytest.mark.parametrize(
    "spec",
    [
        "ipmi:timeout=3600",
        "redfish:127.0.0.1,timeout=61",
        "snmp:127.0.0.1,profile=apc-rpdu2,timeout=61",
        "snmp:127.0.0.1,profile=apc-rpdu2,retries=11",
        "wattsup:/dev/null,interval=3601",
        "replay:t.csv,interval=3601",
    ],
)
def test_a_meter_timeout_or_interval_beyond_physical_limits_is_refused(spec):
    with pytest.raises(MeterError, match=re.escape(spec.split(",")[-1].split("=")[0] + "=")):
        check_meter_spec(spec)


@pytest.mark.parametrize(
    "channel,expected_s",
    [
        ({"sample_interval_s": 0.1}, 10.0),  # estimate: the 10 s floor
        ({"sample_interval_s": 1.0}, 25.0),  # a Watts Up? read every second: 5 x its 5 s gap threshold
        ({"sample_interval_s": 1.0, "longest_call_s": 60.0}, 325.0),  # a BMC's 60 s timeout
        ({"sample_interval_s": 3600.0}, 600.0),  # --sample-interval of an hour: capped
    ],
)
def test_the_wait_for_a_frozen_power_rank_is_bounded(channel, expected_s):
    from npmpi.power.rank import PowerCollector

    assert PowerCollector(None, [1], [[{"spec": "x", **channel}]]).lost_after_s(0) == expected_s


class _Collector:
    """PowerCollector's side used by final_power; its baseline receives a stop signal part-way."""

    def __init__(self, stop: StopFlag | None) -> None:
        self.stop, self.baselines = stop, []
        self.lost: dict = {}  # no power rank given up on

    def collect(self, *_):
        return 0

    def baseline(self, seconds, stop, during=""):
        self.baselines.append(seconds)
        if self.stop is not None:
            self.stop.set(signal.SIGINT, "SIGINT")
        return SimpleNamespace(start_unix_s=0.0, end_unix_s=1.0, cpu_s=[0.0], system_busy=[0.0, 0.0])

    def clock_offsets(self):
        return []


class _Writer:
    def set_group_attrs(self, *_a, **_k):
        pass

    def set_baseline_cpu(self, *_a):
        pass

    def flush(self):
        pass


@pytest.mark.parametrize("signalled", [True, False])
def test_a_stop_during_the_closing_baseline_marks_the_run_interrupted(signalled):
    stop = StopFlag()
    collector = _Collector(stop if signalled else None)
    outcome = SweepOutcome(status="complete")
    layout = SimpleNamespace(power_ranks=[1])
    opts = SimpleNamespace(baseline_s=10.0)
    console = SimpleNamespace(note=lambda text: None)
    nodes = [{"channels": [{"sample_interval_s": 0.1}]}]
    final_power(PowerSession(_Writer(), collector, layout, nodes, opts, None, console, stop), outcome)
    assert collector.baselines == [10.0]
    if signalled:
        assert (outcome.status, outcome.exit_code) == ("interrupted", 128 + signal.SIGINT)
        assert "during the idle baseline after the sweep" in outcome.message
    else:
        assert (outcome.status, outcome.exit_code) == ("complete", 0)


@pytest.mark.mpi
@pytest.mark.timeout(120)
def test_ctrl_c_during_the_closing_baseline_under_mpirun_leaves_the_file_interrupted(tmp_path):
    """The issue's case (there --baseline 10, SIGINT 3 s in): --baseline 4, SIGINT to mpirun 1.5 s into the
    baseline after the sweep."""
    import sys
    import time

    import h5py
    from support.reliability import Job

    name = "closing.h5"
    job = Job(
        ["--quick", "-u", "16", "--meter", "estimate", "--baseline", "4", "-o", name], 3, tmp_path, name
    )
    try:
        assert job.wait_until(lambda: "idle power after the sweep" in job.stdout, 90), job.stderr[-2000:]
        time.sleep(1.5)
        job.proc.send_signal(signal.SIGINT)
        signalled = time.monotonic()
        ended = job.wait(30)
    finally:
        job.close()
    assert job.proc.returncode != 0 and "Traceback" not in job.stdout + job.stderr
    with h5py.File(tmp_path / name) as f:
        assert f.attrs["status"] == "interrupted", dict(f.attrs)
        assert "received" in str(f.attrs["status_message"])
    assert job.leftovers() == []
    print(
        f"\nSIGINT in the closing baseline: interrupted, ended {ended - signalled:.2f} s after",
        file=sys.stderr,
    )
