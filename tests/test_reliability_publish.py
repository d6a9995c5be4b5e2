"""Never a false status (issue 28, item 2): after its last write the writer checks that the run or
map file's path still leads to the file it wrote. A directory removed during the run: exit 1, the
data is lost, said in one line; renamed (and another made in its place): exit 1 naming where the data
is. Never "status complete" with a path that holds nothing, or another file.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

import h5py
import numpy as np
import pytest

from npmpi.errors import RunFileGone
from npmpi.launcher import local_mpi_env, npmpi_command
from npmpi.mapfile import MapWriter
from npmpi.runfile import RunWriter, SizeResult, load_run

LAYOUT = {"host": ["a", "a"], "node_index": [0, 0], "role": ["transmitter", "reflector"]}


def _row(size: int) -> SizeResult:
    return SizeResult(size, 10, 2, [0.01, 0.012], [1000.0, 1001.0], [1000.01, 1001.012])


def _writer(path) -> RunWriter:
    w = RunWriter(path, {"kernel": "python", "options_json": {"trials": 2}}, LAYOUT, 2)
    w.append(_row(1))
    w.append(_row(2))
    return w


def test_the_path_still_leading_to_the_file_is_no_error(tmp_path):
    (tmp_path / "d").mkdir()
    _writer(tmp_path / "d" / "r.h5").finish("complete")
    assert load_run(tmp_path / "d" / "r.h5").status == "complete"


def test_a_directory_removed_during_the_run_says_the_data_is_lost(tmp_path):
    (tmp_path / "d").mkdir()
    w = _writer(tmp_path / "d" / "r.h5")
    shutil.rmtree(tmp_path / "d")
    with pytest.raises(RunFileGone, match=r"no longer leads to the file written: .*the data with it is lost"):
        w.finish("complete")


@pytest.mark.parametrize("recreate", [False, True])
def test_a_directory_renamed_during_the_run_names_where_the_data_is(tmp_path, recreate):
    (tmp_path / "d").mkdir()
    w = _writer(tmp_path / "d" / "r.h5")
    os.rename(tmp_path / "d", tmp_path / "moved")
    if recreate:  # another directory of the same name, even a file of the same name in it
        (tmp_path / "d").mkdir()
        (tmp_path / "d" / "r.h5").write_bytes(b"someone else's")
    with pytest.raises(RunFileGone) as gone:
        w.finish("complete")
    assert str(gone.value).endswith(f"the data is in {tmp_path / 'moved' / 'r.h5'}"), gone.value
    run = load_run(tmp_path / "moved" / "r.h5")
    assert run.status == "complete" and run.pingpong.size_bytes.tolist() == [1, 2]
    if recreate:
        assert (tmp_path / "d" / "r.h5").read_bytes() == b"someone else's"


def test_a_map_file_is_checked_the_same_way(tmp_path):
    (tmp_path / "d").mkdir()
    spec = {
        "attrs": {
            "schedule": "rounds",
            "per_rank": True,
            "kernel": "python",
            "mode": "pingpong",
            "window": 1,
        },
        "hosts": ["a", "b"],
        "ranks": [0, 1],
        "sizes": [1],
        "rounds_matrix": np.zeros((2, 2), dtype=np.int64),
        "n_rounds": 1,
    }
    w = MapWriter(tmp_path / "d" / "m.h5", {"kernel": "python"}, {"host": ["a", "b"]}, 2, map_spec=spec)
    os.rename(tmp_path / "d", tmp_path / "moved")
    with pytest.raises(RunFileGone, match=r"the data is in .*moved/m\.h5"):
        w.finish("complete")
    with h5py.File(tmp_path / "moved" / "m.h5") as f:
        assert f.attrs["status"] == "complete" and f["map"].attrs["status"] == "complete"


@pytest.mark.mpi
@pytest.mark.timeout(120)
def test_a_run_whose_directory_is_removed_exits_1_saying_the_data_is_lost(tmp_path):
    """Under mpirun: the directory is removed while the run sweeps; one line, exit 1, never complete."""
    out = tmp_path / "out"
    out.mkdir()
    # the idle baselines (1 s before and after a sweep of 16 sizes) keep the run going after the file
    # appears, however loaded the machine
    args = ["--quick", "-u", "16", "--meter", "estimate", "--baseline", "1", "-o", str(out / "r.h5")]
    cmd = npmpi_command(3, args)
    proc = subprocess.Popen(
        cmd, env=local_mpi_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path
    )
    deadline = time.monotonic() + 60
    while not (out / "r.h5").exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.02)
    shutil.rmtree(out)
    try:
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    errors = [ln for ln in stderr.splitlines() if ln.startswith("npmpi: error:")]
    assert proc.returncode == 1, (stdout, stderr)
    assert len(errors) == 1 and "the data with it is lost" in errors[0], stderr
    assert "status complete" not in stdout and "Traceback" not in stdout + stderr
    print(f"\nremoved directory: exit {proc.returncode}: {errors[0]}", file=sys.stderr)
