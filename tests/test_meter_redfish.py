"""The Redfish meter against a real HTTPS Redfish service on 127.0.0.1 (tests/fakes/redfish_server.py)
whose readings are a known function of time, and one real `mpirun -np 3` run with it."""

from __future__ import annotations

import json
import math
import time
from decimal import Decimal

import numpy as np
import pytest
from fakes.redfish_server import FakeBmc, Truth, make_ca_and_cert
from test_meter_snmp import SECRET_COMMUNITY, agent  # noqa: F401 - the SNMP agent fixture: the fabric

import npmpi.meters.redfish as redfish_meter
from npmpi.meters.base import MeterError, MeterFault, make_meter, parse_meter_spec
from npmpi.meters.redfish import RedfishMeter, parse_host
from npmpi.meters.redfish_discovery import PayloadError, duration_s, number, resolution
from npmpi.meters.snmp import COMMUNITY_ENV
from npmpi.power.sampler import ChannelSampler, open_meters

SECRET = "Rf-s3cret-7781!"
USER = "npmpi-ops"


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return make_ca_and_cert(tmp_path_factory.mktemp("pki"))


@pytest.fixture
def bmc_factory(certs, tmp_path, monkeypatch):
    """Start fake BMCs (stopped at the end); the meter's credentials in the environment."""
    monkeypatch.setenv("NPMPI_REDFISH_USER", USER)
    monkeypatch.setenv("NPMPI_REDFISH_PASSWORD", SECRET)
    started = []

    def start(**kwargs) -> FakeBmc:
        bmc = FakeBmc(tmp_path, username=USER, password=SECRET, certs=certs, **kwargs).start()
        started.append(bmc)
        return bmc

    yield start
    for bmc in started:
        bmc.stop()


@pytest.fixture
def bmc(bmc_factory):
    return bmc_factory()


def meter_for(bmc: FakeBmc, extra: str = "", measure: bool = False, monkeypatch=None) -> RedfishMeter:
    if not measure and monkeypatch is not None:
        monkeypatch.setattr(redfish_meter, "MEASURE_FOR_S", 0.0)  # the default period: a faster open
    meter = make_meter(f"redfish:127.0.0.1:{bmc.port},verify={bmc.ca}{extra}")
    assert isinstance(meter, RedfishMeter)
    return meter


def opened(bmc: FakeBmc, extra: str = "", monkeypatch=None) -> RedfishMeter:
    meter = meter_for(bmc, extra, monkeypatch=monkeypatch)
    meter.open()
    return meter


def shown_truth(truth: Truth, stamp: float, latency_s: float = 1.5) -> list[tuple[float, float]]:
    """(watts, joules) the service may have shown for a reading stamped at `stamp`: the values of
    the refreshes within latency_s before it, rounded as the BMC writes them, or of one refresh
    within 0.1 s after it (a reading is stamped at the middle of its request: the BMC may answer
    half a request later)."""
    out = []
    k_last = math.floor((stamp + 0.1) / truth.update_s)
    for k in range(k_last - int(latency_s / truth.update_s), k_last + 1):
        watts, kwh = truth.shown(k * truth.update_s)
        out.append((float(watts), float(Decimal(kwh) * Decimal(3_600_000))))
    return out


# -- no server ---------------------------------------------------------------------------------------


def test_spec_host_port_and_parameters():
    assert parse_host("bmc1", "s") == ("bmc1", 443)
    assert parse_host("10.0.0.5:8443", "s") == ("10.0.0.5", 8443)
    assert parse_host("[fe80::1]:8443", "s") == ("fe80::1", 8443)
    for bad in ("bmc1:http", "bmc1:70000", ":443"):
        with pytest.raises(MeterError, match=r"HOST|port"):
            make_meter(f"redfish:{bad}")
    with pytest.raises(MeterError, match="give the BMC's address"):
        make_meter("redfish")
    with pytest.raises(MeterError, match="use='watts'"):
        make_meter("redfish:bmc1,use=watts")
    with pytest.raises(
        MeterError, match="known parameters: chassis, sensor, verify, use, timeout, credentials"
    ):
        make_meter("redfish:bmc1,user=admin")
    with pytest.raises(MeterError, match="may not be given on the command line") as info:
        parse_meter_spec(f"redfish:bmc1,password={SECRET}")
    assert SECRET not in str(info.value)


def test_json_numbers_keep_their_resolution_and_wrong_types_are_refused():
    assert resolution(Decimal("374")) == 1.0 and resolution(Decimal("12.3450")) == pytest.approx(1e-4)
    assert duration_s("PT0.25S") == 0.25 and duration_s("PT1M30S") == 90.0 and math.isnan(duration_s("1s"))
    assert number(Decimal("2.5"), "x") == Decimal("2.5") and number(7, "x") == 7
    for bad in ("374", True, None, [374], {"Reading": 1}):
        with pytest.raises(PayloadError, match="not a number"):
            number(bad, "PowerWatts.Reading")


# -- each schema against the truth ------------------------------------------------------------------


def test_environment_metrics_power_and_energy_counter_match_the_truth(bmc):
    meter = meter_for(bmc, measure=True)
    meter.open()
    try:
        d = meter.describe()
        assert d["schema"] == "EnvironmentMetrics" and d["chassis"] == "1U"
        assert d["uri"] == "/redfish/v1/Chassis/1U/EnvironmentMetrics"
        assert d["schema_type"] == "#EnvironmentMetrics.v1_3_0.EnvironmentMetrics"
        assert d["quantities"] == ["power_w", "energy_j"] and d["energy_from_counter"] is True
        assert d["averaging"] == "instant" and d["power_resolution_w"] == pytest.approx(0.1)
        assert d["energy_resolution_j"] == pytest.approx(0.36)  # 1e-7 kWh as sent
        # the BMC refreshes every 0.25 s: measured by polling (every 0.05 s plus a request's time)
        assert d["update_period_source"] == "measured" and 0.15 <= d["update_period_s"] <= 0.4
        assert d["natural_interval_s"] == d["update_period_s"] and d["tls_verify"] is True
        readings = []
        for _ in range(5):
            readings += meter.read(0.0)
            time.sleep(0.15)
    finally:
        meter.close()
    truth = bmc.truth
    first = shown_truth(truth, readings[0].time_unix_s)
    for r in readings:
        candidates = shown_truth(truth, r.time_unix_s)
        # the watts are one of the values the BMC showed just before the reading, to its resolution
        assert any(abs(w - r.power_w) <= 0.05 + 1e-9 for w, _ in candidates), (r, candidates)
        # the energy since open is the counter's difference, to its resolution (1e-7 kWh = 0.36 J)
        assert any(
            abs(r.energy_j - (j - j0)) <= 0.36 + 1e-6
            for w, j in candidates
            for _, j0 in first
            if abs(w - r.power_w) <= 0.05 + 1e-9
        ), r
    assert readings[-1].energy_j > 250 * 0.6  # at least 0.6 s at 250..350 W
    assert bmc.logins == 1 and bmc.logouts == 1 and not bmc.tokens  # the session was deleted


def test_sensors_declared_interval_power_and_energy_sensors(bmc_factory, monkeypatch):
    bmc = bmc_factory(environment=False)
    meter = opened(bmc, monkeypatch=monkeypatch)  # no EnvironmentMetrics: the chassis power sensor
    d = meter.describe()
    assert (d["schema"], d["sensor"], d["uri"]) == (
        "Sensor",
        "TotalPower",
        "/redfish/v1/Chassis/1U/Sensors/TotalPower",
    )
    assert d["update_period_source"] == "declared (SensingInterval)" and d["update_period_s"] == 0.25
    assert d["energy_from_counter"] is False and d["quantities"] == ["power_w"]
    (r,) = meter.read(0.0)
    assert any(abs(w - r.power_w) <= 0.05 + 1e-9 for w, _ in shown_truth(bmc.truth, r.time_unix_s))
    meter.close()

    meter = opened(bmc, ",sensor=TotalEnergy", monkeypatch)  # a kWh sensor: power from the counter
    d = meter.describe()
    assert d["energy_from_counter"] is True and d["averaging"] == "previous"
    assert d["quantities"] == ["power_w", "energy_j"] and d["energy_resolution_j"] == pytest.approx(0.36)
    assert meter.read(0.0) == []  # the first read after open takes the counter's reference
    time.sleep(0.3)
    (a,) = meter.read(0.0)
    time.sleep(0.6)
    (b,) = meter.read(0.0)
    meter.close()
    # the counter's gain between the readings is the truth's energy between two of the BMC's refreshes
    # (those just before each reading), and the power is that gain over the time between the readings
    gains = [
        jb - ja
        for _, ja in shown_truth(bmc.truth, a.time_unix_s)
        for _, jb in shown_truth(bmc.truth, b.time_unix_s)
    ]
    assert any(abs((b.energy_j - a.energy_j) - g) <= 0.36 + 1e-6 for g in gains), (a, b)
    assert b.power_w == pytest.approx((b.energy_j - a.energy_j) / (b.time_unix_s - a.time_unix_s))
    with pytest.raises(MeterError, match=r"no sensor 'Nope' in /redfish/v1/Chassis/1U/Sensors"):
        opened(bmc, ",sensor=Nope", monkeypatch)
    with pytest.raises(MeterError, match="reads neither W nor kWh"):
        opened(bmc, ",sensor=AmbientTemp", monkeypatch)


def test_legacy_power_resource(bmc_factory, monkeypatch):
    bmc = bmc_factory(environment=False, sensors=False)
    meter = opened(bmc, monkeypatch=monkeypatch)
    d = meter.describe()
    assert (d["schema"], d["uri"], d["schema_type"]) == (
        "Power",
        "/redfish/v1/Chassis/1U/Power",
        "#Power.v1_7_1.Power",
    )
    # PowerMetrics.IntervalInMin is the window of its min/avg/max, not of PowerConsumedWatts: kept, not used
    assert d["power_metrics_interval_s"] == 1800.0 and d["averaging"] == "instant"
    assert d["update_period_source"] == "default" and d["natural_interval_s"] == 1.0
    (r,) = meter.read(0.0)
    meter.close()
    assert math.isnan(r.energy_j)
    assert any(abs(w - r.power_w) <= 0.05 + 1e-9 for w, _ in shown_truth(bmc.truth, r.time_unix_s))
    with pytest.raises(MeterError, match=r"use=energy"):
        opened(bmc, ",use=energy", monkeypatch)


def test_chassis_is_chosen_or_must_be_named(bmc_factory, monkeypatch):
    bmc = bmc_factory(chassis=("1U", "Enclosure", "GPUTray"), powered=1)
    assert opened(bmc, monkeypatch=monkeypatch).describe()["chassis"] == "1U"  # the only one with power
    bmc = bmc_factory(chassis=("1U", "GPUTray"), powered=2)
    with pytest.raises(
        MeterError, match=r"several chassis offer power \(1U, GPUTray\): choose one with chassis=ID"
    ):
        opened(bmc, monkeypatch=monkeypatch)
    meter = opened(bmc, ",chassis=GPUTray,use=power", monkeypatch)
    assert meter.describe()["chassis"] == "GPUTray" and meter.describe()["energy_from_counter"] is False
    with pytest.raises(MeterError, match="no chassis 'Blade7'; the service has: 1U, GPUTray"):
        opened(bmc, ",chassis=Blade7", monkeypatch)


# -- TLS and credentials -----------------------------------------------------------------------------


# urllib3 warns of every unverified request; the library silences it at import, pytest's "error"
# filter (pyproject.toml) comes back before each test; the meter itself warns once (asserted here)
@pytest.mark.filterwarnings("ignore:Unverified HTTPS request")
def test_certificate_verification(bmc, tmp_path, capsys, monkeypatch):
    other_ca, _, _ = make_ca_and_cert(tmp_path / "other")
    for spec in (f"verify={other_ca}", ""):  # another CA; the system bundle (which has no test CA)
        meter = make_meter(f"redfish:127.0.0.1:{bmc.port}" + (f",{spec}" if spec else ""))
        with pytest.raises(
            MeterError, match=r"TLS failed \(\[SSL: CERTIFICATE_VERIFY_FAILED\].*does not verify"
        ):
            meter.open()
    assert bmc.logins == 0 and bmc.failed_logins == 0  # the password never left
    with pytest.raises(MeterError, match=r"verify=/nowhere/ca.pem: no such file"):
        make_meter(f"redfish:127.0.0.1:{bmc.port},verify=/nowhere/ca.pem").open()
    monkeypatch.setattr(redfish_meter, "MEASURE_FOR_S", 0.0)
    meter = make_meter(f"redfish:127.0.0.1:{bmc.port},verify=no")
    capsys.readouterr()
    meter.open()
    meter.close()
    meter.open()  # a reopening does not warn again
    meter.close()
    err = capsys.readouterr().err
    assert err.count("TLS certificate verification is OFF") == 1 and len(err.strip().splitlines()) == 1
    assert meter.describe()["tls_verify"] is False and "NOT verified" in meter.description()


def test_wrong_password_names_where_it_came_from_never_the_secret(bmc, tmp_path, monkeypatch):
    monkeypatch.setenv("NPMPI_REDFISH_PASSWORD", "wrong-" + SECRET)
    with pytest.raises(MeterError) as info:
        meter_for(bmc).open()
    message = str(info.value)
    assert "HTTP 401" in message and "NPMPI_REDFISH_USER, NPMPI_REDFISH_PASSWORD" in message
    assert SECRET not in message and USER not in message
    cred = tmp_path / "bmc.cred"
    cred.write_text(f"username={USER}\npassword=wrong-{SECRET}\n")
    cred.chmod(0o600)
    with pytest.raises(MeterError, match=f"credentials file {cred}") as info:
        meter_for(bmc, f",credentials={cred}").open()
    assert SECRET not in str(info.value)
    cred.write_text(f"username={USER}\npassword={SECRET}\n")
    monkeypatch.setattr(redfish_meter, "MEASURE_FOR_S", 0.0)
    meter = meter_for(bmc, f",credentials={cred}")
    meter.open()
    meter.close()
    assert meter.describe()["credentials"] == f"credentials file {cred}"
    monkeypatch.delenv("NPMPI_REDFISH_USER")
    with pytest.raises(MeterError, match="environment variable NPMPI_REDFISH_USER is not set"):
        meter_for(bmc).open()


# -- faults ------------------------------------------------------------------------------------------


def test_service_down_at_start_is_a_usage_error_or_skipped(bmc):
    port = bmc.port
    bmc.down()
    started = time.monotonic()
    with pytest.raises(MeterError, match=r"cannot connect .*Connection refused.*--meter-optional") as info:
        make_meter(f"redfish:127.0.0.1:{port},verify={bmc.ca}").open()
    assert info.value.exit_code == 2 and time.monotonic() - started < 2.0
    meters, skipped = open_meters([f"redfish:127.0.0.1:{port},verify={bmc.ca}"], optional=True)
    assert meters == [] and "cannot connect" in skipped[0]


def test_drop_out_mid_sampling_is_a_fault_and_sampling_resumes(bmc, monkeypatch):
    monkeypatch.setattr("npmpi.power.sampler.REOPEN_AFTER_S", 0.1)
    meter = opened(bmc, monkeypatch=monkeypatch)
    sampler = ChannelSampler(meter, 0.1, "node 0 (test)")
    sampler.start()
    time.sleep(0.4)
    bmc.down()
    time.sleep(0.4)
    bmc.up()
    time.sleep(0.7)
    sampler.stop()
    buf = sampler.drain()
    messages = [f.message for f in buf.faults]
    assert any("cannot connect" in m and "sampling resumes" in m for m in messages), messages
    assert any("meter is back" in m for m in messages), messages
    times = np.array([r.time_unix_s for r in buf.readings])
    fault_t = next(f.first_unix_s for f in buf.faults if "cannot connect" in f.message)
    back_t = next(f.first_unix_s for f in buf.faults if "meter is back" in f.message)
    assert (times < fault_t).sum() >= 3 and (times > back_t).sum() >= 3
    assert not ((times > fault_t) & (times < back_t)).any()  # no number while it was down
    assert all(math.isfinite(r.power_w) for r in buf.readings)
    # the session of before the drop was deleted once the service answered again, the new one at close
    assert bmc.logins == 2 and bmc.logouts == 2 and not bmc.tokens


def test_hanging_service_times_out(bmc, monkeypatch):
    meter = opened(bmc, ",timeout=0.6", monkeypatch)
    bmc.mode = "hang"
    started = time.monotonic()
    with pytest.raises(MeterFault, match=r"no answer within 0\.6 s"):
        meter.read(0.0)
    assert time.monotonic() - started < 1.0
    meter.close()  # the service did not answer: no logout is waited for
    assert time.monotonic() - started < 1.1
    started = time.monotonic()
    with pytest.raises(MeterError, match=r"no answer within 0\.6 s"):
        meter.open()
    assert time.monotonic() - started < 1.0


@pytest.mark.parametrize(
    ("mode", "message"),
    [
        ("garbage", "not valid JSON"),
        ("wrongtype", r"PowerWatts.Reading is str '\d+\.\d', not a number"),
        ("missing", "no PowerWatts object"),
        ("null", "PowerWatts.Reading is null, not a number"),
    ],
)
def test_bad_payloads_are_faults_never_numbers(bmc, monkeypatch, mode, message):
    meter = opened(bmc, monkeypatch=monkeypatch)
    bmc.mode = mode
    with pytest.raises(MeterFault, match=message):
        meter.read(0.0)
    bmc.mode = "ok"
    assert meter.read(0.0)[0].power_w > 0
    meter.close()


def test_expired_session_and_counter_reset_are_faults(bmc, monkeypatch):
    meter = opened(bmc, monkeypatch=monkeypatch)
    bmc.tokens.clear()  # the BMC dropped the session
    with pytest.raises(MeterFault, match=r"HTTP 401 Unauthorized .*the meter logs in again"):
        meter.read(0.0)
    meter.close()
    meter.open()
    meter.read(0.0)
    bmc.truth.t0 += 100.0  # the counter now shows 100 s less energy: it went back
    with pytest.raises(MeterFault, match="energy counter went back"):
        meter.read(0.0)
    meter.close()


# -- a real run ----------------------------------------------------------------------------------------


@pytest.mark.mpi
def test_real_run_with_a_bmc_and_a_switch_records_both_and_never_the_secrets(
    bmc,
    agent,  # noqa: F811 - the SNMP agent fixture of test_meter_snmp
    npmpi_run,
    tmp_path,
    capsys,
):
    """Issue 17's run: `mpirun -np 3 python -m npmpi --quick --meter redfish:…,verify=CA
    --fabric-meter snmp:…,profile=entity-sensor` against the fake BMC and a real SNMP agent: the file
    holds the node's and the fabric's channels, the analysis reports nodes, fabric and total
    energy per bit, and neither the BMC password nor the community is anywhere."""
    from npmpi_analysis.cli import main

    from npmpi.runfile.reader import load_run

    env = {"NPMPI_REDFISH_USER": USER, "NPMPI_REDFISH_PASSWORD": SECRET, COMMUNITY_ENV: SECRET_COMMUNITY}
    spec = f"redfish:127.0.0.1:{bmc.port},verify={bmc.ca}"
    switch = f"snmp:127.0.0.1:{agent.port},profile=entity-sensor"
    tiny = ["-u", "4K", "-p", "0", "--trials", "2", "--repeats", "6", "--baseline", "1"]
    args = ["--quick", *tiny, "--meter", spec, "--fabric-meter", switch, "-o", "r.h5"]
    proc = npmpi_run(args, np=3, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    run = load_run(tmp_path / "r.h5")
    (ch,) = run.power[0].channels
    a = ch.attrs
    assert (a["kind"], a["host"], int(a["port"]), a["chassis"]) == ("redfish", "127.0.0.1", bmc.port, "1U")
    assert a["schema"] == "EnvironmentMetrics" and a["uri"] == "/redfish/v1/Chassis/1U/EnvironmentMetrics"
    assert bool(a["tls_verify"]) and bool(a["energy_from_counter"]) and ch.label == "measured"
    assert len(ch.power_w) >= 5 and len(ch.fault_message) == 0
    for t, w in zip(ch.time_unix_s, ch.power_w, strict=True):
        assert any(abs(v - w) <= 0.05 + 1e-9 for v, _ in shown_truth(bmc.truth, t)), (t, w)
    assert bmc.logins == bmc.logouts >= 1 and not bmc.tokens  # every session was deleted
    (sw,) = run.fabric.channels
    assert (sw.attrs["kind"], sw.attrs["profile"], sw.label) == ("snmp", "entity-sensor", "measured")
    assert len(sw.power_w) >= 5 and len(sw.fault_message) == 0 and np.all(sw.power_w > 0)
    report, doc = tmp_path / "report.html", tmp_path / "r.json"
    capsys.readouterr()
    code = main([str(tmp_path / "r.h5"), "--report", str(report), "--json", str(doc)])
    out, err = capsys.readouterr()
    assert code == 0, err
    rows = {ln.split()[0] for ln in out.splitlines() if ln.startswith("    ") and ln.split()}
    assert {"nodes", "fabric", "total"} <= rows, out
    sizes = [
        r for r in json.loads(doc.read_text())["runs"][0]["sizes"] if r["total_energy_pj_bit"] is not None
    ]
    assert sizes and all(
        r["total_energy_pj_bit"] == pytest.approx(r["energy_pj_bit"] + r["fabric_energy_pj_bit"])
        for r in sizes
    )
    assert "redfish" in report.read_text() and "snmp" in report.read_text()
    for path in (tmp_path / "r.h5", report, doc):
        data = path.read_bytes()
        assert SECRET.encode() not in data and b"tok1x" not in data, path  # no password, no session token
        assert SECRET_COMMUNITY.encode() not in data, path
    assert SECRET not in proc.stdout + proc.stderr + out + err
    assert SECRET_COMMUNITY not in proc.stdout + proc.stderr + out + err
