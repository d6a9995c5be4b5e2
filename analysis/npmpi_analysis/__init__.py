"""Offline analysis of npmpi run files (no MPI needed): `npmpi-analyze`, see docs/analysis.md.

compute (the formulas, pure numpy), power (time alignment, windows, the multi-node sum),
analyse (one run's figures and summary), report (table, CSV, JSON, np.out, HTML), plots,
outfiles (safe writing), synthetic (small run files for tests and benchmarks), cli.

The public API: `open_run(path)` and API_VERSION (npmpi_analysis.api; docs/analysis.md, "Python API").
"""

__all__ = ["API_VERSION", "RunData", "Table", "open_run"]


def __getattr__(name: str):
    """The API's names, imported when first used: `npmpi-analyze --help` stays without numpy."""
    if name in __all__:
        from npmpi_analysis import api

        return getattr(api, name)
    raise AttributeError(f"module 'npmpi_analysis' has no attribute {name!r}")
