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
    from npmpi.persize import span as trialspan

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


@pytest.mark.parametrize(
    "khz",
    [10**15, 10**60, int("9" * 70), 1, [1, 10**12]],
    ids=["1e15 kHz", "1e60 kHz", "70 digits", "1 kHz", "flapping 1 kHz and 1e12 kHz"],
)
def test_a_frequency_no_core_runs_at_is_unknown_with_the_reason(tree, khz):
    """scaling_cur_freq of 1e15 kHz was stored as 1e18 Hz (shown 1e9 GHz), 1 kHz as 1e-6 GHz: a core
    runs between 1 MHz and 10 GHz, anything else is unknown, and the rank's text says why."""
    reads = khz if isinstance(khz, list) else [khz]
    tree.cpu(0, cur_khz=reads[0])
    span = ConditionSpan(probe(tree))
    for k in range(3):
        tree.set_freq(0, reads[(k + 1) % len(reads)])
        span.lap()
    v, info = span.stop()
    assert all(math.isnan(x) for x in v[:3])
    assert info["cpu_freq_source"] == "unknown"
    assert (
        "scaling_cur_freq read" in info["cpu_freq_reason"] and "outside any core's" in info["cpu_freq_reason"]
    )
    assert info["refused"] and "1 MHz to 10 GHz" in info["refused"][0]


def test_a_5000_digit_frequency_is_unknown(tree):
    tree.cpu(0)
    (tree.root / cpufreq.CPU / "cpu0/cpufreq/scaling_cur_freq").write_text("9" * 5000 + "\n")
    v, info = ConditionSpan(probe(tree)).stop()
    assert math.isnan(v[0]) and "outside any core's" in info["cpu_freq_reason"]


def test_real_frequencies_at_the_edges_are_kept(tree):
    for khz in (1_000, 400_000, 6_000_000, 10_000_000):  # 1 MHz, 400 MHz, 6 GHz, 10 GHz
        tree.cpu(0, cur_khz=khz)
        v, info = ConditionSpan(probe(tree)).stop()
        assert v[0] == khz * 1e3 and "refused" not in info


def test_a_cycles_counter_faster_than_any_core_is_unknown(tree):
    marks = iter([(0, 0), (0, 0), (10**15, 1_000_000)])  # 1e15 cycles in 1 ms: 1e9 GHz
    tree.cpu(0)
    span = ConditionSpan(probe(tree, lambda flags: 99, lambda fd: next(marks)))
    span.lap()
    v, info = span.stop()
    assert all(math.isnan(x) for x in v[:3]) and "perf cycles read" in info["cpu_freq_reason"]


def test_throttle_counts_beyond_what_a_core_counts_are_unknown(tree):
    """8.2e31 (beyond a 64-bit counter) and a rise of 1e9 events within a second: unknown, with the
    reason; a real rise of thousands of events is kept."""
    tree.cpu(0, throttle=(5, 7))
    span = ConditionSpan(probe(tree))
    tree.set_throttle(0, 82 * 10**30, 7 + 10**9)
    v, info = span.stop()
    got = values(v)
    assert math.isnan(got["core_throttle_count"]) and math.isnan(got["package_throttle_count"])
    assert any("core_throttle_count read 8.2e+31, beyond a 64-bit counter" in w for w in info["refused"])
    assert any("package_throttle_count rose by 1e+09" in w for w in info["refused"])
    span = ConditionSpan(probe(tree))
    tree.set_throttle(0, 82 * 10**30, 7 + 10**9 + 5000)
    got = values(span.stop()[0])
    assert math.isnan(got["core_throttle_count"]) and got["package_throttle_count"] == 5000


def test_nic_counters_that_jump_beyond_their_link_are_unknown(tree):
    """A jump of 1e18 bytes on a 10 Gbit/s device, 1e13 on a virtual interface, 6e25 (beyond a
    64-bit counter), 1e16 words on a 100 Gbit/s IB port: unknown with the reason; a full 10 Gbit/s
    second's bytes are kept, and 100 GB in a moment on a virtual interface (memory copies)."""
    tree.cpu(0)
    tree.net("eth0", 1000, 0, speed_mbit=10_000)
    span = ConditionSpan(probe(tree))
    tree.set_net("eth0", 1000 + 10**18, 1_250_000_000)  # rx: one second at 10 Gbit/s
    v, info = span.stop()
    got = values(v)
    assert math.isnan(got["nic_tx_bytes"]) and got["nic_rx_bytes"] == 1_250_000_000
    assert "eth0 tx rose by 1e+18 bytes" in info["refused"][0] and "4 x its 10 Gbit/s" in info["refused"][0]
    tree.net("veth0", 0, 0)  # no device: a virtual interface, bounded by 4 x 400 Gbit/s
    span = ConditionSpan(probe(tree))
    tree.set_net("veth0", 10**13, 10**11)  # rx 100 GB in a moment: a veth's memory copies may
    got, info = values((out := span.stop())[0]), out[1]
    assert math.isnan(got["nic_tx_bytes"]) and got["nic_rx_bytes"] == 10**11
    assert any("veth0 tx rose by 1e+13 bytes" in w and "no line rate known" in w for w in info["refused"])
    span = ConditionSpan(probe(tree))
    tree.set_net("veth0", 6 * 10**25, 10**11)
    got, info = values((out := span.stop())[0]), out[1]
    assert math.isnan(got["nic_tx_bytes"]) and info["refused"] == [
        "veth0 tx read 6e+25, beyond a 64-bit counter: unknown"
    ]
    tree.ib("mlx5_0", 1, 10, 10, rate="100 Gb/sec (4X EDR)")
    (counter,) = [
        c for c in nic.find_counters(Root(tree.root)) if c.name == "mlx5_0/1" and c.direction == "tx"
    ]
    assert counter.max_rate == 100e9 / 8 * 4
    assert math.isnan(nic.delta_bytes(counter, 10, 10 + 10**16, 0.5))
    assert nic.delta_bytes(counter, 10, 10 + 10**9, 0.5) == 4e9  # 32 Gbit/s for 1 s: real
    assert nic.delta_bytes(counter, 10, 10 + 10**16) == 4e16  # no time given: not bounded (as before)
