"""What the `snmp` meter reads on each kind of device: the OIDs of a profile and how they become watts.

Every OID below is taken from the vendor's published MIB (docs/meters.md cites each one):

- `apc-rpdu2`: PowerNet-MIB (APC/Schneider, v4.1.4), `rPDU2OutletMeteredStatusPower`
  (1.3.6.1.4.1.318.1.1.26.9.4.3.1.7, INTEGER, watts) of the row whose `rPDU2OutletMeteredStatusModule`
  (.2) and `rPDU2OutletMeteredStatusNumber` (.4) are the PDU and outlet asked for; without an outlet,
  `rPDU2DeviceStatusPower` (1.3.6.1.4.1.318.1.1.26.4.3.1.5, INTEGER, hundredths of kilowatts) of
  the row whose `rPDU2DeviceStatusModule` (.2) is the PDU. A model without the measurement answers -1.
- `raritan-pdu2`: PDU2-MIB (Raritan, 2016-02-09), `measurementsOutletSensorValue`
  (1.3.6.1.4.1.13742.6.5.4.3.1.4.PDU.OUTLET.5, Unsigned32) for sensor type activePower(5), divided by
  10^`outletSensorDecimalDigits` (1.3.6.1.4.1.13742.6.3.5.4.1.7.PDU.OUTLET.5), its unit
  `outletSensorUnits` (…6.3.5.4.1.6.PDU.OUTLET.5) being watt(3); without an outlet, the inlet's
  `measurementsInletSensorValue` (…6.5.2.3.1.4.PDU.1.5) with `inletSensorDecimalDigits`
  (…6.3.3.4.1.7) and `inletSensorUnits` (…6.3.3.4.1.6).
- `entity-sensor`: ENTITY-SENSOR-MIB (RFC 3433), `entPhySensorValue` (1.3.6.1.2.1.99.1.1.1.4.N,
  Integer32) of the sensors whose `entPhySensorType` (.1) is watts(6), times 10^(3·(scale − 9)) for
  `entPhySensorScale` (.2) and divided by 10^precision for `entPhySensorPrecision` (.3) of 1 to 9;
  `entPhySensorOperStatus` (.5) must be ok(1); `entPhySensorValueUpdateRate` (.8, ms) is the natural
  interval when not 0.
- `generic`: `oid=` (a full instance OID) times `scale=` (watts per unit, default 1).

A profile turns the spec into a `Plan` at open, asking the agent through `Agent` (get and walk);
a read then GETs the plan's OIDs in one request and sums value × factor.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Protocol

from npmpi.units import parse_number, parse_whole

PROFILES = ("apc-rpdu2", "raritan-pdu2", "entity-sensor", "generic")
SYS_DESCR = "1.3.6.1.2.1.1.1.0"

APC_OUTLET_MODULE = "1.3.6.1.4.1.318.1.1.26.9.4.3.1.2"  # rPDU2OutletMeteredStatusModule
APC_OUTLET_NUMBER = "1.3.6.1.4.1.318.1.1.26.9.4.3.1.4"  # rPDU2OutletMeteredStatusNumber
APC_OUTLET_POWER = "1.3.6.1.4.1.318.1.1.26.9.4.3.1.7"  # rPDU2OutletMeteredStatusPower, W
APC_DEVICE_MODULE = "1.3.6.1.4.1.318.1.1.26.4.3.1.2"  # rPDU2DeviceStatusModule
APC_DEVICE_POWER = "1.3.6.1.4.1.318.1.1.26.4.3.1.5"  # rPDU2DeviceStatusPower, hundredths of kW

RARITAN_ACTIVE_POWER = 5  # SensorTypeEnumeration activePower(5)
RARITAN_WATT = 3  # SensorUnitsEnumeration watt(3)
RARITAN_OUTLET_VALUE = "1.3.6.1.4.1.13742.6.5.4.3.1.4"  # measurementsOutletSensorValue
RARITAN_OUTLET_UNITS = "1.3.6.1.4.1.13742.6.3.5.4.1.6"  # outletSensorUnits
RARITAN_OUTLET_DIGITS = "1.3.6.1.4.1.13742.6.3.5.4.1.7"  # outletSensorDecimalDigits
RARITAN_INLET_VALUE = "1.3.6.1.4.1.13742.6.5.2.3.1.4"  # measurementsInletSensorValue
RARITAN_INLET_UNITS = "1.3.6.1.4.1.13742.6.3.3.4.1.6"  # inletSensorUnits
RARITAN_INLET_DIGITS = "1.3.6.1.4.1.13742.6.3.3.4.1.7"  # inletSensorDecimalDigits

ENT_SENSOR = "1.3.6.1.2.1.99.1.1.1"  # entPhySensorEntry
ENT_TYPE, ENT_SCALE, ENT_PRECISION, ENT_VALUE, ENT_STATUS = (f"{ENT_SENSOR}.{c}" for c in (1, 2, 3, 4, 5))
ENT_UPDATE_RATE = f"{ENT_SENSOR}.8"
ENT_WATTS = 6  # EntitySensorDataType watts(6)
ENT_OK = 1  # EntitySensorStatus ok(1)
ENT_OUT_OF_RANGE = (-1000000000, 1000000000)  # EntitySensorValue: underflow and overflow
ENT_TYPES = dict(
    enumerate(
        ("other", "unknown", "voltsAC", "voltsDC", "amperes", "watts", "hertz", "celsius", "percentRH", "rpm",
         "cmm", "truthvalue"),
        start=1,
    )
)  # fmt: skip

MAX_ROWS = 1024  # a table walk stops there: no PDU or switch has that many outlets or sensors
ABSENT_NAMES = ("NoSuchObject", "NoSuchInstance", "EndOfMibView")


@functools.cache
def level_types() -> dict[object, str]:
    """The device's value types that hold a level, by their BER tag: Integer32 (INTEGER) and Gauge32
    (Unsigned32 shares its tag). Counters, time ticks, strings and an Opaque's floats are refused."""
    from pysnmp.proto import rfc1902  # imported when a meter is opened, not with npmpi.meters

    return {rfc1902.Integer32.tagSet: "Integer32", rfc1902.Gauge32.tagSet: "Gauge32"}


def is_absent(value: object) -> bool:
    """True for noSuchObject, noSuchInstance and endOfMibView: the agent has no such value."""
    return value is None or type(value).__name__ in ABSENT_NAMES


class ValueProblem(Exception):
    """An answer that is no usable number: absent, of a wrong type, negative or out of range."""


class Agent(Protocol):
    """The SNMP agent as a profile sees it (npmpi.meters.snmp.SnmpClient)."""

    def get(self, oids: list[str]) -> dict[str, object]: ...

    def walk(self, column: str, limit: int) -> list[tuple[str, object]]: ...


@dataclass(frozen=True)
class Term:
    """One OID read at every sample: watts = the device's integer × 10^exp10 × multiplier."""

    oid: str
    name: str  # the MIB object, for messages and the run file
    exp10: int = 0  # a decimal shift, applied exactly (2066 at 10^-1 is 206.6, not 206.60000000000002)
    multiplier: float = 1.0  # generic profile's scale=

    @property
    def factor_w(self) -> float:
        """Watts per unit of the device's integer."""
        return 10.0**self.exp10 * self.multiplier

    def watts(self, raw: int) -> Fraction:
        """The reading in watts, exactly (the multiplier as the float it is)."""
        return raw * Fraction(10) ** self.exp10 * Fraction(self.multiplier)


@dataclass
class Plan:
    """What a read asks for and how it becomes watts."""

    terms: list[Term]
    resolution_w: float
    what: str  # the measurement in words, for the run file's description
    natural_interval_s: float = 1.0
    details: dict[str, object] = field(default_factory=dict)  # stored in the run file
    out_of_range: tuple[int, ...] = ()  # raw values that flag an underflow or overflow, not a reading


def type_name(value: object) -> str:
    """The SNMP type of an answer as a MIB would name it."""
    if value is None:
        return "no answer"
    if is_absent(value):
        return type(value).__name__[0].lower() + type(value).__name__[1:]
    return level_types().get(getattr(value, "tagSet", None)) or type(value).__name__


def integer(value: object, name: str) -> int:
    """The device's integer, exactly as its type says; ValueProblem for anything else."""
    if is_absent(value):
        raise ValueProblem(f"{name}: {type_name(value)} (the agent has no such value)")
    if getattr(value, "tagSet", None) not in level_types():
        shown = str(value.prettyPrint() if hasattr(value, "prettyPrint") else value)[:40]
        kind = type_name(value)
        article = "an" if kind[0] in "AEIOU" else "a"
        raise ValueProblem(f"{name}: {article} {kind} ({shown!r}) where an integer belongs")
    return int(value)  # type: ignore[call-overload]


def watts(plan: Plan, answers: dict[str, object], max_w: float) -> float:
    """The plan's power from one GET's answers; ValueProblem for a bad or absurd value."""
    total = Fraction(0)
    for term in plan.terms:
        raw = integer(answers.get(term.oid), f"{term.name} ({term.oid})")
        if raw in plan.out_of_range:
            side = "underflow" if raw < 0 else "overflow"
            raise ValueProblem(f"{term.name} ({term.oid}) = {raw}: the sensor reports an {side}")
        if raw < 0:
            hint = " (APC answers -1 where the model has no such measurement)" if raw == -1 else ""
            raise ValueProblem(f"{term.name} ({term.oid}) = {raw}: a negative power{hint}")
        total += term.watts(raw)
    if total > max_w:
        raise ValueProblem(
            f"{float(total):g} W from {plan.terms[0].oid}: more than max_w={max_w:g} W, not a power"
        )
    return float(total)  # rounded once: 1234 × 10^-1 + 98765 × 10^-3 is 222.165


def apc(params: dict[str, str], agent: Agent) -> Plan:
    """PowerNet-MIB: an outlet's power (W) or, without outlet=, the whole PDU's (hundredths of kW)."""
    module = _int_param(params, "index", 1)
    outlet = params.get("outlet")
    if outlet is not None:
        number = _int_param(params, "outlet", 1)
        rows = _table(agent, {"module": APC_OUTLET_MODULE, "number": APC_OUTLET_NUMBER})
        match = [i for i, r in rows.items() if r.get("module") == module and r.get("number") == number]
        if not match:
            listed = ", ".join(f"{r.get('module')}:{r.get('number')}" for r in rows.values()) or "none"
            raise ValueProblem(
                f"no metered outlet {number} on PDU {module} in rPDU2OutletMeteredStatusTable "
                f"(PDU:outlet found: {listed}); outlet= is the outlet number, index= the PDU (default 1)"
            )
        oid = f"{APC_OUTLET_POWER}.{match[0]}"
        term = Term(oid, "rPDU2OutletMeteredStatusPower")
        return Plan([term], 1.0, f"outlet {number} of APC PDU {module}", details={"row": match[0]})
    rows = _table(agent, {"module": APC_DEVICE_MODULE})
    match = [i for i, r in rows.items() if r.get("module") == module]
    if not match:
        listed = ", ".join(str(r.get("module")) for r in rows.values()) or "none"
        raise ValueProblem(
            f"no PDU {module} in rPDU2DeviceStatusTable (PDUs found: {listed}); index= the PDU"
        )
    term = Term(f"{APC_DEVICE_POWER}.{match[0]}", "rPDU2DeviceStatusPower", exp10=1)  # 0.01 kW = 10 W
    return Plan([term], 10.0, f"whole APC PDU {module}", details={"row": match[0]})


def raritan(params: dict[str, str], agent: Agent) -> Plan:
    """PDU2-MIB: an outlet's (or, without outlet=, inlet 1's) active power, scaled by its decimal digits."""
    pdu = _int_param(params, "index", 1)
    if params.get("outlet") is not None:
        outlet = _int_param(params, "outlet", 1)
        where, suffix = f"outlet {outlet}", f"{pdu}.{outlet}"
        value, units, digits = RARITAN_OUTLET_VALUE, RARITAN_OUTLET_UNITS, RARITAN_OUTLET_DIGITS
        names = ("measurementsOutletSensorValue", "outletSensorUnits", "outletSensorDecimalDigits")
    else:
        where, suffix = "inlet 1", f"{pdu}.1"
        value, units, digits = RARITAN_INLET_VALUE, RARITAN_INLET_UNITS, RARITAN_INLET_DIGITS
        names = ("measurementsInletSensorValue", "inletSensorUnits", "inletSensorDecimalDigits")
    index = f"{suffix}.{RARITAN_ACTIVE_POWER}"
    got = agent.get([f"{units}.{index}", f"{digits}.{index}"])
    unit = integer(got[f"{units}.{index}"], f"{names[1]}.{index} ({where} of PDU {pdu})")
    if unit != RARITAN_WATT:
        raise ValueProblem(f"{names[1]}.{index} is {unit}, not watt(3): not an active power sensor")
    places = integer(got[f"{digits}.{index}"], f"{names[2]}.{index}")
    if not 0 <= places <= 9:
        raise ValueProblem(f"{names[2]}.{index} = {places}: not a number of decimal digits")
    term = Term(f"{value}.{index}", names[0], exp10=-places)
    return Plan([term], term.factor_w, f"{where} of Raritan PDU {pdu}", details={"decimal_digits": places})


def entity_sensor(params: dict[str, str], agent: Agent) -> Plan:
    """ENTITY-SENSOR-MIB: the watts sensors chosen with index= (one, several joined by +, or all)."""
    types = {suffix: value for suffix, value in agent.walk(ENT_TYPE, MAX_ROWS)}
    sensors = {s: integer(v, f"entPhySensorType.{s}") for s, v in types.items()}
    watts_rows = sorted((s for s, t in sensors.items() if t == ENT_WATTS), key=_numeric)
    chosen = _choose_sensors(params.get("index"), sensors, watts_rows)
    columns = (ENT_SCALE, ENT_PRECISION, ENT_STATUS, ENT_UPDATE_RATE)
    got = agent.get([f"{c}.{s}" for s in chosen for c in columns])
    terms, resolution, rates = [], 0.0, []
    for s in chosen:
        scale = integer(got[f"{ENT_SCALE}.{s}"], f"entPhySensorScale.{s}")
        precision = integer(got[f"{ENT_PRECISION}.{s}"], f"entPhySensorPrecision.{s}")
        status = integer(got[f"{ENT_STATUS}.{s}"], f"entPhySensorOperStatus.{s}")
        if not 1 <= scale <= 17 or not -8 <= precision <= 9:
            raise ValueProblem(
                f"sensor {s}: entPhySensorScale {scale} or entPhySensorPrecision {precision} out of range"
            )
        if status != ENT_OK:
            raise ValueProblem(f"sensor {s}: entPhySensorOperStatus is {status}, not ok(1)")
        term = Term(f"{ENT_VALUE}.{s}", f"entPhySensorValue.{s}", exp10=sensor_exp10(scale, precision))
        terms.append(term)
        resolution = max(resolution, term.factor_w)
        rate = got.get(f"{ENT_UPDATE_RATE}.{s}")
        if not is_absent(rate):
            rates.append(integer(rate, f"entPhySensorValueUpdateRate.{s}"))
    natural = max(rates) / 1000.0 if rates and max(rates) > 0 else 1.0
    what = f"ENTITY-SENSOR-MIB watts sensor{'s' if len(chosen) > 1 else ''} {'+'.join(chosen)}"
    return Plan(terms, resolution, what, natural, {"sensors": list(chosen)}, ENT_OUT_OF_RANGE)


def sensor_exp10(scale: int, precision: int) -> int:
    """The power of ten that turns entPhySensorValue into watts: the scale's (RFC 3433 numbers yocto(1)
    to yotta(17) as 10^-24 .. 10^24 in steps of 10^3) less the precision, for a precision of 1 to 9 (0
    and the negative precisions, counts of accurate digits, leave the value unscaled)."""
    return 3 * (scale - 9) - max(precision, 0)


def _choose_sensors(index: str | None, sensors: dict[str, int], watts_rows: list[str]) -> list[str]:
    listing = ", ".join(
        f"{s} ({ENT_TYPES.get(t, t)})" for s, t in sorted(sensors.items(), key=lambda x: _numeric(x[0]))
    )
    if not watts_rows:
        raise ValueProblem(
            f"no sensor of type watts(6) in entPhySensorTable (sensors found: {listing or 'none'})"
        )
    if index is None:
        if len(watts_rows) == 1:
            return watts_rows
        raise ValueProblem(
            f"{len(watts_rows)} watts sensors ({', '.join(watts_rows)}): summing them may count twice "
            f"(a supply's input and output, per-port PoE); choose with index=N, index=N+M to sum some, or "
            f"index=all to sum all"
        )
    if index == "all":
        return watts_rows
    chosen = [part.strip() for part in index.split("+")]
    for s in chosen:
        if s not in sensors:
            raise ValueProblem(f"index={index}: no sensor {s} in entPhySensorTable (sensors: {listing})")
        if sensors[s] != ENT_WATTS:
            kind = ENT_TYPES.get(sensors[s], sensors[s])
            raise ValueProblem(
                f"index={index}: sensor {s} measures {kind}, not watts(6) (sensors: {listing})"
            )
    return chosen


def generic(params: dict[str, str], agent: Agent) -> Plan:
    """Any OID holding an integer: watts = value × scale."""
    oid = params["oid"].lstrip(".")
    scale = parse_number(params.get("scale", "1"))
    agent.get([oid])  # refuses an absent OID at open
    return Plan([Term(oid, "oid", multiplier=scale)], abs(scale), f"OID {oid} × {scale:g} W")


def _table(agent: Agent, columns: dict[str, str]) -> dict[str, dict[str, int]]:
    """Rows (index -> column name -> integer) of the given integer columns of one table."""
    rows: dict[str, dict[str, int]] = {}
    for key, oid in columns.items():
        for suffix, value in agent.walk(oid, MAX_ROWS):
            rows.setdefault(suffix, {})[key] = integer(value, f"{oid}.{suffix}")
    return rows


def _int_param(params: dict[str, str], key: str, default: int) -> int:
    text = params.get(key)
    if text is None:
        return default
    try:
        value = parse_whole(text)
    except ValueError:
        raise ValueProblem(f"{key}={text!r} is not a whole number") from None
    if value < 0:
        raise ValueProblem(f"{key}={value} is negative")
    return value


def _numeric(suffix: str) -> list[int]:
    return [int(x) for x in suffix.split(".") if x.isdigit()]


PLANNERS: dict[str, Callable[[dict[str, str], Agent], Plan]] = {
    "apc-rpdu2": apc,
    "raritan-pdu2": raritan,
    "entity-sensor": entity_sensor,
    "generic": generic,
}
