"""`--resume FILE` (npmpi/map/resume.py, issue 44): a map stopped by its time limit continued from its
last complete round into a new file, the rounds copied as they were and the rest measured; a FILE
of another map (members, sizes, options, schedule), a complete one, one that is not a map or the
output itself refused in one line with exit status 2 on every rank."""

from __future__ import annotations

import shutil

import h5py
import numpy as np
import pytest
from support.mapcells import dense_map

pytestmark = pytest.mark.mpi

MAP = ["map", "--per-rank", "--sizes", "1,64K", "--trials", "3", "--confirm", "0"]


def _stopped(npmpi_run, tmp_path):
    """A map the time limit stopped after its first round (as tests/test_map_plan.py's)."""
    proc = npmpi_run([*MAP, "--target-time", "0.2", "--max-minutes", "0.01", "-o", "a.h5"], np=4, timeout=80)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    with h5py.File(tmp_path / "a.h5") as f:
        assert f["map"].attrs["status"] == "interrupted" and f["map"].attrs["rounds_completed"] == 1
    return tmp_path / "a.h5"


@pytest.mark.timeout(150)
def test_an_interrupted_map_is_resumed_into_a_new_file_and_completed(npmpi_run, tmp_path, capsys):
    old = _stopped(npmpi_run, tmp_path)
    proc = npmpi_run([*MAP, "--target-time", "0.02", "--resume", "a.h5", "-o", "b.h5"], np=4, timeout=80)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "Traceback" not in out, out
    assert "resuming a.h5: its 1 completed rounds copied, 5 rounds left to measure" in proc.stdout
    with h5py.File(old) as f, h5py.File(tmp_path / "b.h5") as g:
        a, b = f["map"], g["map"]
        assert b.attrs["status"] == "complete" and b.attrs["rounds_completed"] == 6
        assert b.attrs["resumed_rounds"] == 1 and str(b.attrs["resumed_from"]).endswith("/a.h5")
        first = int(a["round_first_row"][1])  # round 0 of size 0: copied as it was
        for name in ("trial_s", "iterations", "bytes_moved", "pair_window_s", "runq_wait_s"):
            np.testing.assert_array_equal(b[name][0, :first], a[name][0, :first])
        assert b["window_start_unix_s"][0, 0] == a["window_start_unix_s"][0, 0]
        assert (b["window_start_unix_s"][0, 1:] > a["window_start_unix_s"][0, 0]).all()
        t = dense_map(b)["trial_s"]
        assert np.isfinite(t[:, ~np.eye(4, dtype=bool)]).all()  # every pair, every size
    from npmpi_analysis.cli import main

    capsys.readouterr()
    code = main([str(tmp_path / "b.h5")])
    got = capsys.readouterr()
    assert code == 0 and "pairs measured: 6/6 at 1 B, 6/6 at 64 KiB" in got.out, got.out + got.err
    assert "notice: the map was resumed (--resume): its first 1 round(s) were copied from " in got.out


@pytest.mark.timeout(200)
def test_a_resume_file_of_another_map_is_refused_in_one_line(npmpi_run, tmp_path):
    _stopped(npmpi_run, tmp_path)
    shutil.copy(tmp_path / "a.h5", tmp_path / "done.h5")
    with h5py.File(tmp_path / "done.h5", "r+") as f:
        f["map"].attrs["status"] = "complete"
    fast = ["--target-time", "0.02"]
    cases = [
        (
            [*MAP, *fast, "--sizes", "1,4K"],
            "a.h5",
            "another map: its sizes are [1, 65536], this one's [1, 4096]",
        ),
        ([*MAP, *fast, "--trials", "5"], "a.h5", "another map: its trials is '3', this one's '5'"),
        ([*MAP, *fast, "--mode", "stream"], "a.h5", "another map: its mode is 'pingpong'"),
        ([*MAP, *fast], "done.h5", "the map is complete: nothing to resume"),
        ([*MAP, *fast], "nowhere.h5", "nowhere.h5: no such file"),
        ([*MAP, *fast], "out.h5", "needs another --output"),
    ]
    (tmp_path / "out.h5").write_bytes((tmp_path / "a.h5").read_bytes())
    for args, resume, says in cases:
        proc = npmpi_run([*args, "--resume", resume, "-o", "out.h5", "--force"], np=4, timeout=60)
        lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("npmpi: error:")]
        assert proc.returncode == 2 and "Traceback" not in proc.stdout + proc.stderr, proc.stderr
        assert (
            len(lines) == 1
            and f"--resume {resume}: " in lines[0].replace("--resume: ", "--resume ")
            and says in lines[0]
        )
    proc = npmpi_run([*MAP, *fast, "--resume", "a.h5", "-o", "c.h5"], np=3, timeout=60)  # 3 members
    assert proc.returncode == 2 and "another map: its members are 4" in proc.stderr, proc.stderr
