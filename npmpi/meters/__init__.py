"""Power meters: one module per device family behind the small interface in `base.py`.

A meter spec names a backend and its arguments: `KIND[:ARG,key=value,...]`, e.g.
`wattsup:/dev/ttyUSB0`, `rapl`, `hwmon:/sys/class/hwmon`, `nvml:all`, `ipmi`,
`estimate:idle_w=40,max_w=120`, `replay:trace.csv`. Backends are registered by name and imported
only when chosen, so a missing optional dependency fails only the meter that needs it.
"""

from npmpi.meters.base import (
    LABEL_ESTIMATED,
    LABEL_MEASURED,
    LABEL_SIMULATED,
    Meter,
    MeterError,
    MeterFault,
    MeterSpec,
    Reading,
    check_meter_spec,
    known_meters,
    make_meter,
    parse_meter_spec,
    register,
)

__all__ = [
    "LABEL_ESTIMATED",
    "LABEL_MEASURED",
    "LABEL_SIMULATED",
    "Meter",
    "MeterError",
    "MeterFault",
    "MeterSpec",
    "Reading",
    "check_meter_spec",
    "known_meters",
    "make_meter",
    "parse_meter_spec",
    "register",
]
