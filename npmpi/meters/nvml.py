"""`nvml`: NVIDIA GPU power and energy through NVML (the `pynvml` module of nvidia-ml-py).

Where a GPU has the total-energy counter (`nvmlDeviceGetTotalEnergyConsumption`, millijoules since
the driver was loaded; Volta and newer) the meter reads it: energy_j is exact and power is the
energy difference over the time between reads. Otherwise it reads `nvmlDeviceGetPowerUsage`
(milliwatts), which recent GPUs (Ampere and newer) average over one second, and samples it once a
second. NVML errors are translated here, at the edge, into MeterError (cannot use the GPU) or
MeterFault (it failed during the run).

Spec: `nvml[:INDEX|all]` (default all: the sum over every GPU of the node).
"""

from __future__ import annotations

import contextlib
import importlib
import math
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any, NoReturn

from npmpi.meters.base import NAN, Meter, MeterError, MeterFault, MeterSpec, Reading

ENERGY_INTERVAL_S = 0.1
POWER_INTERVAL_S = 1.0  # nvmlDeviceGetPowerUsage is a 1 s average on recent GPUs

INSTALL_HINT = "install nvidia-ml-py (`pip install nvidia-ml-py`, it provides the pynvml module)"
# What to do about the NVML error codes a user can act on (names as in nvidia-ml-py).
ERROR_HINTS = {
    "NVML_ERROR_DRIVER_NOT_LOADED": "the NVIDIA driver is not loaded (`nvidia-smi` should list the GPUs)",
    "NVML_ERROR_LIBRARY_NOT_FOUND": "libnvidia-ml.so was not found: install the NVIDIA driver",
    "NVML_ERROR_NO_PERMISSION": "run as a user allowed to use the GPU devices (/dev/nvidia*)",
    "NVML_ERROR_LIB_RM_VERSION_MISMATCH": "driver and library versions differ: reload the driver or reboot",
    "NVML_ERROR_GPU_IS_LOST": "the GPU fell off the bus or stopped responding",
    "NVML_ERROR_NOT_SUPPORTED": "this GPU does not report it",
}


@dataclass
class Gpu:
    """One GPU being summed and its counter state."""

    index: int
    handle: Any
    name: str
    energy_counter: bool
    last_mj: int = 0


class NvmlMeter(Meter):
    """Power and energy of one or all NVIDIA GPUs of the node."""

    kind = "nvml"
    parameters = ()  # the key=value parameters its spec accepts
    natural_interval_s = ENERGY_INTERVAL_S
    quantities = ("power_w", "energy_j")
    power_resolution_w = 1e-3  # milliwatts
    energy_resolution_j = 1e-3  # millijoules

    def __init__(self, spec: MeterSpec, monotonic: Callable[[], float] = time.monotonic) -> None:
        super().__init__(spec)
        target = (spec.target or "all").lower()
        if target != "all" and not re.fullmatch(r"[0-9]{1,4}", target, re.ASCII):
            raise MeterError.about(spec.text, f"the GPU must be an index (0, 1, ...) or all, not {target!r}")
        self.target = target
        self._monotonic = monotonic
        self._nvml: ModuleType | None = None
        self.gpus: list[Gpu] = []
        self._energy_j = 0.0
        self._last_t = 0.0
        self.natural_interval_s = ENERGY_INTERVAL_S

    # --- the edge: every NVML call goes through here -------------------------------------------

    def _explain(self, exc: Exception) -> str:
        value = getattr(exc, "value", None)
        for name, hint in ERROR_HINTS.items():
            if value is not None and value == getattr(self._nvml, name, object()):
                return f"{exc} ({hint})"
        return str(exc) or f"NVML error {value}"

    def _call(self, what: str, fn: Callable[..., Any], *args: Any, fatal: bool) -> Any:
        """Call NVML; its errors become MeterError (at open) or MeterFault (while reading)."""
        assert self._nvml is not None
        try:
            return fn(*args)
        except self._nvml.NVMLError as exc:
            self._raise(what, exc, fatal)

    def _raise(self, what: str, exc: Exception, fatal: bool) -> NoReturn:
        if fatal:
            raise MeterError.about(self.spec.text, f"{what}: {self._explain(exc)}") from exc
        raise MeterFault(f"{what}: {self._explain(exc)}") from exc

    # --- life cycle ----------------------------------------------------------------------------

    def open(self) -> None:
        self.close()
        try:
            nvml = importlib.import_module("pynvml")  # only now: most nodes have no GPU
        except ImportError as exc:
            raise MeterError.about(self.spec.text, f"cannot import pynvml ({exc}): {INSTALL_HINT}") from None
        self._nvml = nvml
        self._call("cannot initialise NVML", nvml.nvmlInit, fatal=True)
        try:
            self._open_gpus(nvml)
        except MeterError:
            self.close()
            raise

    def _open_gpus(self, nvml: ModuleType) -> None:
        count = int(self._call("cannot count the GPUs", nvml.nvmlDeviceGetCount, fatal=True))
        if count == 0:
            raise MeterError.about(self.spec.text, "NVML sees no GPU on this node")
        if self.target == "all":
            indices = list(range(count))
        else:
            indices = [int(self.target)]
            if indices[0] >= count:
                raise MeterError.about(
                    self.spec.text, f"no GPU {indices[0]}: this node has {count} (0 to {count - 1})"
                )
        gpus = []
        for i in indices:
            handle = self._call(f"cannot open GPU {i}", nvml.nvmlDeviceGetHandleByIndex, i, fatal=True)
            name = self._call(f"cannot read the name of GPU {i}", nvml.nvmlDeviceGetName, handle, fatal=True)
            if isinstance(name, bytes):  # nvidia-ml-py before 11.5 returned bytes
                name = name.decode(errors="replace")
            gpu = Gpu(index=i, handle=handle, name=str(name), energy_counter=False)
            try:
                gpu.last_mj = int(nvml.nvmlDeviceGetTotalEnergyConsumption(handle))
                gpu.energy_counter = True
            except nvml.NVMLError as exc:
                if getattr(exc, "value", None) != nvml.NVML_ERROR_NOT_SUPPORTED:
                    self._raise(f"cannot read the energy counter of GPU {i} ({gpu.name})", exc, fatal=True)
                # an older GPU: fall back to its power reading
                self._call(
                    f"GPU {i} ({gpu.name}) reports neither energy nor power",
                    nvml.nvmlDeviceGetPowerUsage,
                    handle,
                    fatal=True,
                )
            gpus.append(gpu)
        self.gpus = gpus
        self._energy_j = 0.0
        self._last_t = self._monotonic()
        # the first read after an open only takes the energy counters' reference: a read microseconds
        # after open would give 0 W, or a spike if a counter ticked in between
        self._referenced = not any(g.energy_counter for g in gpus)
        # energy_j only when every GPU counts it; power readings are 1 s averages: no faster sampling
        if all(g.energy_counter for g in gpus):
            self.natural_interval_s = ENERGY_INTERVAL_S
            self.quantities = ("power_w", "energy_j")
            self.averaging, self.averaging_s, self.energy_from_counter = "previous", 0.0, True
        else:
            self.natural_interval_s = POWER_INTERVAL_S
            self.quantities = ("power_w",)
            self.averaging, self.averaging_s, self.energy_from_counter = "fixed", POWER_INTERVAL_S, False

    def close(self) -> None:
        nvml, self._nvml = self._nvml, None
        self.gpus = []
        if nvml is not None:
            with contextlib.suppress(nvml.NVMLError):  # the driver went away: nothing left to release
                nvml.nvmlShutdown()

    # --- reading -------------------------------------------------------------------------------

    def read(self, timeout_s: float) -> list[Reading]:
        if self._nvml is None or not self.gpus:
            raise MeterFault("the NVML meter is not open")
        nvml = self._nvml
        now_t = self._monotonic()
        stamp = time.time()
        dt_s = now_t - self._last_t
        if not self._referenced:
            for gpu in self.gpus:
                if gpu.energy_counter:
                    what = f"GPU {gpu.index} ({gpu.name}) energy"
                    gpu.last_mj = int(
                        self._call(what, nvml.nvmlDeviceGetTotalEnergyConsumption, gpu.handle, fatal=False)
                    )
            self._last_t = now_t
            self._referenced = True
            return []
        counters: list[int | None] = []
        power_w = 0.0
        for gpu in self.gpus:
            what = f"GPU {gpu.index} ({gpu.name})"
            if gpu.energy_counter:
                counter = nvml.nvmlDeviceGetTotalEnergyConsumption
                mj = int(self._call(f"{what} energy", counter, gpu.handle, fatal=False))
                if mj < gpu.last_mj:
                    raise MeterFault(
                        f"the energy counter of {what} went back from {gpu.last_mj} to {mj} mJ "
                        "(the driver was reloaded or the GPU reset)"
                    )
                counters.append(mj)
                power_w += (mj - gpu.last_mj) / 1e3 / dt_s if dt_s > 0 else NAN
            else:
                mw = self._call(f"{what} power", nvml.nvmlDeviceGetPowerUsage, gpu.handle, fatal=False)
                counters.append(None)
                power_w += int(mw) / 1e3
        energy_j = NAN
        if all(g.energy_counter for g in self.gpus):
            joules = sum((c or 0) - g.last_mj for g, c in zip(self.gpus, counters, strict=True)) / 1e3
            self._energy_j += joules
            energy_j = self._energy_j
        for gpu, c in zip(self.gpus, counters, strict=True):
            if c is not None:
                gpu.last_mj = c
        self._last_t = now_t
        power_w = power_w if math.isfinite(power_w) else NAN
        return [Reading(time_unix_s=stamp, power_w=power_w, energy_j=energy_j)]

    # --- description ---------------------------------------------------------------------------

    def description(self) -> str:
        if not self.gpus:
            return f"NVIDIA GPU {self.target} through NVML"
        parts = [
            f"GPU {g.index} {g.name} ({'energy counter' if g.energy_counter else 'power, 1 s average'})"
            for g in self.gpus
        ]
        return "NVML: " + "; ".join(parts)

    def describe(self) -> dict[str, object]:
        d = super().describe()
        d.update(
            {
                "gpus": [g.index for g in self.gpus],
                "gpu_names": [g.name for g in self.gpus],
                "energy_counter": [g.energy_counter for g in self.gpus],
            }
        )
        return d
