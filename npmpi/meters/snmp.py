"""`snmp`: power from an SNMP agent (metered PDU outlets, a PDU's total, switch power sensors).

Spec: `snmp:HOST[:PORT][,profile=NAME,outlet=N,index=N,oid=OID,scale=X,version=2c|3,auth=SHA,priv=AES,
context=NAME,timeout=0.5,retries=1,max_w=100000,credentials=PATH,FIELD_env=VAR]`.

The profiles (what is read and how it becomes watts) are in `snmp_profiles`. Each meter has its own
pysnmp engine on a private asyncio event loop, so reads from the sampling thread never meet
another meter's loop. One read is one GET of the profile's OIDs: it waits for the agent at most
`timeout × (retries + 1)` seconds (1 s by default) and is cut 1 s after that. The community (v2c)
or the user and keys (v3) come from the environment or a 0600 credentials file
(npmpi.meters.credentials), never from the spec; no message names them.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import threading
import time
import warnings
from typing import ClassVar

from npmpi.meters import snmp_profiles as profiles
from npmpi.meters.base import Meter, MeterError, MeterFault, MeterSpec, Reading, host_and_port
from npmpi.meters.credentials import credential_parameters, read_credentials, reject_inline_secrets

DEFAULT_PORT = 161
DEFAULT_TIMEOUT_S = 0.5
DEFAULT_RETRIES = 1
DEFAULT_MAX_W = 100_000.0  # a reading above is a fault: no PDU or switch draws 100 kW
MAX_CALL_S = 2.0  # timeout × tries of one read stays below this
# beyond pysnmp's own timeouts, what a request may take (building it, a loaded CPU) before it is cut
CALL_MARGIN_S = 1.0
RESOLVE_S = 5.0  # resolving the agent's host name
COMMUNITY_ENV = "NPMPI_SNMP_COMMUNITY"
V3_ENV = {"user": "NPMPI_SNMP_USER", "auth_key": "NPMPI_SNMP_AUTH_KEY", "priv_key": "NPMPI_SNMP_PRIV_KEY"}
AUTH_PROTOCOLS = ("MD5", "SHA", "SHA224", "SHA256", "SHA384", "SHA512")
PRIV_PROTOCOLS = ("DES", "3DES", "AES", "AES192", "AES256")
INSTALL_HINT = "pip install 'npmpi[snmp]' (pysnmp>=7.1 and cryptography for v3 privacy)"


class AgentError(Exception):
    """The agent did not give an answer: `kind` is timeout, auth (v3 user or keys refused) or other."""

    def __init__(self, message: str, kind: str) -> None:
        super().__init__(message)
        self.kind = kind


def _hlapi():
    try:
        # pysnmp 7 imports pysmi (where installed) by names pysmi 2 deprecates: not this program's to fix
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            from pysnmp.hlapi.v3arch import asyncio as hlapi
    except ImportError as exc:
        raise MeterError(f"the snmp meter needs pysnmp ({exc}): {INSTALL_HINT}") from None
    return hlapi


_VIEW_LOCK = threading.Lock()
_VIEW: list[object] = []  # the process's one MIB view, once set up


def _mib_view(hlapi) -> object:
    """The MIB view every engine of the process resolves OIDs with, set up once.

    pysnmp resolves each OID of a request through a MIB view, and a new engine's view sets up a MIB
    compiler on first use where pysmi is installed: most of a second of CPU. One view set up here
    serves every engine, so neither a second meter nor a reopening after a fault pays it again. After
    the set-up, resolving numeric OIDs only reads the view's indices.
    """
    with _VIEW_LOCK:
        if not _VIEW:
            from pysnmp.smi import builder, compiler, view

            mibs = builder.MibBuilder()
            with warnings.catch_warnings():  # pysmi's deprecated names, as in _hlapi
                warnings.simplefilter("ignore", DeprecationWarning)
                compiler.add_mib_compiler(mibs, ifAvailable=True, ifNotAdded=True)
                shared = view.MibViewController(mibs)
                hlapi.ObjectIdentity(profiles.SYS_DESCR).resolve_with_mib(shared)
            _VIEW.append(shared)
        return _VIEW[0]


def _auth_kind(indication: object) -> str:
    name = type(indication).__name__
    if name == "RequestTimedOut":
        return "timeout"
    if name in ("WrongDigest", "DecryptionError", "UnknownUserName", "UnknownSecurityName",
                "AuthenticationFailure", "AuthenticationError", "UnsupportedSecurityLevel",
                "UnknownCommunityName"):  # fmt: skip
        return "auth"
    return "other"


class SnmpClient:
    """GET and walk on one agent through a pysnmp engine running on this client's own event loop."""

    def __init__(self, host: str, port: int, context: str, timeout_s: float, retries: int) -> None:
        self.host, self.port = host, port
        self._context_name = context
        self.timeout_s, self.retries = timeout_s, retries
        self._auth: object = None  # CommunityData or UsmUserData: holds the secret, never shown
        self._loop: asyncio.AbstractEventLoop | None = None
        self._engine = None
        self._target = None

    @property
    def is_open(self) -> bool:
        """True between open() and close()."""
        return self._loop is not None

    @property
    def deadline_s(self) -> float:
        """The longest one request may take: every try's timeout and a margin."""
        return self.timeout_s * (self.retries + 1) + CALL_MARGIN_S

    def _run(self, coroutine):
        assert self._loop is not None
        return self._loop.run_until_complete(asyncio.wait_for(coroutine, self.deadline_s))

    def open(self, auth: object) -> None:
        """Create the loop, an engine (about 0.2 s of CPU: it loads its MIB modules) and the transport
        (resolving the host name)."""
        hlapi = _hlapi()
        self.close()
        self._auth = auth
        view = _mib_view(hlapi)
        self._loop = asyncio.new_event_loop()
        cls = hlapi.Udp6TransportTarget if ":" in self.host else hlapi.UdpTransportTarget

        async def start():
            engine = hlapi.SnmpEngine()  # CPU only (it loads MIB modules): not under a network deadline
            engine.cache["mibViewController"] = view
            self._engine = engine
            create = cls.create((self.host, self.port), timeout=self.timeout_s, retries=self.retries)
            return await asyncio.wait_for(create, RESOLVE_S)

        try:
            self._target = self._loop.run_until_complete(start())
        except asyncio.TimeoutError:
            self.close()
            raise AgentError(
                f"cannot be reached: its name did not resolve in {RESOLVE_S:g} s", "other"
            ) from None
        except Exception as exc:  # pysnmp wraps resolver errors
            self.close()
            raise AgentError(f"cannot be reached: {exc}", "other") from None

    def get(self, oids: list[str]) -> dict[str, object]:
        """OID -> value (possibly noSuchObject/noSuchInstance) of one GET; AgentError without an answer."""
        hlapi = _hlapi()
        if self._loop is None:
            raise AgentError("cannot be asked: the meter is closed", "other")
        objects = [hlapi.ObjectType(hlapi.ObjectIdentity(oid)) for oid in oids]

        async def ask():
            return await hlapi.get_cmd(
                self._engine, self._auth, self._target, self._context(), *objects, lookupMib=False
            )

        binds = self._answer(ask, oids[0])
        return {str(name): value for name, value in binds}

    def walk(self, column: str, limit: int) -> list[tuple[str, object]]:
        """(index suffix, value) of every row of a table column, at most `limit` rows."""
        hlapi = _hlapi()
        rows: list[tuple[str, object]] = []
        prefix = column + "."
        current = column
        while len(rows) < limit:
            start = current

            async def ask(start=start):
                return await hlapi.next_cmd(
                    self._engine, self._auth, self._target, self._context(),
                    hlapi.ObjectType(hlapi.ObjectIdentity(start)), lookupMib=False,
                )  # fmt: skip

            binds = self._answer(ask, start)
            if not binds:
                break
            name, value = str(binds[0][0]), binds[0][1]
            if not name.startswith(prefix) or profiles.is_absent(value) or name == current:
                break  # past the column, its end, or an agent answering the same row again
            rows.append((name[len(prefix) :], value))
            current = name
        return rows

    def _context(self):
        return _hlapi().ContextData(contextName=self._context_name)

    def _answer(self, ask, first_oid: str):
        if self._loop is None:
            raise AgentError("cannot be asked: the meter is closed", "other")
        deadline_s = self.deadline_s
        try:
            indication, status, index, binds = self._run(ask())
        except asyncio.TimeoutError:
            raise AgentError(f"gave no answer within {deadline_s:g} s", "timeout") from None
        except Exception as exc:  # pysnmp's own errors (PySnmpError and what it lets through)
            raise AgentError(f"could not be asked: {type(exc).__name__}: {exc}", "other") from None
        if indication:
            if _auth_kind(indication) == "timeout":
                tries = self.retries + 1
                raise AgentError(f"gave no answer to {tries} tries of {self.timeout_s:g} s", "timeout")
            raise AgentError(f"refused the request: {indication}", _auth_kind(indication))
        if status:
            where = binds[int(index) - 1][0] if index and binds else first_oid
            raise AgentError(f"answered {status.prettyPrint()} for {where}", "other")
        return binds

    def close(self) -> None:
        """Close the transport, the engine's timer and the loop (idempotent)."""
        loop, engine = self._loop, self._engine
        self._loop = self._engine = self._target = self._auth = None
        if loop is None:
            return

        async def stop():
            if engine is not None:
                engine.close_dispatcher()
            await asyncio.sleep(0)
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        with contextlib.suppress(Exception):  # a loop still running (a read cut short) stays as it is
            loop.run_until_complete(stop())
            loop.close()


def parse_target(spec: MeterSpec) -> tuple[str, int]:
    """HOST[:PORT] (an IPv6 address in brackets: [::1]:1161); MeterError if absent or malformed."""
    return host_and_port(spec.target, spec.text, DEFAULT_PORT, "the agent's", "snmp")


class SnmpMeter(Meter):
    """Power from an SNMP agent through a profile of OIDs (see the module docstring)."""

    kind = "snmp"
    parameters: ClassVar[tuple[str, ...]] = (
        "profile", "outlet", "index", "oid", "scale", "version", "auth", "priv", "context",
        "timeout", "retries", "max_w",
        *credential_parameters(("community", *V3_ENV)),
    )  # fmt: skip
    natural_interval_s = 1.0
    quantities = ("power_w",)

    def __init__(self, spec: MeterSpec) -> None:
        super().__init__(spec)
        reject_inline_secrets(spec)
        self.host, self.port = parse_target(spec)
        p = spec.params
        self.profile = p.get("profile") or ("generic" if "oid" in p else "")
        if self.profile not in profiles.PROFILES:
            raise MeterError.about(
                spec.text,
                (f"unknown profile={self.profile!r}" if self.profile else "give profile= (or oid=)")
                + f"; profiles: {', '.join(profiles.PROFILES)}",
            )
        self.version = p.get("version", "2c").lower().removeprefix("v")
        if self.version not in ("2c", "3"):
            raise MeterError.about(spec.text, f"version={p['version']!r}: choose 2c or 3")
        self._check_profile_params()
        self.timeout_s = spec.number("timeout", DEFAULT_TIMEOUT_S, hi=60.0)
        retries = spec.number("retries", DEFAULT_RETRIES, hi=10.0)
        if self.timeout_s <= 0 or retries < 0 or retries != int(retries):
            raise MeterError.about(spec.text, "timeout must be positive and retries a whole number >= 0")
        self.retries = int(retries)
        tries_s = self.timeout_s * (self.retries + 1)
        self.longest_call_s = tries_s + CALL_MARGIN_S  # the most a read blocks (SnmpClient.deadline_s)
        if tries_s > MAX_CALL_S:
            raise MeterError.about(
                spec.text,
                f"timeout × (retries + 1) = {tries_s:g} s: one read must "
                f"take at most {MAX_CALL_S:g} s, or the sampling loop stalls behind a silent agent",
            )
        self.max_w = spec.number("max_w", DEFAULT_MAX_W, hi=1e7)
        if self.max_w <= 0:
            raise MeterError.about(spec.text, "max_w must be positive (watts)")
        self.auth_protocol = p.get("auth", "SHA").upper()
        self.priv_protocol = p.get("priv", "AES").upper()
        if self.auth_protocol not in AUTH_PROTOCOLS or self.priv_protocol not in PRIV_PROTOCOLS:
            raise MeterError.about(
                spec.text,
                f"auth= is one of {', '.join(AUTH_PROTOCOLS)} and priv= one of {', '.join(PRIV_PROTOCOLS)}",
            )
        context = p.get("context", "")
        self.client = SnmpClient(self.host, self.port, context, self.timeout_s, self.retries)
        self.plan: profiles.Plan | None = None
        self.sys_descr = ""

    def _check_profile_params(self) -> None:
        """Each profile's own parameters: whole numbers where numbers belong, nothing foreign."""
        p, text = self.spec.params, self.spec.text
        allowed = {
            "apc-rpdu2": ("outlet", "index"),
            "raritan-pdu2": ("outlet", "index"),
            "entity-sensor": ("index",),
            "generic": ("oid", "scale"),
        }[self.profile]
        for key in ("outlet", "index", "oid", "scale"):
            if key in p and key not in allowed:
                raise MeterError.about(text, f"{key}= does not apply to profile={self.profile}")
        if self.version != "3" and ("auth" in p or "priv" in p or "context" in p):
            raise MeterError.about(text, "auth=, priv= and context= are for version=3")
        for key in ("outlet", "index") if self.profile in ("apc-rpdu2", "raritan-pdu2") else ():
            if key in p and not re.fullmatch(r"[0-9]{1,9}", p[key], re.ASCII):
                raise MeterError.about(text, f"{key}={p[key]!r} is not a whole number")
        index = p.get("index", "all")
        if (
            self.profile == "entity-sensor"
            and index != "all"
            and not re.fullmatch(r"[0-9]{1,9}(\+[0-9]{1,9})*", index, re.ASCII)
        ):
            raise MeterError.about(text, f"index={index!r}: a sensor's entPhysicalIndex, N+M, or all")
        if self.profile == "generic":
            if "oid" not in p or not re.fullmatch(
                r"[0-9]{1,10}(\.[0-9]{1,10}){1,127}", p["oid"].lstrip("."), re.ASCII
            ):
                raise MeterError.about(
                    text, "oid= must be a numeric OID such as 1.3.6.1.4.1.318.1.1.1.4.2.8.0"
                )
            self.spec.number("scale", 1.0)

    def credentials_source(self) -> str:
        """Where the secrets come from, in words (a file or variable names, never a value)."""
        p = self.spec.params
        if p.get("credentials"):
            return f"credentials file {p['credentials']}"
        fields = {"community": COMMUNITY_ENV} if self.version == "2c" else V3_ENV
        names = [p.get(f"{f}_env") or default for f, default in fields.items()]
        return "environment variable" + ("s " if len(names) > 1 else " ") + ", ".join(names)

    def security(self) -> object:
        """The pysnmp security data, from the environment or the credentials file (MeterError naming
        the variable or file that lacks a value)."""
        hlapi = _hlapi()
        if self.version == "2c":
            secret = read_credentials(self.spec, {"community": COMMUNITY_ENV}, self.spec.text)
            return hlapi.CommunityData(secret["community"], mpModel=1)
        found = read_credentials(self.spec, dict(V3_ENV), self.spec.text)
        auth = {
            "MD5": hlapi.usmHMACMD5AuthProtocol, "SHA": hlapi.usmHMACSHAAuthProtocol,
            "SHA224": hlapi.usmHMAC128SHA224AuthProtocol, "SHA256": hlapi.usmHMAC192SHA256AuthProtocol,
            "SHA384": hlapi.usmHMAC256SHA384AuthProtocol, "SHA512": hlapi.usmHMAC384SHA512AuthProtocol,
        }[self.auth_protocol]  # fmt: skip
        priv = {
            "DES": hlapi.usmDESPrivProtocol, "3DES": hlapi.usm3DESEDEPrivProtocol,
            "AES": hlapi.usmAesCfb128Protocol, "AES192": hlapi.usmAesCfb192Protocol,
            "AES256": hlapi.usmAesCfb256Protocol,
        }[self.priv_protocol]  # fmt: skip
        return hlapi.UsmUserData(
            found["user"], found["auth_key"], found["priv_key"], authProtocol=auth, privProtocol=priv
        )

    def open(self) -> None:
        self.close()
        self.plan = None
        try:
            _hlapi()
        except MeterError as exc:
            raise MeterError.about(self.spec.text, f"{exc}") from None
        client, opened = self.client, False
        try:
            client.open(self.security())
            descr = client.get([profiles.SYS_DESCR]).get(profiles.SYS_DESCR)
            plan = profiles.PLANNERS[self.profile](self.spec.params, client)
            profiles.watts(plan, client.get([t.oid for t in plan.terms]), self.max_w)
            opened = True
        except AgentError as exc:
            raise MeterError.about(self.spec.text, self._agent_message(exc)) from None
        except profiles.ValueProblem as exc:
            raise MeterError.about(self.spec.text, f"{exc}") from None
        finally:
            if not opened:
                client.close()
        self.sys_descr = "" if profiles.is_absent(descr) else str(descr)[:200]
        self.plan = plan
        self.natural_interval_s = plan.natural_interval_s
        self.power_resolution_w = plan.resolution_w

    def _agent_message(self, exc: AgentError) -> str:
        where = f"the agent at {self.host}:{self.port}"
        if exc.kind == "timeout":
            secret = "community" if self.version == "2c" else "v3 user, keys, context="
            return (
                f"{where} {exc}: it is down, the address or port is wrong, a firewall drops UDP, "
                f"or the {secret} in {self.credentials_source()} is wrong (an agent does not answer a "
                f"request it cannot authenticate)"
            )
        if exc.kind == "auth":
            return (
                f"{where} refused the SNMPv3 credentials ({exc}): check user, auth_key and "
                f"priv_key in {self.credentials_source()} and the protocols auth={self.auth_protocol}, "
                f"priv={self.priv_protocol}"
            )
        return f"{where} {exc}"

    def read(self, timeout_s: float) -> list[Reading]:
        if self.plan is None or not self.client.is_open:
            raise MeterFault("the SNMP meter is not open")
        start = time.time()
        try:
            answers = self.client.get([t.oid for t in self.plan.terms])
        except AgentError as exc:
            raise MeterFault(f"the SNMP agent {exc}") from None
        end = time.time()
        try:
            power = profiles.watts(self.plan, answers, self.max_w)
        except profiles.ValueProblem as exc:
            raise MeterFault(f"{exc}; no sample") from None
        # stamped at the middle of the request (the agent read its values within it), both ends kept
        mid = 0.5 * (start + end)
        return [Reading(time_unix_s=mid, power_w=power, request_start_unix_s=start, request_end_unix_s=end)]

    def close(self) -> None:
        self.client.close()

    def description(self) -> str:
        what = self.plan.what if self.plan is not None else f"profile {self.profile}"
        return f"SNMP v{self.version} agent {self.host}:{self.port}, {what}"

    def describe(self) -> dict[str, object]:
        d = super().describe()
        d.update(
            {
                "host": self.host,
                "port": self.port,
                "profile": self.profile,
                "snmp_version": self.version,
                "credentials_from": self.credentials_source(),
                "sys_descr": self.sys_descr,
                "timeout_s": self.timeout_s,
                "retries": self.retries,
                "max_w": self.max_w,
                "extra_sample_fields": ["request_start_unix_s", "request_end_unix_s"],
                "time_stamps": "the middle of each request",
            }
        )
        if self.version == "3":
            d.update({"auth_protocol": self.auth_protocol, "priv_protocol": self.priv_protocol})
            d["context"] = self.spec.params.get("context", "")
        if self.plan is not None:
            d["oids"] = [t.oid for t in self.plan.terms]
            d["oid_names"] = [t.name for t in self.plan.terms]
            d["watts_per_unit"] = [t.factor_w for t in self.plan.terms]
            d["power_resolution_w"] = self.plan.resolution_w
            d.update({f"profile_{k}": v for k, v in self.plan.details.items()})
        return d
