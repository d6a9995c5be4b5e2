"""The run-queue wait of a map's trials: read from Linux's schedstat, stored with every trial and
every re-measured trial, and what the analysis makes of it (npmpi_analysis/map/confirmed.py): a
latency suspect whose every re-measured trial waited for a CPU is not named; a bandwidth suspect no
slower than the slowest window a reference link had is not named; a slow link is named whether its
ranks waited or not.

The files are written by the map's own writer (npmpi.runfile.mapwriter.MapWriter) and read by the
analysis as a user's would be.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time

import h5py
import numpy as np
import pytest
from npmpi_analysis.map.analyse import analyse_map
from npmpi_analysis.map.confirmed import (
    CPU_BUSY,
    REASON_LATENCY_WAITED,
    REASON_SCATTER,
    REASON_SLOWEST,
)
from npmpi_analysis.map.load import load_map
from npmpi_analysis.map.report import json_bytes, outlier_lines

from npmpi.map.confirm import ROLE_REFERENCE, ROLE_SUSPECT
from npmpi.map.schedule import round_matrix, serial_rounds
from npmpi.persize.cputime import runq_wait_ns, waited_s
from npmpi.runfile.mapwriter import MapWriter, PairResult

FIELDS = ("time_unix_s", "power_w", "energy_j_of_counters")
HOSTS = ["h0", "h1", "h2", "h3"]
ITERATIONS = 100
NORMAL_US = 12.0


def test_the_wait_grows_when_another_busy_process_shares_the_cpu():
    """Two busy processes pinned to one CPU: each waits for it about half the time."""
    if runq_wait_ns() < 0:
        pytest.skip("no /proc/thread-self/schedstat here (not Linux)")
    assert math.isnan(waited_s(-1, 10)) and math.isnan(waited_s(10, 5)) and waited_s(0, 2_000_000) == 0.002
    mine = os.sched_getaffinity(0)
    cpu = min(mine)
    hog = subprocess.Popen(
        [sys.executable, "-c", f"import os; os.sched_setaffinity(0, {{{cpu}}})\nwhile True: pass"],
        start_new_session=True,
    )
    try:
        os.sched_setaffinity(0, {cpu})
        time.sleep(0.1)  # the hog pinned and spinning
        before, start = runq_wait_ns(), time.monotonic()
        while time.monotonic() - start < 0.4:
            pass
        waited = waited_s(before, runq_wait_ns())
    finally:
        os.sched_setaffinity(0, mine)
        hog.kill()
        hog.wait(timeout=30)
    assert 0.08 < waited < 0.4  # about 0.2 s of the 0.4 s


def write_map(path, rows, waits=True, slow_size=0):
    """A serial ping-pong map of 4 hosts at 1 B and 64 KiB, every pair 12 us + 8 size / 1 Gbit/s one
    way but h1-h2 20x at size index `slow_size`; then the re-measurement `rows` at that size: (pair,
    role, [one-way us of each trial], [each trial's wait fraction of both ranks]) (without run-queue
    waits when `waits` is False, as off Linux)."""
    sizes, n = [1, 65536], 4
    rounds = serial_rounds(n)
    spec = {
        "attrs": {"schedule": "serial", "per_rank": False, "kernel": "c", "mode": "pingpong", "window": 1},
        "hosts": HOSTS,
        "ranks": [0, 1, 2, 3],
        "sizes": sizes,
        "rounds_matrix": round_matrix(rounds, n),
        "n_rounds": len(rounds),
    }
    spec["attrs"]["directions"] = "one"
    w = MapWriter(path, {"kernel": "c"}, {"host": HOSTS}, 3, map_spec=spec)
    rng = np.random.default_rng(2)

    def result(i, j, one_way_us, wait):
        loop = 2 * ITERATIONS * np.asarray(one_way_us, dtype=float) * 1e-6
        both = (
            None if wait is None else np.repeat(np.asarray(wait, dtype=float)[:, None] * loop[:, None], 2, 1)
        )
        return PairResult(i, j, ITERATIONS, 10, loop, elapsed_s=0.1 + loop.sum(), runq_wait_s=both)

    for s in range(2):
        for r, [(i, j)] in enumerate(rounds):
            base = NORMAL_US + 8e6 * sizes[s] / 1e9
            one_way = base * (20.0 if (s, i, j) == (slow_size, 1, 2) else 1.0) * (1 + 0.01 * rng.random(3))
            w.store_round(s, r, (100.0 * s + r, 100.0 * s + r + 1), [result(i, j, one_way, [0.0] * 3)])
    confirm = [
        (slow_size, (300.0 + k, 301.0 + k), [result(*p, t, wt if waits else None)], role)
        for k, (p, role, t, wt) in enumerate(rows)
    ]
    w.store_confirmations(confirm, 1, 0.1, 1, 0)
    w.finish("complete")
    return path


def latency_finding(path, metric="latency"):
    a = analyse_map(load_map(path, FIELDS), "m")
    found = [f for f in a.outliers if f.metric == metric]
    assert [(f.kind, f.names) for f in found] == [("link", ("h1", "h2"))]
    return a, found[0]


# references measured with the suspect: one link whose ranks never waited, one whose ranks waited
# 55-90 % of each trial and read 55-444 us, as under a CPU hog on 2 cores (docs/clusters.md)
QUIET_REF = ((0, 3), ROLE_REFERENCE, [12.1, 12.9, 12.3], [0.0, 0.0, 0.01])
BUSY_REF = ((0, 1), ROLE_REFERENCE, [55.0, 245.0, 444.0], [0.67, 0.6, 0.9])


def test_a_bandwidth_suspect_no_slower_than_a_references_slowest_window_is_not_named(tmp_path):
    """Measured again h1-h2 reads 870-905 us at 64 KiB in each of its three windows (0.62x the
    references' best) with its ranks waiting 50 %; but one window of reference h0-h3 read 900-910 us
    (a healthy link slow for a whole window, as under a CPU hog: 0.8-1.0 Gbit/s instead of 1.7 on the
    test hosts): whatever slowed it could have slowed the suspect in all of its, not named."""
    half = [0.5, 0.5, 0.5]
    suspect = [((1, 2), ROLE_SUSPECT, [870.0 + 5 * k, 880.0, 905.0], half) for k in range(3)]
    refs = [((0, 3), ROLE_REFERENCE, [536.0, 540.0, 545.0], half)]
    refs += [((0, 1), ROLE_REFERENCE, [540.0, 545.0, 550.0], half)]
    refs += [((0, 3), ROLE_REFERENCE, [900.0, 905.0, 910.0], half)]
    path = write_map(tmp_path / "m.h5", [*suspect, *refs], slow_size=1)
    with h5py.File(path) as f:
        g = f["map"]
        assert g["confirm_runq_wait_s"].shape == (6, 3, 2) and g["confirm_trial_elapsed_s"].shape == (6, 3)
        assert g["confirm_runq_wait_s"].fletcher32 and g["confirm_trial_elapsed_s"].fletcher32
        assert g["runq_wait_s"].shape == (2, 6, 3, 2) and g["runq_wait_s"].fletcher32  # 6 pairs
        assert g["confirm_runq_wait_s"][0, 1, 1] == pytest.approx(0.5 * 2 * ITERATIONS * 880e-6)
    a, f = latency_finding(path, "bandwidth")
    assert f.confirmed is False and f.confirm_reason == REASON_SLOWEST
    assert f.confirm_ratio == pytest.approx(
        538.0 / 870.0, rel=1e-4
    ) and f.confirm_slowest_ratio == pytest.approx(900.0 / 870.0, rel=1e-4)
    assert f.confirm_wait_fraction == pytest.approx(0.5)
    line = next(x for x in outlier_lines(a) if "not confirmed" in x)
    assert "not confirmed: link h1–h2: bandwidth" in line
    assert (
        "measured again: 0.62x the reference links measured with it, but 1.03x their slowest window" in line
    )
    doc = json.loads(json_bytes([a], []))["maps"][0]["outliers"][0]
    assert doc["confirm_reason"] == REASON_SLOWEST and doc["confirm_runq_wait_fraction"] == pytest.approx(0.5)
    assert doc["confirm_slowest_reference_ratio"] == pytest.approx(900.0 / 870.0, rel=1e-4)
    # without that window the references are fast in every one of theirs: named (the rule before)
    path = write_map(tmp_path / "n.h5", [*suspect, *refs[:2]], slow_size=1)
    _, f = latency_finding(path, "bandwidth")
    assert f.confirmed is True and f.confirm_slowest_ratio == pytest.approx(540.0 / 870.0, rel=1e-4)


def test_a_slow_link_is_named_whether_its_ranks_waited_or_not(tmp_path):
    """20x slow in every trial. At 64 KiB, its ranks waiting 55-62 %, beside references that waited as
    much (900-1600 us against 536 us free of the CPU): still beyond the rule. A latency on an idle host
    (no wait): its trials may scatter behind a token bucket (180-1819 us) and it is named all the
    same."""
    shaped = ((1, 2), ROLE_SUSPECT, [10700.0, 10900.0, 11000.0], [0.55, 0.6, 0.62])
    refs = [((0, 3), ROLE_REFERENCE, [536.0, 700.0, 1500.0], [0.0, 0.6, 0.7])]
    refs += [((0, 1), ROLE_REFERENCE, [900.0, 1300.0, 1600.0], [0.6, 0.65, 0.7])]
    _, f = latency_finding(write_map(tmp_path / "w.h5", [shaped, *refs], slow_size=1), "bandwidth")
    assert f.confirmed is True and f.confirm_reason is None and f.confirm_wait_fraction == pytest.approx(0.6)
    idle = ((1, 2), ROLE_SUSPECT, [180.0, 900.0, 1819.0], [0.0, 0.01, 0.0])
    _, f = latency_finding(write_map(tmp_path / "b.h5", [idle, QUIET_REF, QUIET_REF]))
    assert f.confirmed is True and f.confirm_wait_fraction < CPU_BUSY
    # without the waits (an older map, or not Linux) the scattered trials refuse it, as before
    _, f = latency_finding(write_map(tmp_path / "c.h5", [idle, QUIET_REF, QUIET_REF], waits=False))
    assert f.confirmed is False and f.confirm_reason == REASON_SCATTER and math.isnan(f.confirm_wait_fraction)


def test_a_latency_never_measured_free_of_the_cpu_is_not_named(tmp_path):
    """At 1 B a trial whose ranks waited reads the scheduler: a suspect steady at 240-251 us, its ranks
    waiting 65-80 %, is not named, whether a reference ran free of the CPU (12 us) or all waited too
    (the real pair h3-h4 255-1429 us beside references that waited at 77-312 us, named before)."""
    loaded = ((1, 2), ROLE_SUSPECT, [240.0, 246.0, 251.0], [0.65, 0.7, 0.8])
    busy_alike = ((0, 1), ROLE_REFERENCE, [12.5, 13.0, 14.0], [0.6, 0.7, 0.75])
    for k, refs in enumerate(([QUIET_REF, busy_alike], [busy_alike, ((0, 3), *busy_alike[1:])])):
        a, f = latency_finding(write_map(tmp_path / f"a{k}.h5", [loaded, *refs]))
        assert f.confirmed is False and f.confirm_reason == REASON_LATENCY_WAITED
        line = next(x for x in outlier_lines(a) if "not confirmed" in x)
        assert "waited 70 % of its trials for a CPU when measured again (never measured free of it: a" in line


def test_a_slow_link_whose_ranks_waited_more_than_any_reference_is_named(tmp_path):
    """A 20 Mbit/s link's ranks spin (and yield) through each 100 ms message: 90-98 % of its trials
    read as waiting, beside references that waited 50 % (a map on the test hosts, 0.03x): the wait
    does not refuse it."""
    suspect = ((1, 2), ROLE_SUSPECT, [10700.0, 10900.0, 11000.0], [0.9, 0.98, 0.98])
    busy = [((0, k), ROLE_REFERENCE, [536.0, 540.0, 545.0], [0.5, 0.5, 0.51]) for k in (1, 3)]
    a, f = latency_finding(write_map(tmp_path / "m.h5", [suspect, *busy], slow_size=1), "bandwidth")
    assert f.confirmed is True and f.confirm_reason is None
    assert f.confirm_wait_fraction == pytest.approx(0.98) and f.confirm_slowest_ratio == pytest.approx(
        536.0 / 10700.0
    )
    assert any("link h1–h2: bandwidth" in x and "not confirmed" not in x for x in outlier_lines(a))


def test_damaged_waits_are_left_out_and_the_map_is_judged_without_them(tmp_path):
    suspect = ((1, 2), ROLE_SUSPECT, [200.0, 520.0, 1989.0], [0.65, 0.7, 0.8])
    path = write_map(tmp_path / "m.h5", [suspect, QUIET_REF, BUSY_REF])
    with h5py.File(path, "r+") as f:
        g = f["map"]
        data = g["confirm_runq_wait_s"][:, :2]
        del g["confirm_runq_wait_s"]
        g.create_dataset("confirm_runq_wait_s", data=data)
    m = load_map(path, FIELDS)
    assert any("confirm_runq_wait_s or confirm_trial_elapsed_s disagree in shape" in p for p in m.problems)
    _, f = latency_finding(path)
    assert f.confirm_reason == REASON_SCATTER  # judged as a map without the waits: 200-1989 us scatter


def test_a_node_is_confirmed_by_its_own_links_not_by_another_suspects_link():
    """A shaped link h0-h1 and node h0 (its other links 0.63x in the map): when the budget left the
    node out, the shaped link alone (measured as its own suspect) does not confirm the node."""
    from types import SimpleNamespace

    from npmpi_analysis.map.confirmed import REASON_NOT_MEASURED, confirm_findings
    from npmpi_analysis.map.outliers import Finding

    size = 262144
    normal_s = 8 * size / 0.7e9

    def judged(pairs):
        rows = [((0, 1), ROLE_SUSPECT, 14.0)] + [(p, ROLE_SUSPECT, 1.0) for p in pairs]
        rows += [((2, 3), ROLE_REFERENCE, 1.0), ((1, 2), ROLE_REFERENCE, 1.0)]
        confirm = {
            "confirm_pair": np.array([p for p, _, _ in rows]),
            "confirm_size_bytes": np.full(len(rows), size),
            "confirm_trial_s": np.array([[x * normal_s] * 3 for _, _, x in rows]),
            "confirm_role": np.array([r for _, r, _ in rows]),
        }
        f = Finding(
            "node", ("h0",), "bandwidth", size, 0.63, 0.44e9, 0.7e9, "node h0: every link", 3, 3, mad=0.05
        )
        confirm_findings(SimpleNamespace(names=HOSTS, outliers=[f]), confirm)
        return f

    left_out = judged([])
    assert left_out.confirmed is False and left_out.confirm_reason == REASON_NOT_MEASURED
    assert judged([(0, 3)]).confirmed is False  # its own second link measured again at the normal speed


def test_a_pair_two_suspects_share_is_charged_to_the_budget_once():
    from types import SimpleNamespace

    from npmpi.map.confirm import REFERENCES, Suspect, chosen_within_budget

    seconds = {(0, 1): 1.0}
    writer = SimpleNamespace(
        pair_seconds=lambda k, i, j, t=None: seconds.get((i, j), 0.1),
        median_pair_seconds=lambda k, t=None: 0.1,
    )
    link = Suspect("link", "bandwidth", 1, [(0, 1)], 50.0)
    node = Suspect("node", "bandwidth", 1, [(0, 1), (0, 3)], 9.0, 0)
    cost = 3 * (1.0 + REFERENCES * 0.1) + 3 * 0.1  # the node adds only its other link
    assert chosen_within_budget([link, node], writer, 3, cost + 0.01) == ([link, node], 0)
    assert chosen_within_budget([link, node], writer, 3, cost - 0.01) == ([link], 1)


def test_a_suspect_nodes_links_are_never_references():
    """4 hosts, node h3 slow (0.04x) and link h0-h1 a suspect too: every link touches a suspect's end,
    and the nearest to the median of all six was h3's own; now only h1-h2 or h0-h2 can be."""
    from npmpi.map.confirm import Suspect, reference_pairs

    best = np.full((4, 4), 2e-3)
    np.fill_diagonal(best, np.nan)
    best[3, :3] = best[:3, 3] = 55e-3  # node h3's links
    best[0, 1] = best[1, 0] = 2.5e-3
    suspects = [Suspect("node", "bandwidth", 1, [(0, 3), (2, 3)], 9.0, 3)]
    suspects += [Suspect("link", "bandwidth", 1, [(0, 1)], 3.0)]
    refs = reference_pairs(best, suspects)
    assert refs and not any(3 in p for p in refs) and (0, 1) not in refs
