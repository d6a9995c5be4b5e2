"""Helpers shared by the reliability tests (this module holds no tests).

`Job` launches `mpirun … python -m npmpi` with its output read line by line as it comes, finds the
PIDs of its ranks (by the unique output name on their command lines and the rank Open MPI puts in
their environment, so npmpi needs no hook for it), waits with a bound, and checks that no rank
is left behind. `check_run_file` checks what a stopped run left: a readable file whose rows are
whole and whose sizes are the start of the schedule.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from npmpi.core.schedule import netpipe_schedule
from npmpi.runfile.reader import Run, load_run
from support.launcher import local_mpi_env, npmpi_command

ROW_LINE = re.compile(r"^\s*\d+:\s+\d+ bytes ")
RANK_ENV = b"OMPI_COMM_WORLD_RANK="


def processes_named(fragment: str) -> list[int]:
    """PIDs of live processes (other than this one) whose command line holds `fragment`."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if fragment.encode() in cmdline:
            pids.append(int(entry.name))
    return pids


def _task_states(pid: int) -> list[str]:
    """The state letter of every thread of `pid` ([] once the process is gone)."""
    states = []
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return []
    for task in tasks:
        try:
            states.append((task / "stat").read_text().rsplit(")", 1)[1].split()[0])
        except (OSError, IndexError):
            continue  # that thread is gone
    return states


def wait_exited(pids: list[int], timeout_s: float) -> list[int]:
    """The PIDs still running after up to `timeout_s`: a process counts as exited once it is gone or
    every one of its threads is a zombie. A dying process's command line reads empty before its files
    are closed (the kernel drops its memory first), so `processes_named` may stop listing it while it
    still holds a lock; and its main thread shows "Z" while another thread (MPI's progress thread, a
    write in progress) is still exiting: the files, shared by the threads, close with the last one."""
    deadline = time.monotonic() + timeout_s
    while True:
        running = [pid for pid in pids if any(s not in ("Z", "X") for s in _task_states(pid))]
        if not running or time.monotonic() > deadline:
            return running
        time.sleep(0.02)


def rank_of(pid: int) -> int | None:
    """The MPI rank Open MPI gave this process, from its environment."""
    try:
        env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return None
    for item in env:
        if item.startswith(RANK_ENV):
            return int(item[len(RANK_ENV) :])
    return None


class Job:
    """One `mpirun -np N python -m npmpi ARGS` job; `name` (e.g. the output file) must be unique."""

    def __init__(self, args: list[str], np: int, cwd: Path, name: str, env: dict | None = None) -> None:
        self.name = name
        self.np = np
        try:
            self.cmd = npmpi_command(np, args)
        except FileNotFoundError as exc:
            pytest.fail(str(exc))
        self.started = time.monotonic()
        self.proc = subprocess.Popen(
            self.cmd,
            cwd=cwd,
            env=local_mpi_env(env),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            errors="replace",
        )
        self.out: list[str] = []
        self.err: list[str] = []
        self._readers = [
            threading.Thread(target=self._read, args=(self.proc.stdout, self.out), daemon=True),
            threading.Thread(target=self._read, args=(self.proc.stderr, self.err), daemon=True),
        ]
        for t in self._readers:
            t.start()
        self.ended_at: float | None = None

    @staticmethod
    def _read(stream, lines: list[str]) -> None:
        for line in stream:
            lines.append(line.rstrip("\n"))
        stream.close()

    @property
    def stdout(self) -> str:
        return "\n".join(self.out)

    @property
    def stderr(self) -> str:
        return "\n".join(self.err)

    def rows_printed(self) -> int:
        return sum(1 for line in list(self.out) if ROW_LINE.match(line))

    def wait_until(self, condition, timeout_s: float) -> bool:
        """Poll `condition()` until true (True), the job ends or the time is up (False)."""
        deadline = time.monotonic() + timeout_s
        while True:
            if condition():
                return True
            if self.proc.poll() is not None:
                return bool(condition())
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.005)

    def wait_for_rows(self, rows: int, timeout_s: float = 90) -> bool:
        return self.wait_until(lambda: self.rows_printed() >= rows, timeout_s)

    def rank_pids(self, timeout_s: float = 30) -> dict[int, int]:
        """{rank: pid} of every rank of the job (waits until all have started)."""
        found: dict[int, int] = {}

        def all_there() -> bool:
            found.clear()
            for pid in processes_named(self.name):
                rank = rank_of(pid)
                if rank is not None:
                    found[rank] = pid
            return len(found) == self.np

        self.wait_until(all_there, timeout_s)
        return dict(found)

    def wait(self, timeout_s: float) -> float:
        """Wait for mpirun to exit; returns the moment it ended (monotonic). Fails on a hang."""
        try:
            self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.kill_everything()
            pytest.fail(
                f"the job did not end within {timeout_s} s: {' '.join(self.cmd)}\n"
                f"stdout: {self.stdout[-2000:]}\nstderr: {self.stderr[-2000:]}"
            )
        self.ended_at = time.monotonic()
        for t in self._readers:
            t.join(timeout=10)
        return self.ended_at

    def leftovers(self, grace_s: float = 5.0) -> list[int]:
        """Processes of this job still alive `grace_s` after mpirun exited (should be none)."""
        deadline = time.monotonic() + grace_s
        while True:
            left = processes_named(self.name)
            if not left or time.monotonic() > deadline:
                return left
            time.sleep(0.05)

    def kill_everything(self) -> None:
        """Last resort after a failed test: SIGKILL mpirun and this job's ranks, by their PIDs."""
        with contextlib.suppress(ProcessLookupError):
            self.proc.kill()
        for pid in processes_named(self.name):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.kill_everything()


def check_run_file(path: Path, lower: int, upper: int, perturbation: int, at_least_rows: int) -> Run:
    """The file a stopped run left: readable, whole rows, sizes the start of the schedule."""
    run = load_run(path)
    pp = run.pingpong
    n = len(pp)
    assert n >= at_least_rows, f"{n} rows in the file, {at_least_rows} were printed before the stop"
    schedule = [p.size_bytes for p in netpipe_schedule(lower, upper, perturbation)]
    assert pp.size_bytes.tolist() == schedule[:n]
    assert run.attrs["sizes_completed"] >= n
    if n:
        assert np.all(pp.iterations >= 1) and np.all(pp.warmup_iterations >= 0)
        assert np.all(np.isfinite(pp.trial_s)) and np.all(pp.trial_s > 0)
        assert np.all(pp.trial_end_unix_s >= pp.trial_start_unix_s)
        assert np.all(np.diff(pp.trial_start_unix_s.ravel()) > 0)
        assert np.all(pp.data_verified)
    for node in run.power:
        for ch in node.channels:
            t = ch.time_unix_s
            # records that arrive together share their time of receipt (a Watts Up? after a stall)
            assert len(ch.power_w) == len(t) and np.all(np.diff(t) >= 0)
            assert len(ch.fault_message) == len(ch.fault_time_unix_s)
    return run


def analyze_in_process(capsys, path: Path) -> tuple[int, str, str]:
    """npmpi-analyze PATH in this process: (exit status, stdout, stderr)."""
    from npmpi_analysis.cli import main

    capsys.readouterr()
    code = main([str(path)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def assert_analysed_with_a_notice(code: int, out: str, err: str) -> None:
    assert "Traceback" not in out + err
    assert code == 0, err
    assert any(line.strip().startswith("notice:") for line in out.splitlines()), out


def no_traceback(*texts: str) -> bool:
    return all("Traceback" not in t for t in texts)


__all__ = [
    "Job",
    "analyze_in_process",
    "assert_analysed_with_a_notice",
    "check_run_file",
    "no_traceback",
    "processes_named",
    "rank_of",
]


def freeze_until_the_end(job: Job, ready, rank: int, within_s: float) -> tuple[float, list[str]]:
    """SIGSTOP `rank` once `ready()` holds (within 90 s), wait up to `within_s` for the job to end
    by itself, then SIGCONT and SIGKILL the stopped process whatever happened. Checks that no rank
    outlived the job and nothing printed a traceback; (seconds from the SIGSTOP to the end, the
    `npmpi: error:` lines: Open MPI's abort banner can end in a NUL byte that lands before the next
    line forwarded, so it is stripped)."""
    pid = None
    try:
        assert job.wait_until(ready, 90), job.stdout[-2000:] + job.stderr[-2000:]
        pid = job.rank_pids()[rank]
        os.kill(pid, signal.SIGSTOP)
        frozen_at = time.monotonic()
        ended = job.wait(within_s)
    finally:
        for sig in (signal.SIGCONT, signal.SIGKILL):
            with contextlib.suppress(ProcessLookupError, TypeError):
                os.kill(pid, sig)
        job.close()
    assert job.leftovers() == [], "a rank outlived the job"
    assert "Traceback" not in job.stdout + job.stderr
    errors = [ln.lstrip("\0") for ln in job.err if ln.lstrip("\0").startswith("npmpi: error:")]
    return ended - frozen_at, errors


def run_without_tripping(
    args: list[str],
    tmp_path: Path,
    name: str,
    within_s: float,
    stall_timeout_s: float,
    env: dict | None = None,
):
    """A job that must outlast --stall-timeout without the watchdog firing: it ends by itself, exit 0,
    nothing said of a stall; its file `complete` with the timeout stored and no bound fired. The
    file, open for the caller's own checks (closed by the caller)."""
    import h5py

    job = Job([*args, "-o", name], 2, tmp_path, name, env)
    try:
        job.wait(within_s)
    finally:
        job.close()
    assert job.proc.returncode == 0, job.stderr[-2000:]
    assert "stopped answering" not in job.stderr
    f = h5py.File(tmp_path / name)
    assert f.attrs["status"] == "complete", dict(f.attrs)
    assert f.attrs["stall_timeout_s"] == stall_timeout_s and "stall_bound_s" not in f.attrs
    return f
