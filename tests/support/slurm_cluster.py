"""A real single-node Slurm cluster for the tests, driven through scripts/slurm-local.sh.

`SlurmCluster.start()` installs Debian's slurm-wlm and munge when they are missing (root and
apt-get; otherwise the caller skips with the reason), starts munged, slurmctld and slurmd on
loopback with everything in a fresh temporary directory, and `stop()` ends them by their PIDs.
Jobs are submitted with sbatch and waited for with a bound.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "slurm-local.sh"
FINAL_STATES = {
    "COMPLETED",
    "FAILED",
    "CANCELLED",
    "TIMEOUT",
    "NODE_FAIL",
    "OUT_OF_MEMORY",
    "PREEMPTED",
    "BOOT_FAIL",
    "DEADLINE",
}


class SlurmUnavailable(Exception):
    """Slurm cannot run here; the message says why (the tests skip with it)."""


def why_unavailable() -> str | None:
    """Why a local Slurm cannot be started here, or None when it can (perhaps after apt-get)."""
    if os.geteuid() != 0:
        return "a local Slurm needs root (slurmd runs the jobs); run the tests as root"
    have = all(Path(p).exists() for p in ("/usr/sbin/slurmctld", "/usr/sbin/slurmd", "/usr/sbin/munged"))
    if not have and shutil.which("apt-get") is None:
        return "Slurm (slurmctld, slurmd, munged) is not installed and there is no apt-get to install it"
    return None


@dataclass
class Job:
    job_id: str
    state: str
    exit_code: str
    fields: dict[str, str]
    stdout_path: Path

    @property
    def output(self) -> str:
        return self.stdout_path.read_text(errors="replace") if self.stdout_path.exists() else ""


class SlurmCluster:
    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.conf = directory / "etc" / "slurm.conf"

    @classmethod
    def start(cls, timeout: float = 600) -> SlurmCluster:
        """Start a fresh cluster (apt-get may take minutes on a bare machine, hence the bound)."""
        reason = why_unavailable()
        if reason:
            raise SlurmUnavailable(reason)
        # a short path: munge's socket lives here and Unix socket paths are limited to 108 bytes
        cluster = cls(Path(tempfile.mkdtemp(prefix="npmpi-slurm-", dir="/tmp")))
        try:
            proc = subprocess.run(
                ["bash", str(SCRIPT), "start", str(cluster.dir)],
                capture_output=True,
                text=True,
                timeout=timeout,
                stdin=subprocess.DEVNULL,
                check=False,
            )
        except subprocess.TimeoutExpired:
            cluster.stop()
            raise RuntimeError(f"scripts/slurm-local.sh start took more than {timeout} s") from None
        if proc.returncode != 0:
            cluster.stop()
            raise RuntimeError(f"scripts/slurm-local.sh start failed:\n{proc.stdout}\n{proc.stderr}")
        return cluster

    def env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        """The environment for Slurm's commands (and, through sbatch, for the job)."""
        env = dict(os.environ)
        env.pop("PYTHONPATH", None)
        for name in [n for n in env if n.startswith("SLURM_")]:
            del env[name]
        env["SLURM_CONF"] = str(self.conf)
        if extra:
            env.update(extra)
        return env

    def command(self, args: list[str], timeout: float = 30) -> subprocess.CompletedProcess:
        return subprocess.run(
            args,
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
            check=False,
        )

    def sbatch(
        self, script: Path, cwd: Path, options: list[str] | None = None, env: dict[str, str] | None = None
    ) -> str:
        """Submit a batch script from `cwd`; returns the job id."""
        proc = subprocess.run(
            ["sbatch", "--parsable", *(options or []), str(script)],
            cwd=cwd,
            env=self.env(env),
            capture_output=True,
            text=True,
            timeout=30,
            stdin=subprocess.DEVNULL,
            check=False,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"sbatch {script.name} failed: {proc.stderr.strip()}\n{self.logs()}")
        return proc.stdout.strip().split(";")[0]

    def job_fields(self, job_id: str) -> dict[str, str]:
        proc = self.command(["scontrol", "show", "job", "-o", job_id])
        return dict(re.findall(r"(\w+)=(\S*)", proc.stdout))

    def wait(self, job_id: str, timeout: float) -> Job:
        """Wait for the job to end; on timeout cancel it and raise with the job's state and logs."""
        deadline = time.monotonic() + timeout
        fields: dict[str, str] = {}
        while time.monotonic() < deadline:
            fields = self.job_fields(job_id)
            if fields.get("JobState") in FINAL_STATES:
                return Job(
                    job_id,
                    fields["JobState"],
                    fields.get("ExitCode", ""),
                    fields,
                    Path(fields.get("StdOut", "")),
                )
            time.sleep(0.5)
        self.command(["scancel", job_id])
        raise TimeoutError(
            f"job {job_id} did not end within {timeout} s (state {fields.get('JobState')}, "
            f"reason {fields.get('Reason')})\n{self.logs()}"
        )

    def logs(self, lines: int = 30) -> str:
        out = []
        for name in ("slurmctld.log", "slurmd.log"):
            path = self.dir / "log" / name
            if path.exists():
                tail = path.read_text(errors="replace").splitlines()[-lines:]
                out.append(f"--- {path}\n" + "\n".join(tail))
        return "\n".join(out)

    def stop(self) -> None:
        """Stop the cluster (its jobs, then its daemons, by PID); safe to call more than once."""
        with contextlib.suppress(subprocess.TimeoutExpired):
            subprocess.run(
                ["bash", str(SCRIPT), "stop", str(self.dir)],
                capture_output=True,
                timeout=60,
                stdin=subprocess.DEVNULL,
                check=False,
            )
        # whatever the script could not stop: the daemons' own PID files
        for pid_file in (self.dir / "run").glob("*.pid"):
            try:
                pid = int(pid_file.read_text().strip())
                os.kill(pid, signal.SIGKILL)
            except (ValueError, OSError):
                pass
        shutil.rmtree(self.dir, ignore_errors=True)
