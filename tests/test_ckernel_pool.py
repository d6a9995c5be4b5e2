"""The C kernel's cache-cold pool plan (csrc/cutil.c, np_pool_plan), through its memcpy loops in
process: the first message's region is the Python loops' (first * window) % regions, also where
first * window passes 2^64 (cmemcpy.c and crma.c multiplied before reducing and wrapped there), and a
pool whose extent passes Py_ssize_t is refused instead of copied out of bounds."""

from __future__ import annotations

import numpy as np
import pytest

from npmpi.core.modes import mode_named
from npmpi.core.transfer import TransferSettings
from npmpi.protocols.memcpy.loops import memcpy_transfer

_ckernel = pytest.importorskip("npmpi._ckernel")

REGIONS = 5


def _copied(kernel: str, first: int, window: int, iterations: int = 1) -> list[int]:
    """The destination pool after a stream of 1-byte messages, region k of the source holding k + 1."""
    src = np.arange(1, REGIONS + 1, dtype=np.uint8)
    dst = np.zeros(REGIONS, dtype=np.uint8)
    if kernel == "c":
        _ckernel.memcpy_transfer(src, dst, 1, iterations, "stream", window, REGIONS, 1, first)
    else:
        settings = TransferSettings(mode_named("stream"), window=window, regions=REGIONS, stride=1)
        memcpy_transfer(None, None, src, dst, 1, iterations, True, settings, first)
    return dst.tolist()


@pytest.mark.parametrize(
    "first, window",
    [
        (0, 4),
        (3, 4),
        (7, 2),
        (2**40 + 3, 3),
        # 2^62 * 4 = 2^64: wrapped to 0 in 64 bits (region 0), though 2^64 % 5 is 1
        (2**62, 4),
        (2**63 - 1, 4),
    ],
)
def test_the_first_region_is_the_python_loops_even_past_2_to_the_64(first, window):
    expected = [0] * REGIONS
    for j in range(window):
        k = (first * window + j) % REGIONS
        expected[k] = k + 1
    assert _copied("python", first, window) == expected
    assert _copied("c", first, window) == expected


def test_the_wrapped_product_would_have_started_elsewhere():
    """The case the old formula got wrong: (2^62 * 4) mod 2^64 mod 5 is 0, the true region 1."""
    first, window = 2**62, 4
    assert (first * window) % 2**64 % REGIONS == 0
    assert (first * window) % REGIONS == 1
    assert _copied("c", first, window) == [0, 2, 3, 4, 5]  # regions 1-4 copied, region 0 not


def test_a_pool_past_py_ssize_t_is_refused():
    src, dst = bytearray(8), bytearray(8)
    regions = 2**62 + 1  # (regions - 1) * 4 is 2^64: 0 once wrapped, so the pool looked 1 byte long
    with pytest.raises(ValueError, match="no pool of"):
        _ckernel.memcpy_transfer(src, dst, 1, 1, "pingpong", 1, regions, 4, 0)


@pytest.mark.parametrize(
    "regions, stride, first",
    [(0, 1, 0), (2, 0, 0), (1, -1, 0), (1, 1, -1)],
    ids=["no region", "overlap", "stride", "first"],
)
def test_a_bad_pool_is_refused(regions, stride, first):
    with pytest.raises(ValueError, match="no pool of"):
        _ckernel.memcpy_transfer(bytearray(8), bytearray(8), 1, 1, "pingpong", 1, regions, stride, first)


def test_buffers_shorter_than_the_pool_and_a_mode_memcpy_has_not_are_refused():
    with pytest.raises(ValueError, match="memcpy_transfer: buffers of 8 and 8 bytes, 9 and 9 needed"):
        _ckernel.memcpy_transfer(bytearray(8), bytearray(8), 1, 1, "pingpong", 1, 3, 4, 0)
    with pytest.raises(ValueError, match="memcpy has no mode 'bidir'"):
        _ckernel.memcpy_transfer(bytearray(8), bytearray(8), 1, 1, "bidir", 1, 1, 1, 0)
    with pytest.raises(ValueError, match="unknown mode 'ring'"):
        _ckernel.memcpy_transfer(bytearray(8), bytearray(8), 1, 1, "ring", 1, 1, 1, 0)
