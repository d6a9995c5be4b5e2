"""A collective's buffers cost the message and no more (issue 45, class 6): the send pattern of a
size is written into its own buffer, with no temporary of another type (an int64 index of a 1 GiB
char message took 8 GiB, and a member's MemoryError ended the job as an interrupt)."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from npmpi.coll.ops import pattern

DTYPES = ["int8", "uint8", "int32", "float32", "float64", "int64", "complex128"]


@pytest.mark.parametrize("dtype", DTYPES)
def test_the_pattern_is_i_plus_7_rank_mod_5_plus_1(dtype):
    for rank in (0, 1, 6):
        for n in (0, 1, 4, 5, 6, 13):
            want = ((np.arange(n) + 7 * rank) % 5 + 1).astype(dtype)
            got = pattern(rank, n, np.dtype(dtype))
            assert got.dtype == np.dtype(dtype) and np.array_equal(got, want), (rank, n)


def test_the_pattern_of_a_char_message_allocates_the_message_alone():
    """10 MB of char: at most the 10 MB result and a few bytes (before: an 80 MB int64 index)."""
    n = 10_000_003
    tracemalloc.start()
    try:
        out = pattern(3, n, np.dtype("int8"))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert out.nbytes == n
    assert peak < 1.1 * n, peak
