"""The run file: one HDF5 file per run, written by rank 0, read without MPI (the public names).

Schema version 1 is documented in docs/file-format.md. The writer appends one row per
message size and flushes, so a run stopped at any moment leaves a valid file holding every
completed size; `sizes_completed` (a root attribute written after each row) says how many rows
are whole. The reader refuses other formats and newer major versions with a clear message.
The format is npmpi/runformat.py, the writer npmpi/runwriter.py, the reader npmpi/runreader.py;
this module gives their public names, as before they were split.
"""

from __future__ import annotations

from npmpi.runformat import (
    BASELINE_COLUMNS,
    COUNTER_KINDS,
    ENERGY_OF_COUNTERS,
    EXTRA_SAMPLE_FIELDS,
    FORMAT_NAME,
    FORMAT_VERSION,
    LAYOUT_BASELINE_CPU,
    MAX_COMPRESSION_RATIO,
    MAX_ROWS,
    MAX_SAMPLES,
    MAX_TRIAL_S,
    MAX_TRIALS,
    PINGPONG_DATASETS,
    SAMPLE_FIELDS,
    STATUS_COMPLETE,
    STATUS_FAILED,
    STATUS_INTERRUPTED,
    STATUS_RUNNING,
    STATUSES,
    SizeResult,
)
from npmpi.runreader import PingPong, PowerChannel, PowerNode, Run, describe_run, finite_or_none, load_run
from npmpi.runwriter import RunWriter

__all__ = [
    "BASELINE_COLUMNS",
    "COUNTER_KINDS",
    "ENERGY_OF_COUNTERS",
    "EXTRA_SAMPLE_FIELDS",
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "LAYOUT_BASELINE_CPU",
    "MAX_COMPRESSION_RATIO",
    "MAX_ROWS",
    "MAX_SAMPLES",
    "MAX_TRIALS",
    "MAX_TRIAL_S",
    "PINGPONG_DATASETS",
    "SAMPLE_FIELDS",
    "STATUSES",
    "STATUS_COMPLETE",
    "STATUS_FAILED",
    "STATUS_INTERRUPTED",
    "STATUS_RUNNING",
    "PingPong",
    "PowerChannel",
    "PowerNode",
    "Run",
    "RunWriter",
    "SizeResult",
    "describe_run",
    "finite_or_none",
    "load_run",
]
