"""A killed mpirun's session directory and the next mpirun given the same process id.

Open MPI 5's prterun keeps PMIx's rendezvous files in TMPDIR/ompi.PID and removes them when it ends;
a prterun that is killed leaves them. Process ids come round again (pid_max is 32768 here), and a
prterun that gets a leftover's id stops before any rank starts: "The PMIx server's listener thread
failed to start" (exit 213). The suite removes the directories of dead prteruns before every test
(conftest.py, support.launcher.sweep_stale_session_dirs); this test shows the failure and the cure
in a process-id namespace of its own, where the next ids are known (2, 3, …).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap

import pytest
from support.launcher import sweep_stale_session_dirs

PROBE = textwrap.dedent(
    """
    import os, subprocess, sys
    sys.path.insert(0, sys.argv[2])
    from support.launcher import local_mpi_env, mpirun_path, sweep_stale_session_dirs
    base = sys.argv[1]
    env = local_mpi_env({"TMPDIR": base})
    for pid in range(2, 300):  # what killed prteruns of these ids left (no fork until mpirun)
        d = os.path.join(base, f"ompi.{pid}")
        os.makedirs(d)
        for name in (f"pmix.vm.tool.{pid}", "pmix.vm.tool"):
            with open(os.path.join(d, name), "w") as f:
                f.write("prterun-vm-1@0.0;tcp4://127.0.0.1:1\\n")
    first = subprocess.run([mpirun_path(), "-np", "1", "true"], env=env, capture_output=True, text=True)
    swept = sweep_stale_session_dirs((base,))
    second = subprocess.run([mpirun_path(), "-np", "1", "true"], env=env, capture_output=True, text=True)
    failed = "listener thread failed to start" in first.stdout + first.stderr
    print(first.returncode, int(failed), len(swept), second.returncode)
    """
)


@pytest.mark.mpi
@pytest.mark.timeout(120)
def test_a_leftover_session_dir_stops_the_next_mpirun_until_it_is_swept(tmp_path):
    from pathlib import Path

    if shutil.which("unshare") is None:
        pytest.skip("unshare (util-linux) is not installed")
    tests = str(Path(__file__).resolve().parent)
    cmd = ["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-c", PROBE, str(tmp_path), tests]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=100, check=False)
    if proc.returncode != 0 and "unshare" in proc.stderr:
        pytest.skip(f"no process-id namespace here: {proc.stderr.strip()[:200]}")
    first, failed, swept, second = (int(x) for x in proc.stdout.split())
    assert (first, failed) == (213, 1), proc.stdout + proc.stderr  # the leftover stopped prterun
    # swept (all but the ids of the first job's processes, zombies of the namespace's first process
    # until it ends), and the next prterun starts
    assert swept >= 290 and second == 0, proc.stdout + proc.stderr


def test_the_sweep_keeps_a_live_process_s_directory_and_other_files(tmp_path):
    import os

    live = tmp_path / f"ompi.{os.getpid()}"
    dead = tmp_path / "ompi.999999999"  # above any pid_max
    for d in (live, dead):
        d.mkdir()
        (d / "pmix.vm.tool").write_text("x")
    (tmp_path / "ompi.notapid").mkdir()
    (tmp_path / "ompi.12345678901").write_text("a file, not a directory")
    assert sweep_stale_session_dirs((str(tmp_path),)) == [str(dead)]
    assert live.exists() and (tmp_path / "ompi.notapid").exists() and not dead.exists()
    assert (tmp_path / "ompi.12345678901").exists()
