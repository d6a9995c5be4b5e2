"""Several hosts on one machine for the tests: network namespaces built by scripts/netns-hosts.sh.

`NetnsHosts.up()` makes the hosts (names unique to this test run, so runs never collide), joined by
a bridge and, when a rate is given, shaped with tc tbf; `mpirun_wrapper()` writes an executable
that starts Open MPI across them; `down()` removes every namespace and the processes in them.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "netns-hosts.sh"
SUBNET = "10.203.0"


class NetnsUnavailable(Exception):
    """Network namespaces cannot be made here; the message says why (the tests skip with it)."""


def why_unavailable() -> str | None:
    """Why hosts cannot be made here (not root, no ip/unshare, the kernel refuses), else None."""
    if os.geteuid() != 0:
        return "network namespaces need root; run the tests as root"
    for tool in ("ip", "unshare", "tc"):
        if shutil.which(tool) is None:
            return f"no '{tool}' command (Debian: apt-get install iproute2 util-linux)"
    probe = f"npmpi-probe-{os.getpid()}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True, timeout=30)
    if made.returncode != 0:
        return f"the kernel refuses network namespaces: {made.stderr.strip()}"
    try:
        uts = subprocess.run(
            ["ip", "netns", "exec", probe, "unshare", "--uts", "true"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        if uts.returncode != 0:
            return f"the kernel refuses UTS namespaces (own host names): {uts.stderr.strip()}"
    finally:
        subprocess.run(["ip", "netns", "del", probe], capture_output=True, timeout=30)
    return None


@dataclass
class NetnsHosts:
    prefix: str
    count: int
    rate: str
    workdir: Path
    env: dict[str, str] = field(default_factory=dict)

    @property
    def names(self) -> list[str]:
        return [f"{self.prefix}{i}" for i in range(1, self.count + 1)]

    @classmethod
    def up(cls, workdir: Path, count: int = 2, rate: str = "1gbit") -> NetnsHosts:
        reason = why_unavailable()
        if reason:
            raise NetnsUnavailable(reason)
        prefix = f"np{os.getpid() % 100000}h"
        hosts = cls(prefix, count, rate, workdir)
        hosts.env = {
            "NPMPI_NETNS_PREFIX": prefix,
            "NPMPI_NETNS_HOSTS": str(count),
            "NPMPI_NETNS_RATE": rate,
            "NPMPI_NETNS_SUBNET": SUBNET,
            "NPMPI_NETNS_DIR": str(workdir / "netns"),
        }
        proc = hosts._script("up")
        if proc.returncode != 0:
            hosts.down()
            raise RuntimeError(f"scripts/netns-hosts.sh up failed:\n{proc.stderr}")
        return hosts

    def _script(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["bash", str(SCRIPT), *args],
            env={**os.environ, **self.env},
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
            check=False,
        )

    def mpirun_wrapper(self, mpirun: str) -> Path:
        """An executable that runs `mpirun ARGS` across the hosts (what MPIRUN= takes)."""
        path = self.workdir / "mpirun-netns"
        exports = " ".join(f"{k}={v}" for k, v in {**self.env, "NPMPI_NETNS_MPIRUN": mpirun}.items())
        path.write_text(f'#!/bin/sh\nexec env {exports} bash {SCRIPT} mpirun "$@"\n')
        path.chmod(0o755)
        return path

    def qdisc(self, host: str) -> str:
        proc = subprocess.run(
            ["ip", "netns", "exec", host, "tc", "qdisc", "show", "dev", "eth0"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        return proc.stdout

    def down(self) -> None:
        """Remove the hosts and end the processes still in them; safe to call more than once."""
        try:
            self._script("down")
        finally:
            listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=30)
            for line in listed.stdout.splitlines():
                name = line.split()[0] if line.split() else ""
                if name in [*self.names, f"{self.prefix}br"]:
                    subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=30)


def tc(host: str, *args: str) -> None:
    """`tc ARGS` inside a host."""
    subprocess.run(["ip", "netns", "exec", host, "tc", *args], check=True, capture_output=True, timeout=30)


def shape_link(src: str, dst_index: int, slow_rate: str, rate: str, burst: str = "128kb") -> None:
    """Packets from `src` to host number dst_index (1-based) at `slow_rate`, the rest exactly as every
    other host sends them. An htb root sorts the packets (a u32 filter on the destination's address)
    into two classes far above any rate here, so htb itself never holds a packet back; each class
    holds a tbf, the rest's the very tbf of every host (`rate`, `burst`), the link's at `slow_rate`.
    (With the rates on htb's classes, the rest's class measured 0.69x the other hosts' links on an
    idle machine with htb's default bucket and, with the hosts' bucket, under a CPU hog still slow
    enough on all of `src`'s links that the analysis named the host, not the link. This kernel has
    no prio, drr or ets qdisc to sort packets without htb.)"""
    tc(src, "qdisc", "replace", "dev", "eth0", "root", "handle", "1:", "htb", "default", "20")
    for cls, cls_rate in (("10", slow_rate), ("20", rate)):
        tc(src, "class", "add", "dev", "eth0", "parent", "1:", "classid", f"1:{cls}", "htb", "rate",
           HTB_OPEN, "ceil", HTB_OPEN, "burst", "1mb", "cburst", "1mb")  # fmt: skip
        tc(src, "qdisc", "add", "dev", "eth0", "parent", f"1:{cls}", "handle", f"{cls}:", "tbf", "rate",
           cls_rate, "burst", burst, "latency", "50ms")  # fmt: skip
    tc(src, "filter", "add", "dev", "eth0", "parent", "1:", "protocol", "ip", "prio", "1", "u32",
       "match", "ip", "dst", f"{SUBNET}.{dst_index}/32", "flowid", "1:10")  # fmt: skip


HTB_OPEN = "40gbit"  # shape_link's htb classes: a rate no link here reaches (the tbf under each shapes)


def unshape(host: str, rate: str, burst: str = "128kb") -> None:
    """Back to the hosts' own rate (as scripts/netns-hosts.sh shapes them)."""
    tc(host, "qdisc", "replace", "dev", "eth0", "root", "tbf", "rate", rate, "burst", burst,
       "latency", "50ms")  # fmt: skip


@contextlib.contextmanager
def cpu_hog():
    """A busy loop in its own session (its own scheduling group, as another user's job) while inside."""
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)
    try:
        yield hog
    finally:
        hog.kill()
        hog.wait(timeout=30)


@contextlib.contextmanager
def hosts_or_skip(workdir: Path, count: int = 2, rate: str = "1gbit"):
    """`count` namespace hosts while inside (down at the end); the test is skipped where network
    namespaces cannot be made (no root, no iproute2), with the reason."""
    import pytest

    try:
        hosts = NetnsHosts.up(workdir, count=count, rate=rate)
    except NetnsUnavailable as exc:
        pytest.skip(f"no network namespaces: {exc}")
    try:
        yield hosts
    finally:
        hosts.down()
