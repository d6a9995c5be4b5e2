"""What npmpi-analyze makes of stopped and hostile files (issue 28): a map stopped before its last
size by a signal, a killed writer or rank, or a full disk holds every flushed round and
`npmpi-analyze` reads it (text, JSON, CSV, report) with the rest blank; a file whose declared data
exceed what the analysis reads (a compression bomb) is refused with one line, never a MemoryError;
text from a file (not UTF-8, control characters) is safe in every output; an impossible timing
attribute or a short sample dataset is named.

Stopped maps are written by the map writer itself (npmpi.runfile.mapwriter.MapWriter) in this process, as a
stopped `npmpi map` leaves them: finished `interrupted` by a signal's handler, never finished
(a killed writer, in a forked child), `failed` on a real full tmpfs. Two real stopped maps under
mpirun are analysed in tests/test_map.py.
"""

from __future__ import annotations

import csv
import functools
import io
import json
import os
import re
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest
from npmpi_analysis.map.synthetic import circle_rounds
from test_reliability_disk import fill, tmpfs  # noqa: F401  (a fixture)
from test_reliability_files import write_base

from npmpi.core.errors import RunFileWriteError
from npmpi.core.outpath import reserve_output
from npmpi.runfile.attrseal import seal_all
from npmpi.runfile.mapwriter import MapWriter, PairResult
from npmpi.runfile.writecheck import RESERVED_BYTES

HOSTS = ["a", "b", "c", "d"]
SIZES = [1, 65536, 1 << 20, 4 << 20]
TRIALS = 3


def map_writer(path: Path, reservation=None, hosts: list[str] = HOSTS) -> MapWriter:
    rounds, nr = circle_rounds(len(hosts))
    spec = {
        "attrs": {
            "schedule": "rounds",
            "per_rank": True,
            "kernel": "python",
            "mode": "pingpong",
            "window": 1,
        },
        "hosts": hosts,
        "ranks": list(range(len(hosts))),
        "sizes": SIZES,
        "rounds_matrix": rounds,
        "n_rounds": nr,
    }
    return MapWriter(
        path, {"kernel": "python"}, {"host": hosts}, TRIALS, map_spec=spec, reservation=reservation
    )


def store_rounds(w: MapWriter, count: int) -> int:
    """Store rounds in the map's order (size 0's rounds first) until `count` or a write error."""
    rounds, nr = circle_rounds(len(HOSTS))
    n = len(HOSTS)
    for k in range(count):
        s, r = divmod(k, nr)
        pairs = [(i, j) for i in range(n) for j in range(i + 1, n) if rounds[i, j] == r]
        t = 1.7e9 + 2.0 * k
        results = [
            PairResult(i, j, 100, 30, np.array([2e-3, 1e-3, 1.5e-3]) * (1 + SIZES[s] / 1e5)) for i, j in pairs
        ]
        try:
            w.store_round(s, r, (t, t + 1.0), results)
        except RunFileWriteError:
            return k
    return count


def stopped_map(path: Path, how: str, rounds: int = 4) -> Path:
    """A map stopped after `rounds` rounds (3 per size): `interrupted` by a signal's handler,
    `killed` (the writer never finishes: a forked child exits at once), `failed` (a rank's error)."""
    if how == "killed":
        pid = os.fork()
        if pid == 0:  # the writer, killed after its last flush: no finish, no close
            try:
                store_rounds(map_writer(path), rounds)
            finally:
                os._exit(0)
        os.waitpid(pid, 0)
        for lock in path.parent.glob(".npmpi-*"):
            lock.unlink()
        return path
    w = map_writer(path)
    store_rounds(w, rounds)
    message = {"interrupted": "stopped by SIGTERM", "failed": "rank 2 on a: fault injected"}[how]
    w.finish(how, message)
    return path


def analyse_all_outputs(capsys, path: Path, out: Path, report: bool = True) -> tuple[int, str, str]:
    from npmpi_analysis.cli import main

    out.mkdir(exist_ok=True)
    capsys.readouterr()
    html = ["--report", str(out / "m.html")] if report else []
    code = main([str(path), "--json", str(out / "m.json"), "--csv", str(out / "m.csv"), *html])
    got = capsys.readouterr()
    return code, got.out, got.err


def check_stopped_map_analysis(capsys, path: Path, out: Path, measured_at_1b: int) -> dict:
    code, text, err = analyse_all_outputs(capsys, path, out)
    assert code == 0 and "Traceback" not in text + err and "internal error" not in err, err
    assert "notice:" in text and f"{measured_at_1b}/6 at 1 B" in text, text
    assert "0/6 at 4 MiB" in text  # sizes not reached: blank, not refused
    data = json.loads((out / "m.json").read_text())
    rows = (out / "m.csv").read_text().splitlines()
    html = (out / "m.html").read_text()
    assert "notice" in html.lower() and len(rows) >= 2
    return data


@pytest.mark.parametrize("how", ["interrupted", "killed", "failed"])
def test_a_stopped_map_is_analysed_with_the_rest_blank(tmp_path, capsys, how):
    """Before issue 28: '/map/trial_s claims shape … damaged or forged', exit 1."""
    path = stopped_map(tmp_path / f"{how}.h5", how, rounds=4)  # size 0 whole, one round of 64 KiB
    with h5py.File(path) as f:
        assert f["map"].attrs["rounds_completed"] == 4
        assert f["map"].attrs["status"] == ("running" if how == "killed" else how)
    check_stopped_map_analysis(capsys, path, tmp_path / "out", 6)


def test_a_map_stopped_in_its_first_round_is_refused_with_one_line(tmp_path, capsys):
    from npmpi_analysis.cli import main

    path = stopped_map(tmp_path / "none.h5", "interrupted", rounds=0)
    capsys.readouterr()
    code = main([str(path)])
    err = capsys.readouterr().err
    assert code == 1 and "Traceback" not in err and "internal error" not in err, err


def test_a_round_written_but_not_counted_is_left_out(tmp_path, capsys):
    """A writer killed between a round's data and its count: the data are not trusted."""
    path = stopped_map(tmp_path / "late.h5", "killed", rounds=5)
    with h5py.File(path, "r+") as f:
        f["map"].attrs["rounds_completed"] = 4  # round 5's data flushed, its count not
    from npmpi_analysis.map.load import load_map

    from npmpi.runfile.format import SAMPLE_FIELDS

    m = load_map(path, SAMPLE_FIELDS)
    assert any("rounds after the 4 counted" in n for n in m.notices), m.notices
    assert (m.trial_stats["trials_run"][1] > 0).sum() == 4  # one round of 64 KiB: two pairs, both ways
    assert np.isnan(m.window_start_unix_s[1, 1:]).all()
    check_stopped_map_analysis(capsys, path, tmp_path / "out", 6)


def test_a_map_whose_disk_fills_is_analysed(tmpfs, tmp_path, capsys):  # noqa: F811
    path = tmpfs / "full.h5"
    res = reserve_output(path, False, ballast_bytes=RESERVED_BYTES)
    w = map_writer(path, reservation=res)
    assert store_rounds(w, 4) == 4
    fill(tmpfs)
    stored = store_rounds(w, 12)  # the next flush finds no room
    assert stored < 12
    with pytest.raises(RunFileWriteError):
        w.finish("complete")
    with h5py.File(path) as f:
        assert f.attrs["status"] == "failed" and "No space left" in f.attrs["status_message"]
    (tmpfs / "filler").unlink()
    data = check_stopped_map_analysis(capsys, path, tmp_path / "out", 6)
    assert data["maps"][0]["summary"]["status"] == "failed"
    from npmpi_analysis.map.load import load_map

    from npmpi.runfile.format import SAMPLE_FIELDS

    m = load_map(path, SAMPLE_FIELDS)  # /map may still say running: the root's failed stands
    assert m.status == "failed" and any("the map failed: cannot write" in n for n in m.notices), m.notices


@pytest.mark.parametrize("status", ["interrupted", "running", "failed"])
def test_a_stopped_run_is_analysed_into_every_output(tmp_path, capsys, status):
    path = write_base(tmp_path / f"{status}.h5", rows=7, status=status)
    report = status == "failed"  # the report's figures take most of the time: one status draws them
    code, text, err = analyse_all_outputs(capsys, path, tmp_path / "out", report=report)
    assert code == 0 and "Traceback" not in text + err and "notice:" in text, err
    assert not report or "notice" in (tmp_path / "out" / "m.html").read_text()
    assert len(json.loads((tmp_path / "out" / "m.json").read_text())) >= 1
    assert len((tmp_path / "out" / "m.csv").read_text().splitlines()) == 8  # header + 7 sizes


# ---- bounded memory: a compression bomb


def _limited_memory():
    limit = 3 << 30  # the refusal allocates nothing; without the cap the read needs 16 GiB
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def _bomb_map(path: Path) -> Path:
    """A 2.6 GB trial_s (200 hosts, 8 sizes, 1000 trials), every chunk stored, gzip'd NaN at about
    190:1 (as the issue's forged map): a 14 MB file."""
    stopped_map(path, "interrupted", rounds=3)
    n, s, t = 200, 8, 1000
    with h5py.File(path, "r+") as f:
        g = f["map"]
        for name in list(g):
            del g[name]
        del g.attrs["pairs_layout"]  # the dense layout (format 1.x), forged
        hosts = np.array([f"h{k}" for k in range(n)], dtype=object)
        g.create_dataset("hosts", data=hosts, dtype=h5py.string_dtype())
        g.create_dataset("ranks", data=np.arange(n, dtype=np.int32))
        g.create_dataset("size_bytes", data=np.arange(1, s + 1, dtype=np.int64))
        g.create_dataset("round", data=np.where(np.eye(n, dtype=bool), -1, 0).astype(np.int32))
        ds = g.create_dataset("trial_s", (s, n, n, t), np.float64, chunks=(1, n, n, 100), compression="gzip")
        packed = _gzip((1, n, n, 100), np.nan)
        for k in range(s):
            for m in range(0, t, 100):
                ds.id.write_direct_chunk((k, 0, 0, m), packed, 0)
        for name in ("iterations", "bytes_moved"):
            g.create_dataset(name, data=np.zeros((s, n, n), dtype=np.int64))
        for name in ("window_start_unix_s", "window_end_unix_s"):
            g.create_dataset(name, data=np.full((s, 1), np.nan))
    return path


def _bomb_run(path: Path) -> Path:
    """Every sample dataset of 60 million samples (0.96 GB read by the analysis: times and watts),
    every chunk stored, gzip'd at
    about 190:1 (within the 1000:1 the reader allows a compressed dataset): a 13 MB file."""
    write_base(path, rows=4, status="complete")
    chunk = 1 << 20
    count = 57 * chunk
    packed = _gzip((chunk,), 1.0)
    with h5py.File(path, "r+") as f:
        cg = f["power/node0/channel0"]
        for name in ("time_unix_s", "power_w", "energy_j", "volts", "amps"):
            del cg[name]
            ds = cg.create_dataset(
                name, (count,), np.float64, chunks=(chunk,), compression="gzip", maxshape=(None,)
            )
            for k in range(count // chunk):
                ds.id.write_direct_chunk((k * chunk,), packed, 0)
    return path


@functools.cache
def _gzip(shape: tuple, value: float) -> bytes:
    import zlib

    return zlib.compress(np.full(shape, value).tobytes(), 1)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("make", [_bomb_map, _bomb_run], ids=["map", "run"])
def test_a_compression_bomb_is_refused_with_one_line_under_a_memory_limit(tmp_path, make):
    """Before issue 28 the map took 11 GB ('internal error … MemoryError' under a 6 GB limit)."""
    path = make(tmp_path / "bomb.h5")
    assert path.stat().st_size < 40 << 20
    proc = subprocess.run(
        [sys.executable, "-m", "npmpi_analysis", str(path), "--json", str(tmp_path / "b.json")],
        capture_output=True,
        text=True,
        timeout=100,
        check=False,
        preexec_fn=_limited_memory,
    )
    err = proc.stderr
    assert proc.returncode == 1 and "Traceback" not in err and "MemoryError" not in err, err
    lines = [ln for ln in err.splitlines() if ln.startswith("npmpi-analyze: error:")]
    # a run reads 0.5 GiB of a file; a map what this machine can hold (rows.read_cap: a part of its
    # free memory under the 3 GiB limit here, at least 0.5 GiB)
    cap = r"(1\.36|0\.[5-9][0-9]*) GiB" if make is _bomb_map else r"0\.5 GiB"
    assert len(lines) == 1 and re.search(f"over the {cap} npmpi-analyze reads of a file", lines[0]), err
    if make is _bomb_map:
        assert not (tmp_path / "b.json").exists()
    else:  # the run's bandwidth and latency are analysed without its power
        assert "/power/node0/channel0/" in lines[0] and "analysed without power" in lines[0]


# ---- text safety: what a file holds is safe for the terminal, CSV and HTML

CONTROL = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u202e\ud800-\udfff]")


def test_map_host_names_with_escapes_are_escaped_in_every_output(tmp_path, capsys):
    """Before issue 28 the map CSV wrote host names raw: a CR split the row, ESC and BEL went to
    whoever printed the file."""
    from npmpi_analysis.map.synthetic import MapTruth, write_map

    hosts = ["a\x1b[31m", "b\x07", "c\rX", "d\u202e"]
    path = write_map(tmp_path / "esc.h5", MapTruth(hosts=hosts, size_bytes=[1, 1024]))
    code, text, err = analyse_all_outputs(capsys, path, tmp_path / "out")
    assert code == 0, err
    raw = (tmp_path / "out" / "m.csv").read_bytes().decode()
    assert not CONTROL.search(raw + text + err), repr(raw[:300])
    rows = list(csv.DictReader(io.StringIO(raw)))
    assert len(rows) == 2 * 6  # 2 sizes x 6 pairs: no row split
    assert {r["host_a"] for r in rows} >= {"a\\x1b[31m", "b\\x07", "c\\x0dX"}
    html = (tmp_path / "out" / "m.html").read_text()
    assert not CONTROL.search(html) and "a\\x1b[31m" in html


def _not_utf8(f, owner: str, key: str, raw: bytes) -> None:
    f[owner].attrs.create(key, np.array(raw, dtype=h5py.string_dtype("utf-8")))


def test_a_report_of_a_run_with_attributes_that_are_not_utf8(tmp_path, capsys):
    """Before issue 28: 'internal error … UnicodeEncodeError' (h5py gives such bytes as lone
    surrogates, which no encoder writes)."""
    path = write_base(tmp_path / "u.h5", rows=6)
    with h5py.File(path, "r+") as f:
        _not_utf8(f, "/", "kernel", b"py\xff\xfethon")
        _not_utf8(f, "/", "mpi_library_version", b"Open \xc3MPI")
        _not_utf8(f, "power/node0/channel0", "description", b"\x9bmodel\xff")
        _not_utf8(f, "power/node0", "host", b"vm\xfe")
        seal_all(f)  # a forger's own attribute checksums
    code, text, err = analyse_all_outputs(capsys, path, tmp_path / "out")
    assert code == 0 and "internal error" not in err, err
    html = (tmp_path / "out" / "m.html").read_text(encoding="utf-8")
    out = text + err + html + (tmp_path / "out" / "m.csv").read_text()
    assert not CONTROL.search(out) and "py\ufffd\ufffdthon" in html
    json.loads((tmp_path / "out" / "m.json").read_text())


def test_a_map_with_host_names_that_are_not_utf8(tmp_path, capsys):
    from npmpi_analysis.map.synthetic import MapTruth, write_map

    path = write_map(tmp_path / "u.h5", MapTruth(hosts=["a", "b", "c"], size_bytes=[1]))
    with h5py.File(path, "r+") as f:
        f["map/hosts"][1] = b"b\xff\x1b"
        _not_utf8(f, "map", "kernel", b"py\xff")
    code, text, err = analyse_all_outputs(capsys, path, tmp_path / "out")
    assert code == 0, err
    every = text + err + (tmp_path / "out" / "m.html").read_text() + (tmp_path / "out" / "m.csv").read_text()
    assert not CONTROL.search(every) and "b\ufffd\\x1b" in every


# ---- messages name the bad field


def _damaged(base: Path, path: Path, owner: str, key: str, value) -> Path:
    shutil.copy(base, path)
    with h5py.File(path, "r+") as f:
        f[owner].attrs[key] = value
        seal_all(f)  # a forger's own attribute checksums: the value reaches the analysis
    return path


@pytest.fixture(scope="module")
def base_run(tmp_path_factory) -> Path:
    return write_base(tmp_path_factory.mktemp("base") / "base.h5")


FIELD_CASES = [
    ("power/node0", "clock_offset_start_s", np.inf),
    ("power/node0", "clock_offset_end_s", -np.inf),
    ("power/node0/channel0", "meter_delay_s", -1e6),
    ("power/node0/channel0", "meter_delay_s", 1e300),
    ("power/node0/channel0", "meter_delay_s", np.nan),
]


@pytest.mark.parametrize("owner,key,value", FIELD_CASES, ids=[f"{k}={v}" for _, k, v in FIELD_CASES])
def test_an_impossible_timing_attribute_is_named(base_run, tmp_path, capsys, owner, key, value):
    """Before issue 28: 'no sample in or near the baseline window' (or nothing at all)."""
    from npmpi_analysis.cli import main

    path = _damaged(base_run, tmp_path / "d.h5", owner, key, value)
    capsys.readouterr()
    code = main([str(path)])
    got = capsys.readouterr()
    errors = [ln for ln in got.err.splitlines() if ln.startswith("npmpi-analyze: error:")]
    assert code == 1 and len(errors) == 1, got.err
    assert f"/{owner}: attribute {key} = " in errors[0] and "is ignored" in errors[0], errors
    assert "no sample in or near" not in got.err
    assert "24 sizes analysed" in got.out  # the rest of the power analysis stands


def test_a_sample_dataset_shorter_than_the_others_is_named(base_run, tmp_path, capsys):
    from npmpi_analysis.cli import main

    path = tmp_path / "short.h5"
    shutil.copy(base_run, path)
    with h5py.File(path, "r+") as f:
        f["power/node0/channel0/power_w"].resize((3,))
    capsys.readouterr()
    code = main([str(path)])
    got = capsys.readouterr()
    assert code in (0, 1) and "Traceback" not in got.out + got.err
    assert "/power/node0/channel0: power_w holds 3 sample(s), time_unix_s " in got.out, got.out


# ---- gaps and stalls in maps


def _gap_map(path: Path, stall_s: float = 0.0) -> Path:
    """4 nodes, 2 sizes (6 round windows of 1 s, 0.5 s apart), 100 W sampled every 0.1 s; node 2's
    power rank stopped over windows 1 and 2 (a gap record, no samples); with `stall_s`, the trial 1
    of pair (0, 1) at 64 KiB took that much longer (its member stopped)."""
    from npmpi_analysis.map.synthetic import T0, MapTruth, write_map
    from npmpi_analysis.synthetic import SynthChannel, SynthNode

    from npmpi.runfile.faults import gap_record

    t = np.arange(T0 - 5.0, T0 + 15.0, 0.1)
    gap = (T0 + 1.4, T0 + 4.2)
    nodes = []
    for i in range(4):
        keep = (t < gap[0]) | (t > gap[1]) if i == 2 else np.ones(len(t), dtype=bool)
        faults = [gap_record(*gap, "replay on node 2")] if i == 2 else []
        ch = SynthChannel(t[keep], np.full(keep.sum(), 100.0), sample_interval_s=0.1, faults=faults)
        nodes.append(SynthNode([ch], host=f"h{i}"))
    truth = MapTruth([f"h{i}" for i in range(4)], [1, 65536], trials=5)
    write_map(path, truth, nodes=nodes, window_s=1.0, gap_s=0.5, baseline=(T0 - 4.0, T0 - 1.0))
    if stall_s:
        with h5py.File(path, "r+") as f:
            ds = f["map/trial_s"]
            for i, j in ((0, 1), (1, 0)):
                ds[1, i, j, 1] += stall_s / 100  # 100 iterations: stall_s more loop time
    return path


def test_a_recorded_gap_flags_the_pairs_of_its_node_in_the_windows_it_overlaps(tmp_path, capsys):
    """Before issue 28 the map's analysis flagged nothing and gave energy from the samples around."""
    from npmpi_analysis.map.analyse import analyse_map
    from npmpi_analysis.map.load import load_map

    from npmpi.runfile.format import SAMPLE_FIELDS

    path = _gap_map(tmp_path / "gap.h5")
    a = analyse_map(load_map(path, SAMPLE_FIELDS), "gap")
    rd = a.round
    flagged = {
        (k, i, j)
        for k in range(2)
        for i, j in a.pairs()
        if a.energy.flag[k, i, j] == 4  # 'recorded gap'
    }
    # windows 1 and 2 are rounds 1 and 2 of size 1 B: the pairs of node 2 in those rounds
    want = {(0, i, j) for i, j in a.pairs() if 2 in (i, j) and rd[i, j] in (1, 2)}
    assert flagged == want and len(want) == 2
    assert all("replay on node 2" in a.energy.flag_reason[k, i, j] for k, i, j in want)
    assert any("2 pair-size(s) flagged 'recorded gap'" in n for n in a.notices), a.notices
    code, text, err = analyse_all_outputs(capsys, path, tmp_path / "out", report=False)
    assert code == 0 and "flagged 'recorded gap': 2 pair-size(s)" in text, err
    rows = list(csv.DictReader(io.StringIO((tmp_path / "out" / "m.csv").read_text())))
    assert sum(r["power_flag"] == "recorded gap" for r in rows) == 2
    assert all("did not run" in r["power_flag_reason"] for r in rows if r["power_flag"] == "recorded gap")
    doc = json.loads((tmp_path / "out" / "m.json").read_text())["maps"][0]
    assert (
        sum(f == "recorded gap" for size in doc["power_flag"] for row in size for f in row) == 4
    )  # both ways
    reasons = [r for size in doc["power_flag_reason"] for row in size for r in row if r]
    assert len(reasons) == 4 and all("did not run" in r for r in reasons)


def test_a_stalled_trial_is_flagged_and_left_out_of_the_mean(tmp_path, capsys):
    """Before issue 28: a member stopped 15 s left a 15 s trial in the mean bandwidth, no flag."""
    from npmpi_analysis.map.analyse import analyse_map
    from npmpi_analysis.map.load import load_map

    from npmpi.runfile.format import SAMPLE_FIELDS

    clean = analyse_map(load_map(_gap_map(tmp_path / "clean.h5"), SAMPLE_FIELDS), "clean")
    a = analyse_map(load_map(_gap_map(tmp_path / "stall.h5", stall_s=15.0), SAMPLE_FIELDS), "stall")
    assert a.trials_stalled[1, 0, 1] == a.trials_stalled[1, 1, 0] == 1 and a.trials_stalled.sum() == 2
    assert clean.trials_stalled.sum() == 0
    # the mean of the 4 other trials: close to the clean map's mean of 5
    assert a.mean_bit_s[1, 0, 1] == pytest.approx(clean.mean_bit_s[1, 0, 1], rel=0.01)
    assert a.bandwidth_bit_s[1, 0, 1] == clean.bandwidth_bit_s[1, 0, 1]
    assert any("stalled trial(s)" in n and "h0-h1 at 65536 B (1)" in n for n in a.notices), a.notices
    code, text, err = analyse_all_outputs(capsys, tmp_path / "stall.h5", tmp_path / "out", report=False)
    assert code == 0, err
    rows = list(csv.DictReader(io.StringIO((tmp_path / "out" / "m.csv").read_text())))
    assert [r["trials_stalled"] for r in rows].count("1") == 1 and "stalled trial(s)" in text
    assert json.loads((tmp_path / "out" / "m.json").read_text())["maps"][0]["trials_stalled"][1][0][1] == 1


# ---- checksums (format 1.6): a flipped bit in any numeric dataset is detected and named


def _stored_chunks(path: Path) -> dict[str, tuple[int, int]]:
    """Each checksummed dataset's first stored chunk: (byte offset, size) in the file."""
    out = {}

    def visit(name, obj):
        if isinstance(obj, h5py.Dataset) and obj.fletcher32 and obj.id.get_num_chunks():
            info = obj.id.get_chunk_info(0)
            out[name] = (info.byte_offset, info.size)

    with h5py.File(path) as f:
        f.visititems(visit)
    return out


def _complete_map(path: Path) -> Path:
    w = map_writer(path)
    store_rounds(w, 12)
    w.finish("complete")
    return path


@pytest.mark.parametrize("kind", ["run", "map"])
def test_a_flipped_bit_in_any_numeric_dataset_is_detected_and_named(tmp_path, kind):
    """Before issue 28, 36 of 40 single-bit flips in a run file passed unnoticed (one changed 1,263
    values of the JSON)."""
    from npmpi_analysis.map.load import load_map

    from npmpi.core.errors import RunFileError
    from npmpi.runfile.format import SAMPLE_FIELDS
    from npmpi.runfile.reader import load_run

    base = write_base(tmp_path / "base.h5") if kind == "run" else _complete_map(tmp_path / "base.h5")
    chunks = _stored_chunks(base)
    want = 17 if kind == "run" else 18  # every numeric dataset holding data (a map's 7 conditions too)
    assert len(chunks) == want, sorted(chunks)
    rng = np.random.default_rng(28)
    for name, (offset, size) in chunks.items():
        path = tmp_path / "flipped.h5"
        data = bytearray(base.read_bytes())
        at = offset + int(rng.integers(size))
        data[at] ^= 1 << int(rng.integers(8))
        path.write_bytes(bytes(data))
        if name.startswith(("map/cond_", "map/runq_wait_s")):  # the map analysed without them
            problems = load_map(path, SAMPLE_FIELDS).problems
            assert any(f"/{name} fails its checksum (Fletcher-32)" in x for x in problems), (name, problems)
            continue
        with pytest.raises(RunFileError) as info:
            load_run(path) if kind == "run" else load_map(path, SAMPLE_FIELDS)
        assert f"/{name} fails its checksum (Fletcher-32)" in str(info.value), (name, info.value)
        assert "\n" not in str(info.value)


@pytest.mark.parametrize("kind", ["run", "map"])
def test_a_flipped_bit_in_a_host_name_is_detected_and_named(tmp_path, kind):
    """Text datasets cannot take a filter: /layout's text and /map/hosts carry a CRC-32 of it."""
    from npmpi_analysis.map.load import load_map

    from npmpi.core.errors import RunFileError
    from npmpi.runfile.format import SAMPLE_FIELDS
    from npmpi.runfile.reader import load_run
    from npmpi.runfile.writer import RunWriter

    host = "uniquehost-q7"
    path = tmp_path / "h.h5"
    if kind == "run":
        w = RunWriter(path, {"kernel": "python"}, {"host": [host, "other"], "node_index": [0, 1]}, 3)
        w.finish("interrupted", "test")
    else:
        w = map_writer(path, hosts=[host, "hb", "hc", "hd"])
        store_rounds(w, 12)
        w.finish("complete")
    data = bytearray(path.read_bytes())
    spots = [m.start() for m in re.finditer(host.encode(), bytes(data))]
    assert spots
    for at in spots:  # every copy of the name (a map's layout holds it too)
        data[at + 3] ^= 0x02
    path.write_bytes(bytes(data))
    with pytest.raises(RunFileError) as info:
        load_run(path) if kind == "run" else load_map(path, SAMPLE_FIELDS)
    where = "/layout/host" if kind == "run" else "/map/hosts"
    assert f"{where} fails its checksum (CRC-32 of its text)" in str(info.value), info.value


def test_a_chunk_torn_by_a_killed_writer_is_read_unchecked_only_in_a_file_left_running(tmp_path):
    """A writer killed while it rewrites a chunk of samples leaves the chunk's checksum stale: in a
    file left `running` that is the kill, not a flipped bit, and every flushed value is kept; in a
    closed file the same damage is refused."""
    from npmpi.core.errors import RunFileError
    from npmpi.runfile.reader import load_run

    base = write_base(tmp_path / "base.h5")
    name = "pingpong/trial_s"
    offset, size = _stored_chunks(base)[name]
    with h5py.File(base) as f:
        rows = int(f.attrs["sizes_completed"])
        stored = np.array(f[name][:rows])
    for status in ("running", "complete"):
        path = tmp_path / f"torn-{status}.h5"
        shutil.copy(base, path)
        with h5py.File(path, "r+") as f:
            f.attrs["status"] = status
        data = bytearray(path.read_bytes())
        data[offset + size - 1] ^= 0xFF  # the chunk's stored checksum: its values are intact
        path.write_bytes(bytes(data))
        if status == "running":
            assert np.array_equal(load_run(path).pingpong.trial_s, stored)
        else:
            with pytest.raises(RunFileError, match="fails its checksum"):
                load_run(path)
