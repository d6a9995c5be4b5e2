"""The run file's format shared by its writer and reader: version, datasets, statuses, limits, a size's row.

Schema documented in docs/file-format.md; npmpi/runwriter.py writes it, npmpi/runreader.py reads it,
npmpi/runfile.py offers both under one name.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

FORMAT_NAME = "npmpi-run"
# 1.1 added the /power group; 1.2 the mode attributes and pair_trial_s; 1.3 the buffer and thread
# level attributes, /layout/thread_level and /pingpong/buffer_huge_page_bytes; 1.4 the baseline after
# the sweep (/power baseline_after_* attributes), /layout/baseline_cpu_s, the nodes' baseline CPU
# utilisation, the channels' reading attributes (averaging, resolutions, energy_from_counter), the
# faults' last_time_unix_s, count and kind, and a Watts Up?'s time_spaced_unix_s; 1.5 the /map group
# (npmpi map), /power/fabric (--fabric-meter) and the redfish and snmp channels' attributes; 1.6 the map's
# directions attribute and /map/pair_window_s (optional: 1.5 maps still read)
FORMAT_VERSION = (1, 6)
# /layout datasets holding one row per rank and one column per baseline (before, after)
LAYOUT_BASELINE_CPU = "baseline_cpu_s"
BASELINE_COLUMNS = ("before", "after")

STATUS_RUNNING = "running"
STATUS_COMPLETE = "complete"
STATUS_INTERRUPTED = "interrupted"
STATUS_FAILED = "failed"
STATUSES = (STATUS_RUNNING, STATUS_COMPLETE, STATUS_INTERRUPTED, STATUS_FAILED)

# (name, dtype, per-trial?) of the pingpong group's row-appended datasets
PINGPONG_DATASETS = (
    ("size_bytes", np.int64, False),
    ("iterations", np.int64, False),
    ("warmup_iterations", np.int64, False),
    ("trial_s", np.float64, True),
    ("trial_start_unix_s", np.float64, True),
    ("trial_end_unix_s", np.float64, True),
    ("data_verified", np.bool_, False),
)

# /power/fabric: the channels of devices that belong to no node (switches, a shared PDU), sampled by
# one power rank (--fabric-meter); the nodes' groups are /power/node{i}
FABRIC_GROUP = "fabric"


def power_group(node: int | str) -> str:
    """The run-file path of a power group: `power/node{i}`, or `power/fabric` for FABRIC_GROUP."""
    return f"power/{FABRIC_GROUP}" if node == FABRIC_GROUP else f"power/node{node}"


# per-sample datasets of a power channel (NaN where the meter does not give the quantity)
SAMPLE_FIELDS = ("time_unix_s", "power_w", "energy_j", "volts", "amps")
# in load_run's sample_fields: read energy_j only of channels whose counter gives a window's energy
# (attribute energy_from_counter; before format 1.4, the rapl and nvml kinds)
ENERGY_OF_COUNTERS = "energy_j_of_counters"
COUNTER_KINDS = ("rapl", "nvml")
# per-sample datasets only channels that name them in their `extra_sample_fields` attribute have
EXTRA_SAMPLE_FIELDS = ("time_spaced_unix_s",)

# A file claiming more rows or trials than this is refused before anything is allocated.
MAX_ROWS = 10_000_000
MAX_TRIALS = 100_000
MAX_SAMPLES = 2_000_000_000
MAX_TRIAL_S = 1e9  # 30 years: a longer trial time is damage, and would overflow the figures
# Uncompressed data must be stored in the file; compressed data (after h5repack) at most this much larger.
MAX_COMPRESSION_RATIO = 1000


@dataclass
class SizeResult:
    """The measurements of one message size, as the transmitter recorded them."""

    size_bytes: int
    iterations: int
    warmup_iterations: int
    trial_s: list[float]
    trial_start_unix_s: list[float]
    trial_end_unix_s: list[float]
    data_verified: bool = True
    pair_trial_s: list[list[float]] | None = None  # [pairs][trials] with --pairs > 1
    buffer_huge_page_bytes: int = -1  # the transmitter's buffers on transparent huge pages; -1 unknown
