"""npmpi: an MPI network benchmark that measures bandwidth, latency and energy in one run."""

from __future__ import annotations

__all__ = ["__version__"]

try:
    from importlib.metadata import PackageNotFoundError, version

    __version__ = version("npmpi")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.1.0+source"
