"""`redfish`: chassis power (and energy) from a BMC's Redfish service, with DMTF's `redfish` library.

At open the meter logs in (a session: POST to SessionService/Sessions, the X-Auth-Token header on
every later request, DELETE of the session at close), finds where the chosen or only chassis with
power offers it (npmpi/meters/redfish_discovery.py) and learns how often the BMC refreshes it
(the sensor's SensingInterval, else measured by polling until the value has changed twice). Each
read is then one GET of that resource, bounded by `timeout` (connect and answer: a hanging BMC
costs at most that long, and the read becomes a fault).

Certificates are verified by default against the system's CA bundle (`verify=PATH`: a CA file of
the site's; `verify=no`: not at all, with a warning). The library itself verifies nothing unless
it is given a CA file, so the meter always gives it one unless told `verify=no`.

Credentials (npmpi/meters/credentials.py): NPMPI_REDFISH_USER and NPMPI_REDFISH_PASSWORD, other
variables with username_env=/password_env=, or credentials=PATH (a 0600 file of `username=`,
`password=` lines). No user name, password or session token reaches a message or the run file.

Spec: `redfish:HOST[:PORT][,chassis=ID,sensor=ID,verify=PATH|no,use=auto|power|energy,timeout=2,
credentials=PATH,username_env=VAR,password_env=VAR]`.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import ssl
import sys
import time
from dataclasses import replace

from npmpi.core.inputfiles import read_regular_file
from npmpi.core.periods import MAX_CHANGES, refresh_period_s
from npmpi.meters.base import Meter, MeterError, MeterFault, MeterSpec, Reading, host_and_port, spec_error
from npmpi.meters.credentials import credential_parameters, credentials_source, read_credentials
from npmpi.meters.redfish_discovery import (
    JOULES_PER_KWH,
    DiscoveryError,
    PayloadError,
    Source,
    Values,
    discover,
    resolution,
    values_of,
)
from npmpi.meters.redfish_service import RedfishService, ServiceError

DEFAULT_PORT = 443
DEFAULT_TIMEOUT_S = 2.0
# a login is two requests with TLS handshakes: on a loaded 2-core host (12 busy processes besides
# other jobs) 45 logins to the test BMC took 0.2-0.6 s median, up to 2.0-5.8 s in all (docs/meters.md);
# each wait for the BMC is bounded by half the timeout: 6 s unless timeout= is given (2 s had failed)
DEFAULT_LOGIN_TIMEOUT_S = 6.0
WANTED = {"username": "NPMPI_REDFISH_USER", "password": "NPMPI_REDFISH_PASSWORD"}
MEASURE_FOR_S = 3.0  # at most this long polling at open to see the value change twice
MEASURE_POLL_S = 0.05
DEFAULT_PERIOD_S = 1.0  # a BMC's usual refresh, when neither declared nor seen
MIN_INTERVAL_S = 0.1
MAX_STALE_SESSIONS = 4
USES = ("auto", "power", "energy")
STAMP_SLACK_S = 0.05  # a BMC's ReadingTime may disagree with this host's clock by this much
STAMP_FIELDS = ["request_start_unix_s", "request_end_unix_s", "reading_time_unix_s"]

# the library logs a garbage response (its text) at error level: kept out of npmpi's output, which
# reports the fault itself
logging.getLogger("redfish").addHandler(logging.NullHandler())


def parse_host(target: str | None, spec_text: str) -> tuple[str, int]:
    """(host, port) from HOST, HOST:PORT or [IPV6]:PORT (an https:// before it and a path after it
    are allowed); MeterError if absent or malformed, or for http://: plain HTTP is refused."""
    text = target or ""  # no strip: host_and_port refuses spaces, as every number of a spec
    scheme, sep, rest = text.partition("://")
    if sep and scheme.lower() == "http":
        raise MeterError.about(
            spec_text,
            "http:// is plain HTTP, not HTTPS: the BMC's password and session "
            "would cross the network in clear text; npmpi reads Redfish over HTTPS only: give "
            "redfish:HOST[:PORT] of the BMC's HTTPS service (port 443 unless told otherwise)",
        )
    if sep and scheme.lower() == "https":
        text = rest.split("/", 1)[0]
    return host_and_port(text, spec_text, DEFAULT_PORT, "the BMC's", "redfish")


def _refreshed(last: Values, values: Values, rates: list[float], dt_s: float) -> bool:
    """Whether the service refreshed between two polls: its power reading changed; without one, the
    energy counter changed if it has been seen to repeat (a counter refreshed with the readings),
    else its rate since the previous poll differs from the rate before by more than its resolution
    allows (a counter integrating continuously; `rates` keeps the rates seen)."""
    if values.power_w is not None and last.power_w is not None:
        return values.power_w != last.power_w
    if values.energy_kwh is None or last.energy_kwh is None or dt_s <= 0:
        return False
    rate = float(values.energy_kwh - last.energy_kwh) / dt_s
    step = resolution(values.energy_kwh) / dt_s
    changed = bool(rates) and abs(rate - rates[-1]) > 2 * step + 0.01 * abs(rates[-1])
    rates.append(rate)
    if 0.0 in rates:  # the counter repeats between refreshes: each change is one
        return values.energy_kwh != last.energy_kwh
    return changed


def system_ca_file() -> str | None:
    """The system's CA bundle (what a browser on this host would trust), or None."""
    paths = ssl.get_default_verify_paths()
    candidates = [
        os.environ.get("REQUESTS_CA_BUNDLE"),
        os.environ.get("SSL_CERT_FILE"),
        paths.cafile,
        paths.openssl_cafile,
        "/etc/ssl/certs/ca-certificates.crt",  # Debian, Ubuntu
        "/etc/pki/tls/certs/ca-bundle.crt",  # RHEL, Rocky
    ]
    with contextlib.suppress(ImportError):
        import certifi  # requests' own bundle: a dependency of the library

        candidates.append(certifi.where())
    return next((c for c in candidates if c and os.path.isfile(c)), None)


class RedfishMeter(Meter):
    """Chassis power from a Redfish service (EnvironmentMetrics, Sensors or the legacy Power)."""

    kind = "redfish"
    parameters = ("chassis", "sensor", "verify", "use", "timeout", *credential_parameters(tuple(WANTED)))
    natural_interval_s = DEFAULT_PERIOD_S
    quantities = ("power_w",)

    def __init__(self, spec: MeterSpec) -> None:
        super().__init__(spec)
        self.host, self.port = parse_host(spec.target, spec.text)
        self.timeout_s = spec.number("timeout", DEFAULT_TIMEOUT_S, hi=60.0)
        if not 0 < self.timeout_s <= 60:
            raise MeterError.about(spec.text, "timeout must be in (0, 60] seconds")
        self.login_timeout_s = self.timeout_s if "timeout" in spec.params else DEFAULT_LOGIN_TIMEOUT_S
        self.longest_call_s = max(self.timeout_s, self.login_timeout_s)
        self.use = spec.params.get("use", "auto")
        if self.use not in USES:
            raise MeterError.about(spec.text, f"use={self.use!r}: give one of {', '.join(USES)}")
        verify = spec.params.get("verify", "")
        self.tls_verify = verify.lower() != "no"
        self.ca_file = verify if self.tls_verify and verify else ""
        self.source: Source | None = None
        self.update_period_s = math.nan
        self.update_period_source = ""
        self._service: RedfishService | None = None
        self._stale: list[RedfishService] = []  # sessions to delete once the service answers again
        self._warned = False
        self._energy0_kwh = self._last_kwh = None
        self._previous: tuple[float, float] | None = None  # (time, energy_j) of the last reading
        self.reading_times_used = self.reading_times_ignored = 0  # the service's ReadingTime as the stamp
        self._seen: tuple[Values, float] | None = None  # the last answer and when its request began
        self._changes: list[float] = []  # when the served value changed, over the whole run
        self._changes_exact = True  # all of them from the service's ReadingTime
        self._rates: list[float] = []  # the counter's rates, for _refreshed
        self._run_period: tuple[int, float] = (0, math.nan)  # (changes, period) as of the last estimate

    # -- open: log in, discover once, measure the update period once --------------------------------

    def open(self) -> None:
        cafile = self._ca_file_for_open()
        creds = read_credentials(self.spec, WANTED, self.spec.text)
        self._delete_stale_sessions()
        service = RedfishService(f"https://{self._netloc()}", cafile, self.timeout_s, self.login_timeout_s)
        try:
            service.login(creds["username"], creds["password"])
        except ServiceError as exc:
            raise MeterError.about(self.spec.text, self._open_message(exc)) from None
        self._service = service
        try:
            first = self._discover_and_read(service)
        except (ServiceError, PayloadError, DiscoveryError, MeterFault) as exc:
            self.close()
            raise MeterError.about(self.spec.text, f"{exc}") from None
        if math.isnan(self.update_period_s):
            self._learn_the_service(first)
        self._previous = self._seen = None  # a change is seen between two answers of one opening
        self._energy0_kwh = self._last_kwh = first.energy_kwh

    def _ca_file_for_open(self) -> str | None:
        """The CA file to verify against (None: verify=no, warned once); MeterError if unusable."""
        if not self.tls_verify:
            if not self._warned:
                self._warned = True
                print(
                    f"npmpi: warning: --meter {self.spec.text}: TLS certificate verification is OFF "
                    "(verify=no): anyone on the path can read the BMC password; give the BMC's CA with "
                    "verify=PATH",
                    file=sys.stderr,
                )
            return None
        if self.ca_file:
            read_regular_file(self.ca_file, f"verify={self.ca_file}", spec_error(self.spec.text))
            return self.ca_file
        found = system_ca_file()
        if found is None:
            raise MeterError.about(
                self.spec.text,
                "no system CA bundle found to verify the BMC's certificate: "
                "give the BMC's CA with verify=PATH (or verify=no to skip verification)",
            )
        return found

    def _open_message(self, exc: ServiceError) -> str:
        """The MeterError's words (after the spec) for a failed login: the remedy depends on what failed."""
        text = str(exc)
        if exc.kind == "auth":
            return (
                f"{text}: the BMC refused the user name or password from "
                f"{credentials_source(self.spec, WANTED)}; check them (they are never shown)"
            )
        if exc.kind == "plain-http":
            return (
                f"{text}: {self._netloc()} serves plain HTTP, not HTTPS; npmpi reads Redfish over HTTPS "
                "only (the password would cross the network in clear text): give the port of the BMC's "
                "HTTPS service"
            )
        if exc.kind == "tls":
            hint = f"verify={self.ca_file}" if self.ca_file else "the system CA bundle"
            return (
                f"{text}: the BMC's certificate does not verify against {hint}; give the CA that signed it "
                "with verify=PATH (or verify=no to skip verification, warned)"
            )
        if exc.kind in ("connect", "timeout"):
            return (
                f"{text}: is the BMC up and {self._netloc()} its Redfish address? "
                "(--meter-optional goes on without it)"
            )
        return text

    def _discover_and_read(self, service: RedfishService) -> Values:
        """The source (found once, kept across reopenings) and a first reading of it."""
        if self.source is None:
            root = service.get_json(service.root_uri)
            source = discover(
                service.get_json, root, self.spec.params.get("chassis"), self.spec.params.get("sensor")
            )
            self.source = self._with_use(source)
        return self._values()

    def _with_use(self, source: Source) -> Source:
        """The source with use= applied: power only, or the energy counter required."""
        if self.use == "power":
            if not source.has_power:
                raise DiscoveryError(
                    f"{source.uri} gives no power reading (use=power); it counts energy only"
                )
            return replace(source, has_energy=False)
        if self.use == "energy" and not source.has_energy:
            raise DiscoveryError(f"{source.uri} has no energy counter (use=energy); give use=power or auto")
        return source

    def _learn_the_service(self, first: Values) -> None:
        """Update period (declared or measured), resolutions and how a reading relates to time."""
        assert self.source is not None
        samples = [first]
        declared = self.source.sensing_interval_s
        if math.isfinite(declared) and declared > 0:
            self.update_period_s, self.update_period_source = declared, "declared (SensingInterval)"
        else:
            period, samples = self._measure_period(first)
            self.update_period_s = period
            self.update_period_source = "measured" if math.isfinite(period) else "default"
            if not math.isfinite(period):
                self.update_period_s = DEFAULT_PERIOD_S
        self.natural_interval_s = max(self.update_period_s, MIN_INTERVAL_S)
        self._declare(samples)

    def _measure_period(self, first: Values) -> tuple[float, list[Values]]:
        """The BMC's refresh period seen while polling (NaN unless the value refreshed at least twice
        within MEASURE_FOR_S), and the values seen. A refresh is a change of the power reading; of a
        source without one, a change of the energy counter's rate (a counter integrating continuously
        changes on every request, so its changes say nothing of the refresh: counting them gave
        0.055 s for a BMC refreshing once a second). A refresh happened between the start of the
        poll before and the end of the poll that saw it: the middle of that span is taken as its
        time, and the period is their span over the periods it holds (npmpi.core.periods), from three to
        five refreshes. The run's readings refine it (`measured_period_s`)."""
        seen, changes = [first], []
        before = time.monotonic()  # the start of the previous poll
        deadline = before + MEASURE_FOR_S
        rates: list[float] = []
        stamps = [before]
        while time.monotonic() < deadline and len(changes) < 5:
            time.sleep(MEASURE_POLL_S)
            asked = time.monotonic()
            try:
                values = self._values()
            except (ServiceError, PayloadError):
                break
            now = time.monotonic()
            if _refreshed(seen[-1], values, rates, now - stamps[-1]):
                changes.append((before + now) / 2)
            seen.append(values)
            stamps.append(now)
            before = asked
        return refresh_period_s(changes) if len(changes) >= 3 else math.nan, seen

    def _declare(self, samples: list[Values]) -> None:
        """Quantities, averaging and resolutions from the source and the digits the service sends."""
        assert self.source is not None
        power = [resolution(v.power_w) for v in samples if v.power_w is not None]
        energy = [resolution(v.energy_kwh) for v in samples if v.energy_kwh is not None]
        self.power_resolution_w = min(power) if power else 0.0
        if self.source.has_energy:
            self.quantities = ("power_w", "energy_j")
            self.energy_from_counter = True
            self.energy_resolution_j = (min(energy) if energy else 1.0) * JOULES_PER_KWH
            if not self.source.has_power:  # power from the counter: the average since the previous read
                self.averaging = "previous"
                self.power_resolution_w = self.energy_resolution_j / self.natural_interval_s

    # -- reading ----------------------------------------------------------------------------------------

    def _values(self) -> Values:
        if self._service is None or self.source is None:
            raise MeterFault("the Redfish meter is not open")
        return values_of(self.source, self._service.get_json(self.source.uri))

    def read(self, timeout_s: float) -> list[Reading]:
        try:
            values = self._values()
        except ServiceError as exc:
            raise MeterFault(str(exc)) from None
        except PayloadError as exc:
            raise MeterFault(f"{exc} (no reading taken)") from None
        assert self._service is not None
        start, end = self._service.last_request_unix_s  # the exchange, not the decoding after it
        self._note_change(values, start, end)
        reading = self._reading(self._stamp(start, end, values.reading_time_unix_s), values)
        if reading is None:
            return []
        return [
            replace(
                reading,
                request_start_unix_s=start,
                request_end_unix_s=end,
                reading_time_unix_s=values.reading_time_unix_s,
            )
        ]

    def _note_change(self, values: Values, start: float, end: float) -> None:
        """Keep when the served value changed: at its ReadingTime where both answers have one, else
        in the middle of the span between the previous request's start and this one's end."""
        seen, self._seen = self._seen, (values, start)
        if seen is None or len(self._changes) >= MAX_CHANGES:
            return
        last, last_start = seen
        now, before = values.reading_time_unix_s, last.reading_time_unix_s
        if math.isfinite(now) and math.isfinite(before):
            if now != before:
                self._changes.append(now)
            return
        if _refreshed(last, values, self._rates, end - last_start):
            self._changes_exact = False
            self._changes.append(0.5 * (last_start + end))
        if len(self._rates) > 20:  # the recent rates, and whether the counter was seen to repeat
            self._rates[:] = ([0.0] if 0.0 in self._rates else []) + self._rates[-10:]

    def measured_period_s(self) -> float:
        """The refresh period measured from the run's readings so far (NaN before three changes)."""
        count = len(self._changes)
        if count != self._run_period[0] and (count < 64 or count % 16 == 0):
            changes = sorted(self._changes)
            self._run_period = (count, refresh_period_s(changes, exact=self._changes_exact))
        return self._run_period[1]

    def period_s(self) -> float:
        """The refresh period to reckon with: the run's measurement, else the one taken at open."""
        measured = self.measured_period_s()
        if math.isfinite(measured):
            return measured
        return self.update_period_s if math.isfinite(self.update_period_s) else DEFAULT_PERIOD_S

    def _stamp(self, start: float, end: float, reading_time: float) -> float:
        """A reading's time: the service's own ReadingTime where it is one this request can have
        answered with (after the refresh before the request began, not after its answer: a BMC
        clock that disagrees is not trusted), else the middle of the request. Stamping on return
        instead put samples up to 0.18 s late on a loaded host (docs/meters.md)."""
        earliest, latest = start - self.period_s() - STAMP_SLACK_S, end + STAMP_SLACK_S
        if math.isfinite(reading_time) and earliest <= reading_time <= latest:
            self.reading_times_used += 1
            return reading_time
        if math.isfinite(reading_time):
            self.reading_times_ignored += 1
        return 0.5 * (start + end)

    def _reading(self, stamp: float, values: Values) -> Reading | None:
        """A Reading from one response: power as sent, or from the counter since the previous read
        (None for the first read after open, which only takes the counter's reference, as RAPL's)."""
        energy_j = self._energy_since_open(values.energy_kwh)
        previous, self._previous = self._previous, (stamp, energy_j)
        if values.power_w is not None:
            return Reading(time_unix_s=stamp, power_w=float(values.power_w), energy_j=energy_j)
        if previous is None:
            return None
        t0, e0 = previous
        power_w = (energy_j - e0) / (stamp - t0) if stamp > t0 else math.nan
        return Reading(time_unix_s=stamp, power_w=power_w, energy_j=energy_j)

    def _energy_since_open(self, kwh) -> float:
        """Joules counted since open; MeterFault if the counter went back (NaN without a counter)."""
        if kwh is None or self._energy0_kwh is None:
            return math.nan
        if self._last_kwh is not None and kwh < self._last_kwh:
            raise MeterFault(
                f"the energy counter went back from {self._last_kwh} to {kwh} kWh (reset by the BMC?)"
            )
        self._last_kwh = kwh
        return float(kwh - self._energy0_kwh) * JOULES_PER_KWH

    # -- closing ----------------------------------------------------------------------------------------

    def close(self) -> None:
        service, self._service = self._service, None
        if service is None:
            return
        # a service that did not answer is not waited for: its session is deleted at the next open
        if service.reachable and service.logout():
            self._delete_stale_sessions()  # and those of before a drop-out, if any is left
        else:  # at most a BMC's few sessions are kept: each costs a timeout at open while it hangs
            self._stale = [*self._stale, service][-MAX_STALE_SESSIONS:]

    def _delete_stale_sessions(self) -> None:
        self._stale = [service for service in self._stale if not service.logout()]

    # -- the run file -----------------------------------------------------------------------------------

    def _netloc(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    def description(self) -> str:
        where = f"Redfish at {self._netloc()}"
        if self.source is None:
            return where
        tls = "" if self.tls_verify else ", certificate NOT verified"
        return f"{where}: chassis {self.source.chassis}, {self.source.schema} {self.source.uri}{tls}"

    def describe(self) -> dict[str, object]:
        d = super().describe()
        s = self.source
        d.update(
            {
                "host": self.host,
                "port": self.port,
                "chassis": s.chassis if s else "",
                "sensor": s.sensor if s else "",
                "uri": s.uri if s else "",
                "schema": s.schema if s else "",
                "schema_type": s.odata_type if s else "",
                "tls_verify": self.tls_verify,
                "ca_file": self.ca_file,
                "timeout_s": self.timeout_s,
                "update_period_s": self.update_period_s,
                "update_period_source": self.update_period_source,
                "power_metrics_interval_s": s.power_metrics_interval_s if s else math.nan,
                "credentials": credentials_source(self.spec, WANTED),
                "extra_sample_fields": STAMP_FIELDS,
                "time_stamps": "the service's ReadingTime where it is within the request's reach, "
                "else the middle of the request",
            }
        )
        return d

    def counters(self) -> dict[str, int | float]:
        return {
            "reading_times_used": self.reading_times_used,
            "reading_times_ignored": self.reading_times_ignored,
            # the refresh period measured over the run (NaN before three changes), and from how many
            "update_period_measured_s": self.measured_period_s(),
            "update_period_changes": len(self._changes),
        }
