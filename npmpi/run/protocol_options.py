"""--protocol and its protocols' options (declared from the registry, one check), for the run's parser.

The protocol list, its notes and each protocol's own options come from the registry
(npmpi/protocols/); a protocol a mode or kernel cannot do is refused here, before MPI starts, in one
line (exit 2), and so is an option of another protocol than the run's.
"""

from __future__ import annotations

import argparse

from npmpi.core.errors import UsageError
from npmpi.protocols import DEFAULT_PROTOCOL, PROTOCOL_TABLE, protocol_problem


def _text(text: str) -> str:
    return text


def add_protocol_options(p: argparse.ArgumentParser) -> None:
    """--protocol (the list generated from the registry) and each protocol's own options."""
    g = p.add_argument_group("protocol (the layer the timed loop goes through, NetPIPE's modules)")
    g.add_argument(
        "--protocol",
        default=DEFAULT_PROTOCOL,
        metavar="NAME",
        help="; ".join(f"'{x.name}': {x.help_note}" for x in PROTOCOL_TABLE.values())
        + " (default: %(default)s)",
    )
    for protocol in PROTOCOL_TABLE.values():
        for option in protocol.options:
            if option.metavar:  # a value, checked by its protocol
                g.add_argument(
                    option.flag, type=_text, default=None, metavar=option.metavar, help=option.help
                )
            else:  # a switch
                g.add_argument(option.flag, action="store_true", help=option.help)


def check_protocol_options(ns: argparse.Namespace) -> dict:
    """Check --protocol against the mode and kernel, and its own options; the Options fields."""
    problem = protocol_problem(
        ns.protocol, ns.mode, ns.kernel, ns.async_, ns.cache_cold, ns.lower, ns.window or 1
    )
    if problem:
        raise UsageError(problem)
    for other in PROTOCOL_TABLE.values():
        for option in other.options:
            if other.name != ns.protocol and getattr(ns, option.dest) != option.unset:
                raise UsageError(
                    f"{option.flag} only applies to --protocol {other.name} "
                    f"(this run: --protocol {ns.protocol})"
                )
    return PROTOCOL_TABLE[ns.protocol].fields(ns)
