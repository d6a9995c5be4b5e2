"""The timed ping-pong loop, twice with one contract: pure Python (mpi4py) and C.

A kernel takes the communicator, the peer's rank, the send and receive buffers (numpy uint8),
the message size in bytes, the number of round trips and whether this rank transmits first;
it runs exactly that loop with blocking Send/Recv and returns the loop's elapsed seconds on the
monotonic clock (the transmitter's figure is the one recorded). Nothing else is timed.
"""

from __future__ import annotations

from collections.abc import Callable
from time import perf_counter
from typing import Any

from npmpi.errors import KernelUnavailable

DATA_TAG = 1

KernelFn = Callable[[Any, int, Any, Any, int, int, bool], float]
KERNEL_NAMES = ("python", "c")


def python_pingpong(
    comm, peer: int, sendbuf, recvbuf, nbytes: int, iterations: int, transmitter: bool
) -> float:
    """Blocking mpi4py Send/Recv on preallocated buffers; lookups hoisted out of the loop."""
    from mpi4py import MPI

    send, recv = comm.Send, comm.Recv
    smsg = [sendbuf[:nbytes], MPI.BYTE]
    rmsg = [recvbuf[:nbytes], MPI.BYTE]
    tag = DATA_TAG
    loop = range(iterations)
    if transmitter:
        t0 = perf_counter()
        for _ in loop:
            send(smsg, peer, tag)
            recv(rmsg, peer, tag)
        t1 = perf_counter()
    else:
        t0 = perf_counter()
        for _ in loop:
            recv(rmsg, peer, tag)
            send(smsg, peer, tag)
        t1 = perf_counter()
    return t1 - t0


def c_kernel_status() -> tuple[bool, str]:
    """Whether the C kernel can be used here, and why not (or how it was built)."""
    try:
        from npmpi import _build_info
    except ImportError:
        _build_info = None
    try:
        from npmpi import _ckernel
    except ImportError as exc:
        if _build_info is not None and not _build_info.CKERNEL_BUILT:
            reason = f"it was not built: {_build_info.CKERNEL_REASON}"
        else:
            reason = f"it cannot be imported ({exc})"
        return False, (
            f"the C kernel is unavailable: {reason}. Rebuild with an MPI compiler on PATH "
            "(scripts/setup.sh, or MPICC=/path/to/mpicc pip install --no-build-isolation .), "
            "or use --kernel python"
        )
    from mpi4py import MPI

    linked = _ckernel.library_version().strip()
    used = MPI.Get_library_version().strip()
    if linked.split("\n")[0] != used.split("\n")[0]:
        return False, (
            "the C kernel was built against a different MPI library than mpi4py uses "
            f"(C kernel: {linked.splitlines()[0][:60]!r}; mpi4py: {used.splitlines()[0][:60]!r}); "
            "rebuild npmpi with the mpicc of the MPI that mpi4py uses (MPICC=…)"
        )
    built_with = _build_info.MPI_C_COMPILER if _build_info is not None else "unknown mpicc"
    return True, f"built with {built_with}"


def get_kernel(name: str) -> KernelFn:
    """The kernel function for a name; KernelUnavailable says why it cannot be had."""
    if name == "python":
        return python_pingpong
    if name == "c":
        ok, why = c_kernel_status()
        if not ok:
            raise KernelUnavailable(why)
        from npmpi import _ckernel

        return _ckernel.pingpong
    raise KernelUnavailable(f"unknown kernel {name!r}; choose one of: {', '.join(KERNEL_NAMES)}")
