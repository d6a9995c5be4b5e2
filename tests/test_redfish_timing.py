"""When a Redfish reading was made: stamped at the middle of its request (or at the BMC's own
ReadingTime), checked against the test BMC's log of what it served and when; and the BMC's refresh
period measured from what refreshes (tests/fakes/redfish_server.py)."""

from __future__ import annotations

import subprocess
import sys
import time
from decimal import Decimal
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from fakes.redfish_server import FakeBmc, Truth, make_ca_and_cert
from npmpi_analysis.numbers.channel_power import channel_series as _channel_series
from npmpi_analysis.numbers.channel_samples import refresh_period
from npmpi_analysis.numbers.energy_windows import counter_spans, segment_breaks, span_means
from npmpi_analysis.numbers.said import Said
from test_meter_redfish import SECRET, USER

import npmpi.meters.redfish as redfish_meter
from npmpi.meters.base import make_meter
from npmpi.power.sampler import ChannelSampler


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_ca_and_cert(tmp_path_factory.mktemp("pki"))


@pytest.fixture
def start_bmc(pki, tmp_path, monkeypatch):
    monkeypatch.setenv("NPMPI_REDFISH_USER", USER)
    monkeypatch.setenv("NPMPI_REDFISH_PASSWORD", SECRET)
    started = []

    def start(**kwargs) -> FakeBmc:
        bmc = FakeBmc(tmp_path, username=USER, password=SECRET, certs=pki, **kwargs).start()
        started.append(bmc)
        return bmc

    yield start
    for bmc in started:
        bmc.stop()


def sample(bmc: FakeBmc, seconds: float, interval_s: float = 0.05):
    meter = make_meter(f"redfish:127.0.0.1:{bmc.port},verify={bmc.ca}")
    meter.open()
    sampler = ChannelSampler(meter, interval_s, "node 0 (test)")
    sampler.start()
    time.sleep(seconds)
    sampler.stop()
    return sampler.drain().readings


@pytest.mark.parametrize("update_s", [1.0, 0.25])
def test_refresh_period_is_measured_from_the_power_not_a_counter_changing_on_every_read(start_bmc, update_s):
    bmc = start_bmc(truth=Truth(update_s=update_s), exact_energy=True)  # EnvironmentMetrics + EnergykWh
    meter = make_meter(f"redfish:127.0.0.1:{bmc.port},verify={bmc.ca}")
    meter.open()
    d = meter.describe()
    meter.close()
    assert d["update_period_source"] == "measured"
    assert d["update_period_s"] == pytest.approx(update_s, rel=0.25), d["update_period_s"]


@pytest.fixture
def bmc_process(tmp_path, monkeypatch):
    """The test BMC in a process of its own (as a BMC is: not sharing this process's interpreter),
    its counter integrated to each request's instant; yields (port, CA file, stop), stop() ending
    it and returning its log of what it served: (instant, watts, kWh) per answer."""
    monkeypatch.setenv("NPMPI_REDFISH_USER", USER)
    monkeypatch.setenv("NPMPI_REDFISH_PASSWORD", SECRET)
    args = [sys.executable, "-m", "fakes.redfish_server", str(tmp_path), SECRET, USER, "exact_energy"]
    proc = subprocess.Popen(args, cwd=Path(__file__).parent, stdout=subprocess.PIPE, text=True)

    def stop() -> list[tuple[float, str, str]]:
        proc.terminate()
        lines = proc.communicate(timeout=10)[0].splitlines()
        return [(float(t), w, k) for _, t, w, k in (line.split() for line in lines) if k != "None"]

    port, ca = proc.stdout.readline().split()
    yield int(port), ca, stop
    if proc.poll() is None:
        stop()


def test_stamps_at_the_middle_of_the_request_and_energy_over_windows_match_the_served_truth(
    bmc_process, monkeypatch
):
    monkeypatch.setattr(redfish_meter, "MEASURE_FOR_S", 0.0)
    port, ca, stop = bmc_process
    meter = make_meter(f"redfish:127.0.0.1:{port},verify={ca}")
    meter.open()
    sampler = ChannelSampler(meter, 0.05, "node 0 (test)")
    sampler.start()
    time.sleep(6.0)  # about 120 readings
    sampler.stop()
    readings = sampler.drain().readings
    # every reading is one the BMC served (its counter value is unique: it changes on every request);
    # the counter's reference is the answer of the open that the readings' values all fit
    served = [(t, Decimal(k)) for t, _, k in stop()]
    for _, kwh0 in served[:5]:
        when = {round(float(k - kwh0) * 3.6e6, 3): t for t, k in served}
        if all(round(r.energy_j, 3) in when for r in readings):
            break
    error = np.array([r.time_unix_s - when[round(r.energy_j, 3)] for r in readings])
    half = np.array([(r.request_end_unix_s - r.request_start_unix_s) / 2 for r in readings])
    assert len(readings) >= 80
    assert all(r.request_start_unix_s <= r.time_unix_s <= r.request_end_unix_s for r in readings)
    # the BMC served each reading inside its request, so the middle is off by at most half the
    # request (a loaded machine stretches some requests: a fixed 20 ms for 99 % failed under load)
    assert np.all(np.abs(error) <= half + 0.001), np.percentile(np.abs(error) - half, [50, 99, 100])
    assert np.median(np.abs(error)) <= 0.020, np.percentile(np.abs(error), [50, 99, 100])
    # energy over windows of 2 s: the counter interpolated at the edges, against the exact integral
    # (of the BMC's curve: a difference of its integral does not depend on where that starts)
    truth = Truth()
    t = np.array([r.time_unix_s for r in readings])
    e = np.array([r.energy_j for r in readings])
    lo, hi, pw = counter_spans(t, e, segment_breaks(t, np.zeros(0)))
    starts = np.arange(t[0], t[-1] - 2.0, 0.05)
    mean, covered = span_means(lo, hi, pw, starts, starts + 2.0)
    exact = np.array([truth.energy_j(s + 2.0) - truth.energy_j(s) for s in starts])
    relative = np.abs(mean * covered - exact) / exact
    assert len(starts) >= 40 and np.mean(relative <= 0.01) >= 0.99, np.percentile(relative, [50, 99, 100])


def test_a_reading_time_the_bmc_gives_is_the_stamp(start_bmc, monkeypatch):
    monkeypatch.setattr(redfish_meter, "MEASURE_FOR_S", 0.0)
    bmc = start_bmc(environment=False, reading_time=True)  # the chassis power Sensor with ReadingTime
    readings = sample(bmc, 1.5)
    assert len(readings) >= 15
    for r in readings:
        # the refresh's instant (0.25 s grid), to the millisecond the BMC writes
        assert r.time_unix_s == r.reading_time_unix_s
        assert abs(r.time_unix_s - bmc.truth.refreshed_at(r.time_unix_s + 1e-4)) < 1.5e-3
        assert r.time_unix_s <= r.request_end_unix_s
        assert float(bmc.truth.shown(r.time_unix_s + 1e-4)[0]) == r.power_w


def test_plain_http_is_named_so_in_the_spec_and_on_the_https_port(monkeypatch):
    from http.server import BaseHTTPRequestHandler, HTTPServer
    from threading import Thread

    from npmpi.meters.base import MeterError

    monkeypatch.setenv("NPMPI_REDFISH_USER", USER)
    monkeypatch.setenv("NPMPI_REDFISH_PASSWORD", SECRET)
    with pytest.raises(MeterError, match=r"http:// is plain HTTP, not HTTPS"):
        make_meter("redfish:http://127.0.0.1:8000")

    class Plain(BaseHTTPRequestHandler):  # a web server speaking HTTP where HTTPS was expected
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

        def do_HEAD(self):
            self.do_GET()

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", 0), Plain)
    Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    try:
        with pytest.raises(MeterError, match=r"serves plain HTTP, not HTTPS") as info:
            make_meter(f"redfish:127.0.0.1:{server.server_address[1]},verify=no").open()
    finally:
        server.shutdown()
        server.server_close()
    assert "certificate" not in str(info.value)


@pytest.mark.parametrize("update_s, reading_time", [(3.0, False), (0.25, False), (0.25, True)])
def test_the_refresh_period_is_measured_over_the_run(start_bmc, update_s, reading_time):
    """EnvironmentMetrics (no SensingInterval): a BMC refreshing every 3 s was stored as 1 s, source
    `default` (3 s of polling at open cannot see two refreshes) and never refined; one refreshing every
    0.25 s as 0.33 s. The run's readings measure it (from ReadingTime where the sensor has one), and
    the stamps' staleness bound uses it."""
    truth = Truth(update_s=update_s, wave_s=7.0)  # not a multiple of the period: every refresh shows
    bmc = start_bmc(truth=truth, exact_energy=True, reading_time=reading_time)
    meter = make_meter(f"redfish:127.0.0.1:{bmc.port},verify={bmc.ca}")
    meter.open()
    sampler = ChannelSampler(meter, meter.natural_interval_s, "node 0 (test)")
    sampler.start()
    deadline = time.monotonic() + 8 * update_s + 6.0
    while time.monotonic() < deadline and meter.counters()["update_period_changes"] < 6:
        time.sleep(0.2)
    sampler.stop()
    counts = sampler.drain().counters
    assert counts["update_period_changes"] >= 5, counts
    assert counts["update_period_measured_s"] == pytest.approx(update_s, rel=0.1), counts
    assert meter.period_s() == counts["update_period_measured_s"]
    d = meter.describe()
    assert d["update_period_source"] in ("measured", "default")  # the one taken at open, kept beside it


def bmc_channel(t, p, reading_time=None, **attrs):
    """A stored redfish channel as the analysis reads it (no fault)."""
    extra = {} if reading_time is None else {"reading_time_unix_s": np.asarray(reading_time, dtype=float)}
    return SimpleNamespace(
        attrs={"kind": "redfish", "sample_interval_s": 1.0, "update_period_s": 1.0,
               "update_period_source": "default", **attrs},
        time_unix_s=np.asarray(t, dtype=float), power_w=np.asarray(p, dtype=float),
        energy_j=np.full(len(t), np.nan), extra=extra, fault_time_unix_s=np.zeros(0), fault_message=[],
    )  # fmt: skip


def test_the_analysis_measures_a_bmc_refresh_period_from_its_distinct_readings():
    """Polled every 1 s (with jitter), refreshed every 3 s: the analysis finds 3 s from the changes of
    the readings (or their ReadingTime), and windows and sigma reckon with readings 3 s old."""
    rng = np.random.default_rng(7)
    t = 1.7e9 + np.arange(60) + rng.uniform(-0.05, 0.05, 60)
    refreshed = np.floor((t - 1.7e9 + 0.4) / 3.0) * 3.0 + 1.7e9 - 0.4  # the BMC's last refresh
    p = 300 + 40 * np.sin(refreshed / 7.0)
    period, whence = refresh_period(bmc_channel(t, p).attrs, t, p, {})
    assert period == pytest.approx(3.0, rel=0.03) and whence == "the readings (analysis)"
    ch = bmc_channel(t, p, reading_time=refreshed)
    period, _ = refresh_period(ch.attrs, t, p, ch.extra)
    assert period == pytest.approx(3.0, rel=1e-6)  # from ReadingTime: exact
    readings, info = _channel_series(ch, "f: /power/node0/channel0", None, lambda x: x, Said())
    assert readings.interval_s == pytest.approx(3.0) and info.refresh[0] == pytest.approx(3.0)
    # a flat series: the meter's measurement over the run, else the one taken at open
    flat = np.full(60, 300.0)
    ch = bmc_channel(t, flat, update_period_measured_s=2.5)
    assert refresh_period(ch.attrs, t, flat, {}) == (2.5, "the meter, over the run")
    assert refresh_period(bmc_channel(t, flat).attrs, t, flat, {}) == (1.0, "at open (default)")
    assert refresh_period(bmc_channel(t, flat, update_period_measured_s=1e12).attrs, t, flat, {})[0] == 1.0
    assert refresh_period({"kind": "rapl"}, t, p, {}) == (0.0, "")  # not a BMC: no refresh period
