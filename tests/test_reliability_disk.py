"""A full disk: the run stops at once with one line, the file is closed `failed` naming the cause,
and every size completed before the disk filled stays readable by npmpi-analyze.

The tests mount a small tmpfs of their own (root only; skipped with the reason otherwise) and fill
it at chosen moments: before the run, during the idle baseline, after some sizes, during the final
attributes. The writer alone is tested at many fill points in this process; a few real mpirun jobs
check the whole path (one error line, every rank ends, no crash of rank 0 at exit).
"""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
import threading
from pathlib import Path

import numpy as np
import pytest
from support.reliability import Job, analyze_in_process, check_run_file

from npmpi.core.errors import RunFileWriteError, UsageError
from npmpi.core.outpath import reserve_output
from npmpi.runfile.format import SAMPLE_FIELDS, SizeResult
from npmpi.runfile.reader import load_run
from npmpi.runfile.writecheck import RESERVED_BYTES
from npmpi.runfile.writer import RunWriter

TMPFS_BYTES = 4 << 20
NO_SPACE = os.strerror(errno.ENOSPC)  # "No space left on device"


@pytest.fixture
def tmpfs(tmp_path) -> Path:
    """A fresh 4 MiB tmpfs, mounted for this test."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs to fill needs root")
    mnt = tmp_path / "tmpfs"
    mnt.mkdir()
    proc = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={TMPFS_BYTES}", "tmpfs", str(mnt)],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def fill(directory: Path, leave: int = 0, name: str = "filler") -> int:
    """Write a file in `directory` until `leave` bytes are free (0: until the disk is full)."""
    st = os.statvfs(directory)
    target = max(st.f_bavail * st.f_frsize - leave, 0)
    written = 0
    block = b"\xa5" * 65536
    with open(directory / name, "ab", buffering=0) as f:
        while written < target or leave == 0:
            try:
                written += f.write(block[: min(len(block), target - written)] if leave else block)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                break
    return written


def row(k: int) -> SizeResult:
    t = 1.7e9 + k
    return SizeResult(k + 1, 10, 1, [1e-3] * 3, [t, t + 0.1, t + 0.2], [t + 0.01, t + 0.11, t + 0.21])


def new_writer(path: Path, power: bool) -> RunWriter:
    res = reserve_output(path, False, ballast_bytes=RESERVED_BYTES)
    w = RunWriter(path, {"kernel": "python"}, {"host": ["h", "h", "h"]}, 3, reservation=res)
    if power:
        w.create_power({}, [{"host": "h"}], [[{"kind": "estimate", "label": "estimated"}]])
    return w


def append_until_full(w: RunWriter, samples: int) -> int:
    """Append sizes (and `samples` power samples after each) until a write fails; sizes that made it."""
    with contextlib.suppress(RunFileWriteError):
        for k in range(100_000):
            w.append(row(k))
            if samples:
                t = 1.7e9 + k + np.arange(samples) / samples
                w.append_samples(0, 0, {n: t for n in SAMPLE_FIELDS}, [(t[0], "a fault")])
                w.flush()
    return w.rows


def check_failed_file(path: Path, sizes: int) -> None:
    run = load_run(path)
    assert run.status == "failed"
    assert NO_SPACE in run.attrs["status_message"], run.attrs["status_message"]
    assert len(run.pingpong) == sizes
    assert run.pingpong.size_bytes.tolist() == list(range(1, sizes + 1))
    for node in run.power:
        for ch in node.channels:
            assert len(ch.time_unix_s) == len(ch.power_w) and np.all(np.diff(ch.time_unix_s) > 0)


# free bytes left before the writer starts, from too few for the file's structure to room for hundreds
# of sizes; with 400 power samples after each size (five 32 KiB chunks may be allocated per flush)
FILL_POINTS = {
    0: [70_000, 90_000, 120_000, 150_000, 180_000, 250_000],
    400: [250_000, 350_000, 450_000, 600_000, 900_000, 1_300_000],
}


@pytest.mark.parametrize("samples", [0, 400], ids=["sizes", "sizes+samples"])
def test_the_writer_at_many_fill_points(tmpfs, samples):
    results = []
    for leave in FILL_POINTS[samples]:
        for p in tmpfs.iterdir():
            p.unlink()
        fill(tmpfs, RESERVED_BYTES + leave)
        path = tmpfs / "run.h5"
        try:
            w = new_writer(path, power=bool(samples))
        except RunFileWriteError as exc:  # no room for the file's structure: nothing is left behind
            assert NO_SPACE in str(exc)
            assert sorted(p.name for p in tmpfs.iterdir()) == ["filler"]
            results.append((leave, "refused"))
            continue
        sizes = append_until_full(w, samples)
        with pytest.raises(RunFileWriteError, match=NO_SPACE):
            w.finish("complete")
        check_failed_file(path, sizes)
        assert sorted(p.name for p in tmpfs.iterdir()) == ["filler", "run.h5"]  # no temporary, no lock
        results.append((leave, sizes))
    print(f"\nfree bytes -> sizes kept ({'with' if samples else 'without'} samples): {results}")
    kept = [r for _, r in results if r != "refused"]
    assert len(kept) >= 5 and kept == sorted(kept) and kept[-1] > kept[0]


def test_the_disk_fills_during_the_final_attributes(tmpfs):
    path = tmpfs / "run.h5"
    w = new_writer(path, power=True)
    for k in range(10):
        w.append(row(k))
    fill(tmpfs)
    with pytest.raises(RunFileWriteError, match=NO_SPACE):
        w.finish("complete", stopped_early="", notes="x" * 200_000)
    check_failed_file(path, 10)


def test_too_little_space_to_start_is_a_usage_error(tmpfs):
    fill(tmpfs, RESERVED_BYTES // 2)
    with pytest.raises(UsageError, match="KiB free"):
        reserve_output(tmpfs / "run.h5", False, ballast_bytes=RESERVED_BYTES)
    assert [p.name for p in tmpfs.iterdir()] == ["filler"]


def test_a_file_system_too_small_for_the_file_is_refused_at_start(tmpfs):
    """Issue 28, item 11: 300 KiB free held the 256 KiB reserve, then the run failed with exit 1."""
    from types import SimpleNamespace

    from npmpi.commands.agreement import Agreed, prepare_output
    from npmpi.core.outpath import release

    fill(tmpfs, 300 * 1024)
    opts = SimpleNamespace(output=str(tmpfs / "run.h5"), force=False, calibration=None)
    problem = prepare_output(opts, Agreed())
    assert problem is not None and "has less than 384 KiB free" in problem, problem
    assert [p.name for p in tmpfs.iterdir()] == ["filler"]
    (tmpfs / "filler").unlink()
    fill(tmpfs, 450 * 1024)  # enough: the run starts
    agreed = Agreed()
    assert prepare_output(opts, agreed) is None
    w = RunWriter(
        tmpfs / "run.h5", {"kernel": "python"}, {"host": ["h"] * 3}, 3, reservation=agreed.reservation
    )
    w.create_power({}, [{"host": "h"}], [[{"kind": "estimate", "label": "estimated"}]])
    w.append(row(0))
    w.finish("complete")
    assert load_run(tmpfs / "run.h5").status == "complete"
    release(agreed.reservation)


# ---------------------------------------------------------------- real runs

QUICK = ["--quick", "-u", "8M", "-p", "0"]


def _run_and_fill(tmpfs: Path, args: list[str], np_: int, when) -> tuple[Job, Path]:
    out = tmpfs / "run.h5"
    job = Job([*args, "-o", str(out)], np_, tmpfs.parent, name=str(out))
    try:
        assert job.wait_until(lambda: when(job), 60), job.stdout + job.stderr
        filler = threading.Thread(target=fill, args=(tmpfs,))
        filler.start()
        job.wait(60)
        filler.join(30)
    finally:
        job.close()
    return job, out


def _one_error_line(job: Job) -> str:
    lines = [ln for ln in job.err if ln.startswith("npmpi: error:")]
    assert len(lines) == 1, job.stderr
    assert "Exception ignored" not in job.stderr and "Traceback" not in job.stderr, job.stderr
    assert job.proc.returncode == 1, (job.proc.returncode, job.stderr)  # 139 would be a segfault
    assert job.leftovers() == []
    print(f"\n{lines[0]}")
    return lines[0]


@pytest.mark.mpi
@pytest.mark.timeout(180)
def test_a_run_whose_disk_fills_after_some_sizes(tmpfs, capsys):
    job, out = _run_and_fill(tmpfs, QUICK, 2, lambda j: j.rows_printed() >= 8)
    line = _one_error_line(job)
    assert NO_SPACE in line and "completed sizes are in" in line, line
    run = check_run_file(out, 1, 8 << 20, 0, at_least_rows=8)
    assert run.status == "failed" and NO_SPACE in run.attrs["status_message"]
    code, text, err = analyze_in_process(capsys, out)
    assert code == 0 and f"{len(run.pingpong)} sizes analysed" in text and "failed" in text, err


@pytest.mark.mpi
@pytest.mark.timeout(180)
def test_a_run_whose_disk_fills_during_the_baseline(tmpfs):
    args = [*QUICK, "--meter", "estimate", "--baseline", "2"]
    job, out = _run_and_fill(tmpfs, args, 3, lambda j: "idle baseline" in j.stdout)
    line = _one_error_line(job)
    assert NO_SPACE in line, line
    run = load_run(out)
    assert run.status == "failed" and NO_SPACE in run.attrs["status_message"]
    assert len(run.pingpong) == 0


@pytest.mark.mpi
@pytest.mark.timeout(120)
def test_a_run_without_room_to_start_exits_2(tmpfs):
    fill(tmpfs, RESERVED_BYTES // 2)
    out = tmpfs / "run.h5"
    job = Job([*QUICK, "-o", str(out)], 2, tmpfs.parent, name=str(out))
    try:
        job.wait(60)
    finally:
        job.close()
    lines = [ln for ln in job.err if ln.startswith("npmpi: error:")]
    assert job.proc.returncode == 2 and len(lines) == 1 and "KiB free" in lines[0], job.stderr
    assert [p.name for p in tmpfs.iterdir()] == ["filler"]


def test_a_write_that_fails_inside_hdf5_still_leaves_a_readable_file(tmpfs, monkeypatch):
    """Without the space check (another process filling the disk between the check and the write,
    a quota): HDF5's write fails, the chunk being written may lose its index entry, and the writer
    cuts every dataset to what is stored: the file stays readable, short of at most one chunk."""
    import npmpi.runfile.writecheck

    monkeypatch.setattr(npmpi.runfile.writecheck, "check_space", lambda *args: None)
    results = []
    for leave in (60_000, 180_000, 340_000):  # the failing chunk at three places
        for p in tmpfs.iterdir():
            p.unlink()
        fill(tmpfs, RESERVED_BYTES + leave)
        path = tmpfs / "run.h5"
        w = new_writer(path, power=False)
        flushed = append_until_full(w, 0)
        with pytest.raises(RunFileWriteError, match=NO_SPACE):
            w.finish("complete")
        run = load_run(path)  # never refused
        kept = len(run.pingpong)
        assert run.status == "failed" and NO_SPACE in run.attrs["status_message"]
        assert flushed - 256 <= kept <= flushed, (leave, flushed, kept)  # a chunk of 256 rows at most
        assert run.pingpong.size_bytes.tolist() == list(range(1, kept + 1))
        results.append((flushed, kept))
    print(f"\nwrites failing inside HDF5: (sizes flushed, sizes readable) {results}")
