"""Modes beyond the ping-pong: stream, bidir, several pairs, --async, --cache-cold, large messages.

Unit tests of the option checks, the factors and the pair layout; real mpirun jobs of every mode
with 2 and 4 ranks and both kernels, checking the stored attributes, byte accounting and data checks.
"""

from __future__ import annotations

import csv
import re
import subprocess
import sys

import numpy as np
import pytest

from npmpi.core.errors import UsageError
from npmpi.core.layout import LayoutError, compute_layout, pair_ranks, with_pairs
from npmpi.core.modes import MAX_COLD_REGIONS, MODE_TABLE, mode_factors, pool_bytes, regions_for
from npmpi.core.schedule import netpipe_schedule
from npmpi.core.transfer import TransferSettings
from npmpi.persize.kernels import Kernel
from npmpi.persize.messageloop import MessageLoop, Patterns
from npmpi.run.options import parse_options
from npmpi.runfile.reader import load_run

TINY = ["-u", "4K", "-p", "0", "--trials", "2", "--repeats", "6"]
MPI_TIMEOUT = 60


# ---------------------------------------------------------------- options, factors, layout


def test_mode_options_defaults_and_values():
    o = parse_options([])
    assert (o.mode, o.window, o.pairs, o.async_, o.cache_cold) == ("pingpong", 1, 1, False, False)
    o = parse_options(["--mode", "stream"])
    assert o.window == 64
    o = parse_options(["--mode", "stream", "--window", "8", "--pairs", "all", "--async", "--cache-cold"])
    assert (o.window, o.pairs, o.async_, o.cache_cold) == (8, "all", True, True)
    assert parse_options(["--mode", "bidir", "--pairs", "3"]).pairs == 3
    assert parse_options(["--cache-cold", "--cache-pool", "1M"]).cache_pool_bytes == 1 << 20


@pytest.mark.parametrize(
    "argv,fragment",
    [
        (["--mode", "ring"], "unknown mode"),
        (["--window", "8"], "only applies to --mode stream"),
        (["--mode", "bidir", "--window", "8", "--async"], "--async does not combine with --mode bidir"),
        (["--mode", "bidir", "--window", "8", "--protocol", "tcp"], "no windowed --mode bidir"),
        (["--mode", "stream", "--buffers", "osu", "--cache-cold"], "--buffers osu does not combine"),
        (["--mode", "stream", "--window", "0"], "--window 0"),
        (["--mode", "stream", "--window", "x"], "invalid count"),
        (["--pairs", "0"], "at least 1 pair"),
        (["--pairs", "some"], "invalid pairs"),
        (["--cache-pool", "1M"], "only applies with --cache-cold"),
        (["--cache-cold", "--cache-pool", "100"], "at least 4K"),
    ],
)
def test_mode_option_errors_are_one_line(argv, fragment):
    with pytest.raises(UsageError) as e:
        parse_options(argv)
    assert fragment in str(e.value) and "\n" not in str(e.value)


def test_mode_factors():
    assert mode_factors("pingpong") == mode_factors("pingpong", 1, 1)
    f = mode_factors("pingpong")
    assert (f.bytes_per_iteration_factor, f.one_way_factor, f.one_way_divisor(10)) == (2, 2, 20)
    f = mode_factors("stream", 64)
    assert (f.bytes_per_iteration_factor, f.one_way_divisor(10)) == (64, 640)
    f = mode_factors("bidir", 1, 3)
    assert (f.bytes_per_iteration_factor, f.one_way_divisor(10)) == (6, 10)
    assert mode_factors("stream", 8, 2).bytes_per_iteration_factor == 16
    # a window each way (osu_bibw): 2 w per pair, one way = t / (w i)
    f = mode_factors("bidir", 64, 2)
    assert (f.bytes_per_iteration_factor, f.one_way_divisor(10)) == (256, 640)
    # a ping-pong has no window: the factors ignore one
    assert mode_factors("pingpong", 8) == mode_factors("pingpong")


def test_regions_cover_the_pool_without_overlap():
    largest = 64 << 10
    pool = pool_bytes("pingpong", 1, True, 1 << 20, largest)
    assert pool == 1 << 20
    for size in (1, 100, 4096, largest):
        regions, stride = regions_for("pingpong", 1, True, pool, size)
        assert 2 <= regions <= MAX_COLD_REGIONS and stride >= size and stride % 64 == 0
        assert (regions - 1) * stride + size <= pool
    # the pool grows to hold two of the largest message
    assert pool_bytes("bidir", 1, True, 4096, largest) == 2 * largest
    # without --cache-cold: one region, except a stream window's receives
    assert regions_for("pingpong", 1, False, largest, 100) == (1, 0)
    sp = pool_bytes("stream", 64, False, 0, largest)
    regions, stride = regions_for("stream", 64, False, sp, 1000)
    assert regions == 64 and stride == 1024
    # a window each way: a region per message of the window too
    assert regions_for("bidir", 64, False, pool_bytes("bidir", 64, False, 0, largest), 1000) == (64, 1024)
    assert pool_bytes("bidir", 1, False, 0, largest) == largest
    # --buffers osu: one region for the whole window, a pool of one message
    assert pool_bytes("stream", 64, False, 0, largest, one_region=True) == largest
    assert regions_for("stream", 64, False, largest, 1000, one_region=True) == (1, 0)
    assert regions_for("bidir", 64, False, largest, 1000, one_region=True) == (1, 0)


def test_modes_reach_the_loops_as_values_with_the_window_normalised_once():
    """The options normalise the window (1 outside a stream); the loops' settings carry the Mode
    value and that window, and refuse a window in a mode that has none."""
    no_loops = Kernel("none", None, None, None, 0)
    for argv, name, window in (
        (["--mode", "bidir", "--cache-cold"], "bidir", 1),
        (["--mode", "stream", "--window", "8"], "stream", 8),
        (["--mode", "bidir", "--window", "8"], "bidir", 8),
        (["--mode", "bidir"], "bidir", 1),
        (["--async"], "pingpong", 1),
    ):
        loop = MessageLoop(parse_options([*argv, "-u", "4K"]), no_loops, transmitter=True)
        loop.set_size(100, Patterns(4096), 0)
        assert loop.settings.mode is MODE_TABLE[name] and loop.settings.window == window
    with pytest.raises(ValueError, match="one message each way, not a window of 4"):
        TransferSettings(MODE_TABLE["pingpong"], 4)
    with pytest.raises(ValueError, match="no --async variant"):
        TransferSettings(MODE_TABLE["bidir"], 4, async_=True)


def test_the_c_entries_take_the_window_as_given_and_refuse_one_outside_a_stream():
    import socket

    ckernel = pytest.importorskip("npmpi._ckernel")
    src, dst = np.zeros(4096, dtype=np.uint8), np.zeros(4096, dtype=np.uint8)
    assert ckernel.memcpy_transfer(src, dst, 8, 3, "stream", 4, 4, 64, 0) >= 0
    with pytest.raises(ValueError, match="a window outside a stream"):
        ckernel.memcpy_transfer(src, dst, 8, 3, "pingpong", 4, 1, 0, 0)
    comm = pytest.importorskip("mpi4py.MPI").COMM_SELF
    with pytest.raises(ValueError, match="window"):
        ckernel.transfer(comm, 0, src, dst, 8, 0, True, "pingpong", 4, False, 1, 0, 0)
    a, b = socket.socketpair()
    with a, b, pytest.raises(ValueError, match="window"):
        ckernel.tcp_transfer(a.fileno(), src, dst, 8, 0, True, "bidir", 4, 1, 0, 0)


def test_pair_ranks_netpipe_order_on_one_node():
    assert pair_ranks([0, 1, 2, 3], [0, 0, 0, 0], 2) == ((0, 3), (1, 2))
    assert pair_ranks([0, 1, 2, 3, 4, 5], [0] * 6, 2) == ((0, 5), (1, 4))
    with pytest.raises(ValueError):
        pair_ranks([0, 1, 2], [0, 0, 0], 2)


def test_pair_ranks_cross_nodes_for_block_and_round_robin_placement():
    block = [0, 0, 1, 1]  # ranks 0,1 on node 0; 2,3 on node 1
    assert pair_ranks(range(4), block, 2) == ((0, 3), (1, 2))
    robin = [0, 1, 0, 1]  # --map-by node
    pairs = pair_ranks(range(4), robin, 2)
    assert pairs == ((0, 3), (2, 1))
    assert all(robin[a] != robin[b] for a, b in pairs)
    three = [0, 0, 1, 1, 2, 2]
    assert all(three[a] != three[b] for a, b in pair_ranks(range(6), three, 3))


def test_with_pairs_roles_power_and_all():
    lay = compute_layout(["a#0"] * 4, ["a"] * 4, power=False)
    two = with_pairs(lay, 2)
    assert two.pairs == ((0, 3), (1, 2)) and two.pair == (0, 3)
    assert two.roles == ("transmitter", "transmitter", "reflector", "reflector")
    assert with_pairs(lay, "all").pairs == two.pairs
    assert with_pairs(lay, 1) is lay and lay.pairs == (lay.pair,)
    # power ranks (the highest of each node) never take part
    keys = ["a#0"] * 3 + ["b#3"] * 3
    lay = compute_layout(keys, [k[0] for k in keys], power=True)
    p = with_pairs(lay, "all")
    assert p.power_ranks == (2, 5) and p.pairs == ((0, 4), (1, 3))
    assert p.roles[2] == p.roles[5] == "power" and p.pairs_crossing_nodes == 2
    odd = with_pairs(compute_layout(["a#0"] * 5, ["a"] * 5, power=False), "all")
    assert odd.pairs == ((0, 4), (1, 3)) and odd.roles[2] == "idle"


def test_with_pairs_refuses_too_few_ranks():
    lay = compute_layout(["a#0"] * 3, ["a"] * 3, power=False)
    with pytest.raises(LayoutError, match=r"--pairs 2 needs 4 ranks .* run e.g. mpirun -np 4"):
        with_pairs(lay, 2)
    lay = compute_layout(["a#0"] * 4, ["a"] * 4, power=True)  # rank 3 samples power
    with pytest.raises(LayoutError, match="plus 1 power rank"):
        with_pairs(lay, 2)


# ---------------------------------------------------------------- real jobs


def _check_common(proc, run, mode, pairs, kernel, window=1):
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert run.status == "complete" and run.notices == []
    a = run.attrs
    f = mode_factors(mode, window, pairs)
    assert a["format_version"] == "1.11"
    assert (a["mode"], a["window"], a["pairs"], a["kernel"]) == (mode, window, pairs, kernel)
    assert a["bytes_per_iteration_factor"] == f.bytes_per_iteration_factor
    assert a["one_way_divisor"] == f.one_way_factor
    pp = run.pingpong
    assert pp.size_bytes.tolist() == [p.size_bytes for p in netpipe_schedule(1, 4096, 0)]
    assert np.all(pp.data_verified) and np.all(pp.trial_s > 0) and set(pp.iterations.tolist()) == {6}
    # byte accounting: the console's Mbps is F · i · m · 8 / best trial / 2^20, its usec best / (D · i)
    rows = [ln for ln in proc.stdout.splitlines() if " times --> " in ln]
    assert len(rows) == len(pp)
    for line, size, iters, trials in zip(rows, pp.size_bytes, pp.iterations, pp.trial_s, strict=True):
        m = re.search(r"(\d+) bytes +(\d+) times --> +([\d.]+) Mbps in +([\d.]+) usec", line)
        assert m and int(m[1]) == size and int(m[2]) == iters
        best = trials.min()
        mbps = f.bytes_per_iteration_factor * iters * size * 8 / best / 2**20
        assert float(m[3]) == pytest.approx(mbps, rel=1e-3, abs=0.01)
        assert float(m[4]) == pytest.approx(best / (f.one_way_factor * iters) * 1e6, rel=1e-3, abs=0.01)


@pytest.mark.mpi
@pytest.mark.timeout(MPI_TIMEOUT)
@pytest.mark.parametrize("kernel", ["python", "c"])
@pytest.mark.parametrize("mode", ["pingpong", "stream", "bidir"])
def test_each_mode_with_two_ranks(npmpi_run, tmp_path, mode, kernel):
    extra = ["--window", "16"] if mode == "stream" else []
    proc = npmpi_run([*TINY, "--mode", mode, *extra, "--kernel", kernel, "-o", "r.h5"], timeout=MPI_TIMEOUT)
    run = load_run(tmp_path / "r.h5")
    _check_common(proc, run, mode, 1, kernel, window=16 if mode == "stream" else 1)
    assert run.pingpong.pair_trial_s is None and run.attrs["all_pair_ranks"] == [0, 1]
    assert not run.attrs["async"] and not run.attrs["cache_cold"]
    label = {"pingpong": "peak bandwidth", "stream": "one-way stream", "bidir": "both directions"}[mode]
    assert label in proc.stdout


@pytest.mark.mpi
@pytest.mark.timeout(MPI_TIMEOUT)
def test_osu_bibw_window_and_buffers_in_a_launched_job(npmpi_run, tmp_path):
    """--mode bidir --window 8 --buffers osu (osu_bibw as OSU runs it by default): the factors
    (2 w bytes per iteration, one way t / (w i)) in the file and the console's figures, and the
    arrangement said to be outside MPI's rules in the console, the file and the analysis."""
    from npmpi_analysis.numbers.compute import mode_label

    args = [*TINY, "--mode", "bidir", "--window", "8", "--buffers", "osu", "--kernel", "c"]
    proc = npmpi_run([*args, "-o", "r.h5"], timeout=MPI_TIMEOUT)
    run = load_run(tmp_path / "r.h5")
    a = run.attrs
    assert (a["bytes_per_iteration_factor"], a["one_way_divisor"], a["buffers"]) == (16, 8, "osu")
    assert "outside MPI's rules" in a["buffers_note"] and "outside MPI's rules" in proc.stdout
    assert "window 8 each way" in proc.stdout
    label = mode_label(a)
    assert "window 8 each way" in label and "OSU's -b single" in label
    pp = run.pingpong
    assert np.all(pp.data_verified) and set(pp.iterations.tolist()) == {6}  # windows
    rows = [ln for ln in proc.stdout.splitlines() if " times --> " in ln]
    for line, size, trials in zip(rows, pp.size_bytes, pp.trial_s, strict=True):
        m = re.search(r"(\d+) bytes +(\d+) times --> +([\d.]+) Mbps in +([\d.]+) usec", line)
        assert float(m[3]) == pytest.approx(16 * 6 * size * 8 / trials.min() / 2**20, rel=1e-3, abs=0.01)
        assert float(m[4]) == pytest.approx(trials.min() / (8 * 6) * 1e6, rel=1e-3, abs=0.01)


# every mode and kernel in two pairs: tests/inprocess/test_comm_sweeps.py::test_two_pairs_on_the_world;
# here the file and console of a launched job
@pytest.mark.mpi
@pytest.mark.timeout(MPI_TIMEOUT)
@pytest.mark.parametrize("kernel,pairs", [("python", ["--pairs", "2"]), ("c", ["--pairs", "all"])])
def test_each_mode_with_four_ranks_in_two_pairs(npmpi_run, tmp_path, kernel, pairs):
    mode = "pingpong"
    proc = npmpi_run(
        [*TINY, "--mode", mode, "--kernel", kernel, *pairs, "-o", "r.h5"], np=4, timeout=MPI_TIMEOUT
    )
    run = load_run(tmp_path / "r.h5")
    _check_common(proc, run, mode, 2, kernel, window=64 if mode == "stream" else 1)
    pp = run.pingpong
    assert pp.pair_trial_s.shape == (len(pp), 2, 2) and np.all(pp.pair_trial_s > 0)
    # the aggregate is the slowest pair of each trial
    assert np.array_equal(pp.trial_s, pp.pair_trial_s.max(axis=1))
    assert run.attrs["all_pair_ranks"] == [0, 3, 1, 2]
    assert list(run.layout["role"]) == ["transmitter", "transmitter", "reflector", "reflector"]
    assert "2 pairs" in proc.stdout and "0 <-> 3, 1 <-> 2" in proc.stdout


@pytest.mark.mpi
@pytest.mark.timeout(MPI_TIMEOUT)
def test_four_ranks_single_pair_leaves_two_idle(npmpi_run, tmp_path):
    proc = npmpi_run([*TINY, "--mode", "bidir", "-o", "r.h5"], np=4, timeout=MPI_TIMEOUT)
    run = load_run(tmp_path / "r.h5")
    _check_common(proc, run, "bidir", 1, "python")
    assert list(run.layout["role"]) == ["transmitter", "reflector", "idle", "idle"]


# every mode and kernel with --async --cache-cold --integrity: tests/inprocess/test_comm_sweeps.py;
# here the file's attributes and the console of a launched job
@pytest.mark.mpi
@pytest.mark.timeout(MPI_TIMEOUT)
@pytest.mark.parametrize("mode,kernel", [("stream", "c"), ("bidir", "python")])
def test_async_and_cache_cold(npmpi_run, tmp_path, mode, kernel):
    args = [*TINY, "--mode", mode, "--kernel", kernel, "--async", "--cache-cold", "--cache-pool", "256K"]
    proc = npmpi_run([*args, "-o", "r.h5"], timeout=MPI_TIMEOUT)
    run = load_run(tmp_path / "r.h5")
    _check_common(proc, run, mode, 1, kernel, window=64 if mode == "stream" else 1)
    a = run.attrs
    assert a["async"] and a["cache_cold"] and a["cache_pool_bytes"] == 256 << 10
    assert "pre-posted" in proc.stdout and "cache-cold" in proc.stdout


@pytest.mark.mpi
@pytest.mark.timeout(MPI_TIMEOUT)
@pytest.mark.parametrize(
    "mode,np_,extra,who",
    [
        # stream, bidir --cache-cold and --pairs 2 with separate buffers: tests/inprocess; here the
        # launched job's exit, message and file, with the default, NetPIPE's one buffer (the
        # reflector's received data is what it checks)
        ("pingpong", 4, ["--pairs", "2"], "rank 2 received wrong data from rank 1"),
    ],
)
def test_corrupted_data_is_caught_in_every_mode(npmpi_run, tmp_path, mode, np_, extra, who):
    proc = npmpi_run(
        [*TINY, "--mode", mode, *extra, "-o", "r.h5"],
        np=np_,
        env={"NPMPI_FAULT_CORRUPT_SIZE": "64"},
        timeout=MPI_TIMEOUT,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "data check failed at message size 64 B" in proc.stderr and who in proc.stderr
    assert "Traceback" not in proc.stderr
    run = load_run(tmp_path / "r.h5")
    assert run.status == "failed" and run.pingpong.size_bytes[-1] < 64


def assert_one_clear_error(proc, fragment):
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("npmpi: error:")]
    assert len(lines) == 1, proc.stderr
    assert fragment in lines[0]
    assert "Traceback" not in proc.stderr + proc.stdout


@pytest.mark.mpi
@pytest.mark.timeout(MPI_TIMEOUT)
@pytest.mark.parametrize(
    "args,np_,fragment",
    [
        (["--mode", "ring"], 2, "unknown mode"),
        (["--window", "4"], 2, "only applies to --mode stream"),
        (["--pairs", "2"], 3, "--pairs 2 needs 4 ranks"),
        (["--pairs", "3", "--mode", "bidir"], 4, "--pairs 3 needs 6 ranks"),
        (["--mode", "stream", "-u", "3G"], 2, "2 GiB - 1"),
        (["--mode", "bidir", "--kernel", "c", "-u", "2G", "-p", "0"], 2, "need an MPI 4 library"),
    ],
)
def test_bad_mode_usage_exits_2_everywhere(npmpi_run, tmp_path, args, np_, fragment):
    proc = npmpi_run(args, np=np_, timeout=MPI_TIMEOUT)
    assert_one_clear_error(proc, fragment)
    assert list(tmp_path.iterdir()) == []


LARGE_COUNT_SHIM = """
#include <mpi.h>
#undef MPI_VERSION
#define MPI_VERSION 4
int MPI_Send_c(const void *, MPI_Count, MPI_Datatype, int, int, MPI_Comm);
int MPI_Recv_c(void *, MPI_Count, MPI_Datatype, int, int, MPI_Comm, MPI_Status *);
int MPI_Isend_c(const void *, MPI_Count, MPI_Datatype, int, int, MPI_Comm, MPI_Request *);
int MPI_Irecv_c(void *, MPI_Count, MPI_Datatype, int, int, MPI_Comm, MPI_Request *);
#include "{source}"
"""


@pytest.mark.timeout(60)
def test_c_kernel_large_count_branch_compiles(tmp_path):
    """The MPI 4 branch (MPI_Send_c & co.) cannot run on this MPI 3.1 library: compile it against
    the MPI 4 prototypes to keep it honest."""
    import shutil
    import subprocess
    import sys
    import sysconfig
    from pathlib import Path

    import mpi4py

    mpicc = Path(sys.executable).parent / "mpicc"
    mpicc = str(mpicc) if mpicc.exists() else shutil.which("mpicc")
    if mpicc is None:
        pytest.skip("no mpicc")
    source = Path(__file__).resolve().parents[1] / "csrc" / "cmpi.c"
    shim = tmp_path / "large_count.c"
    shim.write_text(LARGE_COUNT_SHIM.format(source=source))
    cmd = [mpicc, "-Werror", "-fsyntax-only", f"-I{sysconfig.get_paths()['include']}"]
    cmd += [f"-I{mpi4py.get_include()}", str(shim)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=50, check=False)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.mpi
@pytest.mark.timeout(2 * MPI_TIMEOUT)
@pytest.mark.parametrize(
    "mode,np_,extra",
    [("pingpong", 2, []), ("stream", 2, []), ("bidir", 2, []), ("pingpong", 4, ["--pairs", "2"])],
    ids=["pingpong", "stream", "bidir", "pairs2"],
)
def test_np_out_matches_the_csv_column_by_column(npmpi_run, tmp_path, mode, np_, extra):
    proc = npmpi_run(
        ["--quick", "-u", "64K", "-p", "0", "-q", "--mode", mode, *extra, "-o", "r.h5"],
        np=np_,
        timeout=MPI_TIMEOUT,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    outputs = ["--csv", str(tmp_path / "r.csv"), "--np-out", str(tmp_path / "np.out")]
    res = subprocess.run(
        [sys.executable, "-m", "npmpi_analysis", str(tmp_path / "r.h5"), "-q", *outputs],
        capture_output=True,
        text=True,
        timeout=MPI_TIMEOUT,
        check=False,
    )
    assert res.returncode == 0, res.stderr
    rows = list(csv.DictReader((tmp_path / "r.csv").read_text().splitlines()))
    lines = [ln.split() for ln in (tmp_path / "np.out").read_text().splitlines()]
    assert len(rows) == len(lines) == len(netpipe_schedule(1, 64 << 10, 0))
    doubled = 2 if mode == "bidir" else 1  # NetPIPE -2 writes twice the message size
    for row, (nbytes, mbps, seconds) in zip(rows, lines, strict=True):
        assert int(nbytes) == doubled * int(row["size_bytes"])
        # Mbps (2^20 bit/s, six decimals) is the CSV's bandwidth of the same size
        assert float(mbps) == pytest.approx(float(row["bandwidth_peak_bit_s"]) / 2**20, abs=1e-6)
        assert float(seconds) == pytest.approx(float(row["one_way_s"]), abs=5e-9)


def test_a_window_sharing_the_pools_regions_is_said_from_the_size_it_starts():
    """The stream pool holds 16 MiB: a window of 64 gets a region per message up to 256 KiB; from
    256 KiB + 1 B two pending receives share one, outside MPI's rules as --buffers osu's, which the
    file's buffers_note and the mode's label now say (before: said for --buffers osu only)."""
    from npmpi_analysis.numbers.compute import mode_label

    from npmpi.core.modes import shared_from_bytes
    from npmpi.run.recording import buffers_note

    note = buffers_note(parse_options(["--mode", "stream", "-u", "4M"]))
    assert note.startswith("from 262145 B the 64 messages of a window share") and "outside MPI" in note
    assert buffers_note(parse_options(["--mode", "stream", "-u", "256K", "-p", "0"])) == ""
    assert buffers_note(parse_options(["--mode", "bidir", "-u", "4M"])) == ""  # one message each way
    assert "-b single" in buffers_note(parse_options(["--mode", "stream", "--buffers", "osu", "-u", "4M"]))
    assert "from 262145 B" in mode_label({"mode": "stream", "window": 64, "buffers": "separate",
                                          "buffers_note": note})  # fmt: skip
    pool = pool_bytes("stream", 8, False, 64 << 20, 4 << 20)
    first = shared_from_bytes("stream", 8, False, pool, 4 << 20)
    assert (
        regions_for("stream", 8, False, pool, first)[0]
        < 8
        <= regions_for("stream", 8, False, pool, first - 1)[0]
    )
