"""The conditions under real Open MPI: every measuring rank reads them around its trials and reports
them to rank 0 (the shared per-size driver, npmpi/persize/driver.py), for a run with several pairs and
for a group kind (coll); the readers see a fake tree (NPMPI_CONDITIONS_ROOT), so the figures are known."""

from __future__ import annotations

import numpy as np
import pytest
from fakes.cpu_sysfs import ConditionsTree

from npmpi.runfile.reader import load_run

pytestmark = [pytest.mark.mpi]


def _tree(tmp_path) -> ConditionsTree:
    tree = ConditionsTree(tmp_path / "fake-root").node()
    for n in range(4):  # whichever core a rank runs on
        tree.cpu(n, cur_khz=2_100_000, governor="performance")
    tree.net("eth0", 10, 20)
    return tree


def _check(run, ranks: list[int]) -> None:
    c = run.pingpong.conditions
    assert c is not None and c.ranks.tolist() == ranks
    n = len(run.pingpong)
    for name, array in c.values.items():
        assert array.shape == (n, len(ranks)), name
    assert np.all(c.values["cpu_freq_hz"] == 2.1e9)  # cpufreq's, sampled: the VM has no cycles counter
    throttled = c.values["core_throttle_count"]  # NaN where an unbound rank changed cores within a size
    assert np.all(np.isnan(throttled) | (throttled == 0)) and (throttled == 0).any()
    assert np.all(c.values["nic_tx_bytes"] == 0)
    for r in ranks:
        info = c.rank_info(r)
        assert info["settings_before"]["governor"] == "performance", info
        assert info["settings_after"]["rapl_power_limits_w"] == {
            "package-0": {"long_term": 150.0, "short_term": 180.0}
        }
        assert info["nic_counters"] == ["eth0"]
        if info["cpu_freq_source"] != "perf cycles (user mode)" and info["cpu_freq_source"] != "perf cycles":
            assert info["cpu_freq_source"] == "cpufreq scaling_cur_freq (sampled)"


def test_a_run_with_two_pairs_carries_every_ranks_conditions(npmpi_run, tmp_path):
    tree = _tree(tmp_path)
    args = ["-u", "64", "-p", "0", "--trials", "2", "--repeats", "100", "--pairs", "2", "-o", "r.h5"]
    proc = npmpi_run(args, np=4, env={"NPMPI_CONDITIONS_ROOT": str(tree.root)})
    assert proc.returncode == 0, proc.stderr
    run = load_run(tmp_path / "r.h5")
    c = run.pingpong.conditions
    if any(c.rank_info(r)["cpu_freq_source"].startswith("perf") for r in range(4)):
        pytest.skip("this machine has a cycles counter: the figures are its own, not the fake tree's")
    _check(run, [0, 1, 2, 3])


def test_coll_carries_its_members_conditions(npmpi_run, tmp_path):
    tree = _tree(tmp_path)
    args = ["coll", "--op", "allreduce", "--sizes", "8,1K", "--quick", "-o", "c.h5"]
    proc = npmpi_run(args, np=2, env={"NPMPI_CONDITIONS_ROOT": str(tree.root)})
    assert proc.returncode == 0, proc.stderr
    run = load_run(tmp_path / "c.h5")
    if run.pingpong.conditions.rank_info(0)["cpu_freq_source"].startswith("perf"):
        pytest.skip("this machine has a cycles counter: the figures are its own, not the fake tree's")
    _check(run, [0, 1])
