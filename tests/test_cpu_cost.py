"""CPU cost per byte (format 1.7's /pingpong/cpu_*_s) and the protocol ladder, on synthetic run
files: the formulas by hand, the file's datasets, older and damaged files, and several protocols'
runs side by side per size."""

from __future__ import annotations

import csv
import io
import json
import math

import h5py
import numpy as np
import pytest
from npmpi_analysis.cli import main
from npmpi_analysis.numbers.analyse import analyse_run, size_rows
from npmpi_analysis.numbers.cpu_cost import bytes_per_rank, percent_of, us_per_kib
from npmpi_analysis.numbers.ladder import ladder_labels
from npmpi_analysis.synthetic import SynthChannel, SynthNode, write_run

from npmpi.core.errors import RunFileError
from npmpi.runfile.reader import load_run

T0 = 1_000.0
NAN = math.nan


def _cpu(user, system, wall, wait=None, ranks=(0, 1)):
    out = {"ranks": list(ranks), "cpu_user_s": user, "cpu_system_s": system, "cpu_wall_s": wall}
    if wait is not None:
        out["cpu_runqueue_wait_s"] = wait
    return out


def test_service_demand_and_core_share_by_hand(tmp_path):
    # 1024 B, 100 round trips, 2 trials: each rank sent and received 2 x 100 x 1024 x 2 = 400 KiB.
    # rank 0: 3 ms user + 1 ms system = 4000 us -> 10 us/KiB; over 8 ms of wall: 50 % of a core.
    # rank 1: 6 + 2 ms -> 20 us/KiB, 100 %; it waited 0 s for a CPU, rank 0 4 ms (50 %)
    cpu = _cpu([[0.003, 0.006]], [[0.001, 0.002]], [[0.008, 0.008]], [[0.004, 0.0]])
    path = write_run(tmp_path / "r.h5", [1024], [100], [[0.003, 0.004]], [[T0, T0 + 1]], cpu=cpu)
    a = analyse_run(load_run(path), "r")
    c = a.cpu
    assert c.ranks == [0, 1] and c.roles == ["transmitter", "reflector"]
    assert c.bytes_per_rank[0] == 400 * 1024
    assert c.us_per_kib[0].tolist() == pytest.approx([10.0, 20.0])
    assert c.core_percent[0].tolist() == pytest.approx([50.0, 100.0])
    assert c.wait_percent[0].tolist() == pytest.approx([50.0, 0.0])
    assert c.mean_us_per_kib[0] == pytest.approx(15.0) and c.mean_core_and_wait_percent[0] == pytest.approx(
        100
    )
    row = size_rows(a)[0]
    assert row["cpu_us_per_kib"] == pytest.approx(15.0) and row["rank1_cpu_core_percent"] == pytest.approx(
        100
    )
    assert row["rank0_cpu_user_s"] == 0.003 and row["rank0_cpu_runqueue_wait_s"] == 0.004
    s = a.summary()
    assert s["min_cpu_us_per_kib"] == pytest.approx(15.0) and s["cpu_core_percent"] == pytest.approx(75.0)
    assert [r["core_percent"] for r in s["cpu_ranks"]] == pytest.approx([50.0, 100.0])


def test_bytes_per_rank_follow_the_mode_and_pairs():
    # a stream of window 64 moves 64 messages one way per iteration; with 2 pairs the factor (all
    # pairs, 128) is halved per rank; a trial that did not run moves nothing
    attrs = {"mode": "stream", "window": 64, "pairs": 2, "bytes_per_iteration_factor": 128}
    assert bytes_per_rank(attrs, [1000], [10], [3]).tolist() == [3 * 10 * 1000 * 64]
    assert bytes_per_rank({}, [8], [5], [2]).tolist() == [2 * 5 * 8 * 2]  # ping-pong: there and back
    assert np.isnan(us_per_kib(np.array([0.1]), np.array([0.0]))).all()  # a 0-byte row: undefined
    assert np.isnan(percent_of(np.array([0.1]), np.array([0.0]))).all()


def test_rows_before_the_first_measured_one_are_nan_and_checksummed(tmp_path):
    from npmpi.runfile.format import SizeResult
    from npmpi.runfile.writer import RunWriter

    w = RunWriter(tmp_path / "r.h5", {"kernel": "python"}, {"role": ["transmitter", "reflector"]}, 1)
    w.append(SizeResult(1, 5, 0, [1e-3], [T0], [T0 + 1e-3]))
    w.append(
        SizeResult(
            2,
            5,
            0,
            [1e-3],
            [T0 + 1],
            [T0 + 1.001],
            cpu_ranks=[0, 3],
            cpu_user_s=[0.1, 0.2],
            cpu_system_s=[0.0, 0.1],
            cpu_wall_s=[1.0, 1.0],
            cpu_runqueue_wait_s=[NAN, 0.5],
        )
    )
    w.finish("complete")
    with h5py.File(tmp_path / "r.h5", "r") as f:
        ds = f["pingpong/cpu_user_s"]
        assert ds.fletcher32 and ds.attrs["ranks"].tolist() == [0, 3] and ds.shape == (2, 2)
    cpu = load_run(tmp_path / "r.h5").pingpong.cpu
    assert np.isnan(cpu.cpu_wall_s[0]).all() and cpu.cpu_system_s[1].tolist() == [0.0, 0.1]
    assert np.isnan(cpu.cpu_runqueue_wait_s[1, 0]) and cpu.ranks.tolist() == [0, 3]


def test_older_and_damaged_files_show_no_cpu_and_no_error(tmp_path, capsys):
    old = write_run(tmp_path / "old.h5", [8, 64], [10, 10], [[1e-4], [2e-4]], [[T0], [T0 + 1]])
    assert load_run(old).pingpong.cpu is None
    assert main([str(old), "--csv", str(tmp_path / "old.csv")]) == 0
    out = capsys.readouterr().out
    assert "CPU" not in out and "cpu" not in (tmp_path / "old.csv").read_text()
    cpu = _cpu([[0.1, 0.1], [0.2, 0.2]], [[0, 0], [0, 0]], [[0.2, 0.2], [0.4, 0.4]])
    bad = write_run(tmp_path / "bad.h5", [8, 64], [10, 10], [[1e-4], [2e-4]], [[T0], [T0 + 1]], cpu=cpu)
    with h5py.File(bad, "a") as f:
        f["pingpong/cpu_wall_s"][1, 0] = -1.0
    run = load_run(bad)
    assert run.pingpong.cpu is None and any("cpu_wall_s holds negative" in n for n in run.notices)
    assert main([str(bad)]) == 0
    assert "CPU time left out" in capsys.readouterr().out
    # a flipped bit is damage as in any numeric dataset (format 1.6): the file is refused, naming it
    with h5py.File(bad, "a") as f:
        del f["pingpong/cpu_wall_s"]
        f.create_dataset("pingpong/cpu_wall_s", data=np.full((2, 2), 0.25), chunks=(2, 2), fletcher32=True)
        f["pingpong/cpu_wall_s"].attrs["ranks"] = [0, 1]
        info = f["pingpong/cpu_wall_s"].id.get_chunk_info(0)
    data = bytearray(bad.read_bytes())
    data[info.byte_offset + 3] ^= 0x10
    bad.write_bytes(bytes(data))
    with pytest.raises(RunFileError, match="/pingpong/cpu_wall_s fails its checksum"):
        load_run(bad)


def test_ladder_labels_by_protocol_mode_and_kernel():
    mpi, tcp = {"kernel": "c"}, {"protocol": "tcp", "kernel": "c"}
    assert ladder_labels([mpi, tcp, {"protocol": "tcp", "kernel": "c"}]) == ["mpi", "tcp", "tcp-2"]
    assert ladder_labels([mpi, {"protocol": "rma", "kernel": "python"}]) == ["mpi-c", "rma-python"]
    assert ladder_labels([{"mode": "stream", **mpi}, tcp]) == ["mpi-stream", "tcp-pingpong"]
    assert ladder_labels([mpi, {"kernel": "python"}]) is None  # one protocol: the file names stay
    assert ladder_labels([{"protocol": "a b/../c"}, mpi]) == ["a_b_.._c", "mpi-c"]


def _ladder_run(path, protocol, slow, cpu_s, watts=None):
    """One protocol's run: latency `slow` times mpi's, CPU `cpu_s` per rank per size, power if given."""
    sizes, iters = [8, 1024, 65536], [1000, 500, 20]
    trial = [[slow * 1e-6 * 2 * i * (1 + s / 1e4)] for s, i in zip(sizes, iters, strict=True)]
    starts = [[T0 + 10 * k] for k in range(3)]
    wall = [[t[0], t[0]] for t in trial]
    cpu = _cpu([[cpu_s * t[0]] * 2 for t in trial], [[0.0, 0.0]] * 3, wall, [[0.0, 0.0]] * 3)
    nodes = None
    if watts is not None:
        t = np.arange(T0 - 5, T0 + 40, 0.5)
        nodes = [SynthNode([SynthChannel(t, np.full(len(t), watts), sample_interval_s=0.5)])]
    return write_run(
        path,
        sizes,
        iters,
        trial,
        starts,
        cpu=cpu,
        nodes=nodes,
        attrs={"protocol": protocol} if protocol else None,
    )


def test_protocol_ladder_side_by_side_per_size(tmp_path, capsys):
    # mpi (no protocol attribute: an older file), tcp 3x slower and at 40 % of a core, memcpy
    # without CPU figures: its CPU column is '-', its energy per bit measured
    files = [
        _ladder_run(tmp_path / "a.h5", "", 1.0, 1.0, watts=100.0),
        _ladder_run(tmp_path / "b.h5", "tcp", 3.0, 0.4, watts=100.0),
        _ladder_run(tmp_path / "c.h5", "memcpy", 0.5, 1.0, watts=50.0),
    ]
    with h5py.File(files[2], "a") as f:
        for name in ("cpu_user_s", "cpu_system_s", "cpu_wall_s", "cpu_runqueue_wait_s"):
            del f[f"pingpong/{name}"]
    outs = [tmp_path / n for n in ("cmp.csv", "r.html", "plots", "all.json")]
    argv = [
        *map(str, files),
        "--compare-csv",
        str(outs[0]),
        "--report",
        str(outs[1]),
        "--plots",
        str(outs[2]),
    ]
    assert main([*argv, "--json", str(outs[3])]) == 0
    text = capsys.readouterr().out
    table = text[text.index("per message size") :]
    assert "mpi latency us  tcp latency us  memcpy latency us  tcp/mpi  memcpy/mpi" in table
    assert "mpi energy per bit pJ/bit" in table and "tcp CPU per KiB us/KiB" in table
    rows = list(csv.DictReader(io.StringIO(outs[0].read_text())))
    assert [r["size_bytes"] for r in rows] == ["8", "1024", "65536"]
    r = rows[1]
    assert float(r["tcp_latency_min_s_ratio"]) == pytest.approx(3.0)
    assert float(r["tcp_bandwidth_peak_bit_s_ratio"]) == pytest.approx(1 / 3)
    # the same power over 3x the time per bit: 3x the energy per bit; memcpy half the power, twice as fast
    assert float(r["tcp_energy_pj_bit_ratio"]) == pytest.approx(3.0, rel=1e-6)
    assert float(r["memcpy_energy_pj_bit_ratio"]) == pytest.approx(0.25, rel=1e-6)
    # CPU per KiB: 0.4 of the wall time over 3x the time per KiB: 1.2x mpi's (which was 100 %)
    assert float(r["tcp_cpu_us_per_kib_ratio"]) == pytest.approx(1.2)
    assert r["memcpy_cpu_us_per_kib"] == "" and r["memcpy_cpu_us_per_kib_ratio"] == ""
    html = outs[1].read_text()
    assert "<h4>CPU per KiB (us/KiB)</h4>" in html and "<h4>energy per bit (pJ/bit)</h4>" in html
    assert (outs[2] / "cpu_per_kib.png").stat().st_size > 0
    doc = json.loads(outs[3].read_text())
    assert [run["summary"]["protocol"] for run in doc["runs"]] == ["mpi", "tcp", "memcpy"]
    cmp = {c["key"]: c for c in doc["comparison"]}
    assert cmp["cpu_core_percent"]["values"][:2] == pytest.approx([100.0, 40.0])


def test_the_readme_ladder_example_is_labelled_synthetic(tmp_path, capsys):
    from npmpi_analysis.synthetic import write_ladder_example

    files = write_ladder_example(tmp_path)
    assert [f.name for f in files] == ["mpi.h5", "tcp.h5", "rma.h5", "memcpy.h5"]
    assert main([*map(str, files), "--compare-csv", str(tmp_path / "c.csv")]) == 0
    out = capsys.readouterr().out
    assert (
        out.count("power: SIMULATED, not measured") == 4 and out.count("MPI library: synthetic run file") == 4
    )
    header = (tmp_path / "c.csv").read_text().splitlines()[0]
    assert "memcpy_cpu_us_per_kib_ratio" in header and "rma_energy_pj_bit" in header
