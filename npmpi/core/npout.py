"""NetPIPE 3.7's np.out, written by the run as it goes (`--np-out`) and by `npmpi-analyze --np-out`.

One line per size, `fprintf("%8d %lf %12.8lf\\n", bytes, Mbps, seconds)` as NPopenmpi writes it:
Mbps is NetPIPE's 2^20 bit/s (the only place besides the console lines where npmpi uses it),
seconds the time of one message in the best trial (one way for a ping-pong, one exchange for
bidir, whose bytes column is twice the message size as NetPIPE -2 prints it).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from npmpi.core.errors import UsageError

NETPIPE_MBPS_BIT_S = 1024.0 * 1024.0  # NetPIPE 3.7's Mbps: 2^20 bit/s


def np_out_line(size_bytes: int, bit_s: float, seconds: float, bidir: bool = False) -> str:
    """One line of np.out: bytes (doubled for bidir), Mbps (2^20 bit/s), seconds."""
    mbps = float(bit_s) / NETPIPE_MBPS_BIT_S
    return f"{int(size_bytes) * (2 if bidir else 1):8d} {mbps:f} {float(seconds):12.8f}\n"


def check_np_out(path: str, force: bool, run_file: str) -> None:
    """UsageError (one line) when --np-out cannot be written: it exists (without --force), names the
    run file, or its directory is missing or not writable. Nothing is created here."""
    target = Path(path)
    if os.path.realpath(target) == os.path.realpath(run_file):
        raise UsageError(f"--np-out {path} is the run file too: give np.out its own name")
    if target.exists() and not force:
        raise UsageError(f"--np-out {path} exists: choose another name or add --force to replace it")
    directory = target.parent if str(target.parent) else Path(".")
    if not directory.is_dir():
        raise UsageError(f"--np-out {path}: directory {directory} does not exist; create it first")
    if not os.access(directory, os.W_OK | os.X_OK):
        raise UsageError(f"--np-out {path}: directory {directory} is not writable; choose another location")


class NpOutWriter:
    """np.out written a line per size and flushed, as NetPIPE does; a write error stops it, once."""

    def __init__(self, path: str, factor: int, divisor: int, bidir: bool) -> None:
        self.path, self.factor, self.divisor, self.bidir = path, factor, divisor, bidir
        self.problem: str | None = None
        try:
            self.file = open(path, "w", encoding="ascii")  # noqa: SIM115 (open for the whole run)
        except OSError as exc:
            self.file = None
            self.problem = f"--np-out {path}: cannot be written ({exc.strerror}); the run file has every size"

    def write(self, size_bytes: int, iterations: int, trial_s: list[float]) -> str | None:
        """Add a size's line; the problem, the first time writing fails."""
        if self.file is None:
            return None
        best = min(trial_s)
        if not best > 0:
            return None
        bit_s = self.factor * size_bytes * iterations * 8 / best
        try:
            self.file.write(np_out_line(size_bytes, bit_s, best / (self.divisor * iterations), self.bidir))
            self.file.flush()
        except OSError as exc:
            self.close()
            return f"--np-out {self.path}: writing failed ({exc.strerror}); the run file has every size"
        return None

    def close(self) -> None:
        if self.file is not None:
            with contextlib.suppress(OSError):
                self.file.close()
            self.file = None
