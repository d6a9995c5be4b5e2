"""The protocols a run measures through, as NetPIPE's transport modules: one method, many layers.

A `Protocol` says what its timed loop can do (which modes, which kernels, whether --async means
anything) and whether the measuring ranks form pairs. The registry `PROTOCOL_TABLE` is the one
place that lists them: --protocol's help and checks are generated from it, and every protocol has
a link opener (npmpi/sweep/links.py) and loops in each kernel it names (npmpi/sweep/kernels.py).
docs/architecture.md ("Adding a protocol") has the contract.
"""

from __future__ import annotations

from dataclasses import dataclass

from npmpi.core.modes import MODE_BIDIR, MODE_PINGPONG, MODE_STREAM

PROTOCOL_MPI = "mpi"
PROTOCOL_TCP = "tcp"
PROTOCOL_RMA = "rma"
PROTOCOL_MEMCPY = "memcpy"
DEFAULT_PROTOCOL = PROTOCOL_MPI


@dataclass(frozen=True)
class Protocol:
    """One protocol as a value: its name, what its loops support, and a note for --protocol's help."""

    name: str
    help_note: str
    modes: tuple[str, ...]  # the modes its loops implement
    kernels: tuple[str, ...]  # the kernels with a loop for it
    paired: bool  # the measuring ranks form pairs (False: each rank measures on its own)
    async_ok: bool  # --async (receives posted before the peer sends) has a meaning here
    cache_cold_ok: bool = True  # --cache-cold's pool regions are supported
    zero_bytes_ok: bool = True  # a 0-byte message exists (-l 0); not on a TCP stream

    def problem(
        self, mode: str, kernel: str, async_: bool, cache_cold: bool, lower_bytes: int = 1
    ) -> str | None:
        """Why this protocol cannot run these options (one line), or None."""
        if mode not in self.modes:
            return f"--protocol {self.name} cannot run --mode {mode}; it supports: {', '.join(self.modes)}"
        if kernel not in self.kernels:
            return (
                f"--protocol {self.name} has no loop in --kernel {kernel}; use --kernel "
                f"{' or '.join(self.kernels)}"
            )
        if async_ and not self.async_ok:
            return f"--async (pre-posted MPI receives) has no meaning with --protocol {self.name}"
        if cache_cold and not self.cache_cold_ok:
            return f"--cache-cold is not supported with --protocol {self.name}"
        if lower_bytes == 0 and not self.zero_bytes_ok:
            return f"--lower 0: a 0-byte message does not exist with --protocol {self.name}; use -l 1"
        return None


_MPI = Protocol(
    name=PROTOCOL_MPI,
    help_note="MPI two-sided send/receive, NetPIPE's NPmpi",
    modes=(MODE_PINGPONG, MODE_STREAM, MODE_BIDIR),
    kernels=("python", "c"),
    paired=True,
    async_ok=True,
)
_TCP = Protocol(
    name=PROTOCOL_TCP,
    help_note="blocking send/recv on a TCP connection between the pair's ranks, NetPIPE's NPtcp; "
    "MPI only sets it up",
    modes=(MODE_PINGPONG, MODE_STREAM, MODE_BIDIR),
    kernels=("python", "c"),
    paired=True,
    async_ok=False,
    zero_bytes_ok=False,
)
_RMA = Protocol(
    name=PROTOCOL_RMA,
    help_note="MPI one-sided MPI_Put (or --rma-op get) into the peer's window, fences (or "
    "--rma-sync lock) as the synchronisation, NetPIPE's NPmpi2",
    modes=(MODE_PINGPONG, MODE_STREAM, MODE_BIDIR),
    kernels=("python", "c"),
    paired=True,
    async_ok=False,
)
_MEMCPY = Protocol(
    name=PROTOCOL_MEMCPY,
    help_note="each measuring rank copies between its own two buffers, NetPIPE's memcpy module: "
    "the memory-bandwidth ceiling of a shared-memory transport",
    modes=(MODE_PINGPONG, MODE_STREAM),
    kernels=("python", "c"),
    paired=False,
    async_ok=False,
)
PROTOCOL_TABLE = {p.name: p for p in (_MPI, _TCP, _RMA, _MEMCPY)}
PROTOCOLS = tuple(PROTOCOL_TABLE)


def protocol_named(name: str) -> Protocol:
    """The protocol of a name; ValueError for an unknown one."""
    try:
        return PROTOCOL_TABLE[name]
    except KeyError:
        raise ValueError(f"unknown protocol {name!r}") from None


def protocol_problem(
    name: str, mode: str, kernel: str, async_: bool, cache_cold: bool, lower_bytes: int = 1
) -> str | None:
    """Why --protocol NAME cannot run with these options (one line), or None."""
    if name not in PROTOCOL_TABLE:
        return f"--protocol {name!r}: unknown protocol; choose one of: {', '.join(PROTOCOLS)}"
    return PROTOCOL_TABLE[name].problem(mode, kernel, async_, cache_cold, lower_bytes)
