"""The size schedule (npmpi/core/schedule.py) is NetPIPE 3.7's: its default sizes exactly, its
perturbations, bounds and repeats rule, and bad bounds refused."""

from __future__ import annotations

import pytest
from support.schedules import netpipe_reference_sizes, powers_of_two_schedule

from npmpi.core.schedule import netpipe_repeats, netpipe_schedule


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


def test_group_end_marks_the_last_size_of_each_perturbation_group():
    pts = netpipe_schedule(1, 64, 3)
    ends = [p.size_bytes for p in pts if p.group_end]
    # every base point alone until the increment exceeds p+1 = 4, then n+p closes its group
    assert ends == [1, 2, 3, 4, 6, 8, 12, 19, 27, 35, 51, 67]
    assert all(p.group_end for p in netpipe_schedule(1, 64, 0))


def test_netpipe_repeats_hand_computed():
    # NetPIPE 3.7 (netpipe.c): nrepeat = MAX(RUNTM / (b / (b - inc + 1.0) * tlast), TRIALS) with b
    # the size measured last, inc the coming size's increment, tlast its best one-way time
    # first size 1 B (b = 1, inc = 1: factor 1), Debian's RUNTM 0.1 s, 0.3 us one way: 333333.3
    assert netpipe_repeats(0.1, 1, 1, 0.3e-6, 3, 10**9) == 333333
    # 2 B after 1 B: NPopenmpi printed 733842 times after 0.136 us (docs/netpipe-comparison.md)
    assert netpipe_repeats(0.1, 1, 1, 0.1 / 733842.5, 3, 10**9) == 733842
    # 13 B after 12 B with increment 8: factor 12 / 5 = 2.4; 0.1 / (2.4 * 0.5e-6) = 83333.3
    assert netpipe_repeats(0.1, 12, 8, 0.5e-6, 3, 10**9) == 83333
    # 8388605 B after 6291459 B, increment 2097152: factor 6291459 / 4194308 = 1.49999928...;
    # release RUNTM 0.25 s, 1.5 ms one way: 0.25 / (1.49999928 * 1.5e-3) = 111.11116
    assert netpipe_repeats(0.25, 6291459, 2097152, 1.5e-3, 7, 10**9) == 111
    # the floor is TRIALS (the number of trials), not 1
    assert netpipe_repeats(0.1, 1 << 20, 1 << 19, 0.2, 7, 10**9) == 7
    assert netpipe_repeats(0.1, 1 << 20, 1 << 19, 0.2, 3, 10**9) == 3
    # capped; a zero time counts as 1 us as in NetPIPE (factor 8 / 5: 0.05 / 1.6e-6 = 31250)
    assert netpipe_repeats(10.0, 1, 1, 1e-9, 3, 1000) == 1000
    assert netpipe_repeats(0.05, 8, 4, 0.0, 3, 10**9) == 31250
    assert netpipe_repeats(0.05, 8, 4, float("nan"), 3, 10**9) == 31250
    # a denominator that is not positive counts as 1 (never reached by NetPIPE's schedule, below)
    assert netpipe_repeats(0.1, 4, 8, 1e-3, 3, 10**9) == int(0.1 / (4 * 1e-3))


@pytest.mark.parametrize("lower,p", [(1, 3), (1, 0), (7, 3), (1000, 3), (16384, 100), (5, 1)])
def test_netpipe_factor_denominator_stays_positive_over_the_schedule(lower, p):
    pts = netpipe_schedule(lower, 64 << 20, p)
    prev = lower
    for pt in pts:
        assert prev - pt.increment_bytes + 1 >= 1, (prev, pt)
        prev = pt.size_bytes
