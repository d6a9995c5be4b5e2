"""Type stub of the C kernel (csrc/: ckernel.c the module, cmpi.c MPI, ctcp.c TCP, crma.c one-sided,
cmemcpy.c copies), built with npmpi when an MPI C compiler is found.

The same contract as npmpi.persize.kernels.python_pingpong and python_transfer: the timed loop's elapsed
seconds; an MPI error raises RuntimeError naming the call.
"""

from typing import Any

MPI_VERSION: int  # of the MPI headers the kernel was compiled against
MPI_SUBVERSION: int
MAX_COUNT: int  # the largest message one call carries: 2**31 - 1, or more with MPI 4's large counts

def pingpong(
    comm: Any,
    peer: int,
    sendbuf: Any,
    recvbuf: Any,
    nbytes: int,
    iterations: int,
    transmitter: bool,
    /,
) -> float:
    """Plain ping-pong: `iterations` round trips of `nbytes` with `peer`; elapsed seconds."""

def transfer(
    comm: Any,
    peer: int,
    sendbuf: Any,
    recvbuf: Any,
    nbytes: int,
    iterations: int,
    transmitter: bool,
    mode: str,
    window: int,  # messages one way per iteration: 1 outside a stream (ValueError otherwise)
    async_: bool,
    regions: int,
    stride: int,
    first: int,
    /,
) -> float:
    """Every mode's timed loop (see npmpi.persize.kernels.python_transfer); elapsed seconds."""

def rma_transfer(
    comm: Any,
    win: Any,
    flag_win: Any,
    flags: Any,
    peer: int,
    sendbuf: Any,
    recvbuf: Any,
    nbytes: int,
    iterations: int,
    transmitter: bool,
    mode: str,
    window: int,  # messages one way per iteration: 1 outside a stream (ValueError otherwise)
    regions: int,
    stride: int,
    first: int,
    get: bool,
    lock: bool,
    /,
) -> float:
    """--protocol rma's loops (csrc/crma.c; see npmpi.protocols.rma.loops); elapsed seconds."""

def memcpy_transfer(
    src: Any,
    dst: Any,
    nbytes: int,
    iterations: int,
    mode: str,
    window: int,  # messages one way per iteration: 1 outside a stream (ValueError otherwise)
    regions: int,
    stride: int,
    first: int,
    /,
) -> float:
    """--protocol memcpy's copies (csrc/cmemcpy.c; see npmpi.protocols.memcpy.loops); elapsed seconds."""

def tcp_pingpong(
    fd: int, sendbuf: Any, recvbuf: Any, nbytes: int, iterations: int, transmitter: bool, /
) -> float:
    """--protocol tcp's ping-pong on a connected socket's descriptor; OSError when it breaks."""

def tcp_transfer(
    fd: int,
    sendbuf: Any,
    recvbuf: Any,
    nbytes: int,
    iterations: int,
    transmitter: bool,
    mode: str,
    window: int,  # messages one way per iteration: 1 outside a stream (ValueError otherwise)
    regions: int,
    stride: int,
    first: int,
    /,
) -> float:
    """--protocol tcp's loops of every mode (see npmpi.protocols.tcp.loops.tcp_transfer)."""

def library_version() -> str:
    """MPI_Get_library_version of the MPI the kernel is linked with."""

def clock_info(reads: int = 100000, /) -> tuple[float, float]:
    """(resolution_s of CLOCK_MONOTONIC, mean read_cost_s of one clock read)."""

def collective(
    comm: Any,
    op_code: int,
    sendbuf: Any,
    recvbuf: Any,
    count: int,
    datatype: Any,
    mpi_op: Any,
    iterations: int,
    per_call: int = 0,
    /,
) -> float:
    """`iterations` calls of one collective (npmpi.coll.step.C_CODES) back to back, `count` items per
    block; elapsed seconds. per_call: each call timed on its own and an untimed MPI_Barrier after
    it, as OSU's loops; the sum of the calls' times."""
