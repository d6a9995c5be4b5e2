"""A fake `pynvml` (the module of nvidia-ml-py) with simulated GPUs, for tests without a GPU.

Same names, units and error behaviour as the real module for what the nvml meter uses:
`nvmlInit`/`nvmlShutdown` (reference-counted), `nvmlDeviceGetCount`, `nvmlDeviceGetHandleByIndex`,
`nvmlDeviceGetName` (str, or bytes like nvidia-ml-py before 11.5), `nvmlDeviceGetPowerUsage`
(milliwatts), `nvmlDeviceGetTotalEnergyConsumption` (millijoules since the driver loaded),
`NVMLError` whose `value` is the NVML return code and whose constructor returns the matching
subclass (`NVMLError(NVML_ERROR_NOT_SUPPORTED)` is an `NVMLError_NotSupported`), and the
`NVML_ERROR_*` constants. Calls before nvmlInit fail with NVML_ERROR_UNINITIALIZED, as in NVML.

Tests install it with `monkeypatch.setitem(sys.modules, "pynvml", fakes.pynvml)` and set the
machine up with `setup([FakeGpu(...), ...])`.
"""

from __future__ import annotations

import string
import sys
from dataclasses import dataclass, field

NVML_SUCCESS = 0
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_ALREADY_INITIALIZED = 5
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_INSUFFICIENT_SIZE = 7
NVML_ERROR_INSUFFICIENT_POWER = 8
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_IRQ_ISSUE = 11
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_CORRUPTED_INFOROM = 14
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_RESET_REQUIRED = 16
NVML_ERROR_OPERATING_SYSTEM = 17
NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18
NVML_ERROR_IN_USE = 19
NVML_ERROR_MEMORY = 20
NVML_ERROR_NO_DATA = 21
NVML_ERROR_UNKNOWN = 999

_ERROR_STRINGS = {
    NVML_ERROR_UNINITIALIZED: "Uninitialized",
    NVML_ERROR_INVALID_ARGUMENT: "Invalid Argument",
    NVML_ERROR_NOT_SUPPORTED: "Not Supported",
    NVML_ERROR_NO_PERMISSION: "Insufficient Permissions",
    NVML_ERROR_ALREADY_INITIALIZED: "Already Initialized",
    NVML_ERROR_NOT_FOUND: "Not Found",
    NVML_ERROR_INSUFFICIENT_SIZE: "Insufficient Size",
    NVML_ERROR_INSUFFICIENT_POWER: "Insufficient External Power",
    NVML_ERROR_DRIVER_NOT_LOADED: "Driver Not Loaded",
    NVML_ERROR_TIMEOUT: "Timeout",
    NVML_ERROR_IRQ_ISSUE: "Interrupt Request Issue",
    NVML_ERROR_LIBRARY_NOT_FOUND: "NVML Shared Library Not Found",
    NVML_ERROR_FUNCTION_NOT_FOUND: "Function Not Found",
    NVML_ERROR_CORRUPTED_INFOROM: "Corrupted infoROM",
    NVML_ERROR_GPU_IS_LOST: "GPU is lost",
    NVML_ERROR_RESET_REQUIRED: "GPU requires restart",
    NVML_ERROR_OPERATING_SYSTEM: "The operating system has blocked the request.",
    NVML_ERROR_LIB_RM_VERSION_MISMATCH: "RM has detected an NVML/RM version mismatch.",
    NVML_ERROR_IN_USE: "In Use",
    NVML_ERROR_MEMORY: "Insufficient Memory",
    NVML_ERROR_NO_DATA: "No data",
    NVML_ERROR_UNKNOWN: "Unknown Error",
}


def nvmlErrorString(result: int) -> str:
    """The text NVML gives for a return code."""
    return _ERROR_STRINGS.get(result, "Unknown Error")


class NVMLError(Exception):
    """An NVML failure; `value` is the return code; constructing it yields the code's subclass."""

    _valClassMapping: dict[int, type[NVMLError]] = {}  # noqa: RUF012 - the real module's name and shape

    def __new__(cls, value: int, *args: object) -> NVMLError:
        if cls is NVMLError:
            cls = NVMLError._valClassMapping.get(value, cls)
        obj = Exception.__new__(cls)
        obj.value = value
        return obj

    def __init__(self, value: int, *args: object) -> None:
        super().__init__(value)
        self.value = value

    def __str__(self) -> str:
        return nvmlErrorString(self.value)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, NVMLError) and self.value == other.value

    __hash__ = Exception.__hash__


def _extract_errors_as_classes() -> None:
    # NVML_ERROR_NOT_SUPPORTED -> NVMLError_NotSupported, as the real module does
    module = sys.modules[__name__]
    for err_name in [x for x in dir(module) if x.startswith("NVML_ERROR_")]:
        class_name = "NVMLError_" + string.capwords(err_name.replace("NVML_ERROR_", ""), "_").replace("_", "")
        err_val = getattr(module, err_name)

        def gen_new(val: int):
            def new(typ: type, *args: object) -> NVMLError:
                return NVMLError.__new__(typ, val)

            return new

        def gen_init(val: int):
            def init(self: NVMLError, *args: object) -> None:
                NVMLError.__init__(self, val)

            return init

        cls = type(class_name, (NVMLError,), {"__new__": gen_new(err_val), "__init__": gen_init(err_val)})
        cls.__module__ = __name__
        setattr(module, class_name, cls)
        NVMLError._valClassMapping[err_val] = cls


_extract_errors_as_classes()


# --- the simulated machine -----------------------------------------------------------------------


@dataclass
class FakeGpu:
    """A simulated GPU: power in mW, the energy counter in mJ, and what it does not support."""

    name: str = "NVIDIA A100-SXM4-40GB"
    power_mw: int = 250_000
    energy_mj: int = 123_456_789
    energy_supported: bool = True
    power_supported: bool = True
    error: int | None = None  # every call on this GPU fails with this code (e.g. GPU_IS_LOST)

    def run(self, seconds: float, watts: float | None = None) -> None:
        """Let time pass at a given power: the counter grows, the power reading follows."""
        if watts is not None:
            self.power_mw = round(watts * 1000)
        self.energy_mj += round(self.power_mw * seconds)


@dataclass
class _Handle:
    index: int


@dataclass
class Machine:
    """The fake driver's state, reset by setup()."""

    gpus: list[FakeGpu] = field(default_factory=list)
    init_error: int | None = None
    name_as_bytes: bool = False
    init_count: int = 0
    calls: list[str] = field(default_factory=list)


machine = Machine()


def setup(gpus: list[FakeGpu], init_error: int | None = None, name_as_bytes: bool = False) -> Machine:
    """Install a fresh simulated machine and return it."""
    global machine
    machine = Machine(gpus=list(gpus), init_error=init_error, name_as_bytes=name_as_bytes)
    return machine


def _initialised() -> None:
    if machine.init_count <= 0:
        raise NVMLError(NVML_ERROR_UNINITIALIZED)


def _gpu(handle: _Handle) -> FakeGpu:
    _initialised()
    if not isinstance(handle, _Handle) or handle.index >= len(machine.gpus):
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    gpu = machine.gpus[handle.index]
    if gpu.error is not None:
        raise NVMLError(gpu.error)
    return gpu


def nvmlInit() -> None:
    machine.calls.append("nvmlInit")
    if machine.init_error is not None:
        raise NVMLError(machine.init_error)
    machine.init_count += 1


def nvmlShutdown() -> None:
    machine.calls.append("nvmlShutdown")
    _initialised()
    machine.init_count -= 1


def nvmlDeviceGetCount() -> int:
    _initialised()
    return len(machine.gpus)


def nvmlDeviceGetHandleByIndex(index: int) -> _Handle:
    _initialised()
    if not 0 <= index < len(machine.gpus):
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    return _Handle(index)


def nvmlDeviceGetName(handle: _Handle) -> str | bytes:
    name = _gpu(handle).name
    return name.encode() if machine.name_as_bytes else name


def nvmlDeviceGetPowerUsage(handle: _Handle) -> int:
    gpu = _gpu(handle)
    machine.calls.append(f"nvmlDeviceGetPowerUsage({handle.index})")
    if not gpu.power_supported:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    return gpu.power_mw


def nvmlDeviceGetTotalEnergyConsumption(handle: _Handle) -> int:
    gpu = _gpu(handle)
    machine.calls.append(f"nvmlDeviceGetTotalEnergyConsumption({handle.index})")
    if not gpu.energy_supported:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    return gpu.energy_mj
