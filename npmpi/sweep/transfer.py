"""What one iteration of a transfer loop does besides a plain ping-pong (a leaf: the kernels and
every protocol's loops import it, it imports nothing of npmpi)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TransferSettings:
    """What one iteration of the transfer kernel does besides a plain ping-pong: the mode, a
    stream's window, pre-posted receives, and the pool regions messages cycle through (`stride`
    bytes apart)."""

    mode: str
    window: int = 1
    async_: bool = False
    regions: int = 1
    stride: int = 0


PLAIN = TransferSettings("pingpong")  # a plain ping-pong, one region
