"""What one iteration of a transfer loop does besides a plain ping-pong (imported by the kernels and
every protocol's loops; it imports only npmpi/core/modes.py)."""

from __future__ import annotations

from dataclasses import dataclass

from npmpi.core.modes import MODE_PINGPONG, Mode, mode_named


@dataclass(frozen=True)
class TransferSettings:
    """What one iteration of the transfer kernel does besides a plain ping-pong: the mode (its
    value), the messages one way per iteration (a stream's or bidir's window; 1 in pingpong, as the
    options normalised it: the loops take it as it is), pre-posted receives, and the pool regions
    messages cycle through (`stride` bytes apart)."""

    mode: Mode
    window: int = 1
    async_: bool = False
    regions: int = 1
    stride: int = 0

    def __post_init__(self) -> None:
        if self.window != self.mode.messages_per_iteration(self.window):
            raise ValueError(
                f"a {self.mode.name} iteration has one message each way, not a window of {self.window}"
            )
        if self.async_ and self.window > 1 and not self.mode.windowed:
            raise ValueError(f"a {self.mode.name} window posts its receives first: no --async variant")


PLAIN = TransferSettings(mode_named(MODE_PINGPONG))  # a plain ping-pong, one region
