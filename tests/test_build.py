"""The package builds and installs without an MPI compiler, and --kernel c then says why it cannot run."""

from __future__ import annotations

import os
import subprocess
import sys
import types
import zipfile

import pytest
from conftest import REPO

import npmpi
from npmpi.core.errors import KernelUnavailable
from npmpi.persize.kernels import c_kernel_status
from npmpi.persize.kernels import get_kernels as get_kernel


@pytest.mark.slow
def test_wheel_builds_without_mpi_compiler(tmp_path):
    env = dict(os.environ, MPICC=str(tmp_path / "no-such-mpicc"))
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-build-isolation",
            "--no-deps",
            "-q",
            "-w",
            str(tmp_path),
            "-C",
            f"build-dir={tmp_path / 'build'}",
            str(REPO),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    (wheel,) = tmp_path.glob("npmpi-*.whl")
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        info = z.read("npmpi/_build_info.py").decode()
    assert not any("_ckernel" in n and not n.endswith(".pyi") for n in names)  # only its type stub
    assert "npmpi/_ckernel.pyi" in names
    assert "npmpi_analysis/__init__.py" in names and "npmpi/cli.py" in names
    assert "CKERNEL_BUILT = False" in info and "no-such-mpicc" in info


def test_c_kernel_unavailable_message(monkeypatch):
    info = types.ModuleType("npmpi._build_info")
    info.CKERNEL_BUILT = False
    info.CKERNEL_REASON = "no MPI C compiler was found at build time (set MPICC or put mpicc on PATH)"
    info.MPI_C_COMPILER = ""
    monkeypatch.setitem(sys.modules, "npmpi._build_info", info)
    monkeypatch.setitem(sys.modules, "npmpi._ckernel", None)  # import fails as if never built
    # `from npmpi import _ckernel` reads the package's attribute first: an earlier test that
    # imported the kernel in process left it there
    monkeypatch.setattr(npmpi, "_build_info", info, raising=False)
    monkeypatch.delattr(npmpi, "_ckernel", raising=False)
    ok, why = c_kernel_status()
    assert not ok
    assert "C kernel is unavailable: it was not built: no MPI C compiler" in why and "--kernel python" in why
    with pytest.raises(KernelUnavailable, match="not built"):
        get_kernel("c")


def test_c_kernel_available_here():
    ok, why = c_kernel_status()
    assert ok, why
    assert "built with" in why
