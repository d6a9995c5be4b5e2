"""What a Redfish service offers for power, and reading it from its JSON (no I/O: `get` is given).

Three places hold a chassis's power, in order of preference (DMTF DSP0268):
- `Chassis/{id}/EnvironmentMetrics` (schema 2020.4 and later): `PowerWatts.Reading` (W) and, where
  the service counts it, `EnergykWh.Reading` (a cumulative energy counter, kWh);
- `Chassis/{id}/Sensors/{sid}`: a `Sensor` with `ReadingUnits` `W` (power) or `kW.h` (energy);
- `Chassis/{id}/Power` (deprecated since 2020.4, still the only one on many BMCs):
  `PowerControl[0].PowerConsumedWatts`.

JSON numbers are parsed as `Decimal`, so a reading's resolution is known from the digits the
service sends (`374` -> 1 W, `12.345` kWh -> 1 Wh = 3600 J).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from npmpi.inputfiles import json_depth

MAX_PAYLOAD_CHARS = 1 << 20  # a Redfish resource is a few kB; a sensor collection tens of kB
MAX_DEPTH = 32
MAX_SENSORS_SCANNED = 64  # each costs a request; a chassis lists 20-100 sensors
MAX_CHASSIS_SCANNED = 16
JOULES_PER_KWH = 3.6e6
MAX_PLAUSIBLE_W = 1e6  # one chassis: a reading above is garbage, never a number
POWER_UNITS = ("W",)
ENERGY_UNITS = ("kW.h", "kWh")
SCHEMA_ENVIRONMENT = "EnvironmentMetrics"
SCHEMA_SENSOR = "Sensor"
SCHEMA_POWER = "Power"
PLACES = "EnvironmentMetrics, Sensors, Power"
_DURATION = re.compile(
    r"^P(?:(\d+(?:\.\d+)?)D)?(?:T(?:(\d+(?:\.\d+)?)H)?(?:(\d+(?:\.\d+)?)M)?(?:(\d+(?:\.\d+)?)S)?)?$"
)


class PayloadError(Exception):
    """A response that is not the JSON resource it should be (garbage, wrong types, missing parts)."""


class DiscoveryError(Exception):
    """The service offers no usable power reading, or several where one must be chosen."""


@dataclass(frozen=True)
class Source:
    """Where one chassis's power (and energy) is read: one GET of `uri` per reading."""

    chassis: str
    schema: str  # SCHEMA_ENVIRONMENT, SCHEMA_SENSOR or SCHEMA_POWER
    uri: str
    odata_type: str  # e.g. '#EnvironmentMetrics.v1_3_0.EnvironmentMetrics': the schema version
    has_power: bool
    has_energy: bool
    sensor: str = ""  # the sensor's Id (SCHEMA_SENSOR)
    sensing_interval_s: float = math.nan  # the sensor's declared SensingInterval, where given
    power_metrics_interval_s: float = math.nan  # legacy PowerMetrics.IntervalInMin (its min/avg/max)


@dataclass(frozen=True)
class Values:
    """One response's numbers: watts and kWh as sent (None where the source has none)."""

    power_w: Decimal | None
    energy_kwh: Decimal | None
    reading_time_unix_s: float = math.nan  # the service's own time of the reading (ReadingTime), if any


def decode(text: str, uri: str) -> dict:
    """A JSON object from a response body, numbers as int/Decimal; PayloadError otherwise."""
    if len(text) > MAX_PAYLOAD_CHARS:
        raise PayloadError(f"{uri}: a response of {len(text)} characters, not a Redfish resource")
    data = text.encode("utf-8", "replace")
    if json_depth(data) > MAX_DEPTH:
        raise PayloadError(f"{uri}: JSON nested more than {MAX_DEPTH} levels deep")
    try:
        value = json.loads(text, parse_float=Decimal, parse_constant=_no_constant)
    except (ValueError, RecursionError) as exc:
        raise PayloadError(f"{uri}: not valid JSON ({str(exc)[:100]}): {_start(text)}") from None
    if not isinstance(value, dict):
        raise PayloadError(f"{uri}: JSON {type(value).__name__}, not an object")
    return value


def _no_constant(name: str):
    raise ValueError(f"{name} is not a JSON number")


def _start(text: str) -> str:
    first = text.strip()[:60]
    return repr(first) if first else "an empty body"


def link(resource: dict, key: str) -> str | None:
    """The `@odata.id` of a navigation property, or None."""
    value = resource.get(key)
    if isinstance(value, dict) and isinstance(value.get("@odata.id"), str):
        return value["@odata.id"]
    return None


def members(collection: dict, uri: str) -> list[str]:
    """The member links of a collection; PayloadError if it is not one."""
    items = collection.get("Members")
    if not isinstance(items, list):
        raise PayloadError(f"{uri}: no Members list (not a Redfish collection)")
    out = []
    for item in items:
        if not isinstance(item, dict) or not isinstance(item.get("@odata.id"), str):
            raise PayloadError(f"{uri}: a member without an @odata.id link")
        out.append(item["@odata.id"])
    return out


def last_segment(uri: str) -> str:
    return uri.rstrip("/").rsplit("/", 1)[-1]


def number(value, what: str, null_ok: bool = False) -> Decimal | None:
    """A finite JSON number as Decimal; PayloadError for a string, bool, list or null (unless null_ok)."""
    if value is None and null_ok:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, Decimal)):
        shown = "null" if value is None else f"{type(value).__name__} {str(value)[:40]!r}"
        raise PayloadError(f"{what} is {shown}, not a number")
    dec = Decimal(value)
    if not dec.is_finite():
        raise PayloadError(f"{what} is not finite")
    return dec


def resolution(value: Decimal) -> float:
    """The step of a number as sent: 10**-decimals (374 -> 1, 12.345 -> 0.001)."""
    exponent = value.as_tuple().exponent
    return float(Decimal(1).scaleb(exponent)) if isinstance(exponent, int) else math.nan


def duration_s(text) -> float:
    """An ISO 8601 duration such as 'PT0.25S' in seconds; NaN if absent or not one."""
    if not isinstance(text, str):
        return math.nan
    m = _DURATION.match(text.strip())
    if m is None or not any(m.groups()):
        return math.nan
    d, h, mi, s = (float(g) if g else 0.0 for g in m.groups())
    return ((d * 24 + h) * 60 + mi) * 60 + s


def values_of(source: Source, resource: dict) -> Values:
    """The power and energy in one GET of the source; PayloadError for missing or mistyped ones."""
    where = source.uri
    if source.schema == SCHEMA_ENVIRONMENT:
        power = _nested_reading(resource, "PowerWatts", where) if source.has_power else None
        energy = _nested_reading(resource, "EnergykWh", where) if source.has_energy else None
    elif source.schema == SCHEMA_SENSOR:
        value = number(resource.get("Reading"), f"{where}: Reading")
        power, energy = (None, value) if source.has_energy else (value, None)
    else:
        control = resource.get("PowerControl")
        if not isinstance(control, list) or not control or not isinstance(control[0], dict):
            raise PayloadError(f"{where}: no PowerControl[0]")
        power = number(control[0].get("PowerConsumedWatts"), f"{where}: PowerControl[0].PowerConsumedWatts")
        energy = None
    for value, what in ((power, "power"), (energy, "energy")):
        if value is not None and (value < 0 or (what == "power" and value > MAX_PLAUSIBLE_W)):
            raise PayloadError(f"{where}: {what} reading {value} is out of range")
    block = resource.get("PowerWatts") if source.schema == SCHEMA_ENVIRONMENT else resource
    stamp = block.get("ReadingTime") if isinstance(block, dict) else None
    return Values(power, energy, iso_time_s(stamp))


def iso_time_s(text) -> float:
    """An ISO 8601 date and time with its offset ('2026-11-24T03:12:05.250+00:00', '...Z') in seconds
    since the epoch; NaN if absent, not one, or without an offset (a BMC's local time is unknown)."""
    if not isinstance(text, str) or len(text) > 64:
        return math.nan
    try:
        when = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        return math.nan
    return when.timestamp() if when.tzinfo is not None else math.nan


def _nested_reading(resource: dict, key: str, where: str) -> Decimal | None:
    block = resource.get(key)
    if not isinstance(block, dict):
        raise PayloadError(f"{where}: no {key} object")
    return number(block.get("Reading"), f"{where}: {key}.Reading")


def environment_source(chassis: str, uri: str, resource: dict) -> Source | None:
    """The EnvironmentMetrics resource as a source, if it carries a power or energy reading."""
    has = {}
    for key in ("PowerWatts", "EnergykWh"):
        block = resource.get(key)
        has[key] = isinstance(block, dict) and "Reading" in block
    if not has["PowerWatts"] and not has["EnergykWh"]:
        return None
    return Source(
        chassis,
        SCHEMA_ENVIRONMENT,
        uri,
        str(resource.get("@odata.type", "")),
        has["PowerWatts"],
        has["EnergykWh"],
    )


def sensor_source(chassis: str, uri: str, resource: dict) -> Source | None:
    """A Sensor resource as a source if it reads watts or kWh."""
    units = resource.get("ReadingUnits")
    if units not in POWER_UNITS and units not in ENERGY_UNITS:
        return None
    return Source(
        chassis,
        SCHEMA_SENSOR,
        uri,
        str(resource.get("@odata.type", "")),
        has_power=units in POWER_UNITS,
        has_energy=units in ENERGY_UNITS,
        sensor=str(resource.get("Id") or last_segment(uri)),
        sensing_interval_s=duration_s(resource.get("SensingInterval")),
    )


def legacy_source(chassis: str, uri: str, resource: dict) -> Source | None:
    """The deprecated Power resource as a source if PowerControl[0] has PowerConsumedWatts."""
    control = resource.get("PowerControl")
    if not isinstance(control, list) or not control or not isinstance(control[0], dict):
        return None
    if "PowerConsumedWatts" not in control[0]:
        return None
    metrics = control[0].get("PowerMetrics")
    interval_min = metrics.get("IntervalInMin") if isinstance(metrics, dict) else None
    interval = float(interval_min) * 60 if isinstance(interval_min, (int, Decimal)) else math.nan
    return Source(
        chassis, SCHEMA_POWER, uri, str(resource.get("@odata.type", "")), True, False,
        power_metrics_interval_s=interval,
    )  # fmt: skip


Getter = Callable[[str], dict]


def chassis_source(get: Getter, uri: str, sensor: str | None) -> Source | None:
    """The best power source of one chassis (`sensor`: that sensor only), or None."""
    chassis = get(uri)
    cid = str(chassis.get("Id") or last_segment(uri))
    sensors_uri = link(chassis, "Sensors")
    if sensor:
        if sensors_uri is None:
            raise DiscoveryError(f"chassis {cid} has no Sensors collection, so no sensor {sensor!r}")
        found = [m for m in members(get(sensors_uri), sensors_uri) if last_segment(m) == sensor]
        if not found:
            raise DiscoveryError(f"chassis {cid} has no sensor {sensor!r} in {sensors_uri}")
        source = sensor_source(cid, found[0], get(found[0]))
        if source is None:
            raise DiscoveryError(f"sensor {found[0]} reads neither W nor kWh (ReadingUnits)")
        return source
    env_uri = link(chassis, "EnvironmentMetrics")
    environment = environment_source(cid, env_uri, get(env_uri)) if env_uri else None
    if environment is not None and environment.has_power:
        return environment
    source = _chassis_power_sensor(get, cid, sensors_uri) if sensors_uri else None
    power_uri = link(chassis, "Power")
    if source is None and power_uri:
        source = legacy_source(cid, power_uri, get(power_uri))
    return source or environment  # an energy counter alone, if nothing gives watts


def _chassis_power_sensor(get: Getter, cid: str, sensors_uri: str) -> Source | None:
    """The one watts sensor of the whole chassis (PhysicalContext Chassis), if exactly one."""
    found = []
    for uri in members(get(sensors_uri), sensors_uri)[:MAX_SENSORS_SCANNED]:
        resource = get(uri)
        source = sensor_source(cid, uri, resource)
        if source is not None and source.has_power and resource.get("PhysicalContext") == "Chassis":
            found.append(source)
    if len(found) > 1:
        names = ", ".join(s.sensor for s in found)
        raise DiscoveryError(
            f"chassis {cid} has several chassis power sensors ({names}): choose with sensor=ID"
        )
    return found[0] if found else None


def discover(get: Getter, root: dict, chassis: str | None, sensor: str | None) -> Source:
    """The source to read: `chassis` (an Id) or the one chassis with power; DiscoveryError otherwise."""
    collection_uri = link(root, "Chassis")
    if collection_uri is None:
        raise DiscoveryError("the service root links no Chassis collection")
    uris = members(get(collection_uri), collection_uri)
    ids = [last_segment(u) for u in uris]
    if chassis:
        if chassis not in ids:
            raise DiscoveryError(f"no chassis {chassis!r}; the service has: {', '.join(ids) or 'none'}")
        source = chassis_source(get, uris[ids.index(chassis)], sensor)
        if source is None:
            raise DiscoveryError(
                f"chassis {chassis} offers no power reading (EnvironmentMetrics, Sensors, Power)"
            )
        return source
    found, passed = [], []
    for uri in uris[:MAX_CHASSIS_SCANNED]:
        try:
            source = chassis_source(get, uri, sensor)
        except DiscoveryError as exc:
            if not sensor:
                raise
            passed.append(str(exc))  # this chassis lacks the named sensor: perhaps another has it
            continue
        if source is not None:
            found.append(source)
    if not found and passed:
        raise DiscoveryError("; ".join(passed))
    if not found:
        raise DiscoveryError(
            f"no chassis offers a power reading ({PLACES}); the service has: {', '.join(ids) or 'none'}"
        )
    if len(found) > 1:
        raise DiscoveryError(
            f"several chassis offer power ({', '.join(s.chassis for s in found)}): choose one with chassis=ID"
        )
    return found[0]
