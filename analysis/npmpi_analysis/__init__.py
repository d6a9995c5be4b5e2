"""Offline analysis of npmpi run files (no MPI needed): `npmpi-analyze`, see docs/analysis.md.

compute (the formulas, pure numpy), power (time alignment, windows, the multi-node sum),
analyse (one run's figures and summary), report (table, CSV, JSON, np.out, HTML), plots,
outfiles (safe writing), synthetic (small run files for tests and benchmarks), cli.
"""
