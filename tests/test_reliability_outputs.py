"""Output paths (issue 15): checked by creating the file at start-up, one writer per path, links
never followed, atomic publication.

In this process: the temporary file's name and mode, long names, a read-only mount, links planted
at the temporary or the target, a second writer on a path being written. Under mpirun: two runs
on one path at once, the second with --force, and `calibrate` refusing its output at once.
"""

from __future__ import annotations

import os
import stat
import subprocess
import time
from pathlib import Path

import pytest
from support.reliability import Job

from npmpi.core.errors import UsageError
from npmpi.core.outpath import LOCK_PREFIX, TEMP_PREFIX, publish, release, reserve_output
from npmpi.runfile.format import SizeResult
from npmpi.runfile.reader import load_run
from npmpi.runfile.writer import RunWriter

LAYOUT = {"host": ["h", "h"], "node_index": [0, 0], "role": ["transmitter", "reflector"]}


def row(k: int) -> SizeResult:
    return SizeResult(k, 10, 1, [1e-3] * 3, [1.0, 2.0, 3.0], [1.5, 2.5, 3.5])


def names(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def test_the_temporary_is_short_unpredictable_locked_and_0644(tmp_path):
    target = tmp_path / ("r" * 240 + ".h5")
    a = reserve_output(target, False)
    b = reserve_output(tmp_path / "other.h5", False)
    try:
        for res in (a, b):
            assert res.temp.parent == tmp_path and res.temp.name.startswith(TEMP_PREFIX)
            assert len(res.temp.name) < 32 and str(os.getpid()) not in res.temp.name
            st = os.lstat(res.temp)
            assert stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o644 & ~_umask()
        assert a.temp != b.temp
        assert len([n for n in names(tmp_path) if n.startswith(LOCK_PREFIX)]) == 2
    finally:
        release(a)
        release(b)
    assert names(tmp_path) == []  # nothing published, nothing left: no temporary, no lock


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_a_legal_248_character_name_works_and_a_300_character_one_is_refused(tmp_path):
    name = "b" * 245 + ".h5"
    w = RunWriter(tmp_path / name, {}, LAYOUT, 3)
    w.append(row(1))
    w.finish("complete")
    assert names(tmp_path) == [name] and len(load_run(tmp_path / name).pingpong) == 1
    with pytest.raises(UsageError, match="longer than the file system allows"):
        reserve_output(tmp_path / ("c" * 300), False)
    assert names(tmp_path) == [name]


def test_proc_and_sys_are_refused_by_trying(tmp_path):
    for path in ("/proc/x.h5", "/sys/x.h5", "/proc/self/x"):
        with pytest.raises(UsageError, match="cannot create a file in"):
            reserve_output(path, True)


def test_a_read_only_mount_is_refused_at_once(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("mounting a read-only tmpfs needs root")
    mnt = tmp_path / "ro"
    mnt.mkdir()
    proc = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs", str(mnt)],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip()}")
    try:
        with pytest.raises(UsageError, match="Read-only file system"):
            reserve_output(mnt / "run.h5", False)
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


@pytest.mark.parametrize("kind", ["device", "fifo", "link-to-file", "dangling-link", "directory"])
def test_non_regular_targets_are_refused_even_with_force(tmp_path, kind):
    victim = tmp_path / "victim"
    victim.write_text("keep")
    target = tmp_path / "run.h5"
    if kind == "device":
        target = Path("/dev/null")
    elif kind == "fifo":
        os.mkfifo(target)
    elif kind == "link-to-file":
        target.symlink_to(victim)
    elif kind == "dangling-link":
        target.symlink_to(tmp_path / "nowhere")
    else:
        target.mkdir()
    before = os.lstat(target)
    with pytest.raises(UsageError, match=r"not a regular file|symbolic link|is a directory"):
        RunWriter(target, {}, LAYOUT, 3, overwrite=True)
    after = os.lstat(target)
    assert (after.st_ino, after.st_mode) == (before.st_ino, before.st_mode)
    assert victim.read_text() == "keep"
    assert [n for n in names(tmp_path) if n.startswith(".npmpi")] == []


def test_a_link_planted_at_the_target_before_publication_is_not_followed(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("keep")
    target = tmp_path / "run.h5"
    res = reserve_output(target, True)
    target.symlink_to(victim)  # planted between the start-up check and the publication
    with pytest.raises(UsageError, match="symbolic link"):
        RunWriter(target, {}, LAYOUT, 3, overwrite=True, reservation=res)
    assert victim.read_text() == "keep" and target.is_symlink()
    assert [n for n in names(tmp_path) if n.startswith(".npmpi")] == []


def test_a_link_planted_at_the_temporary_is_never_written_through_nor_published(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("keep")
    target = tmp_path / "run.h5"
    res = reserve_output(target, False)
    os.unlink(res.temp)
    res.temp.symlink_to(victim)  # someone with write access to the directory swaps it for a link
    with pytest.raises(UsageError, match=r"temporary file .* was replaced"):
        RunWriter(target, {}, LAYOUT, 3, reservation=res)
    assert victim.read_text() == "keep"  # HDF5 wrote through the open descriptor, not the name
    assert not target.exists() and res.temp.is_symlink()


def test_the_old_predictable_name_is_harmless(tmp_path):
    """The pre-issue-15 writer followed a link planted at `.NAME.creating-PID`."""
    victim = tmp_path / "victim"
    victim.write_text("keep")
    for pid in range(os.getpid() - 2, os.getpid() + 3):
        (tmp_path / f".run.h5.creating-{pid}").symlink_to(victim)
    w = RunWriter(tmp_path / "run.h5", {}, LAYOUT, 3)
    w.finish("complete")
    assert victim.read_text() == "keep" and not (tmp_path / "run.h5").is_symlink()


def test_a_second_writer_never_replaces_a_file_being_written(tmp_path):
    target = tmp_path / "run.h5"
    first = RunWriter(target, {"who": "first"}, LAYOUT, 3)
    first.append(row(1))
    for overwrite in (False, True):
        with pytest.raises(UsageError, match="another npmpi run is writing this file"):
            RunWriter(target, {"who": "second"}, LAYOUT, 3, overwrite=overwrite)
    first.append(row(2))
    first.finish("complete")
    run = load_run(target)
    assert run.attrs["who"] == "first" and len(run.pingpong) == 2
    # finished: --force replaces it, without --force it stays
    with pytest.raises(FileExistsError):
        RunWriter(target, {"who": "second"}, LAYOUT, 3)
    second = RunWriter(target, {"who": "second"}, LAYOUT, 3, overwrite=True)
    second.finish("complete")
    assert load_run(target).attrs["who"] == "second"
    assert names(tmp_path) == ["run.h5"]


def test_two_reservations_of_one_name_before_either_is_published(tmp_path):
    target = tmp_path / "run.h5"
    first = reserve_output(target, True)
    with pytest.raises(UsageError, match="another npmpi run is writing this file"):
        reserve_output(target, True)
    publish(first)
    release(first)
    second = reserve_output(target, True)  # the first has ended: its name is free again
    release(second)


# ---------------------------------------------------------------- under mpirun

SLOW_SWEEP = ["--quick", "-u", "8M", "--target-time", "0.02"]


@pytest.mark.mpi
@pytest.mark.timeout(300)
def test_two_forced_runs_on_one_path_the_second_refuses(tmp_path):
    out = tmp_path / "run.h5"
    first = Job(
        [*SLOW_SWEEP, "-o", str(out)], 2, tmp_path, name=f"{out}-first", env={"NPMPI_TEST_TAG": "first"}
    )
    second = None
    try:
        assert first.wait_for_rows(3, 90), first.stderr
        t0 = time.monotonic()
        second = Job(["--quick", "-u", "1K", "-o", str(out), "--force"], 2, tmp_path, name=str(out) + " ")
        second.wait(60)
        refused_in = time.monotonic() - t0
        first.wait(180)
    finally:
        first.close()
        if second is not None:
            second.close()
    lines = [ln for ln in second.err if ln.startswith("npmpi: error:")]
    assert second.proc.returncode == 2 and len(lines) == 1, second.stderr
    assert "another npmpi run is writing this file" in lines[0]
    assert first.proc.returncode == 0, first.stderr
    run = load_run(out)
    assert run.status == "complete" and len(run.pingpong) >= 20  # the first run's whole sweep
    assert names(tmp_path) == ["run.h5"]
    print(f"\nsecond run refused in {refused_in:.1f} s: {lines[0]}")


@pytest.mark.mpi
@pytest.mark.timeout(120)
def test_calibrate_refuses_an_unwritable_output_before_measuring(tmp_path):
    t0 = time.monotonic()
    job = Job(
        ["calibrate", "--meter", "estimate", "-o", "/proc/cal.json"], 3, tmp_path, name="/proc/cal.json"
    )
    try:
        job.wait(60)
    finally:
        job.close()
    lines = [ln for ln in job.err if ln.startswith("npmpi: error:")]
    assert job.proc.returncode == 2 and len(lines) == 1 and "cannot create a file in /proc" in lines[0], (
        job.stderr
    )
    assert time.monotonic() - t0 < 30  # the measurement alone takes 60 s


def test_what_a_killed_run_left_is_removed_by_the_next_but_never_a_live_runs(tmp_path):
    live = reserve_output(tmp_path / "live.h5", False, ballast_bytes=65536)
    old = time.time() - 3600
    stale = [
        tmp_path / ".npmpi-abcd1234.tmp",
        tmp_path / ".npmpi-abcd1234.reserve",
        tmp_path / ".npmpi-lock-0123456789abcdef",
    ]
    for p in stale:
        p.write_bytes(b"\0" * 100)
    # issue 37: a file just left by a killed run goes too (it was kept for a minute): no process
    # holds its lock, and a file being made is locked before its maker trusts it (_locked_temp)
    young = tmp_path / ".npmpi-young123.reserve"
    young.write_bytes(b"")
    other = tmp_path / ".npmpi-notes.txt"  # not a name npmpi makes
    other.write_text("keep")
    for p in [*stale, other, live.temp, live.ballast, live.lock_path]:
        os.utime(p, (old, old), follow_symlinks=False)
    second = reserve_output(tmp_path / "next.h5", False)
    try:
        assert not any(p.exists() for p in [*stale, young])
        assert other.exists()
        assert live.temp.exists() and live.ballast.exists() and live.lock_path.exists()
    finally:
        release(second)
        release(live)
    assert names(tmp_path) == [other.name]
