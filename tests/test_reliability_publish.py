"""Never a false status (issue 28, item 2): after its last write the writer checks that the run or
map file's path still leads to the file it wrote. A directory removed during the run: exit 1, the
data is lost, said in one line; renamed (and another made in its place): exit 1 naming where the data
is. Never "status complete" with a path that holds nothing, or another file.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import time

import h5py
import numpy as np
import pytest
from support.launcher import local_mpi_env, npmpi_command
from support.mapcells import map_spec

from npmpi.core.errors import RunFileGone
from npmpi.runfile.format import SizeResult
from npmpi.runfile.mapwriter import MapWriter
from npmpi.runfile.reader import load_run
from npmpi.runfile.writer import RunWriter

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


def test_a_map_stopped_by_a_full_disk_is_failed_everywhere_with_one_count(tmp_path):
    """Issue 28, item 9: root and /map `failed`, /map's rounds_completed the rounds written."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs to fill needs root")
    mnt = tmp_path / "tmpfs"
    mnt.mkdir()
    mount = ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mnt)]
    if subprocess.run(mount, capture_output=True, check=False).returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    try:
        _fill_during_a_map(mnt)
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def _fill_during_a_map(mnt) -> None:
    from npmpi.core.errors import RunFileWriteError
    from npmpi.core.outpath import reserve_output
    from npmpi.runfile.mapwriter import PairResult
    from npmpi.runfile.writecheck import RESERVED_BYTES

    n, sizes = 4, [1, 1024, 65536]
    spec = map_spec(
        [f"h{k}" for k in range(n)], sizes, [[(i, j)] for i in range(n) for j in range(i + 1, n)], "serial"
    )
    path = mnt / "m.h5"
    res = reserve_output(path, False, ballast_bytes=RESERVED_BYTES)
    w = MapWriter(path, {"kernel": "python"}, {"host": spec["hosts"]}, 2, map_spec=spec, reservation=res)
    pairs = [(i, j) for i in range(n) for j in range(i + 1, n)]
    for r in range(4):
        w.store_round(0, r, (10.0 + r, 10.5 + r), [PairResult(*pairs[r], 100, 30, np.array([2e-3, 1e-3]))])
    with open(mnt / "filler", "wb", buffering=0) as filler, contextlib.suppress(OSError):  # the disk full
        while True:
            filler.write(b"\xa5" * 65536)
    with pytest.raises(RunFileWriteError):
        for r in range(4, 6):
            w.store_round(
                0, r, (10.0 + r, 10.5 + r), [PairResult(*pairs[r], 100, 30, np.array([2e-3, 1e-3]))]
            )
    assert w.rounds_completed == 4
    with pytest.raises(RunFileWriteError):
        w.finish("failed", "disk full")
    with h5py.File(path) as f:
        assert f.attrs["status"] == "failed" and f["map"].attrs["status"] == "failed"
        assert f["map"].attrs["rounds_completed"] == w.rounds_completed == 4


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
