"""The conditions' readers (npmpi/conditions/) against fake sysfs and perf trees (tests/fakes/cpu_sysfs.py),
in-process: settings present, missing and unreadable; a frequency that changes within a size; throttle
counters that jump; NIC counters past 2^32, saturated or going back; a cycles counter that is absent,
refused, or counts; and what the analysis makes of them (a synthetic run file)."""

from __future__ import annotations

import errno
import math

import numpy as np
import pytest
from fakes.cpu_sysfs import ConditionsTree
from fakes.sysfs import enforce_denials

from npmpi.conditions import cpufreq, cycles, nic, paths
from npmpi.conditions.paths import Root
from npmpi.conditions.span import SOURCE_CPUFREQ, ConditionSpan, Probe
from npmpi.runfile.format import COND_DATASETS


@pytest.fixture
def tree(tmp_path):
    return ConditionsTree(tmp_path / "root")


def _absent(flags: int) -> int:
    raise OSError(errno.ENOENT, "No such file or directory")


def probe(tree: ConditionsTree, opener=_absent, reader=None) -> Probe:
    args = (opener,) if reader is None else (opener, reader)
    p = Probe(Root(tree.root), opener=args)
    p.cpu = 0  # the fake tree's core, whatever this thread's affinity
    return p


def values(v: np.ndarray) -> dict[str, float]:
    return dict(zip(COND_DATASETS, v.tolist(), strict=True))


def test_settings_of_a_full_tree(tree, monkeypatch):
    tree.cpu(0).node()
    monkeypatch.setenv("SLURM_CPU_FREQ_REQ", "2000000")
    s = cpufreq.settings(Root(tree.root), 0)
    assert s["governor"] == "performance"
    assert s["scaling_max_freq_hz"] == 3.5e9 and s["cpuinfo_min_freq_hz"] == 8e8
    assert s["boost"] is True and s["intel_pstate_no_turbo"] is False
    assert s["energy_performance_preference"] == "balance_performance"
    assert [(x["name"], x["enabled"]) for x in s["idle_states"]] == [
        ("POLL", True),
        ("C1", True),
        ("C6", False),
    ]
    assert s["rapl_power_limits_w"] == {"package-0": {"long_term": 150.0, "short_term": 180.0}}
    assert s["slurm_cpu_freq_req"] == "2000000"


def test_missing_and_unreadable_settings_are_left_out(tree, monkeypatch):
    tree.cpu(0, throttle=None).node(boost=None, no_turbo=None, rapl_w=None)
    gov = tree.root / cpufreq.CPU / "cpu0/cpufreq/scaling_governor"
    tree.deny(gov)
    enforce_denials(monkeypatch, paths, tree)
    monkeypatch.delenv("SLURM_CPU_FREQ_REQ", raising=False)
    s = cpufreq.settings(Root(tree.root), 0)
    for key in ("governor", "boost", "intel_pstate_no_turbo", "rapl_power_limits_w", "slurm_cpu_freq_req"):
        assert key not in s, key
    assert s["scaling_min_freq_hz"] == 8e8
    assert cpufreq.throttle_counts(Root(tree.root), 0) == (None, None)
    assert cpufreq.settings(Root(tree.root / "nothing"), 0) == {"cpu": 0}  # an empty tree: nothing guessed


def test_frequency_changing_mid_size_is_seen_through_cpufreq(tree):
    tree.cpu(0, cur_khz=3_000_000)
    p = probe(tree)
    assert p.cycles is None and "does not exist here" in p.no_cycles
    span = ConditionSpan(p)
    span.lap()
    tree.set_freq(0, 2_000_000)  # the governor lowered it between two trials
    span.lap()
    span.lap()  # after the third and last trial
    tree.set_freq(0, 1_000_000)  # after the trials: not theirs, stop() reads nothing more
    v, info = span.stop()
    got = values(v)
    assert got["cpu_freq_min_hz"] == 2e9 and got["cpu_freq_max_hz"] == 3e9
    assert got["cpu_freq_hz"] == pytest.approx((3e9 + 3e9 + 2e9 + 2e9) / 4)
    assert info["cpu_freq_source"] == SOURCE_CPUFREQ and info["cpu_freq_reason"] == ""
    assert info["settings_before"]["governor"] == "performance"


def test_throttle_counters_that_jump_and_that_go_back(tree):
    tree.cpu(0, throttle=(5, 7))
    span = ConditionSpan(probe(tree))
    tree.set_throttle(0, 8, 7)
    got = values(span.stop()[0])
    assert got["core_throttle_count"] == 3 and got["package_throttle_count"] == 0
    span = ConditionSpan(probe(tree))
    tree.set_throttle(0, 1, 9)  # a counter that went back (a reset): unknown, never negative
    got = values(span.stop()[0])
    assert math.isnan(got["core_throttle_count"]) and got["package_throttle_count"] == 2


def test_no_frequency_at_all_says_why(tree):
    tree.cpu(0, cur_khz=None)
    v, info = ConditionSpan(probe(tree)).stop()
    assert all(math.isnan(x) for x in v[:3])
    assert info["cpu_freq_source"] == "unknown"
    assert info["cpu_freq_reason"].startswith("unknown, because the CPU cycles counter does not exist")
    assert "scaling_cur_freq" in info["cpu_freq_reason"]


def test_a_refused_counter_is_opened_in_user_mode_and_counts(tree):
    """perf_event_paranoid 2: the counter with kernel mode is refused, the user-mode one opens; the
    frequency is cycles over running time, per trial and over the size."""
    asked = []

    def opener(flags: int) -> int:
        asked.append(flags)
        if flags == 0:
            raise OSError(errno.EACCES, "Permission denied")
        return 99

    # (cycles, running ns): 1 ms at 3 GHz, then 1 ms at 2 GHz, then 2 ms at 2 GHz; then, after the
    # last trial's lap, 1 µs of 100 cycles (0.1 GHz: the code before stop(), mostly kernel time)
    marks = iter(
        [
            (0, 0),
            (0, 0),
            (3_000_000, 1_000_000),
            (5_000_000, 2_000_000),
            (9_000_000, 4_000_000),
            (9_000_100, 4_001_000),
        ]
    )
    tree.cpu(0)
    p = probe(tree, opener, lambda fd: next(marks))
    assert asked == [0, cycles.EXCLUDE_KERNEL_HV] and p.cycles.source == "perf cycles (user mode)"
    span = ConditionSpan(p)
    span.lap()
    span.lap()
    span.lap()  # after each of the three trials; stop() adds no span of its own
    got = values(span.stop()[0])
    assert got["cpu_freq_hz"] == pytest.approx(9e9 / 4)
    assert got["cpu_freq_min_hz"] == pytest.approx(2e9) and got["cpu_freq_max_hz"] == pytest.approx(3e9)


def test_refusals_name_the_paranoid_level(tree):
    def refuse(flags: int) -> int:
        raise OSError(errno.EACCES, "Permission denied")

    why = cycles.open_cycles(Root(tree.root), refuse)
    assert isinstance(why, str) and "perf_event_paranoid 2" in why


def test_this_machine_opens_the_counter_or_says_why():
    """The real perf_event_open on this machine's own thread: a counter that counts, or a reason."""
    got = cycles.open_cycles(Root())
    if isinstance(got, str):
        assert "cycles" in got or "perf_event" in got
        return
    try:
        a = got.read()
        sum(range(200_000))
        b = got.read()
        assert b[0] > a[0] and b[1] > a[1]
    finally:
        got.close()


def test_nic_interfaces_counted_and_left_out(tree):
    tree.net("lo", 10**9, 10**9, kind=772)
    tree.net("eth0", 1000, 2000)
    tree.net("eth1", 5, 5, state="down")
    tree.net("ifb0", 7, 7)
    tree.net("br0", 9, 9, extra="bridge")
    tree.net("bond0", 9, 9, extra="bonding")
    tree.net("eth0.100", 9, 9, extra="lower_eth0")  # a VLAN: eth0 counts its frames
    tree.net("team0", 9, 9, extra="lower_eth1")  # a team master: no bonding/, its ports count them
    tree.net("macvlan0", 9, 9, extra="lower_eth0")
    root = Root(tree.root)
    assert [(c.name, c.direction) for c in nic.find_counters(root)] == [("eth0", "tx"), ("eth0", "rx")]
    tree.ib("mlx5_0", 1, 100, 200)
    tree.net("ib0", 50, 50, kind=32)  # IPoIB: the port counts its bytes already
    names = {c.name for c in nic.find_counters(root)}
    assert names == {"mlx5_0/1", "eth0"}


def test_nic_bytes_over_a_size_with_a_64_bit_ib_counter_past_2_32(tree):
    """Since Linux 4.5 `counters/port_xmit_data` is the 64-bit extended counter where the HCA has it:
    past 2^32 words it is a plain difference (before: read as a saturated 32-bit counter, unknown)."""
    tree.cpu(0)
    tree.net("eth0", 1000, 2000)
    tree.ib("mlx5_0", 1, 5 << 32, 100)
    span = ConditionSpan(probe(tree))
    tree.set_net("eth0", 1500, 2600)
    tree.ib("mlx5_0", 1, (5 << 32) + 1000, 150)
    got = values(span.stop()[0])
    assert got["nic_tx_bytes"] == 500 + 1000 * 4 and got["nic_rx_bytes"] == 600 + 50 * 4


def test_nic_counters_saturated_reset_and_unreadable(tree):
    """A 32-bit PMA counter stops at 2^32-1 (the IB specification): unknown there; any counter that
    goes back was reset (perfquery -R, an interface restarted): unknown, never folded as a wrap."""
    ib = nic.Counter("x", 4, True, "mlx5_0/1", "tx")
    net = nic.Counter("y", 1, False, "eth0", "tx")
    assert nic.delta_bytes(ib, (1 << 32) - 10, (1 << 32) - 5) == 5 * 4
    assert math.isnan(nic.delta_bytes(ib, nic.SATURATED32, nic.SATURATED32))
    assert math.isnan(nic.delta_bytes(ib, 10, nic.SATURATED32))  # stuck at its ceiling: unknown
    assert math.isnan(nic.delta_bytes(ib, 1000, 500))  # a legacy counter reset, not 2^32 words more
    assert math.isnan(nic.delta_bytes(ib, 0xFFFF0000, 0x100))
    assert math.isnan(nic.delta_bytes(net, 100, 10))  # a 64-bit counter went back: a reset
    assert math.isnan(nic.delta_bytes(net, None, 10))
    tree.cpu(0)
    tree.net("eth0", 0, 0)
    tree.ib("mlx5_0", 1, (1 << 32) - 100, 0, legacy=True)
    span = ConditionSpan(probe(tree))
    tree.ib("mlx5_0", 1, (1 << 32) + 100, 0, legacy=True)  # it reached its ceiling during the size
    assert math.isnan(values(span.stop()[0])["nic_tx_bytes"])


def test_nic_counters_of_older_ofed_are_read_where_present(tree):
    tree.ib("mlx5_0", 1, 3 << 32, 0, extended=True)
    (counter,) = [c for c in nic.find_counters(Root(tree.root)) if c.direction == "tx"]
    assert counter.path.endswith("counters_ext/port_xmit_data_64") and not counter.saturates
    tree.cpu(0)
    tree.net("eth0", 0, 0)
    span = ConditionSpan(probe(tree))
    (tree.root / "sys/class/net/eth0/statistics/tx_bytes").unlink()  # the interface went away
    assert math.isnan(values(span.stop()[0])["nic_tx_bytes"])


def test_the_root_prefix_comes_from_the_environment(tree, monkeypatch):
    monkeypatch.setenv(paths.ROOT_ENV, str(tree.root))
    assert Root().prefix == tree.root
    monkeypatch.delenv(paths.ROOT_ENV)
    assert str(Root().prefix) == "/"


def test_a_reader_that_fails_is_a_recorded_unknown_not_the_end(tree, monkeypatch):
    """A surprise in a reader (a bug, a kernel's odd file) leaves the size measured with its CPU time
    and its conditions unknown, with the reason; the member still sends both."""
    from npmpi.sweep import span as trialspan

    def broken(*_a, **_k):
        raise ValueError("odd sysfs")

    monkeypatch.setattr(trialspan, "ConditionSpan", broken)
    figures = trialspan.TrialSpan()
    figures.lap()
    got = figures.stop()
    assert got.cpu.shape == (4,) and np.all(np.isnan(got.cond))
    assert got.info["cpu_freq_reason"] == "unknown, because reading the conditions failed: odd sysfs"

    class Halfway:
        def lap(self):
            raise OSError("gone")

    monkeypatch.setattr(trialspan, "ConditionSpan", Halfway)
    figures = trialspan.TrialSpan()
    assert figures.lap("trial") == "trial"  # the trial's result passes through
    assert "failed: gone" in figures.stop().info["cpu_freq_reason"]
