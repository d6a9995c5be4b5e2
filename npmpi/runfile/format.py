"""The run file's format shared by its writer and reader: version, datasets, statuses, limits, a size's row.

Schema documented in docs/file-format.md; npmpi/runfile/writer.py writes it, npmpi/runfile/reader.py
reads it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

FORMAT_NAME = "npmpi-run"
# what each minor version added, and which readers read which files: docs/file-format.md (`format_version`)
FORMAT_VERSION = (1, 11)
# a map file (`python -m npmpi map`) whose pairs are rows (npmpi/runfile/maprows.py): a reader of
# 1.x reads its dense matrices, which it does not have, so the major version moved
MAP_FORMAT_VERSION = (2, 0)
KIND_RUN, KIND_MAP = "run", "map"
# /layout datasets holding one row per rank and one column per baseline (before, after)
LAYOUT_BASELINE_CPU = "baseline_cpu_s"
BASELINE_COLUMNS = ("before", "after")

# root attributes holding JSON: parsed by readers, never shown as text
JSON_ATTRS = ("options_json", "protocol_settings", "coll_series_json", "conditions")

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

# /pingpong's optional CPU datasets, [size, measuring rank] (docs/file-format.md, "1.7: CPU time per
# size"): each rank's process CPU time, user and system, the wall time over the size's trials, and
# the time its main thread waited for a CPU (runnable, not running: a shared or oversubscribed host);
# the ranks' ids are the attribute CPU_RANKS_ATTR of each
CPU_DATASETS = ("cpu_user_s", "cpu_system_s", "cpu_wall_s", "cpu_runqueue_wait_s")
CPU_RANKS_ATTR = "ranks"

# /pingpong's optional conditions datasets, [size, measuring rank] (docs/file-format.md, "Conditions
# of the measurement"; npmpi/conditions/span.py): the rank's effective core frequency over the size's
# trials and its lowest and highest over single trials, its core's and package's thermal throttle
# events during the size, its node's NIC bytes sent and received; NaN where unknown. The ranks' ids
# are the attribute CPU_RANKS_ATTR of each; the root attribute COND_ATTR (JSON) says per rank what
# the figures come from and the node's frequency settings before and after.
COND_DATASETS = (
    "cpu_freq_hz",
    "cpu_freq_min_hz",
    "cpu_freq_max_hz",
    "core_throttle_count",
    "package_throttle_count",
    "nic_tx_bytes",
    "nic_rx_bytes",
)
COND_ATTR = "conditions"

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
EXTRA_SAMPLE_FIELDS = (
    "time_spaced_unix_s",
    "open_epoch",  # OPEN_EPOCH: named by every channel of a run (format 1.6)
    "request_start_unix_s",  # a network meter: its request's start and end (time_unix_s: their middle)
    "request_end_unix_s",
    "reading_time_unix_s",  # the time the device itself gave its reading (NaN: none): redfish, cray
)
# per-sample dataset of every channel of a run (format 1.6): which opening of the meter took the
# reading (0 the first, +1 at each reopening after a fault); a counter restarts at each, so no span
# joins two
OPEN_EPOCH = "open_epoch"
# the per-sample datasets a reader may ask for beyond SAMPLE_FIELDS (absent from older files)
OPTIONAL_SAMPLE_FIELDS = (OPEN_EPOCH, "request_start_unix_s", "request_end_unix_s", "reading_time_unix_s")

# Every numeric dataset is written with HDF5's Fletcher-32 checksum filter (format 1.6): a flipped bit
# in its data makes the read fail, and the reader names the dataset. Text datasets (variable-length
# strings) cannot take a filter. `checksum(data)` gives the keywords of create_dataset (none for an
# empty array given as data: such a dataset cannot be chunked).
CHECKSUM = {"fletcher32": True}


# Text datasets written once (/layout's text, /map/hosts) carry the CRC-32 of their text instead, in
# this attribute (format 1.6): the reader compares it with what it read.
TEXT_CHECKSUM = "text_crc32"


def text_crc32(values) -> int:
    """CRC-32 of text values (str or UTF-8 bytes), each followed by a NUL byte."""
    import zlib

    crc = 0
    for v in values:
        raw = v if isinstance(v, bytes) else str(v).encode("utf-8", "surrogateescape")
        crc = zlib.crc32(raw + b"\0", crc)
    return crc


def checksum(data=None) -> dict:
    """create_dataset's keywords for the checksum, for a dataset created with `data` (or a shape)."""
    return CHECKSUM if data is None or np.size(data) > 0 else {}


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
    member_trial_s: list[list[float]] | None = None  # [members][trials]: a group kind's (format 1.8)
    buffer_huge_page_bytes: int = -1  # the transmitter's buffers on transparent huge pages; -1 unknown
    # CPU time of each measuring rank over the size's trials (CPU_DATASETS); None: not measured
    cpu_ranks: list[int] | None = None
    cpu_user_s: list[float] | None = None
    cpu_system_s: list[float] | None = None
    cpu_wall_s: list[float] | None = None
    cpu_runqueue_wait_s: list[float] | None = None
    # a kind's own per-row integers (/pingpong/NAME, int64, -1 in rows before the first that has it),
    # such as a coll file's series index
    row_columns: dict[str, int] | None = None
    # a row's own per-row floats (/pingpong/NAME, float64, NaN in rows before the first that has it),
    # such as --precision's achieved relative half-width (format 1.11)
    row_floats: dict[str, float] | None = None
    # the conditions of each measuring rank over the size's trials (COND_DATASETS, in cpu_ranks' order)
    # and what each says in text (core, frequency source or why unknown, NIC counters, settings)
    conditions: dict[str, list[float]] | None = None
    condition_info: list[dict] | None = None
