"""Which analysis a file gets, by its kind: the registry of the analysis's paths.

A file's kind is its root attribute `kind` (format 1.8: "run", "map", or a registered kind's name);
a file from before 1.8 is a map when it holds a /map group, else a run. A kind with its own analysis
is listed in OWN_ANALYSIS; every other kind's /pingpong rows are analysed as a run's are (bandwidth,
latency, power and energy per bit from the rows and the root attributes bytes_per_iteration_factor
and one_way_divisor: docs/file-format.md), so a new kind needs no edit here.
"""

from __future__ import annotations

from pathlib import Path

RUN = "run"
OWN_ANALYSIS = {"map": "npmpi_analysis.map_cli"}  # kind -> the module with check_usage() and run()


def file_kind(path: Path) -> str:
    """The kind of the file at `path`; "run" for anything unreadable (the run reader then says what
    is wrong with it)."""
    import h5py

    from npmpi.runfile.format import KIND_MAP

    try:
        if not Path(path).is_file() or not h5py.is_hdf5(path):
            return RUN
        with h5py.File(path, "r", locking=False) as f:
            kind = f.attrs.get("kind")
            if isinstance(kind, bytes):
                kind = kind.decode("utf-8", "replace")
            if isinstance(kind, str) and kind.strip():
                return kind.strip()
            return KIND_MAP if isinstance(f.get(KIND_MAP, getlink=True), h5py.HardLink) else RUN
    except (OSError, ValueError, RuntimeError, TypeError, KeyError):
        return RUN


def own_analysis(kinds: list[str]):
    """(kind, its module) for the first kind among `kinds` that has an analysis of its own, else
    (None, None): the rows' analysis."""
    import importlib

    for kind in kinds:
        if kind in OWN_ANALYSIS:
            return kind, importlib.import_module(OWN_ANALYSIS[kind])
    return None, None
