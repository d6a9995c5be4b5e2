"""The NVML meter against a fake `pynvml` module with simulated GPUs."""

from __future__ import annotations

import math
import sys

import pytest
from fakes import pynvml as fake

from npmpi.meters.base import MeterError, MeterFault, make_meter, parse_meter_spec
from npmpi.meters.nvml import NvmlMeter


class Clock:
    def __init__(self) -> None:
        self.t = 50.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture(autouse=True)
def nvml(monkeypatch):
    """The fake module stands in for pynvml; a fresh machine with no GPU until setup()."""
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    fake.setup([])
    return fake


def open_meter(target: str = "all", clock: Clock | None = None) -> NvmlMeter:
    meter = NvmlMeter(parse_meter_spec(f"nvml:{target}"), monotonic=clock or Clock())
    reopen(meter)
    return meter


def reopen(meter: NvmlMeter) -> None:
    """Open; with an energy counter the first read only takes its reference (no power from 0 s)."""
    meter.open()
    if any(g.energy_counter for g in meter.gpus):
        assert meter.read(0.0) == []


def test_fake_module_behaves_like_nvidia_ml_py():
    err = fake.NVMLError(fake.NVML_ERROR_NOT_SUPPORTED)
    assert isinstance(err, fake.NVMLError_NotSupported) and err.value == 3 and str(err) == "Not Supported"
    assert isinstance(fake.NVMLError_GpuIsLost(), fake.NVMLError)
    assert fake.NVMLError_GpuIsLost().value == fake.NVML_ERROR_GPU_IS_LOST
    with pytest.raises(fake.NVMLError_Uninitialized):
        fake.nvmlDeviceGetCount()  # before nvmlInit, as in NVML


def test_registry_and_target_validation():
    assert isinstance(make_meter("nvml"), NvmlMeter)
    assert make_meter("nvml").target == "all"
    assert make_meter("nvml:1").target == "1"
    with pytest.raises(MeterError, match="index"):
        make_meter("nvml:gpu0")


def test_missing_module_says_install_nvidia_ml_py(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # `import pynvml` raises ImportError
    with pytest.raises(MeterError, match="install nvidia-ml-py"):
        open_meter()


def test_energy_counter_gives_energy_and_power():
    gpu = fake.FakeGpu(energy_mj=5_000_000)
    fake.setup([gpu])
    clock = Clock()
    meter = open_meter("0", clock)
    assert meter.natural_interval_s == 0.1 and meter.quantities == ("power_w", "energy_j")
    gpu.run(0.5, watts=200.0)  # +100 J
    clock.t += 0.5
    (r,) = meter.read(0.0)
    assert r.power_w == pytest.approx(200.0)
    assert r.energy_j == pytest.approx(100.0)
    gpu.run(0.1, watts=300.5)
    clock.t += 0.1
    (r,) = meter.read(0.0)
    assert r.power_w == pytest.approx(300.5)
    assert r.energy_j == pytest.approx(130.05)
    assert "nvmlDeviceGetPowerUsage(0)" not in fake.machine.calls  # the counter is enough


def test_all_sums_gpus_and_an_index_picks_one():
    gpus = [fake.FakeGpu(name="NVIDIA H100"), fake.FakeGpu(name="NVIDIA H100")]
    fake.setup(gpus)
    clock = Clock()
    meter = open_meter("all", clock)
    gpus[0].run(1.0, watts=100.0)
    gpus[1].run(1.0, watts=250.0)
    clock.t += 1.0
    (r,) = meter.read(0.0)
    assert r.power_w == pytest.approx(350.0) and r.energy_j == pytest.approx(350.0)
    assert meter.describe()["gpus"] == [0, 1]
    meter.close()
    meter = open_meter("1", clock)
    gpus[0].run(1.0, watts=100.0)
    gpus[1].run(1.0, watts=250.0)
    clock.t += 1.0
    assert meter.read(0.0)[0].power_w == pytest.approx(250.0)


def test_index_out_of_range():
    fake.setup([fake.FakeGpu(), fake.FakeGpu()])
    with pytest.raises(MeterError, match="no GPU 5: this node has 2"):
        open_meter("5")
    assert fake.machine.init_count == 0  # NVML was shut down again


def test_no_gpu():
    with pytest.raises(MeterError, match="no GPU"):
        open_meter()


def test_power_usage_fallback_without_energy_counter():
    gpu = fake.FakeGpu(name="Tesla K80", power_mw=149_250, energy_supported=False)
    fake.setup([gpu])
    meter = open_meter()
    assert meter.natural_interval_s == 1.0 and meter.quantities == ("power_w",)
    assert meter.describe()["natural_interval_s"] == 1.0
    (r,) = meter.read(0.0)
    assert r.power_w == pytest.approx(149.25)
    assert math.isnan(r.energy_j)
    assert "power, 1 s average" in meter.description()


def test_mixed_gpus_sum_power_without_energy():
    new, old = fake.FakeGpu(), fake.FakeGpu(power_mw=60_000, energy_supported=False)
    fake.setup([new, old])
    clock = Clock()
    meter = open_meter("all", clock)
    new.run(2.0, watts=150.0)
    clock.t += 2.0
    (r,) = meter.read(0.0)
    assert r.power_w == pytest.approx(210.0)
    assert math.isnan(r.energy_j)


def test_gpu_reporting_nothing_is_a_meter_error():
    fake.setup([fake.FakeGpu(energy_supported=False, power_supported=False)])
    with pytest.raises(MeterError, match=r"reports neither energy nor power.*Not Supported"):
        open_meter()


@pytest.mark.parametrize(
    ("code", "words"),
    [
        (fake.NVML_ERROR_DRIVER_NOT_LOADED, "Driver Not Loaded .*driver is not loaded"),
        (fake.NVML_ERROR_LIBRARY_NOT_FOUND, "libnvidia-ml.so"),
        (fake.NVML_ERROR_NO_PERMISSION, "Insufficient Permissions"),
    ],
)
def test_init_errors_are_translated_at_the_edge(code, words):
    fake.setup([fake.FakeGpu()], init_error=code)
    with pytest.raises(MeterError, match=words) as info:
        open_meter()
    assert isinstance(info.value.__cause__, fake.NVMLError)  # raise ... from e
    assert info.value.__cause__.value == code


def test_gpu_lost_mid_run_is_a_fault_and_reopen_resumes():
    gpu = fake.FakeGpu()
    fake.setup([gpu])
    clock = Clock()
    meter = open_meter("all", clock)
    gpu.error = fake.NVML_ERROR_GPU_IS_LOST
    clock.t += 0.1
    with pytest.raises(MeterFault, match="GPU is lost") as info:
        meter.read(0.0)
    assert isinstance(info.value.__cause__, fake.NVMLError_GpuIsLost)
    meter.close()
    assert fake.machine.init_count == 0
    gpu.error = None
    reopen(meter)
    gpu.run(1.0, watts=42.0)
    clock.t += 1.0
    (r,) = meter.read(0.0)
    assert r.power_w == pytest.approx(42.0) and r.energy_j == pytest.approx(42.0)


def test_energy_counter_going_back_is_a_fault():
    gpu = fake.FakeGpu(energy_mj=10_000_000)
    fake.setup([gpu])
    clock = Clock()
    meter = open_meter("all", clock)
    gpu.energy_mj = 1_000  # driver reloaded
    clock.t += 0.1
    with pytest.raises(MeterFault, match=r"went back .*driver was reloaded"):
        meter.read(0.0)


def test_name_as_bytes_and_init_shutdown_pairing():
    fake.setup([fake.FakeGpu(name="Tesla V100-SXM2-16GB")], name_as_bytes=True)
    meter = open_meter()
    assert fake.machine.init_count == 1
    assert meter.describe()["gpu_names"] == ["Tesla V100-SXM2-16GB"]
    meter.close()
    meter.close()  # idempotent: one shutdown for one init
    assert fake.machine.calls.count("nvmlInit") == fake.machine.calls.count("nvmlShutdown") == 1
    with pytest.raises(MeterFault, match="not open"):
        meter.read(0.0)


def test_reopen_gives_no_zero_and_no_spike():
    gpu = fake.FakeGpu(energy_mj=5_000_000)
    fake.setup([gpu])
    clock = Clock()
    meter = open_meter("0", clock)
    meter.close()
    meter.open()
    gpu.run(0.2, watts=100.0)  # the counter ticks between open and the first read (20 J)
    clock.t += 20e-6  # 20 µs later: as power, 1 MW
    assert meter.read(0.0) == []
    gpu.run(0.5, watts=100.0)
    clock.t += 0.5
    (r,) = meter.read(0.0)
    assert r.power_w == pytest.approx(100.0) and r.energy_j == pytest.approx(50.0)
