"""`--resume FILE` (npmpi/map/resume.py, issue 44): a map stopped by its time limit continued from its
last complete round into a new file, the rounds copied as they were and the rest measured; a FILE
of another map (members, sizes, options, schedule), a complete one, one that is not a map or the
output itself refused in one line with exit status 2 on every rank."""

from __future__ import annotations

import shutil
from pathlib import Path

import h5py
import numpy as np
import pytest
from support.mapcells import dense_map

MAP = ["map", "--per-rank", "--sizes", "1,64K", "--trials", "3", "--confirm", "0"]


def _stopped(npmpi_run, tmp_path):
    """A map the time limit stopped after its first round (as tests/test_map_plan.py's)."""
    proc = npmpi_run([*MAP, "--target-time", "0.2", "--max-minutes", "0.01", "-o", "a.h5"], np=4, timeout=80)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    with h5py.File(tmp_path / "a.h5") as f:
        assert f["map"].attrs["status"] == "interrupted" and f["map"].attrs["rounds_completed"] == 1
    return tmp_path / "a.h5"


@pytest.mark.mpi
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


@pytest.mark.mpi
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
    assert proc.returncode == 2 and "another map: 4 members and 2 sizes, this one's 3 and 2" in proc.stderr


def test_what_cannot_be_resumed_is_said_before_anything_is_read(tmp_path):
    """In process: a map of format 1.x, a file with no map, a map whose hosts claim a billion
    members (refused by the shapes, nothing read), a damaged file; each one line."""
    from support.mapcells import map_spec

    from npmpi.map.resume import Resume, resume_problem
    from npmpi.map.schedule import circle_rounds
    from npmpi.runfile.mapwriter import MapWriter, PairResult

    rounds = circle_rounds(4)
    want = {"schedule": "rounds", "per_rank": True, "kernel": "python", "mode": "pingpong", "window": 1}
    want.update(directions="one", trials=3, pairs_plan="all")
    names, sizes = [f"h{k}" for k in range(4)], [1, 64]

    def check(path, output="out.h5"):
        return resume_problem(str(path), str(tmp_path / output), want, names, sizes, rounds)

    spec = map_spec(names, sizes, rounds, directions="one", pairs_plan="all")
    w = MapWriter(tmp_path / "m.h5", {"kernel": "python"}, {"host": names}, 3, map_spec=spec)
    w.store_round(0, 0, (1.0, 2.0), [PairResult(i, j, 10, 2, np.full(3, 1e-3)) for i, j in rounds[0]])
    w.finish("interrupted", "test")
    assert check(tmp_path / "m.h5") == Resume(str(tmp_path / "m.h5"), 1)
    data = Path(__file__).parent / "data" / "maps" / "map_1_11_pp.h5"
    assert "a map of format 1.x (dense matrices) cannot be resumed" in check(data)
    with h5py.File(tmp_path / "run.h5", "w") as f:
        f.attrs["format"] = "npmpi-run"
    assert "not a map file (no /map)" in check(tmp_path / "run.h5")
    shutil.copy(tmp_path / "m.h5", tmp_path / "big.h5")
    with h5py.File(tmp_path / "big.h5", "r+") as f:
        del f["map/hosts"]
        f["map"].create_dataset("hosts", (10**9,), dtype=h5py.string_dtype(), chunks=(1024,))
    said = check(tmp_path / "big.h5")
    assert "another map: 1000000000 members and 2 sizes, this one's 4 and 2" in said
    (tmp_path / "bad.h5").write_bytes(b"\x89HDF\r\n\x1a\n" + b"\0" * 64)
    said = check(tmp_path / "bad.h5")
    assert said.startswith("--resume: ") and "\n" not in said
    assert "needs another --output" in check(tmp_path / "m.h5", "m.h5")
