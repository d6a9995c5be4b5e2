"""`npmpi map` across four network-namespace hosts: one link shaped, then one host shaped.

The hosts (tests/support/netns_hosts.py) are joined by a bridge with no rate limit. First one link is made
slow: on the first host's veth an htb class at SLOW_RATE takes only the packets addressed to the
second host (a u32 filter on its address), so of the six links exactly h1-h2 is slow. Then one host
is made slow on all its traffic (its veth's default htb class at SLOW_RATE): every link of that host
is slow, no other. Both are asserted on the measured bandwidth matrix of the largest size, and on
what `npmpi-analyze` says of each map: the shaped link named as a link and nothing else named for
its bandwidth; the shaped host named as a node and none of its links. (Latency sentences at 1 B are
not asserted: shaping a rate hardly changes a 1-byte message's time, and on this shared 2-core
machine other jobs make single pairs' latencies scatter by several times.) The maps are serial
(one pair at a time): pairs measured at once share the two cores and scatter the unshaped links.
"""

from __future__ import annotations

import json
import os
import re
import subprocess

import h5py
import numpy as np
import pytest
from conftest import VENV
from support import netns_hosts
from support.mapcells import dense_map
from support.netns_hosts import NetnsHosts, hosts_or_skip, tc

from npmpi.runfile.maprows import derived

pytestmark = [pytest.mark.mpi, pytest.mark.slow]

RATE = "1gbit"  # every host's link: a ceiling that keeps the unshaped links alike on a busy machine
BURST = "128kb"
SLOW_RATE = "20mbit"
SIZES = "1,256K"
# A ping-pong at 256 KiB over a link slowed one way to 20 Mbit/s measures at most 2 x 20 Mbit/s (the
# other way is fast: 0.037-0.038 Gbit/s measured); the other links, at 1 Gbit/s, 0.58 to 1.6 Gbit/s
SLOW_BELOW_BIT_S = 0.25e9
# A stream of windows of 4 x 64 KiB each way (a window of 64 would take 7 s at 20 Mbit/s); the
# shaped direction h1 -> h2 streams at most 20 Mbit/s, its reverse and every other direction ~1 Gbit/s
STREAM_ARGS = ("--mode", "stream", "--window", "4", "--sizes", "1,64K")


@pytest.fixture(scope="module")
def hosts(tmp_path_factory):
    with hosts_or_skip(tmp_path_factory.mktemp("netns-map"), count=4, rate=RATE) as h:
        yield h


def shape_link(src: str, dst_index: int) -> None:
    """Packets from `src` to host number dst_index (1-based) through a slow htb class, the rest through
    one at the hosts' own rate."""
    netns_hosts.shape_link(src, dst_index, SLOW_RATE, RATE, BURST)


def shape_host(host: str) -> None:
    """Every packet `host` sends at the slow rate."""
    tc(host, "qdisc", "replace", "dev", "eth0", "root", "tbf", "rate", SLOW_RATE, "burst", BURST,
       "latency", "50ms")  # fmt: skip


def unshape(host: str) -> None:
    """Back to the hosts' own rate (as scripts/netns-hosts.sh shapes them)."""
    netns_hosts.unshape(host, RATE, BURST)


SERIAL = ("--schedule", "serial", "--trials", "3", "--target-time", "0.01", "--confirm", "1")


def run_map(
    hosts: NetnsHosts, tmp_path, name: str, extra: tuple[str, ...] = ("--sizes", SIZES), base=SERIAL
) -> tuple[np.ndarray, list[str], str]:
    """A map (serial unless `base` says otherwise) of one rank per host; (bandwidth [N,N] at the
    largest size, hosts, console)."""
    from npmpi import _build_info

    mpirun = hosts.mpirun_wrapper(str(VENV / "bin" / "mpirun"))
    kernel = "c" if _build_info.CKERNEL_BUILT else "python"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_") and k != "PYTHONPATH"}
    cmd = [str(mpirun), "-np", "4", "--map-by", "node", str(VENV / "bin" / "python"), "-m", "npmpi", "map"]
    cmd += [*base, "--kernel", kernel]
    cmd += [*extra, "-o", str(tmp_path / name)]
    # in a session of its own, as the other hosts' ranks are under their daemons: else rank 0 shares
    # the test runner's scheduling group (kernel.sched_autogroup_enabled) with whatever else runs
    # in it, and under cpu_hog rank 0 alone waited 99 % of its trials for a CPU, its node named slow
    proc = subprocess.run(
        cmd, env=env, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
        start_new_session=True,
    )  # fmt: skip
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log
    with h5py.File(tmp_path / name) as f:
        g = f["map"]
        assert f.attrs["status"] == "complete" and not g.attrs["per_rank"]
        names = [h.decode() for h in g["hosts"][:]]
        _, bw = derived(g["size_bytes"][:], dense_map(g)["trial_s"])
        assert f.attrs["node_count"] == 4
    return bw[-1], names, log


def named_for_bandwidth(path) -> tuple[set[frozenset[str]], set[str], str]:
    """(links, nodes) npmpi-analyze names for their bandwidth, and its output."""
    proc = subprocess.run(
        [str(VENV / "bin" / "npmpi-analyze"), str(path)], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    links = {frozenset(m) for m in re.findall(r"^\s*link (\S+)–(\S+): bandwidth", proc.stdout, flags=re.M)}
    nodes = set(
        re.findall(r"^\s*node (\S+): every link [\d.]+x the median bandwidth", proc.stdout, flags=re.M)
    )
    return links, nodes, proc.stdout


def slow_links(bw: np.ndarray) -> set[frozenset[int]]:
    """The links measured under SLOW_BELOW_BIT_S."""
    n = len(bw)
    return {frozenset((i, j)) for i in range(n) for j in range(i + 1, n) if bw[i, j] < SLOW_BELOW_BIT_S}


@pytest.fixture(scope="module")
def maps(hosts, tmp_path_factory):
    """The three maps, measured once: {"link"|"node"|"direction": (path, bandwidth [N,N] at the largest
    size, hosts, console)}; "direction" is a stream map of both directions with h1 -> h2 shaped."""
    h = hosts.names
    out = tmp_path_factory.mktemp("maps")
    made = {}
    for kind, shape, host, extra in (
        ("link", lambda: shape_link(h[0], 2), h[0], ("--sizes", SIZES)),
        ("node", lambda: shape_host(h[3]), h[3], ("--sizes", SIZES)),
        ("direction", lambda: shape_link(h[0], 2), h[0], STREAM_ARGS),
    ):
        try:
            shape()
            made[kind] = (out / f"{kind}.h5", *run_map(hosts, out, f"{kind}.h5", extra))
        finally:
            unshape(host)
    return made


@pytest.mark.timeout(300)
def test_one_shaped_link_then_one_shaped_host_measure_slow(hosts, maps):
    h = hosts.names
    _, bw, names, log = maps["link"]
    assert names == h  # one rank per host, in host order
    assert slow_links(bw) == {frozenset((0, 1))}, f"{bw / 1e9} Gbit/s\n{log}"
    _, bw, names, log = maps["node"]
    assert slow_links(bw) == {frozenset((3, k)) for k in range(3)}, f"{bw / 1e9} Gbit/s\n{log}"


@pytest.mark.timeout(120)
def test_a_stream_map_measures_each_direction_and_names_the_shaped_one(hosts, maps):
    h = hosts.names
    path, bw, _, log = maps["direction"]
    assert "each direction of a pair measured apart" in log
    slow = {(i, j) for i in range(4) for j in range(4) if i != j and bw[i, j] < SLOW_BELOW_BIT_S}
    assert slow == {(0, 1)}, f"{bw / 1e9} Gbit/s\n{log}"  # h1 -> h2 only: h2 -> h1 is fast
    assert bw[1, 0] > 10 * bw[0, 1], f"{bw / 1e9} Gbit/s"
    proc = subprocess.run(
        [str(VENV / "bin" / "npmpi-analyze"), str(path)], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    named = re.findall(r"^\s*(\S+) → (\S+): bandwidth", proc.stdout, flags=re.M)
    assert named == [(h[0], h[1])], proc.stdout
    assert not re.search(r"^\s*(node|link) \S+.*bandwidth", proc.stdout, flags=re.M), proc.stdout
    assert "directions: each measured apart" in proc.stdout


@pytest.mark.timeout(120)
def test_the_analysis_names_the_shaped_link_and_the_shaped_node(hosts, maps):
    h = hosts.names
    path, bw, _, _ = maps["link"]
    links, nodes, said = named_for_bandwidth(path)
    assert f"link {h[0]}–{h[1]}: bandwidth" in said, f"{bw / 1e9} Gbit/s\n{said}"
    assert (links, nodes) == ({frozenset((h[0], h[1]))}, set()), f"{bw / 1e9} Gbit/s\n{said}"
    path, bw, _, _ = maps["node"]
    links, nodes, said = named_for_bandwidth(path)
    assert f"node {h[3]}: every link" in said, f"{bw / 1e9} Gbit/s\n{said}"
    assert (links, nodes) == (set(), {h[3]}), f"{bw / 1e9} Gbit/s\n{said}"
    assert "directions: the round trip" in said  # a ping-pong map says it cannot tell the direction


ENERGY_SLOW_RATE = "40mbit"


@pytest.mark.timeout(180)
def test_energy_is_charged_to_the_pair_that_used_it(hosts, tmp_path):
    """A rounds map with h4 slowed: each pair's energy over its own window, so every link's energy
    per bit is its power over its own bandwidth (pJ/bit x bandwidth / power alike for all links),
    and h4's links cost several times the others' instead of the round's slowest pair setting all."""
    from npmpi_analysis.cli import ANALYSED_SAMPLE_FIELDS
    from npmpi_analysis.map.analyse import analyse_map
    from npmpi_analysis.map.load import load_map

    h = hosts.names
    tc(h[3], "qdisc", "replace", "dev", "eth0", "root", "tbf", "rate", ENERGY_SLOW_RATE, "burst", BURST,
       "latency", "50ms")  # fmt: skip
    try:
        mpirun = hosts.mpirun_wrapper(str(VENV / "bin" / "mpirun"))
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_") and k != "PYTHONPATH"}
        cmd = [str(mpirun), "-np", "8", "--map-by", "node", str(VENV / "bin" / "python"), "-m", "npmpi",
               "map", "--sizes", "256K", "--trials", "3", "--target-time", "0.05", "--meter", "estimate",
               "--sample-interval", "0.05", "--baseline", "0", "--confirm", "0", "-q",
               "-o", str(tmp_path / "e.h5")]  # fmt: skip
        proc = subprocess.run(
            cmd, env=env, capture_output=True, text=True, timeout=150, stdin=subprocess.DEVNULL
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
    finally:
        unshape(h[3])
    m = load_map(tmp_path / "e.h5", ANALYSED_SAMPLE_FIELDS)
    a = analyse_map(m, "e")
    e = a.energy
    assert e.own_windows and "ESTIMATED" in a.caveat
    mean_b, pj, watts = a.mean_bit_s[0], e.energy_pj_bit[0], e.power_w[0]
    slow = [(k, 3) for k in range(3)]
    healthy = [(i, j) for i in range(3) for j in range(i + 1, 3)]
    # pJ/bit x mean bandwidth / power: 1 plus the probe's and warm-up's share, alike for every link
    cost = {p: pj[p] * 1e-12 * mean_b[p] / watts[p] for p in slow + healthy}
    detail = f"pJ/bit {pj}\nmean Gbit/s {mean_b / 1e9}\nW {watts}\ncost {cost}"
    assert max(cost.values()) < 1.5 * min(cost.values()), detail  # energy per bit ∝ 1 / bandwidth
    assert min(pj[p] for p in slow) > 3 * max(pj[p] for p in healthy), detail
    m.pair_window_s = None  # as before format 1.6: every pair charged until its round's end
    old = analyse_map(m, "old").energy.energy_pj_bit[0]
    # a healthy pair measured beside a slow one paid for the slow pair's time (one whose own
    # trials ran long on the busy cores less so: the median of the three)
    assert np.median([old[p] / pj[p] for p in healthy]) > 1.3, f"{detail}\nround windows: {old}"
    assert all(old[p] == pytest.approx(pj[p], rel=0.1) for p in slow), f"{detail}\nround windows: {old}"


@pytest.fixture
def cpu_hog():
    """A busy loop in its own session (its own scheduling group, as another user's job) for the test."""
    with netns_hosts.cpu_hog() as hog:
        yield hog


def named_anything(path) -> tuple[list[str], list[dict]]:
    """Every finding npmpi-analyze names (latency and bandwidth; confirmed or without a second
    measurement), and all its findings (--json)."""
    out = path.with_suffix(".json")
    proc = subprocess.run(
        [str(VENV / "bin" / "npmpi-analyze"), str(path), "--json", str(out), "-q"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    found = json.loads(out.read_text())["maps"][0]["outliers"]
    return [f["sentence"] for f in found if f["confirmed"] is not False], found


def re_measured_waits(path) -> np.ndarray:
    """Each re-measured trial's larger rank's run-queue wait over the trial's loop time."""
    with h5py.File(path) as f:
        g = f["map"]
        wait, loop = g["confirm_runq_wait_s"][:], g["confirm_trial_elapsed_s"][:]
    assert np.isfinite(wait).all() and (wait >= 0).all() and np.isfinite(loop).all()
    return wait.max(axis=2) / loop


@pytest.mark.timeout(240)
def test_suspects_measured_again_under_background_load(hosts, tmp_path, cpu_hog):
    """Under a CPU hog, uniform --quick maps name nothing, neither latency nor bandwidth (a pair slow in
    one window is measured again; a latency whose ranks waited for a CPU in every re-measured trial is
    not named, a bandwidth no slower than the slowest reference window is not); a shaped link is
    still named."""
    h = hosts.names
    quick = ("--quick",)
    waited = []
    for k in range(2):
        path = tmp_path / f"u{k}.h5"
        run_map(hosts, tmp_path, path.name, base=quick)
        named, found = named_anything(path)
        assert named == [], found
        waited += list(re_measured_waits(path).ravel()) if found else []
    shape_link(h[0], 2)
    try:
        run_map(hosts, tmp_path, "s.h5", base=quick)
    finally:
        unshape(h[0])
    named, found = named_anything(tmp_path / "s.h5")
    link = f"link {h[0]}–{h[1]}: bandwidth"
    assert any(x.startswith(link) for x in named), found
    # the link alone must be named; the shaped host beside it is let pass (its packets go through one
    # more qdisc than the other hosts' do, see shape_link), nothing else may be
    assert all(x.startswith((link, f"node {h[0]}: every link ")) for x in named), found
    # the hog makes the ranks wait for a CPU: the re-measured trials say so (30-77 % measured by hand)
    waited += list(re_measured_waits(tmp_path / "s.h5").ravel())
    assert np.nanmedian(waited) > 0.1, waited
