"""The stall watchdog in a windowed mode: the probe's first look and its bound follow the window.

An iteration of `--mode bidir --window W` is W messages each way. The probe's first look used to be
PROBE_CHUNKS + 1 iterations bounded by the bare --stall-timeout, so a live run with a large window
(65536 messages of 1 B, or 64 of 1 GiB) was ended as a stall "during the probe". Now the first look
of a windowed mode is one iteration (`probe_chunks`, shared by rank 0 and the reflector), and a step
with no measured rate is bounded by its messages at a floor price (`floor_step_s`).
"""

from __future__ import annotations

import pytest
from support.reliability import run_without_tripping

from npmpi.persize.messageloop import PROBE_CHUNKS, probe_chunks
from npmpi.persize.watchdog import (
    BYTE_FLOOR_S,
    PROBE,
    STALL_FACTOR,
    Progress,
    floor_step_s,
)


def test_the_probe_chunks_are_the_same_plan_with_a_first_look_of_one_iteration():
    assert probe_chunks(200) == (200 // PROBE_CHUNKS, PROBE_CHUNKS + 1)
    assert probe_chunks(PROBE_CHUNKS) == (1, PROBE_CHUNKS + 1)
    assert probe_chunks(1) == (1, 1)  # a windowed mode's first look: one timed iteration


def test_a_probe_of_a_window_of_large_messages_is_bounded_by_its_messages():
    """64 messages of 1 GiB each way, one iteration, no rate yet: far more than a 2 s floor."""
    size, window = 1 << 30, 64
    progress = Progress(7, 2 * window)
    progress.at(size, PROBE, 1, 1)
    bound = progress.bound_s(2.0)
    assert bound == pytest.approx(STALL_FACTOR * floor_step_s(1, 2 * window, size))
    assert bound > STALL_FACTOR * 2 * window * size * BYTE_FLOOR_S * 0.99 > 100


def test_a_small_probe_keeps_the_floor():
    progress = Progress(7)
    progress.at(1, PROBE, 1, 6)
    assert progress.bound_s(2.0) == 2.0


@pytest.mark.mpi
@pytest.mark.timeout(150)
def test_a_bidir_run_with_a_window_of_65536_is_not_a_stall(tmp_path):
    """65536 messages of 1 B each way per iteration take seconds here (the receives' matching): the
    old first look (6 such iterations under the bare 5 s floor) was ended as a stall at 1 B."""
    name = "bidir-window.h5"
    args = ["--mode", "bidir", "--window", "65536", "-l", "1", "-u", "1", "-p", "0", "--trials", "2"]
    with run_without_tripping([*args, "--stall-timeout", "5"], tmp_path, name, 120, 5.0) as f:
        assert f["pingpong/size_bytes"][:].tolist() == [1]
