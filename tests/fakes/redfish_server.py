"""A small Redfish service over real HTTPS on 127.0.0.1, serving DMTF mockup-shaped resources.

Why not sushy-tools' emulator: its templates (chassis, thermal, systems) have no Power,
EnvironmentMetrics or Sensors resources, and nothing in it changes with time. This server serves
the shapes of DMTF's public-rackmount1 mockup (Redfish-Mockup-Server: ServiceRoot,
SessionService/Sessions, Chassis collection, Chassis/1U with EnvironmentMetrics, Sensors/TotalPower,
Sensors/TotalEnergy and the legacy Power) with readings that follow a known function of time:

    P(t) = base_w + swing_w * sin(2 pi t / wave_s)     refreshed every update_s (a BMC's period)

so a test knows the truth of every value it reads. The energy counter is the exact integral of
P from `t0` to the refresh time, in kWh with `energy_decimals` decimals.

Session login as a BMC does it: POST {"UserName", "Password"} -> 201 with X-Auth-Token and
Location; 401 on a wrong password; every resource but the service root needs the token; DELETE
of the session logs out. Switches: `mode` = "ok" | "hang" (accept, never answer) | "garbage"
(truncated JSON) | "wrongtype" (readings as strings) | "missing" (no PowerWatts) | "null";
`fault_every` = N: every N-th answer of a power resource alternates strings and null (a flaky BMC);
`exact_energy`: the counter is the integral up to the request's instant (it changes on every read,
as on BMCs that integrate continuously) while the watts still refresh every update_s;
`reading_time`: sensors carry `ReadingTime` (the refresh's instant, ISO 8601 with milliseconds);
down()/up() close and reopen the listening port (connection refused meanwhile).

Every answer of a power resource is logged in `served`: (the instant its values were taken, watts,
kWh, as written, or None for a faulty answer), the truth a test compares the meter's stamps with.
"""

from __future__ import annotations

import contextlib
import json
import math
import socket
import ssl
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

PREFIX = "/redfish/v1"
COPYRIGHT = "Copyright 2014-2022 DMTF. For the full DMTF copyright policy, see http://www.dmtf.org/about/policies/copyright."


def make_ca_and_cert(folder: Path, host: str = "127.0.0.1") -> tuple[Path, Path, Path]:
    """A self-signed CA and a server certificate for `host` signed by it: (ca.pem, cert.pem, key.pem)."""
    folder.mkdir(parents=True, exist_ok=True)
    ca_key, ca, key, csr, cert = (
        folder / n for n in ("ca.key", "ca.pem", "server.key", "server.csr", "server.pem")
    )
    ext = folder / "server.ext"
    ext.write_text(f"subjectAltName=IP:{host}\nbasicConstraints=CA:FALSE\n")

    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True)

    run("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-keyout", str(ca_key), "-out", str(ca), "-days", "2", "-subj", "/CN=npmpi test BMC CA")  # fmt: skip
    run("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-keyout", str(key), "-out", str(csr), "-subj", f"/CN={host}")  # fmt: skip
    run("x509", "-req", "-in", str(csr), "-CA", str(ca), "-CAkey", str(ca_key), "-CAcreateserial",
        "-out", str(cert), "-days", "2", "-extfile", str(ext))  # fmt: skip
    return ca, cert, key


class Truth:
    """The power the fake BMC reports, a known function of time, and its energy counter."""

    def __init__(
        self, base_w=300.0, swing_w=50.0, wave_s=3.0, update_s=0.25, power_decimals=1, energy_decimals=7
    ):
        self.base_w, self.swing_w, self.wave_s, self.update_s = base_w, swing_w, wave_s, update_s
        self.power_decimals, self.energy_decimals = power_decimals, energy_decimals
        self.t0 = math.floor(time.time() / update_s) * update_s - 1000 * update_s

    def refreshed_at(self, t: float) -> float:
        """The time of the BMC's last refresh at or before t."""
        return math.floor(t / self.update_s) * self.update_s

    def power_w(self, t: float) -> float:
        return self.base_w + self.swing_w * math.sin(2 * math.pi * t / self.wave_s)

    def energy_j(self, t: float) -> float:
        """The exact integral of power_w from t0 to t."""
        k = self.wave_s / (2 * math.pi)
        return self.base_w * (t - self.t0) - self.swing_w * k * (math.cos(t / k) - math.cos(self.t0 / k))

    def shown(self, t: float) -> tuple[str, str]:
        """(watts, kWh) as the BMC writes them at time t: the values at its last refresh, rounded."""
        r = self.refreshed_at(t)
        return (
            f"{self.power_w(r):.{self.power_decimals}f}",
            f"{self.energy_j(r) / 3.6e6:.{self.energy_decimals}f}",
        )


def _ref(uri: str) -> dict:
    return {"@odata.id": uri}


class FakeBmc:
    """The server; start() binds 127.0.0.1 on a free port (or `port`), stop() ends it."""

    def __init__(self, folder: Path, username="admin", password="", truth: Truth | None = None,
                 environment=True, energy=True, sensors=True, legacy=True, chassis=("1U",), powered=1,
                 certs: tuple[Path, Path, Path] | None = None, fault_every=0, exact_energy=False,
                 reading_time=False):  # fmt: skip
        self.ca, self.cert, self.key = certs or make_ca_and_cert(folder)
        self.powered = powered  # how many of the chassis (the first ones) measure power
        self.username, self.password = username, password
        self.truth = truth or Truth()
        self.environment, self.energy, self.sensors, self.legacy = environment, energy, sensors, legacy
        self.chassis = list(chassis)
        self.mode = "ok"
        self.fault_every, self.exact_energy, self.reading_time = fault_every, exact_energy, reading_time
        self.served: list[tuple[float, str | None, str | None]] = []
        self._power_answers = 0
        self._now = 0.0  # the instant of the answer being built
        self.on_served = None  # called with each `served` entry (main(): printed for another process)
        self.tokens: dict[str, str] = {}  # token -> session id
        self.logins = self.logouts = self.failed_logins = 0
        self.requests: list[tuple[str, str]] = []
        self.release = threading.Event()  # ends a hang early (at stop)
        self.port = 0
        self._server: ThreadingHTTPServer | None = None
        self._lock = threading.Lock()
        self._conns: set = set()  # open connections: cut at down(), as a rebooting BMC does

    def start(self) -> FakeBmc:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(self.cert, self.key)
        bmc = self

        class Server(ThreadingHTTPServer):
            daemon_threads = True
            allow_reuse_address = True

            def finish_request(self, request, client_address):
                request.settimeout(10)
                # headers and body leave at once, as from a BMC's web server (without it, Nagle's
                # algorithm and the client's delayed ACK held every body back 40 ms)
                request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                try:  # the handshake in the request's own thread: a client that stalls it blocks no one
                    tls = ctx.wrap_socket(request, server_side=True)
                except (ssl.SSLError, OSError):
                    return  # e.g. the client refused the certificate
                with bmc._lock:
                    bmc._conns.add(tls)
                try:
                    Handler(tls, client_address, self)
                except OSError:
                    pass  # the connection was cut (down())
                finally:
                    with bmc._lock:
                        bmc._conns.discard(tls)
                    tls.close()

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                bmc.handle(self, "GET")

            def do_POST(self):
                bmc.handle(self, "POST")

            def do_DELETE(self):
                bmc.handle(self, "DELETE")

        self._server = Server(("127.0.0.1", self.port), Handler)
        self.port = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True).start()
        return self

    def stop(self) -> None:
        self.release.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        with self._lock:
            conns = list(self._conns)
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)

    def down(self) -> None:
        """Close the port: connections are refused, as from a BMC that reboots."""
        self.stop()

    def up(self) -> None:
        self.release.clear()
        self.start()

    # -- requests -------------------------------------------------------------------------------------

    def handle(self, h: BaseHTTPRequestHandler, method: str) -> None:
        path = h.path.split("?")[0].rstrip("/") or "/"
        with self._lock:
            self.requests.append((method, path))
        if self.mode == "hang":
            self.release.wait(10)
            return
        if method == "POST" and path == f"{PREFIX}/SessionService/Sessions":
            return self._login(h)
        if path not in (PREFIX, "/redfish") and h.headers.get("X-Auth-Token") not in self.tokens:
            return self._send(h, 401, _error("Base.1.8.NoValidSession", "There is no valid session."))
        if method == "DELETE":
            return self._logout(h, path)
        body = self._resource(path)
        if body is None:
            return self._send(h, 404, _error("Base.1.8.ResourceMissingAtURI", f"{path} not found"))
        self._send(h, 200, body)

    def _login(self, h) -> None:
        length = int(h.headers.get("Content-Length") or 0)
        try:
            sent = json.loads(h.rfile.read(length) or b"{}")
        except ValueError:
            sent = {}
        if sent.get("UserName") != self.username or sent.get("Password") != self.password:
            with self._lock:
                self.failed_logins += 1
            return self._send(h, 401, _error("Base.1.8.GeneralError", "Invalid username or password"))
        with self._lock:
            self.logins += 1
            sid = str(self.logins)
            token = f"tok{sid}x{int(time.time() * 1e6)}"
            self.tokens[token] = sid
        uri = f"{PREFIX}/SessionService/Sessions/{sid}"
        body = {"@odata.type": "#Session.v1_5_0.Session", "@odata.id": uri, "Id": sid, "Name": "User Session",
                "UserName": self.username}  # fmt: skip
        self._send(h, 201, body, {"X-Auth-Token": token, "Location": uri})

    def _logout(self, h, path: str) -> None:
        with self._lock:
            found = [t for t, sid in self.tokens.items() if path == f"{PREFIX}/SessionService/Sessions/{sid}"]
            for token in found:
                del self.tokens[token]
                self.logouts += 1
        self._send(h, 204 if found else 404, None)

    def _send(self, h, status: int, body, headers: dict | None = None) -> None:
        if self.mode == "garbage" and status == 200 and "Chassis/" in h.path:
            data = b'{"@odata.id": "/redfish/v1/Chassis/1U/EnvironmentMetrics", "PowerWatts": {"Readi'
        else:
            data = b"" if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
        h.send_response(status)
        if data:
            h.send_header("Content-Type", "application/json")
        h.send_header("OData-Version", "4.0")
        for key, value in (headers or {}).items():
            h.send_header(key, value)
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)

    # -- resources (the shapes of DMTF's public-rackmount1 mockup) -----------------------------------

    def _resource(self, path: str):
        if path in (PREFIX, "/redfish"):
            return self._root() if path == PREFIX else {"v1": f"{PREFIX}/"}
        if path == f"{PREFIX}/Chassis":
            return _collection("#ChassisCollection.ChassisCollection", "Chassis Collection", path,
                               [f"{path}/{c}" for c in self.chassis])  # fmt: skip
        parts = path[len(PREFIX) + 1 :].split("/")
        if len(parts) < 2 or parts[0] != "Chassis" or parts[1] not in self.chassis:
            return None
        return self._chassis_part(parts[1], parts[2:])

    def _root(self) -> dict:
        return {
            "@odata.type": "#ServiceRoot.v1_15_0.ServiceRoot", "Id": "RootService", "Name": "Root Service",
            "RedfishVersion": "1.15.0", "UUID": "92384634-2938-2342-8820-489239905423",
            "Chassis": _ref(f"{PREFIX}/Chassis"), "SessionService": _ref(f"{PREFIX}/SessionService"),
            "Links": {"Sessions": _ref(f"{PREFIX}/SessionService/Sessions")},
            "@odata.id": f"{PREFIX}/", "@Redfish.Copyright": COPYRIGHT,
        }  # fmt: skip

    def _chassis_part(self, cid: str, rest: list[str]):
        base = f"{PREFIX}/Chassis/{cid}"
        has_power = cid in self.chassis[: self.powered]  # often only one does, as on real servers
        if not rest:
            body = {"@odata.type": "#Chassis.v1_22_0.Chassis", "Id": cid, "Name": "Computer System Chassis",
                    "ChassisType": "RackMount", "PowerState": "On",
                    "Status": {"State": "Enabled", "Health": "OK"}, "@odata.id": base}  # fmt: skip
            if has_power and self.environment:
                body["EnvironmentMetrics"] = _ref(f"{base}/EnvironmentMetrics")
            if has_power and self.sensors:
                body["Sensors"] = _ref(f"{base}/Sensors")
            if has_power and self.legacy:
                body["Power@Redfish.Deprecated"] = f"Please migrate to use {base}/PowerSubsystem"
                body["Power"] = _ref(f"{base}/Power")
            return body
        if not has_power:
            return None
        now = self._now = time.time()
        watts, kwh = self.truth.shown(now)
        if self.exact_energy:
            kwh = f"{self.truth.energy_j(now) / 3.6e6:.{self.truth.energy_decimals}f}"
        name = "/".join(rest)
        if name in ("EnvironmentMetrics", "Power") or (rest[0] == "Sensors" and len(rest) == 2):
            with self._lock:
                self._power_answers += 1
                faulty = self.fault_every and self._power_answers % self.fault_every == 0
                self.served.append((now, None, None) if faulty else (now, watts, kwh))
                if self.on_served is not None:
                    self.on_served(*self.served[-1])
            if faulty:  # strings and null in turn: the kinds of garbage a flaky BMC sends
                watts, kwh = (None, None) if self._power_answers % (2 * self.fault_every) else ("", "")
        if name == "EnvironmentMetrics" and self.environment:
            return self._environment(base, watts, kwh)
        if name == "Sensors" and self.sensors:
            return _collection("#SensorCollection.SensorCollection", "Chassis sensors", f"{base}/Sensors",
                               [f"{base}/Sensors/{s}" for s in ("AmbientTemp", "PS1InputPower", "TotalEnergy",
                                                                "TotalPower")])  # fmt: skip
        if rest[0] == "Sensors" and len(rest) == 2 and self.sensors:
            return self._sensor(base, rest[1], watts, kwh)
        if name == "Power" and self.legacy:
            return self._legacy(base, watts)
        return None

    def _environment(self, base: str, watts: str, kwh: str):
        body = {"@odata.type": "#EnvironmentMetrics.v1_3_0.EnvironmentMetrics",
                "Name": "Chassis Environment Metrics",
                "TemperatureCelsius": {"Reading": 39, "DataSourceUri": f"{base}/Sensors/AmbientTemp"},
                "PowerWatts": {"Reading": "@W@", "DataSourceUri": f"{base}/Sensors/TotalPower"},
                "@odata.id": f"{base}/EnvironmentMetrics", "@Redfish.Copyright": COPYRIGHT}  # fmt: skip
        if self.energy:
            body["EnergykWh"] = {"Reading": "@KWH@", "DataSourceUri": f"{base}/Sensors/TotalEnergy"}
        if self.mode == "missing":
            del body["PowerWatts"]
        return self._numbers(body, watts, kwh)

    def _sensor(self, base: str, sid: str, watts: str, kwh: str):
        kinds = {"AmbientTemp": ("Temperature", "Cel", "39", "Intake"),
                 "PS1InputPower": ("Power", "W", "@W@", "PowerSupply"),
                 "TotalPower": ("Power", "W", "@W@", "Chassis"),
                 "TotalEnergy": ("EnergykWh", "kW.h", "@KWH@", "Chassis")}  # fmt: skip
        if sid not in kinds:
            return None
        reading_type, units, reading, context = kinds[sid]
        body = {"@odata.type": "#Sensor.v1_6_0.Sensor", "Id": sid, "Name": sid, "ReadingType": reading_type,
                "Status": {"State": "Enabled", "Health": "OK"}, "Reading": reading, "ReadingUnits": units,
                "PhysicalContext": context, "SensingInterval": f"PT{self.truth.update_s:g}S",
                "@odata.id": f"{base}/Sensors/{sid}", "@Redfish.Copyright": COPYRIGHT}  # fmt: skip
        if self.reading_time:
            ms = round(self.truth.refreshed_at(self._now) * 1000)
            body["ReadingTime"] = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ms // 1000)) + (
                f".{ms % 1000:03d}+00:00"
            )
        return self._numbers(body, watts, kwh)

    def _legacy(self, base: str, watts: str):
        body = {"@odata.type": "#Power.v1_7_1.Power", "Id": "Power", "Name": "Power",
                "PowerControl": [{"@odata.id": f"{base}/Power#/PowerControl/0", "MemberId": "0",
                                  "Name": "System Input Power", "PowerConsumedWatts": "@W@",
                                  "PowerCapacityWatts": 800,
                                  "PowerMetrics": {"IntervalInMin": 30, "MinConsumedWatts": 271,
                                                   "MaxConsumedWatts": 489, "AverageConsumedWatts": 319},
                                  "Status": {"State": "Enabled", "Health": "OK"}}],
                "@odata.id": f"{base}/Power", "@Redfish.Copyright": COPYRIGHT}  # fmt: skip
        return self._numbers(body, watts, "0")

    def _numbers(self, body: dict, watts: str, kwh: str) -> bytes:
        """The JSON text with the readings written with their fixed decimals (json.dumps would trim
        trailing zeros); as strings (mode wrongtype) or null (mode null) when asked."""
        text = json.dumps(body)
        if watts is None or watts == "":  # one faulty answer (fault_every): null, or the values as strings
            shown = "null" if watts is None else '"300.0"'
            return text.replace('"@W@"', shown).replace('"@KWH@"', shown).encode()
        if self.mode == "wrongtype":
            watts, kwh = json.dumps(watts), json.dumps(kwh)
        elif self.mode == "null":
            watts = kwh = "null"
        return text.replace('"@W@"', watts).replace('"@KWH@"', kwh).encode()


def _collection(odata_type: str, name: str, uri: str, items: list[str]) -> dict:
    return {"@odata.type": odata_type, "Name": name, "Members@odata.count": len(items),
            "Members": [_ref(i) for i in items], "@odata.id": uri,
            "@Redfish.Copyright": COPYRIGHT}  # fmt: skip


def _error(code: str, message: str) -> dict:
    return {"error": {"code": code, "message": message,
                      "@Message.ExtendedInfo": [{"MessageId": code, "Message": message}]}}  # fmt: skip


def main() -> None:
    """Run a fake BMC in the foreground (python -m fakes.redfish_server DIR PASSWORD [USER
    [exact_energy]]): prints its port and CA file, then one line `SERVED <time> <watts> <kWh>` per
    answer of a power resource (its process of its own: a BMC is not sharing the client's CPU time)."""
    import sys

    user = sys.argv[3] if len(sys.argv) > 3 else "admin"
    bmc = FakeBmc(
        Path(sys.argv[1]), username=user, password=sys.argv[2], exact_energy="exact_energy" in sys.argv
    )
    bmc.on_served = lambda t, w, k: print(f"SERVED {t!r} {w} {k}", flush=True)
    bmc.start()
    print(bmc.port, bmc.ca, flush=True)
    threading.Event().wait()


if __name__ == "__main__":
    main()
