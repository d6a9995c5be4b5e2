"""Buffer arrangements (--buffers), huge pages (--huge-pages) and MPI thread levels (--thread-level):
the allocator and /proc/self/smaps reading, the launcher-based power-rank prediction, the option
checks, and real mpirun jobs that store what each rank got."""

from __future__ import annotations

import numpy as np
import pytest

from npmpi.commands.threadlevel import level_problem, local_position, requested_level
from npmpi.core import buffers
from npmpi.core.errors import UsageError
from npmpi.persize.kernels import Kernel
from npmpi.persize.messageloop import MessageLoop, Patterns
from npmpi.run.options import parse_options
from npmpi.runfile.reader import load_run

MPI_TIMEOUT = 90
TINY = ["-u", "64K", "-p", "0", "--trials", "2", "--repeats", "6"]
THP = buffers.thp_policy() in ("always", "madvise")


# ---------------------------------------------------------------- allocation and huge pages


@pytest.mark.parametrize("choice", buffers.HUGE_PAGE_CHOICES)
@pytest.mark.parametrize("nbytes", [1, 4095, 65536, 3 << 20])
def test_allocate_gives_zeroed_aligned_writable_buffers(choice, nbytes):
    if choice == "on" and not THP:
        pytest.skip("transparent huge pages are off on this machine")
    buf = buffers.allocate(nbytes, choice, buffers.NETPIPE_ALIGN_BYTES)
    assert buf.dtype == np.uint8 and buf.size == nbytes and buf.flags.writeable
    assert buf.ctypes.data % buffers.NETPIPE_ALIGN_BYTES == 0
    if choice == "on":
        assert buf.ctypes.data % buffers.huge_page_size_bytes() == 0
    assert not buf.any()
    buf[:] = 7
    assert int(buf.sum()) == 7 * nbytes


@pytest.mark.skipif(not THP, reason="transparent huge pages are off on this machine")
def test_huge_pages_on_and_off_are_what_the_kernel_reports():
    hp = buffers.huge_page_size_bytes()
    on = buffers.allocate(4 * hp, "on")
    off = buffers.allocate(4 * hp, "off")
    got_on = buffers.huge_page_bytes([on])
    assert got_on > 0 and got_on % hp == 0, got_on  # khugepaged or the fault gave at least one
    assert buffers.huge_page_bytes([off]) == 0
    # one small buffer with "on" is rounded up to a whole huge page
    assert buffers.huge_page_bytes([buffers.allocate(100, "on")]) in (0, hp)


def test_huge_page_bytes_reads_smaps_and_counts_each_map_once(tmp_path):
    a = np.zeros(10, dtype=np.uint8)
    b = a[5:]
    start = a.ctypes.data - 4096
    smaps = tmp_path / "smaps"
    smaps.write_text(
        "00400000-00452000 r-xp 00000000 08:02 173521 /usr/bin/python3\n"
        "Size:                328 kB\nAnonHugePages:       999 kB\n"
        f"{start:x}-{start + (8 << 20):x} rw-p 00000000 00:00 0 \n"
        "Size:               8192 kB\nRss:                8192 kB\nAnonHugePages:      6144 kB\n"
    )
    assert buffers.huge_page_bytes([a, b], smaps) == 6144 * 1024
    other = tmp_path / "other"
    other.write_text("00400000-00452000 r-xp 00000000 08:02 173521 /usr/bin/python3\nAnonHugePages: 0 kB\n")
    assert buffers.huge_page_bytes([a], other) == -1  # the buffer's map is not listed
    assert buffers.huge_page_bytes([a], tmp_path / "missing") == -1
    assert buffers.huge_page_bytes([]) == 0


def test_huge_pages_problem_names_the_policy(monkeypatch, tmp_path):
    monkeypatch.setattr(buffers, "THP_DIR", tmp_path)
    (tmp_path / "enabled").write_text("always madvise [never]\n")
    assert buffers.thp_policy() == "never"
    problem = buffers.huge_pages_problem("on")
    assert "never" in problem and "--huge-pages system" in problem
    assert buffers.huge_pages_problem("off") is None and buffers.huge_pages_problem("system") is None
    (tmp_path / "enabled").write_text("always [madvise] never\n")
    assert buffers.huge_pages_problem("on") is None
    monkeypatch.setattr(buffers, "THP_DIR", tmp_path / "absent")
    assert buffers.thp_policy() == "unavailable"


# ---------------------------------------------------------------- one buffer per size (netpipe)


def _loop(transmitter: bool, arrangement: str) -> MessageLoop:
    opts = parse_options(["-u", "4K", "--buffers", arrangement])
    no_loops = Kernel("none", None, None, None, 0)  # these tests never call a loop
    return MessageLoop(opts, no_loops, transmitter=transmitter)


def test_netpipe_arrangement_uses_one_fresh_aligned_buffer_per_size():
    patterns = Patterns(8192)
    tx, rx = _loop(True, "netpipe"), _loop(False, "netpipe")
    tx.set_size(1000, patterns, 0)
    rx.set_size(1000, patterns, 1)
    assert tx.sbuf is tx.rbuf and rx.sbuf is rx.rbuf and tx.sbuf.size == 1000
    assert tx.sbuf.ctypes.data % buffers.NETPIPE_ALIGN_BYTES == 0
    assert patterns.matches(tx.sbuf, 0, 1000) and not rx.rbuf.any()
    first = tx.sbuf
    tx.set_size(3000, patterns, 0)
    assert tx.sbuf is not first and tx.sbuf.size == 3000
    # the transmitter's buffer must keep what it sends: clearing it before a trial does nothing
    tx.clear_received(0, 1)
    assert patterns.matches(tx.sbuf, 0, 3000)
    # both sides expect the transmitter's pattern (the reflector sent back what it received)
    rx.set_size(3000, patterns, 1)
    rx.rbuf[:] = patterns.expected(0, 3000)
    assert tx.received_ok(patterns, 1, 0, 5) and rx.received_ok(patterns, 0, 0, 5)
    tx.sbuf[1500] ^= 0xFF  # a corrupted echo
    assert not tx.received_ok(patterns, 1, 0, 5)
    rx.clear_received(0, 1)
    assert not rx.rbuf.any() and not rx.received_ok(patterns, 0, 0, 5)


def test_separate_arrangement_keeps_two_long_lived_buffers():
    patterns = Patterns(8192)
    tx = _loop(True, "separate")
    s, r = tx.sbuf, tx.rbuf
    assert s is not r and s.size == r.size == 4096 + 3
    tx.set_size(100, patterns, 0)
    assert tx.sbuf is s and tx.rbuf is r and patterns.matches(s, 0, 100) and not r[:100].any()
    assert tx.huge_page_bytes() >= -1


# ---------------------------------------------------------------- thread levels


@pytest.mark.parametrize(
    "env,want",
    [
        ({"OMPI_COMM_WORLD_LOCAL_RANK": "2", "OMPI_COMM_WORLD_LOCAL_SIZE": "3"}, (2, 3)),
        ({"MPI_LOCALRANKID": "0", "MPI_LOCALNRANKS": "4"}, (0, 4)),
        (
            {
                "SLURM_LOCALID": "1",
                "SLURM_NODEID": "2",
                "SLURM_STEP_ID": "0",
                "SLURM_STEP_TASKS_PER_NODE": "3(x2),2",
            },
            (1, 2),
        ),
        ({"SLURM_LOCALID": "0", "SLURM_NODEID": "0", "SLURM_TASKS_PER_NODE": "2"}, None),  # batch step
        ({"OMPI_COMM_WORLD_LOCAL_RANK": "3", "OMPI_COMM_WORLD_LOCAL_SIZE": "3"}, None),
        ({"OMPI_COMM_WORLD_LOCAL_RANK": "x", "OMPI_COMM_WORLD_LOCAL_SIZE": "3"}, None),
        ({}, None),
    ],
)
def test_local_position_from_launchers(env, want):
    assert local_position(env) == want


def test_requested_level_predicts_the_power_rank():
    last = {"OMPI_COMM_WORLD_LOCAL_RANK": "2", "OMPI_COMM_WORLD_LOCAL_SIZE": "3"}
    first = {"OMPI_COMM_WORLD_LOCAL_RANK": "0", "OMPI_COMM_WORLD_LOCAL_SIZE": "3"}
    assert requested_level("auto", False, last) == "single"  # no meters: nobody runs threads
    assert requested_level("auto", True, last) == "funneled"
    assert requested_level("auto", True, first) == "single"
    assert requested_level("auto", True, {}) == "funneled"  # unknown: every rank may sample
    assert requested_level("multiple", False, first) == "multiple"
    assert "at least MPI_THREAD_FUNNELED" in level_problem(0, True, "single")
    assert level_problem(0, True, "auto") is None and level_problem(0, False, "single") is None
    assert level_problem(1, True, "funneled") is None


@pytest.mark.parametrize(
    "argv,fragment",
    [
        (["--buffers", "one"], "unknown arrangement"),
        (["--buffers", "netpipe", "--mode", "stream"], "does not combine with --mode stream"),
        (["--buffers", "netpipe", "--async"], "does not combine with --async"),
        (["--buffers", "netpipe", "--cache-cold"], "does not combine with --cache-cold"),
        (["--huge-pages", "yes"], "unknown choice"),
        (["--thread-level", "serial"], "unknown level"),
    ],
)
def test_option_errors_are_one_line(argv, fragment):
    with pytest.raises(UsageError) as e:
        parse_options(argv)
    assert fragment in str(e.value) and "\n" not in str(e.value)


# ---------------------------------------------------------------- under mpirun


# both kernels in-process: tests/inprocess/test_comm_sweeps.py::test_netpipe_buffers_check_every_message
@pytest.mark.mpi
@pytest.mark.timeout(MPI_TIMEOUT)
def test_netpipe_buffers_run_and_check_every_message(npmpi_run, tmp_path, kernel="python"):
    proc = npmpi_run(
        [*TINY, "--buffers", "netpipe", "--integrity", "--kernel", kernel, "-o", "r.h5"], timeout=MPI_TIMEOUT
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run = load_run(tmp_path / "r.h5")
    assert run.status == "complete" and np.all(run.pingpong.data_verified)
    assert run.attrs["buffers"] == "netpipe" and run.attrs["huge_pages"] == "system"
    assert run.attrs["format_version"] == "1.11"  # 1.3 added these attributes
    hp = run.pingpong.buffer_huge_page_bytes
    assert hp is not None and len(hp) == len(run.pingpong) and np.all(hp >= -1)


@pytest.mark.mpi
@pytest.mark.timeout(MPI_TIMEOUT)
def test_netpipe_buffers_catch_corrupted_data(npmpi_run, tmp_path):
    proc = npmpi_run(
        [*TINY, "--buffers", "netpipe", "-o", "r.h5"],
        env={"NPMPI_FAULT_CORRUPT_SIZE": "64"},
        timeout=MPI_TIMEOUT,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "data check failed at message size 64 B" in proc.stderr
    assert "rank 1 received wrong data from rank 0" in proc.stderr and "Traceback" not in proc.stderr
    run = load_run(tmp_path / "r.h5")
    assert run.status == "failed" and run.pingpong.size_bytes[-1] < 64


@pytest.mark.mpi
@pytest.mark.timeout(MPI_TIMEOUT)
@pytest.mark.skipif(not THP, reason="transparent huge pages are off on this machine")
def test_huge_pages_on_are_recorded_per_size(npmpi_run, tmp_path):
    proc = npmpi_run([*TINY, "--huge-pages", "on", "-o", "r.h5"], timeout=MPI_TIMEOUT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run = load_run(tmp_path / "r.h5")
    assert run.attrs["huge_pages"] == "on" and run.attrs["thp_policy"] in ("always", "madvise")
    assert np.all(run.pingpong.buffer_huge_page_bytes > 0)
    proc = npmpi_run([*TINY, "--huge-pages", "off", "-o", "off.h5"], timeout=MPI_TIMEOUT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert np.all(load_run(tmp_path / "off.h5").pingpong.buffer_huge_page_bytes == 0)


@pytest.mark.mpi
@pytest.mark.timeout(MPI_TIMEOUT)
def test_thread_levels_single_for_the_pair_funneled_for_the_power_rank(npmpi_run, tmp_path):
    power = ["--meter", "estimate", "--baseline", "0"]
    proc = npmpi_run([*TINY, *power, "-o", "auto.h5"], np=3, timeout=MPI_TIMEOUT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run = load_run(tmp_path / "auto.h5")
    assert list(run.layout["role"]) == ["transmitter", "reflector", "power"]
    assert list(run.layout["thread_level"]) == ["single", "single", "funneled"]
    assert run.attrs["thread_level_requested"] == "auto" and run.attrs["thread_level_pair"] == "single,single"
    assert run.attrs["thread_level_note"] == ""

    proc = npmpi_run([*TINY, "--thread-level", "funneled", "-o", "f.h5"], timeout=MPI_TIMEOUT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert list(load_run(tmp_path / "f.h5").layout["thread_level"]) == ["funneled", "funneled"]

    proc = npmpi_run([*TINY, *power, "--thread-level", "single", "-o", "s.h5"], np=3, timeout=MPI_TIMEOUT)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("npmpi: error:")]
    assert len(lines) == 1 and "at least MPI_THREAD_FUNNELED" in lines[0], proc.stderr
    assert not (tmp_path / "s.h5").exists()


@pytest.mark.parametrize("size", [1, 999, 1000, 1001, 4096])
def test_pattern_check_in_pieces_finds_a_wrong_byte_anywhere(monkeypatch, size):
    monkeypatch.setattr(Patterns, "CHECK_CHUNK_BYTES", 100)  # many pieces, and a short last one
    patterns = Patterns(4096)
    buf = np.zeros(4096, dtype=np.uint8)
    patterns.fill(buf, 1, size)
    assert patterns.matches(buf, 1, size) and not patterns.matches(buf, 0, size)
    for at in {0, size // 2, size - 1}:
        bad = buf.copy()
        bad[at] ^= 1
        assert not patterns.matches(bad, 1, size)
