"""A pair's link: what a protocol's timed loops talk through, opened before the sweep, closed after.

Every measuring rank opens its link once, before the sweep (`open_link`, while every rank still
agrees on the start: a link that cannot be opened is a usage error on every rank, exit 2), and the
message loop passes `link.endpoint` to the protocol's loops as their first two arguments:

- mpi: (comm, peer rank), the MPI send/receive loops' arguments as they always were;
- tcp: (socket, file descriptor) of the pair's connection (npmpi/protocols/tcp/link.py);
- rma: (the link, the peer's rank in the pair's communicator) (npmpi/protocols/rma/link.py);
- memcpy: (the link, -1): no peer (npmpi/protocols/memcpy/loops.py).

`before_trial` runs untimed at the start of every trial on both ranks of a pair (a protocol that
renews its connection per trial does it there), `settings` is what was asked and granted (stored
as the run file's `protocol_settings`), `close` ends it (the contract: `Link`,
npmpi/core/protocol.py; each protocol's link is in its room, npmpi/protocols/). MPI itself stays the
control channel:
commands, syncs and results travel on the communicator whatever the protocol.
"""

from __future__ import annotations

import json

from npmpi.core.config import Options
from npmpi.core.protocol import Link
from npmpi.protocols import protocol_named


def open_link(comm, opts: Options, peer: int, transmitter: bool) -> Link:
    """This rank's link to `peer` for the run's protocol (both ranks of the pair call it together;
    `transmitter`: this rank times, the other reflects). LinkError says why it could not be had."""
    return protocol_named(opts.protocol).open_link(comm, opts, peer, transmitter)


def protocol_attrs(opts: Options, gathered: list[dict | None] | None, pairs) -> dict[str, str]:
    """The run file's root attributes `protocol` and `protocol_settings` (docs/file-format.md)."""
    gathered = gathered or [None] * (1 + max((r for pair in pairs for r in pair), default=0))
    return {"protocol": opts.protocol, "protocol_settings": protocol_settings_json(opts, gathered, pairs)}


def protocol_settings_json(opts: Options, gathered: list[dict | None], pairs) -> str:
    """The run file's protocol_settings: the protocol, what was asked, and per pair what each rank
    was granted (`gathered`: every rank's `Link.settings()`, None on ranks without a link)."""
    fields = protocol_named(opts.protocol).option_fields
    asked = {k: v for k, v in opts.to_dict().items() if k in fields}
    per_pair = [
        {"ranks": [a, b], "transmitter": gathered[a] or {}, "reflector": gathered[b] or {}} for a, b in pairs
    ]
    return json.dumps({"protocol": opts.protocol, "requested": asked, "pairs": per_pair}, sort_keys=True)


def open_pair_link(comm, opts: Options, pairs) -> tuple[Link | None, str | None]:
    """This rank's link if it is in one of `pairs` (a, b) (a transmits), else None; and the one-line
    problem when it could not be opened (for the start-up's collective check). Both ranks of every
    pair must call it, whatever else they found wrong, so neither waits for the other forever."""
    from npmpi.core.errors import NpmpiError

    me = comm.Get_rank()
    for a, b in pairs:
        if me in (a, b):
            try:
                return open_link(comm, opts, b if me == a else a, me == a), None
            except NpmpiError as exc:
                return None, str(exc)
    return None, None
