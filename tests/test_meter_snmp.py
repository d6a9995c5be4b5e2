"""The snmp meter against a real SNMP agent: snmpsim, started here on 127.0.0.1 on a free UDP port.

The agent serves the .snmprec files of tests/data/snmp, each recorded in the layout of one profile
(PowerNet-MIB, PDU2-MIB, ENTITY-SENSOR-MIB); its community is the file's name. Some values follow
a known function of the time (snmpsim's `numeric` module: offset + amplitude × sin(2π t / 60), t the
Unix time, truncated to an integer), so every reading is checked against the truth at the moment the
agent answered. SNMPv3 (SHA, AES) uses the agent's one user and the file's name as context.
"""

from __future__ import annotations

import math
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from support.schedules import DATA

from npmpi.meters import MeterError, MeterFault, make_meter, parse_meter_spec
from npmpi.meters.snmp import COMMUNITY_ENV, V3_ENV, SnmpMeter, parse_target
from npmpi.meters.snmp_profiles import Plan, Term, ValueProblem, sensor_exp10, watts

SNMP_DATA = DATA / "snmp"
BROKEN_DATA = DATA / "snmp-broken"
SECRET_COMMUNITY = "c0mmunity-5ecret-9d41"  # also the name of a copy of entity-sensor.snmprec
V3_USER, V3_AUTH_KEY, V3_PRIV_KEY = "npmpi-tester", "auth-5ecret-7f3a", "priv-5ecret-91c2"
OMEGA = 2 * math.pi / 60  # the data files' functions have a period of one minute


class Agent:
    """snmpsim-command-responder on 127.0.0.1:port, stopped and started again on the same port."""

    def __init__(self, port: int, cache: Path, log: Path) -> None:
        self.port, self.cache, self.log = port, cache, log
        self.proc: subprocess.Popen | None = None

    def start(self, data: Path) -> Agent:
        argv = [
            sys.executable, "-c", "from snmpsim.commands.responder import main; main()",
            f"--data-dir={data}", f"--agent-udpv4-endpoint=127.0.0.1:{self.port}",
            f"--cache-dir={self.cache / data.name}", f"--logging-method=file:{self.log}",
            f"--v3-user={V3_USER}", f"--v3-auth-key={V3_AUTH_KEY}", "--v3-auth-proto=SHA",
            f"--v3-priv-key={V3_PRIV_KEY}", "--v3-priv-proto=AES",
        ]  # fmt: skip
        # snmpsim refuses to run as root unless told to (it would otherwise drop to another user)
        env = {**os.environ, "SNMPSIM_ALLOW_ROOT": "true"}
        self.proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self._wait_ready()
        return self

    def _wait_ready(self) -> None:
        """Until the agent answers a GET (about 2 s), or fail with its log."""
        spec = parse_meter_spec(f"snmp:127.0.0.1:{self.port},oid=1.3.6.1.2.1.1.1.0")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            assert self.proc is not None and self.proc.poll() is None, self.log.read_text()[-3000:]
            try:
                probe = SnmpProbe(spec, "entity-sensor")
                probe.client.open(probe.security)
                probe.client.get(["1.3.6.1.2.1.1.1.0"])
                return
            except Exception:
                time.sleep(0.1)
            finally:
                probe.client.close()
        pytest.fail(f"snmpsim did not answer in 30 s: {self.log.read_text()[-3000:]}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.proc = None


class SnmpProbe:
    """A bare client of the meter's own kind, with a community given here (readiness checks)."""

    def __init__(self, spec, community: str) -> None:
        from npmpi.meters.snmp import SnmpClient

        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("NPMPI_SNMP_PROBE", community)
            self.security = SnmpMeter(
                parse_meter_spec(f"{spec.text},community_env=NPMPI_SNMP_PROBE")
            ).security()
        self.client = SnmpClient("127.0.0.1", int(spec.target.split(":")[1]), "", 0.2, 0)


def _free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def agent(tmp_path_factory):
    """One agent for the module, serving tests/data/snmp and a copy of entity-sensor.snmprec named
    after the community that must never reach a file."""
    base = tmp_path_factory.mktemp("snmpsim")
    data = base / "data"
    data.mkdir()
    for f in SNMP_DATA.glob("*.snmprec"):
        shutil.copy(f, data / f.name)
    shutil.copy(SNMP_DATA / "entity-sensor.snmprec", data / f"{SECRET_COMMUNITY}.snmprec")
    running = Agent(_free_udp_port(), base / "cache", base / "snmpsim.log").start(data)
    running.data = data
    yield running
    running.stop()


@pytest.fixture
def opened():
    """opened(spec): an open SnmpMeter, closed (its event loop with it) when the test ends."""
    meters: list[SnmpMeter] = []

    def open_one(spec: str) -> SnmpMeter:
        meter = make_meter(spec)
        assert isinstance(meter, SnmpMeter)
        meters.append(meter)
        meter.open()
        return meter

    yield open_one
    for meter in meters:
        meter.close()


def truth_bounds(offset: float, amplitude: float, t0: float, t1: float) -> tuple[int, int]:
    """The integers the agent can have answered between t0 and t1: its function truncated."""
    values = [offset + amplitude * math.sin(OMEGA * t) for t in np.linspace(t0, t1, 64)]
    return math.floor(min(values)), math.floor(max(values))


def read_with_truth(meter: SnmpMeter) -> tuple[float, float, float]:
    t0 = time.time()
    (reading,) = meter.read(0.0)
    t1 = time.time()
    assert t0 <= reading.time_unix_s <= t1
    return reading.power_w, t0, t1


def test_exponents_of_entity_sensor_scale_and_precision():
    # RFC 3433: units(9) is 10^0, milli(8) 10^-3, kilo(10) 10^3, yocto(1) 10^-24, yotta(17) 10^24;
    # precision 1..9 are decimal places, 0 and -8..-1 (counts of accurate digits) shift nothing
    assert sensor_exp10(9, 1) == -1 and sensor_exp10(8, 0) == -3 and sensor_exp10(10, 2) == 1
    assert sensor_exp10(1, 0) == -24 and sensor_exp10(17, 0) == 24 and sensor_exp10(9, -3) == 0
    assert Term("1.1", "x", exp10=-1).watts(2066) == pytest.approx(206.6, abs=0)
    assert float(Term("1.1", "x", exp10=-3).watts(98765)) == 98.765
    assert float(Term("1.1", "x", exp10=1).watts(37)) == 370.0


@pytest.mark.parametrize(
    ("target", "expected"),
    [("pdu1", ("pdu1", 161)), ("10.0.0.5:1161", ("10.0.0.5", 1161)), ("[::1]:1161", ("::1", 1161))],
)
def test_targets(target, expected):
    assert parse_target(parse_meter_spec(f"snmp:{target},profile=entity-sensor")) == expected


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ("snmp:profile=entity-sensor", "give the agent's address"),
        ("snmp:pdu1:99999,profile=entity-sensor", "port 99999"),
        ("snmp:pdu1", "give profile= (or oid=)"),
        ("snmp:pdu1,profile=eaton", "unknown profile='eaton'; profiles: apc-rpdu2, raritan-pdu2"),
        ("snmp:pdu1,profile=apc-rpdu2,outlet=two", "outlet='two' is not a whole number"),
        ("snmp:pdu1,profile=entity-sensor,outlet=1", "outlet= does not apply to profile=entity-sensor"),
        ("snmp:pdu1,profile=entity-sensor,index=psu", "index='psu'"),
        ("snmp:pdu1,oid=sysDescr", "numeric OID"),
        ("snmp:pdu1,oid=1.3.6.1,scale=lots", "scale='lots' is not a number"),
        ("snmp:pdu1,profile=entity-sensor,version=1", "choose 2c or 3"),
        ("snmp:pdu1,profile=entity-sensor,auth=SHA", "are for version=3"),
        ("snmp:pdu1,profile=entity-sensor,version=3,priv=ROT13", "priv= one of DES, 3DES, AES"),
        ("snmp:pdu1,profile=entity-sensor,timeout=1.5,retries=1", "one read must take at most 2 s"),
        ("snmp:pdu1,profile=entity-sensor,max_w=0", "max_w must be positive"),
    ],
)
def test_bad_specs_are_usage_errors(spec, words):
    with pytest.raises(MeterError, match=words.replace("(", r"\(").replace(")", r"\)")) as info:
        make_meter(spec)
    assert info.value.exit_code == 2


def test_an_inline_community_is_refused_without_echoing_it():
    for key in ("community", "auth_key", "priv_key"):
        with pytest.raises(MeterError) as info:
            make_meter(f"snmp:pdu1,profile=entity-sensor,{key}=hunter2-{key}")
        assert f"hunter2-{key}" not in str(info.value) and key in str(info.value)


def test_without_pysnmp_the_error_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "pysnmp.hlapi.v3arch", None)  # as if pysnmp were not installed
    monkeypatch.setenv(COMMUNITY_ENV, "entity-sensor")
    meter = make_meter("snmp:127.0.0.1:1161,profile=entity-sensor")  # building it needs no pysnmp
    with pytest.raises(
        MeterError, match=r"--meter snmp:127.0.0.1:1161,profile=entity-sensor: .*pip install 'npmpi\[snmp\]'"
    ):
        meter.open()


def test_entity_sensor_reads_the_truth(agent, monkeypatch, opened):
    monkeypatch.setenv(COMMUNITY_ENV, "entity-sensor")
    meter = opened(f"snmp:127.0.0.1:{agent.port},profile=entity-sensor")
    # entPhySensorValueUpdateRate 200 ms, precision 1 (tenths of a watt)
    assert meter.natural_interval_s == 0.2 and meter.power_resolution_w == 0.1
    values = []
    for _ in range(5):
        power, t0, t1 = read_with_truth(meter)
        lo, hi = truth_bounds(2000, 500, t0, t1)  # tenths of a watt
        assert lo / 10 <= power <= hi / 10 and round(power * 10) == power * 10
        values.append(power)
        time.sleep(0.05)
    d = meter.describe()
    assert d["oids"] == ["1.3.6.1.2.1.99.1.1.1.4.20"] and d["profile_sensors"] == ["20"]
    assert d["credentials_from"] == f"environment variable {COMMUNITY_ENV}" and "entity-sensor" in d["spec"]
    assert d["sys_descr"].startswith("npmpi test switch") and d["label"] == "measured"
    meter.close()
    with pytest.raises(MeterFault, match="not open"):
        meter.read(0.0)


@pytest.mark.parametrize(
    ("index", "watts_expected", "natural_s", "resolution_w"),
    [
        ("2", 123.4, 1.0, 0.1),  # units, precision 1; update rate 0 (unknown): 1 s
        ("3", 98.765, 2.0, 0.001),  # milli, precision 0; 2000 ms
        ("5", 1500.0, 0.5, 10.0),  # kilo, precision 2: 150 × 10^(3-2)
        ("2+3", 222.165, 2.0, 0.1),
        ("all", 1722.165, 2.0, 10.0),
    ],
)
def test_entity_sensor_index_picks_or_sums(
    agent, monkeypatch, index, watts_expected, natural_s, resolution_w, opened
):
    monkeypatch.setenv(COMMUNITY_ENV, "switch-psus")
    meter = opened(f"snmp:127.0.0.1:{agent.port},profile=entity-sensor,index={index}")
    assert meter.read(0.0)[0].power_w == watts_expected
    assert (meter.natural_interval_s, meter.power_resolution_w) == (natural_s, resolution_w)
    meter.close()


@pytest.mark.parametrize(
    ("index", "words"),
    [
        (None, r"3 watts sensors \(2, 3, 5\): summing them may count twice.*index=N"),
        ("1", r"sensor 1 measures celsius, not watts\(6\) \(sensors: 1 \(celsius\), 2 \(watts\)"),
        ("9", "no sensor 9 in entPhySensorTable"),
    ],
)
def test_entity_sensor_ambiguity_and_wrong_sensors(agent, monkeypatch, index, words, opened):
    monkeypatch.setenv(COMMUNITY_ENV, "switch-psus")
    chosen = f",index={index}" if index else ""
    with pytest.raises(MeterError, match=words):
        opened(f"snmp:127.0.0.1:{agent.port},profile=entity-sensor{chosen}")


def test_apc_outlets_and_whole_pdus(agent, monkeypatch, opened):
    monkeypatch.setenv(COMMUNITY_ENV, "apc-rpdu2")
    at = f"snmp:127.0.0.1:{agent.port},profile=apc-rpdu2"
    outlet = opened(f"{at},outlet=3")
    power, t0, t1 = read_with_truth(outlet)
    lo, hi = truth_bounds(150, 40, t0, t1)  # watts
    assert lo <= power <= hi and outlet.power_resolution_w == 1.0
    assert outlet.describe()["oids"] == ["1.3.6.1.4.1.318.1.1.26.9.4.3.1.7.3"]
    pdu = opened(at)
    power, t0, t1 = read_with_truth(pdu)
    lo, hi = truth_bounds(120, 30, t0, t1)  # hundredths of a kilowatt
    assert 10 * lo <= power <= 10 * hi and power % 10 == 0 and pdu.power_resolution_w == 10.0
    # the second PDU of the chain: its rows are found by module and outlet number, not by position
    assert opened(f"{at},outlet=1,index=2").read(0.0)[0].power_w == 61.0
    assert opened(f"{at},index=2").read(0.0)[0].power_w == 370.0
    with pytest.raises(MeterError, match=r"= -1: a negative power \(APC answers -1 where the model"):
        opened(f"{at},outlet=4")
    with pytest.raises(
        MeterError, match=r"no metered outlet 9 on PDU 1 .*found: 1:1, 1:2, 1:3, 1:4, 2:1, 2:2"
    ):
        opened(f"{at},outlet=9")
    for m in (outlet, pdu):
        m.close()


def test_raritan_outlets_and_inlet(agent, monkeypatch, opened):
    monkeypatch.setenv(COMMUNITY_ENV, "raritan-pdu2")
    at = f"snmp:127.0.0.1:{agent.port},profile=raritan-pdu2"
    assert opened(f"{at},outlet=1").read(0.0)[0].power_w == 187.0
    outlet = opened(f"{at},outlet=2")  # outletSensorDecimalDigits 1
    power, t0, t1 = read_with_truth(outlet)
    lo, hi = truth_bounds(1000, 300, t0, t1)
    assert lo / 10 <= power <= hi / 10 and outlet.describe()["profile_decimal_digits"] == 1
    assert outlet.describe()["oids"] == ["1.3.6.1.4.1.13742.6.5.4.3.1.4.1.2.5"]
    assert opened(at).read(0.0)[0].power_w == 890.0  # inlet 1
    with pytest.raises(MeterError, match=r"an OctetString \('187.5 W'\) where an integer belongs"):
        opened(f"{at},outlet=3")
    with pytest.raises(MeterError, match=r"outletSensorUnits.1.4.5 is 1, not watt\(3\)"):
        opened(f"{at},outlet=4")
    with pytest.raises(MeterError, match=r"outletSensorUnits.1.5.5 .*noSuchInstance"):
        opened(f"{at},outlet=5")


def test_generic_oid_takes_integers_exactly_and_refuses_the_rest(agent, monkeypatch, opened):
    monkeypatch.setenv(COMMUNITY_ENV, "odd-values")
    at = f"snmp:127.0.0.1:{agent.port},oid=1.3.6.1.4.1.99999"
    assert opened(f"{at}.1.0,scale=0.5").read(0.0)[0].power_w == 250.0
    meter = opened(f"{at}.5.0,scale=0.000001")  # a Gauge32 above 2^31, exactly
    assert meter.read(0.0)[0].power_w == 4000.0
    with pytest.raises(MeterError, match=r"an OctetString \('12.5'\) where an integer belongs"):
        opened(f"{at}.2.0")
    # the other values as the agent sends them, through the conversion every read uses
    expected = {
        1: 500.0,
        3: r"oid \(1.3.6.1.4.1.99999.3.0\): a Counter32 \('1000'\) where an integer belongs",
        7: r"a TimeTicks \('12345'\) where",
        4: r"= -3: a negative power",
        5: r"4e\+09 W from 1.3.6.1.4.1.99999.5.0: more than max_w=100000 W, not a power",
        8: r"oid \(1.3.6.1.4.1.99999.8.0\): noSuchInstance \(the agent has no such value\)",
    }
    answers = meter.client.get([f"1.3.6.1.4.1.99999.{n}.0" for n in expected])
    for n, outcome in expected.items():
        plan = Plan([Term(f"1.3.6.1.4.1.99999.{n}.0", "oid")], 1.0, "test")
        if isinstance(outcome, float):
            assert watts(plan, answers, 100_000.0) == outcome
        else:
            with pytest.raises(ValueProblem, match=outcome):
                watts(plan, answers, 100_000.0)


def _v3(agent, extra: str = "") -> str:
    return f"snmp:127.0.0.1:{agent.port},profile=entity-sensor,version=3,context=entity-sensor{extra}"


def test_v3_auth_priv_from_the_environment_and_from_a_file(agent, monkeypatch, tmp_path, opened):
    for field, variable in V3_ENV.items():
        monkeypatch.setenv(
            variable, {"user": V3_USER, "auth_key": V3_AUTH_KEY, "priv_key": V3_PRIV_KEY}[field]
        )
    meter = opened(_v3(agent))
    power, t0, t1 = read_with_truth(meter)
    lo, hi = truth_bounds(2000, 500, t0, t1)
    assert lo / 10 <= power <= hi / 10
    d = meter.describe()
    assert (d["snmp_version"], d["auth_protocol"], d["priv_protocol"]) == ("3", "SHA", "AES")
    assert not any(s in str(d) for s in (V3_AUTH_KEY, V3_PRIV_KEY))
    meter.close()
    secrets = tmp_path / "pdu.cred"
    secrets.write_text(f"# SNMPv3\nuser={V3_USER}\nauth_key={V3_AUTH_KEY}\npriv_key={V3_PRIV_KEY}\n")
    secrets.chmod(0o600)
    for variable in V3_ENV.values():
        monkeypatch.delenv(variable)
    meter = opened(_v3(agent, f",credentials={secrets}"))
    assert (
        meter.read(0.0)[0].power_w > 0
        and meter.describe()["credentials_from"] == f"credentials file {secrets}"
    )
    meter.close()


@pytest.mark.parametrize(
    ("field", "wrong", "words"),
    [
        ("auth_key", "auth-wrong-0000", "Wrong SNMP PDU digest"),
        ("priv_key", "priv-wrong-0000", "Ciphering services not available or ciphertext is broken"),
        ("user", "intruder", "Unknown USM user"),
    ],
)
def test_v3_wrong_credentials_name_their_source_not_their_value(
    agent, monkeypatch, field, wrong, words, opened
):
    good = {"user": V3_USER, "auth_key": V3_AUTH_KEY, "priv_key": V3_PRIV_KEY}
    for name, variable in V3_ENV.items():
        monkeypatch.setenv(variable, wrong if name == field else good[name])
    with pytest.raises(MeterError) as info:
        opened(_v3(agent))
    text = str(info.value)
    assert words in text and "NPMPI_SNMP_AUTH_KEY" in text and "refused the SNMPv3 credentials" in text
    assert wrong not in text and V3_AUTH_KEY not in text and V3_PRIV_KEY not in text


def test_wrong_community_or_no_agent_is_a_bounded_clear_error(agent, monkeypatch, tmp_path, opened):
    monkeypatch.setenv("PDU_COMMUNITY", "not-the-community")
    start = time.monotonic()
    with pytest.raises(MeterError) as info:
        opened(f"snmp:127.0.0.1:{agent.port},profile=entity-sensor,community_env=PDU_COMMUNITY")
    elapsed = time.monotonic() - start
    text = str(info.value)
    assert "gave no answer to 2 tries of 0.5 s" in text and "environment variable PDU_COMMUNITY" in text
    assert "not-the-community" not in text and elapsed < 3.0
    secrets = tmp_path / "pdu.cred"
    secrets.write_text("community=also-not-it\n")
    secrets.chmod(0o600)
    with pytest.raises(MeterError) as info:
        opened(f"snmp:127.0.0.1:{_free_udp_port()},profile=entity-sensor,timeout=0.2,credentials={secrets}")
    assert f"credentials file {secrets}" in str(info.value) and "also-not-it" not in str(info.value)
    monkeypatch.delenv(COMMUNITY_ENV, raising=False)
    with pytest.raises(MeterError, match=f"no community: environment variable {COMMUNITY_ENV} is not set"):
        opened(f"snmp:127.0.0.1:{agent.port},profile=entity-sensor")


def test_an_agent_down_at_start_stops_the_run_or_is_skipped(monkeypatch):
    from npmpi.power.sampler import open_meters

    monkeypatch.setenv(COMMUNITY_ENV, "entity-sensor")
    spec = f"snmp:127.0.0.1:{_free_udp_port()},profile=entity-sensor,timeout=0.2"
    with pytest.raises(MeterError) as info:
        open_meters([spec], optional=False)
    assert info.value.exit_code == 2 and "gave no answer" in str(info.value)
    meters, skipped = open_meters([spec], optional=True)
    assert meters == [] and len(skipped) == 1 and "gave no answer" in skipped[0]


def _faults_and_readings(sampler, faults: list, readings: list) -> None:
    buffer = sampler.drain()
    faults.extend(buffer.faults)
    readings.extend(buffer.readings)


def _wait_for_fault(sampler, faults, readings, words: str, timeout_s: float) -> float:
    """Drain the sampler until a fault holding `words` is recorded; its time."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        _faults_and_readings(sampler, faults, readings)
        for f in faults:
            if words in f.message:
                return f.first_unix_s
        time.sleep(0.05)
    pytest.fail(f"no fault {words!r} in {timeout_s} s: {[f.message for f in faults]}")


def test_agent_killed_then_restarted_faults_and_resumes(agent, monkeypatch, opened, capsys):
    """The power rank's sampling loop on a real agent that dies, comes back broken, then whole: a
    timeout fault, no number while it is away or broken, `meter is back` and samples again; reads
    of the broken agent are faults of their own kind (an OctetString, a vanished OID, -1 W)."""
    from npmpi.power.sampler import REOPEN_AFTER_S, ChannelSampler

    monkeypatch.setenv("SWITCH_COMMUNITY", "entity-sensor")
    monkeypatch.setenv("PDU_COMMUNITY", "apc-rpdu2")
    at = f"snmp:127.0.0.1:{agent.port}"
    sampled = opened(f"{at},profile=entity-sensor,community_env=SWITCH_COMMUNITY")
    switch = opened(f"{at},profile=entity-sensor,community_env=SWITCH_COMMUNITY")
    outlet = opened(f"{at},profile=apc-rpdu2,outlet=3,community_env=PDU_COMMUNITY")
    pdu = opened(f"{at},profile=apc-rpdu2,community_env=PDU_COMMUNITY")
    sampler = ChannelSampler(sampled, 0.2, "test node")
    faults: list = []
    readings: list = []
    sampler.start()
    try:
        time.sleep(1.0)
        killed_at = time.time()
        agent.stop()
        with pytest.raises(MeterFault, match=r"the SNMP agent gave no answer to 2 tries of 0\.5 s"):
            switch.read(0.0)
        t_fault = _wait_for_fault(sampler, faults, readings, "gave no answer", 3.0)
        agent.start(BROKEN_DATA)  # the same port, the same communities, broken values
        with pytest.raises(
            MeterFault, match=r"an OctetString \('2000'\) where an integer belongs; no sample"
        ):
            switch.read(0.0)
        with pytest.raises(MeterFault, match=r"rPDU2OutletMeteredStatusPower .*7\.3\): noSuchInstance"):
            outlet.read(0.0)
        with pytest.raises(MeterFault, match=r"= -1: a negative power \(APC answers -1"):
            pdu.read(0.0)
        agent.stop()
        restarted_at = time.time()
        agent.start(agent.data)
        t_back = _wait_for_fault(sampler, faults, readings, "meter is back", REOPEN_AFTER_S + 10)
        time.sleep(0.5)
    finally:
        sampler.stop()
    _faults_and_readings(sampler, faults, readings)
    times = np.array([r.time_unix_s for r in readings])
    assert killed_at < t_fault < restarted_at < t_back
    assert np.sum(times < killed_at) >= 2 and np.sum(times > t_back) >= 2
    assert not np.any((times > t_fault) & (times < t_back))  # nothing while away or broken
    for r in readings:
        # stamped at the middle of its request: the agent may have answered up to the request's end
        lo, hi = truth_bounds(2000, 500, r.time_unix_s - 1.0, r.request_end_unix_s)
        assert lo / 10 <= r.power_w <= hi / 10
    power, t0, t1 = read_with_truth(switch)  # a direct read works again without reopening
    lo, hi = truth_bounds(2000, 500, t0, t1)
    assert lo / 10 <= power <= hi / 10
    assert "gave no answer" in capsys.readouterr().err
    first_after = times[times > t_back].min()
    with capsys.disabled():  # shown with -s
        print(
            f"\nsnmp agent killed: fault after {t_fault - killed_at:.2f} s; restarted whole: back after "
            f"{t_back - restarted_at:.2f} s, first sample {first_after - restarted_at:.2f} s after restarting"
        )


def test_mpirun_run_and_analysis_hold_no_secret(agent, tmp_path, capsys, npmpi_run):
    """`mpirun -np 3 python -m npmpi --quick --meter snmp:...,profile=entity-sensor`: the file holds
    the agent's true power at each sample's time, the host, profile and OID, and never the community
    (nor does the analysis' report)."""
    from npmpi_analysis.cli import main as analyze

    from npmpi.runfile.reader import load_run

    spec = f"snmp:127.0.0.1:{agent.port},profile=entity-sensor"
    args = ["--quick", "-u", "256", "--baseline", "0.5", "--meter", spec, "-o", "snmp.h5"]
    done = npmpi_run(args, np=3, env={COMMUNITY_ENV: SECRET_COMMUNITY})
    assert done.returncode == 0, done.stderr[-3000:]
    run = load_run(tmp_path / "snmp.h5")
    (ch,) = run.power[0].channels
    a = ch.attrs
    assert (a["kind"], a["profile"], a["host"], a["port"]) == (
        "snmp",
        "entity-sensor",
        "127.0.0.1",
        agent.port,
    )
    assert list(a["oids"]) == ["1.3.6.1.2.1.99.1.1.1.4.20"] and a["label"] == "measured"
    assert a["natural_interval_s"] == 0.2 and a["sample_interval_s"] == 0.2 and a["power_resolution_w"] == 0.1
    assert len(ch.power_w) >= 10 and np.ptp(ch.power_w) > 0 and len(ch.fault_message) == 0
    errors = []
    for t, w in zip(ch.time_unix_s, ch.power_w, strict=True):
        # stamped at the middle of its request: the agent answered at most one read's span before
        # the stamp, or up to half the request's duration after it
        lo, hi = truth_bounds(2000, 500, t - 1.0, t + 0.25)
        assert lo / 10 <= w <= hi / 10
        errors.append(abs(w - (2000 + 500 * math.sin(OMEGA * t)) / 10))
    assert np.median(errors) < 0.5  # typically one tenth of a watt
    report = tmp_path / "report.json"
    capsys.readouterr()
    assert analyze([str(tmp_path / "snmp.h5"), "--json", str(report), "--csv", str(tmp_path / "r.csv")]) == 0
    out = capsys.readouterr()
    secret = SECRET_COMMUNITY.encode()
    for path in (tmp_path / "snmp.h5", report, tmp_path / "r.csv"):
        assert secret not in path.read_bytes(), path
    assert SECRET_COMMUNITY not in out.out + out.err + done.stdout + done.stderr
    assert "pJ/bit" in out.out or "pJ" in out.out


def test_a_stale_or_late_datagram_is_never_the_answer_to_a_new_request(monkeypatch):
    """Each answer matches its request (pysnmp drops a response whose request id is not pending): an
    agent sending the previous answer again before each answer, and one answering a request after the
    meter gave up on it, never have that datagram taken for the next request's answer."""
    from fakes.snmp_agent import STALE_VALUE, BareAgent

    monkeypatch.setenv(COMMUNITY_ENV, "public")
    spec = "oid=1.3.6.1.4.1.99.1.0,timeout=0.2,retries=0"
    stale = BareAgent(stale=True)
    stale.start()
    meter = make_meter(f"snmp:127.0.0.1:{stale.port},{spec}")
    try:
        meter.open()
        for _ in range(20):
            (reading,) = meter.read(0.0)
            assert reading.power_w == stale.requests != STALE_VALUE  # this request's own answer
    finally:
        meter.close()
        stale.stop()
    assert stale.stale_sent >= 20
    late = BareAgent(late={4: 0.35, 7: 0.35})  # requests 1-3: the open's; 4 and 7 answered too late
    late.start()
    meter = make_meter(f"snmp:127.0.0.1:{late.port},{spec}")
    try:
        meter.open()
        got = []
        for _ in range(8):
            try:
                got.append(meter.read(0.0)[0].power_w)
            except MeterFault:
                got.append(None)
                time.sleep(0.3)  # the late answer arrives before the next request
    finally:
        meter.close()
        late.stop()
    assert got == [None, 5.0, 6.0, None, 8.0, 9.0, 10.0, 11.0]
