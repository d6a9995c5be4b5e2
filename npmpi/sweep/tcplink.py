"""--protocol tcp's link: a TCP connection between the pair's ranks (being written)."""

from __future__ import annotations

from npmpi.core.errors import LinkError


def open_tcp_link(comm, opts, peer: int, transmitter: bool):
    """Not available yet: says so in one line."""
    raise LinkError("--protocol tcp is not available in this build yet")
