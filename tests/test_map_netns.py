"""`npmpi map` across four network-namespace hosts: one link shaped, then one host shaped.

The hosts (tests/netns_hosts.py) are joined by a bridge with no rate limit. First one link is made
slow: on the first host's veth an htb class at SLOW_RATE takes only the packets addressed to the
second host (a u32 filter on its address), so of the six links exactly h1-h2 is slow. Then one host
is made slow on all its traffic (its veth's default htb class at SLOW_RATE): every link of that host
is slow, no other. Both are asserted on the measured bandwidth matrix of the largest size.
"""

from __future__ import annotations

import os
import subprocess

import h5py
import numpy as np
import pytest
from conftest import VENV
from netns_hosts import SUBNET, NetnsHosts, NetnsUnavailable

from npmpi.mapfile import derived

pytestmark = [pytest.mark.mpi, pytest.mark.slow]

SLOW_RATE = "50mbit"
SIZES = "1,256K"
# A ping-pong over a link slowed one way to 50 Mbit/s measures at most 2 x 50 Mbit/s (the other way
# is fast); unshaped links here measure 0.6 to 18 Gbit/s (Python or C kernel, a loaded 2-core machine)
SLOW_BELOW_BIT_S = 0.25e9


@pytest.fixture(scope="module")
def hosts(tmp_path_factory):
    try:
        h = NetnsHosts.up(tmp_path_factory.mktemp("netns-map"), count=4, rate="")
    except NetnsUnavailable as exc:
        pytest.skip(f"no network namespaces: {exc}")
    try:
        yield h
    finally:
        h.down()


def tc(host: str, *args: str) -> None:
    subprocess.run(["ip", "netns", "exec", host, "tc", *args], check=True, capture_output=True, timeout=30)


def shape_link(src: str, dst_index: int) -> None:
    """Packets from `src` to host number dst_index (1-based) through a slow htb class, the rest fast."""
    tc(src, "qdisc", "add", "dev", "eth0", "root", "handle", "1:", "htb", "default", "20")
    tc(src, "class", "add", "dev", "eth0", "parent", "1:", "classid", "1:10", "htb", "rate", SLOW_RATE)
    tc(src, "class", "add", "dev", "eth0", "parent", "1:", "classid", "1:20", "htb", "rate", "20gbit")
    tc(src, "filter", "add", "dev", "eth0", "parent", "1:", "protocol", "ip", "prio", "1", "u32",
       "match", "ip", "dst", f"{SUBNET}.{dst_index}/32", "flowid", "1:10")  # fmt: skip


def shape_host(host: str) -> None:
    """Every packet `host` sends through a slow htb class."""
    tc(host, "qdisc", "add", "dev", "eth0", "root", "handle", "1:", "htb", "default", "10")
    tc(host, "class", "add", "dev", "eth0", "parent", "1:", "classid", "1:10", "htb", "rate", SLOW_RATE)


def unshape(host: str) -> None:
    subprocess.run(["ip", "netns", "exec", host, "tc", "qdisc", "del", "dev", "eth0", "root"],
                   capture_output=True, timeout=30)  # fmt: skip


def run_map(hosts: NetnsHosts, tmp_path, name: str) -> tuple[np.ndarray, list[str], str]:
    """A --quick map of one rank per host; (bandwidth [N,N] at the largest size, hosts, console)."""
    from npmpi import _build_info

    mpirun = hosts.mpirun_wrapper(str(VENV / "bin" / "mpirun"))
    kernel = "c" if _build_info.CKERNEL_BUILT else "python"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_") and k != "PYTHONPATH"}
    cmd = [str(mpirun), "-np", "4", "--map-by", "node", str(VENV / "bin" / "python"), "-m", "npmpi", "map"]
    cmd += [
        "--quick",
        "--target-time",
        "0.02",
        "--kernel",
        kernel,
        "--sizes",
        SIZES,
        "-o",
        str(tmp_path / name),
    ]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log
    with h5py.File(tmp_path / name) as f:
        g = f["map"]
        assert f.attrs["status"] == "complete" and not g.attrs["per_rank"]
        names = [h.decode() for h in g["hosts"][:]]
        _, bw = derived(g["size_bytes"][:], g["trial_s"][:])
        np.testing.assert_array_equal(bw, g["bandwidth_bit_s"][:])
        assert f.attrs["node_count"] == 4
    return bw[-1], names, log


def slow_links(bw: np.ndarray) -> set[frozenset[int]]:
    """The links measured under SLOW_BELOW_BIT_S."""
    n = len(bw)
    return {frozenset((i, j)) for i in range(n) for j in range(i + 1, n) if bw[i, j] < SLOW_BELOW_BIT_S}


@pytest.mark.timeout(300)
def test_one_shaped_link_then_one_shaped_host(hosts, tmp_path):
    h = hosts.names
    try:
        shape_link(h[0], 2)
        bw, names, log = run_map(hosts, tmp_path, "link.h5")
    finally:
        unshape(h[0])
    assert names == h  # one rank per host, in host order
    assert slow_links(bw) == {frozenset((0, 1))}, f"{bw / 1e9} Gbit/s\n{log}"
    try:
        shape_host(h[3])
        bw, names, log = run_map(hosts, tmp_path, "node.h5")
    finally:
        unshape(h[3])
    assert slow_links(bw) == {frozenset((3, k)) for k in range(3)}, f"{bw / 1e9} Gbit/s\n{log}"
