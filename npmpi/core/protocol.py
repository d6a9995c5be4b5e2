"""What a protocol is: one value carrying everything the run needs to know of it (the contract).

A `Protocol` says what its timed loops can do (which modes, which kernels, whether --async means
anything), whether the measuring ranks form pairs, its own command-line options (declared as data,
checked by its own function), the Options fields they fill, and — named as "module:attribute",
imported only when a run uses it, so the contract imports no protocol — its link opener, its
loops in each kernel and what it sets up before MPI starts. `Link` is the base of a protocol's link
(what its loops talk through). Every protocol's room (npmpi/protocols/) and the per-size engine
(npmpi/persize/) import this module; it imports only the core. docs/architecture.md, "Adding a
protocol", walks through writing one.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from npmpi.core.errors import KernelUnavailable
from npmpi.core.modes import mode_named


@dataclass(frozen=True)
class ProtocolOption:
    """One of a protocol's own options, as argparse declares it in the protocol group of --help:
    a value (`metavar` given; None when not given) or a switch (no metavar; False when not given)."""

    flag: str  # "--tcp-port"; its argparse dest is the flag's name with '_' for '-'
    help: str
    metavar: str | None = None

    @property
    def dest(self) -> str:
        return self.flag.lstrip("-").replace("-", "_")

    @property
    def unset(self) -> Any:
        """Its value when not given."""
        return None if self.metavar else False


def load(target: str) -> Any:
    """The object a "module:attribute" names (imported now)."""
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)


@dataclass(frozen=True)
class Protocol:
    """One protocol as a value: what its loops support, its options, its link, loops and set-up."""

    name: str
    help_note: str  # what it is, for --protocol's help
    modes: tuple[str, ...]  # the modes its loops implement
    kernels: tuple[str, ...]  # the kernels with a loop for it
    paired: bool  # the measuring ranks form pairs (False: each rank measures on its own)
    async_ok: bool  # --async (receives posted before the peer sends) has a meaning here
    cache_cold_ok: bool = True  # --cache-cold's pool regions are supported
    zero_bytes_ok: bool = True  # a 0-byte message exists (-l 0); not on a TCP stream
    bidir_window_ok: bool = False  # its bidir loops take a window each way (--mode bidir --window N)
    options: tuple[ProtocolOption, ...] = ()  # its own options, in --help's order
    # its options checked -> {Options field: value}; called with the parsed command line (argparse's
    # namespace, --mode already checked) only when this protocol is the run's; UsageError: one line
    check_options: Callable[[Any], dict] | None = None
    option_fields: tuple[str, ...] = ()  # its Options fields (the file's protocol_settings `requested`)
    link: str = ""  # "module:attribute" of opener(comm, opts, peer, transmitter) -> link; LinkError
    # kernel name -> ("module:attribute" of its ping-pong loop, of its transfer loop); None: each
    # kernel's own loops (the kernel's MPI send/receive, npmpi/persize/kernels.py)
    loops: Mapping[str, tuple[str, str]] | None = field(default=None)
    before_mpi_setup: str = ""  # "module:attribute" of a function run before MPI starts, or ""
    in_header: bool = True  # the console's header says "over NAME" (not for MPI itself)

    def problem(
        self, mode: str, kernel: str, async_: bool, cache_cold: bool, lower_bytes: int = 1, window: int = 1
    ) -> str | None:
        """Why this protocol cannot run these options (one line), or None."""
        if mode not in self.modes:
            return f"--protocol {self.name} cannot run --mode {mode}; it supports: {', '.join(self.modes)}"
        if window > 1 and not mode_named(mode).windowed and not self.bidir_window_ok:
            return (
                f"--protocol {self.name} has no windowed --mode {mode} (--window {window}); drop --window "
                "or use --protocol mpi"
            )
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

    def fields(self, ns) -> dict:
        """The Options fields of this protocol's own options (checked), with `protocol` itself."""
        return {"protocol": self.name, **(self.check_options(ns) if self.check_options else {})}

    def open_link(self, comm, opts, peer: int, transmitter: bool):
        """This rank's link to `peer` (a `Link`, below); LinkError says why not."""
        return load(self.link)(comm, opts, peer, transmitter)

    def loops_in(self, kernel) -> tuple[Callable, Callable]:
        """(pingpong, transfer) of this protocol in a kernel (npmpi.persize.kernels.Kernel);
        KernelUnavailable when the kernel has none."""
        if self.loops is None:
            return kernel.pingpong, kernel.transfer
        try:
            pingpong, transfer = self.loops[kernel.name]
        except KeyError:
            why = f"--kernel {kernel.name} has no loop for --protocol {self.name}"
            raise KernelUnavailable(why) from None
        return load(pingpong), load(transfer)

    def before_mpi(self) -> None:
        """What this protocol sets up before MPI starts (its MPI's environment), if anything."""
        if self.before_mpi_setup:
            load(self.before_mpi_setup)()


class Link:
    """The base of every protocol's link: no per-trial work, nothing granted, nothing to close."""

    protocol = ""
    endpoint: tuple[Any, Any] = (None, None)

    def before_trial(self) -> None:
        """Untimed, at every trial's start, on both ranks of the pair."""

    def settings(self) -> dict[str, Any]:
        """What this rank asked for and got (JSON-able), for the run file's protocol_settings."""
        return {}

    def close(self) -> None:
        """End the link (the sweep is over, or it broke)."""

    def reset(self) -> None:
        """Fault injection (NPMPI_FAULT_LINK_RESET_SIZE): break the link as a failing network
        would, so the peer's loop sees it (TCP: a reset); a protocol that cannot does nothing."""
