from __future__ import annotations

import pytest
from tests_support import netpipe_reference_sizes

from npmpi.schedule import netpipe_schedule, next_iterations, powers_of_two_schedule


def sizes(lower, upper, p):
    return [pt.size_bytes for pt in netpipe_schedule(lower, upper, p)]


def test_default_schedule_is_netpipes_exactly():
    # column 1 of np.out written by Debian's NPopenmpi 3.7.2 with default options
    assert sizes(1, 8 << 20, 3) == netpipe_reference_sizes()
    assert len(sizes(1, 8 << 20, 3)) == 124


def test_schedule_start_as_documented():
    expected = [1, 2, 3, 4, 6, 8, 12, 13, 16, 19, 21, 24, 27, 29, 32, 35, 45, 48, 51, 61, 64, 67]
    assert sizes(1, 8 << 20, 3)[: len(expected)] == expected


def test_perturbed_sizes_may_pass_upper_by_p_only():
    s = sizes(1, 1024, 3)
    assert s[-3:] == [1021, 1024, 1027]
    assert max(s) == 1024 + 3


def test_perturbation_zero_keeps_base_points():
    s = sizes(1, 64, 0)
    assert s == [1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64]


def test_larger_perturbation_applies_only_where_increment_exceeds_p_plus_1():
    # increment 8 is not above p+1 = 8, so 16 and 24 stand alone; from increment 16 on, ±7
    assert sizes(1, 64, 7) == [1, 2, 3, 4, 6, 8, 12, 16, 24, 25, 32, 39, 41, 48, 55, 57, 64, 71]


def test_lower_bound_sets_first_increment_like_netpipe():
    # NetPIPE starts the increment at lower/2 and perturbs from the first point on, so sizes may
    # lie p below lower as well as p above upper; Debian's NPopenmpi -l 16384 -u 200000 -p 3 wrote
    # exactly these sizes (column 1 of its np.out)
    reference = [
        16381,
        16384,
        16387,
        24573,
        24576,
        24579,
        32765,
        32768,
        32771,
        49149,
        49152,
        49155,
        65533,
        65536,
        65539,
        98301,
        98304,
        98307,
        131069,
        131072,
        131075,
        196605,
        196608,
        196611,
    ]
    assert sizes(16384, 200000, 3) == reference
    # hand-derived the same way: increment 512 for 1024 and 1536, then 1024 from 2048 (it doubles
    # every other point, first after the second when NetPIPE starts above 1 B), then 2048 from 4096
    bases = [1024, 1536, 2048, 3072, 4096, 6144, 8192]
    assert sizes(1024, 8192, 3) == [b + d for b in bases for d in (-3, 0, 3)]


def test_single_size():
    assert sizes(4096, 4096, 0) == [4096]
    assert sizes(4096, 4096, 3) == [4093, 4096, 4099]


@pytest.mark.parametrize("lower,upper,p", [(0, 10, 3), (10, 5, 3), (1, 10, -1)])
def test_bad_bounds(lower, upper, p):
    with pytest.raises(ValueError):
        netpipe_schedule(lower, upper, p)


def test_powers_of_two():
    assert [p.size_bytes for p in powers_of_two_schedule(1, 16)] == [1, 2, 4, 8, 16]


def test_iteration_rule_hand_computed():
    # i = r*o/(t*n): 0.25 s target, previous 1000 B took 1e-4 s per round trip, next 2000 B
    assert next_iterations(0.25, 1000, 1e-4, 2000, 3, 10**9) == 1250
    # same size: i = r/t
    assert next_iterations(0.05, 8, 1e-6, 8, 3, 10**9) == 50000
    # never below the minimum, never above the maximum
    assert next_iterations(0.01, 1, 1.0, 1 << 20, 3, 10**9) == 3
    assert next_iterations(10.0, 1 << 20, 1e-9, 1, 3, 1000) == 1000
    # a broken previous time falls back to the cap rather than dividing by zero
    assert next_iterations(0.05, 8, 0.0, 8, 3, 777) == 777
