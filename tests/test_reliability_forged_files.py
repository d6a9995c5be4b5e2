"""What cannot be printed and what a forged file may not make the analysis print or do (issue 37).

A standard output that cannot be written (`> /dev/full`, `>&-`) ends `npmpi` and `npmpi-analyze`
with one line and a non-zero status, never a traceback; output names the file system cannot take
are refused before the analysis; text from a file is one printable, bounded line in the text and
the HTML report; a forged protocol never reaches a figure's file name whole; impossible CPU times
are left out and named; a flipped attribute is named; what a SIGKILLed `calibrate` left beside its
output is removed by the next run.
"""

from __future__ import annotations

import json
import math
import os
import re
import struct
import subprocess
import sys
import time
from pathlib import Path

import h5py
import pytest
from npmpi_analysis.cli import main as analyze
from npmpi_analysis.synthetic import write_run

REPO = Path(__file__).resolve().parents[1]
T0 = 1_000.0
NAN = math.nan


def command(args: list[str], module: str = "npmpi", **kw) -> subprocess.CompletedProcess:
    kw.setdefault("stdout", subprocess.PIPE)
    kw.setdefault("stderr", subprocess.PIPE)
    return subprocess.run([sys.executable, "-m", module, *args], text=True, timeout=120, cwd=REPO, **kw)


def run_file(path: Path, attrs: dict | None = None, cpu: dict | None = None) -> Path:
    """A two-size run (1 kB, 64 kB) with three trials each; `attrs` and `cpu` as write_run takes them."""
    return write_run(
        path,
        [1024, 65536],
        [100, 10],
        [[1e-3, 1.1e-3, 1.2e-3], [2e-3, 2.1e-3, 2.2e-3]],
        [[T0, T0 + 1, T0 + 2], [T0 + 3, T0 + 4, T0 + 5]],
        attrs=attrs,
        cpu=cpu,
    )


# ---- standard output that cannot be written (class 12)

FULL = ["meters"], ["meters", "--json"], ["--help"], ["map", "--help"], ["--version"]


def _one_error_line(proc, prog: str, cause: str) -> None:
    lines = proc.stderr.splitlines()
    assert proc.returncode == 1, proc.stderr
    assert lines == [f"{prog}: error: cannot write to standard output: {cause}"], proc.stderr


@pytest.mark.parametrize("args", FULL, ids=" ".join)
def test_npmpi_to_a_full_disk_is_one_line(args):
    """Before: a traceback (OSError: [Errno 28]), or HelpRequested chained to it."""
    with open("/dev/full", "w") as full:
        proc = command(args, stdout=full, stderr=subprocess.PIPE)
    _one_error_line(proc, "npmpi", "No space left on device")


@pytest.mark.parametrize("args", FULL, ids=" ".join)
def test_npmpi_with_stdout_closed_is_one_line(args):
    """Before: AttributeError: 'NoneType' object has no attribute 'write' (Python's sys.stdout is
    None when descriptor 1 is closed)."""
    proc = subprocess.run(
        [sys.executable, "-m", "npmpi", *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        timeout=120,
        cwd=REPO,
        preexec_fn=lambda: os.close(1),
    )
    _one_error_line(proc, "npmpi", "it was closed when the command started")


def test_npmpi_with_stdout_and_stderr_full_says_nothing_and_fails():
    with open("/dev/full", "w") as full:
        proc = command(["--version"], stdout=full, stderr=full)
    assert proc.returncode == 1


@pytest.mark.parametrize("args", [["RUN"], ["RUN", "--csv", "OUT/r.csv"], ["--version"]], ids=" ".join)
def test_npmpi_analyze_to_a_full_disk_is_one_line_and_still_writes_its_files(tmp_path, args):
    """Before: 'npmpi-analyze: error: internal error, please report: OSError: [Errno 28] …'."""
    path = run_file(tmp_path / "r.h5")
    args = [a.replace("RUN", str(path)).replace("OUT", str(tmp_path)) for a in args]
    with open("/dev/full", "w") as full:
        proc = command(args, "npmpi_analysis", stdout=full, stderr=subprocess.PIPE)
    _one_error_line(proc, "npmpi-analyze", "No space left on device")
    if "--csv" in args:
        assert (tmp_path / "r.csv").read_text().count("\n") == 3


def test_npmpi_analyze_with_stdout_closed_is_one_line(tmp_path):
    path = run_file(tmp_path / "r.h5")
    proc = subprocess.run(
        [sys.executable, "-m", "npmpi_analysis", str(path)],
        stderr=subprocess.PIPE,
        text=True,
        timeout=120,
        preexec_fn=lambda: os.close(1),
    )
    _one_error_line(proc, "npmpi-analyze", "it was closed when the command started")


# ---- output names checked before the analysis (class 12)


@pytest.mark.parametrize(
    ("option", "value", "says"),
    [
        ("--np-out", "", "names no file"),
        ("--csv", ".", "names no file"),
        ("--np-out", "n" * 300, "a name of 300 bytes is longer than the file system allows"),
        ("--compare-csv", "c" * 300, "a name of 300 bytes is longer than the file system allows"),
        ("--plots", "d" * 300 + "/figs", "a name of 300 bytes is longer than the file system allows"),
        ("--np-out", "n" * 250 + ".out", "longer than the file system allows"),  # np-LABEL.out: longer
    ],
    ids=["np-out empty", "csv dot", "np-out 300", "compare-csv 300", "plots 300", "np-out 254 plus label"],
)
def test_an_output_name_the_file_system_refuses_is_bad_usage_before_any_work(
    tmp_path, capsys, monkeypatch, option, value, says
):
    """Before: 'internal error … PosixPath('.') has an empty name', or 'internal error … File name
    too long' after the whole analysis."""
    a, b = run_file(tmp_path / "a.h5"), run_file(tmp_path / "b.h5")
    monkeypatch.chdir(tmp_path)
    analysed = []
    monkeypatch.setattr("npmpi_analysis.cli.load", lambda p: analysed.append(p))
    assert analyze([str(a), str(b), option, value]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"npmpi-analyze: error: {option} ") and says in line, line
    assert analysed == [] and sorted(p.name for p in tmp_path.iterdir()) == ["a.h5", "b.h5"]


def test_plots_into_the_current_directory_is_still_allowed(tmp_path, capsys, monkeypatch):
    path = run_file(tmp_path / "a.h5")
    monkeypatch.chdir(tmp_path)
    assert analyze([str(path), "--plots", ".", "-q"]) == 0, capsys.readouterr().err
    assert any(p.suffix == ".png" for p in tmp_path.iterdir())


def test_a_long_file_name_still_gives_its_outputs(tmp_path, capsys):
    """Labels (figure names, np.out names) take at most 60 characters of a file's 250-byte name."""
    long_a = run_file(tmp_path / ("a" * 250 + ".h5"))
    long_b = run_file(tmp_path / ("b" * 250 + ".h5"))
    code = analyze(
        [str(long_a), str(long_b), "--np-out", str(tmp_path / "np.out"), "--plots", str(tmp_path / "f")]
    )
    assert code == 0, capsys.readouterr().err
    names = [p.name for p in (tmp_path / "f").iterdir()] + [p.name for p in tmp_path.glob("np-*.out")]
    assert len(names) > 2 and max(len(n) for n in names) < 100, names


# ---- text from a file: one printable line, bounded (classes 11 and 13)


def test_a_newline_in_the_command_or_the_protocol_stays_inside_its_line_and_row(tmp_path, capsys):
    """Before: `command:` and `protocol:` printed a raw newline: a second text line, and an extra
    row of the HTML report's summary table."""
    clean = run_file(tmp_path / "clean.h5", {"command_line": "python -m npmpi", "protocol": "tcp"})
    forged = run_file(
        tmp_path / "forged.h5", {"command_line": "python -m npmpi\nFAKE LINE", "protocol": "tcp\nFAKE PROTO"}
    )
    rows, texts = [], []
    for path in (clean, forged):
        capsys.readouterr()
        html = tmp_path / f"{path.stem}.html"
        assert analyze([str(path), "--report", str(html)]) == 0
        texts.append(capsys.readouterr().out)
        rows.append(html.read_text().split("</table>")[0].count("<tr>"))
    assert rows[0] == rows[1]
    assert "FAKE" not in "".join(line[:2] for line in texts[1].splitlines())  # no line starts with it
    assert "command: python -m npmpi\\x0aFAKE LINE" in texts[1]
    assert "protocol: tcp\\x0aFAKE PROT…" in texts[1]


@pytest.mark.parametrize("size", [2_000, 100_000])
def test_a_huge_forged_protocol_is_cut_and_never_a_file_name(tmp_path, capsys, size):
    """Before: 2 kB made --plots take 9 s, 10 kB 36 s then fail (the label is in figure file names:
    'File name too long'), 100 kB still ran at 120 s."""
    mpi = run_file(tmp_path / "mpi.h5", {"protocol": "mpi"})
    forged = run_file(tmp_path / "forged.h5", {"protocol": "x" * size, "protocol_settings": "{}"})
    t0 = time.monotonic()
    code = analyze(
        [str(mpi), str(forged), "--plots", str(tmp_path / "f"), "--report", str(tmp_path / "r.html")]
    )
    took = time.monotonic() - t0
    out, err = capsys.readouterr()
    assert code == 0, err
    assert took < 30 and max(len(p.name) for p in (tmp_path / "f").iterdir()) < 80
    assert "protocol: xxxxxxxxxxxxxxxx…" in out and "x" * 100 not in out + err
    assert "x" * 100 not in (tmp_path / "r.html").read_text()


# ---- impossible CPU times (class 13)


def _cpu(user, system, wall, wait):
    return {
        "ranks": [0, 1],
        "cpu_user_s": user,
        "cpu_system_s": system,
        "cpu_wall_s": wall,
        "cpu_runqueue_wait_s": wait,
    }


GOOD = [[0.1, 0.05], [0.2, 0.1]]
WALL = [[0.2, 0.2], [0.4, 0.4]]
ZERO = [[0.0, 0.0], [0.0, 0.0]]


@pytest.mark.parametrize(
    ("cpu", "left_out"),
    [
        (_cpu([[1e300, 0.05], [0.2, 0.1]], ZERO, WALL, ZERO), "above the wall time × 4096 cores"),
        (_cpu(GOOD, ZERO, WALL, [[111.0, 0.0], [0.0, 0.0]]), "longer than the wall time"),
        (_cpu(GOOD, ZERO, [[0.0, 0.2], [0.4, 0.4]], ZERO), "a wall time that is not a positive number"),
    ],
    ids=["cpu 1e300", "wait above wall", "wall 0"],
)
def test_an_impossible_cpu_time_is_named_and_never_a_percentage(tmp_path, capsys, cpu, left_out):
    """Before: cpu_user_s = 1e300 printed '5.55e+303 %' of a core, a run-queue wait above the wall
    time '5.55e+04 %'."""
    path = run_file(tmp_path / "r.h5", cpu=cpu)
    assert analyze([str(path), "--json", str(tmp_path / "r.json")]) == 0
    out = capsys.readouterr().out
    (note,) = [ln for ln in out.splitlines() if "left out as impossible" in ln]
    assert "1 CPU figure(s) of rank(s) 0" in note and left_out in note, note
    percents = [float(x) for x in re.findall(r"([0-9.e+]+) %", out)]
    assert percents and max(percents) <= 100, out
    doc = json.loads((tmp_path / "r.json").read_text())
    summary = doc["runs"][0]["summary"] if "runs" in doc else doc["summary"]
    assert len(summary["cpu_impossible"]) == 1


def test_cpu_times_all_nan_say_not_recorded(tmp_path, capsys):
    """Before: 'least - at None B'."""
    nan = [[NAN, NAN], [NAN, NAN]]
    path = run_file(tmp_path / "r.h5", cpu=_cpu(nan, nan, nan, nan))
    assert analyze([str(path)]) == 0
    out = capsys.readouterr().out
    assert "CPU time: not recorded" in out and "None" not in out


# ---- --tcp-port 0 is what its help says the default is (class 13)


def test_tcp_port_0_is_accepted_as_the_help_says_any_free_port():
    """Before: '--tcp-port 0: out of range; expected a port number from 1 to 65535', though the
    help says 'default: 0, any free port'."""
    from npmpi.run.options import build_parser, parse_options

    assert "(default: 0, any free port)" in " ".join(build_parser().format_help().split())
    assert parse_options(["--protocol", "tcp", "--tcp-port", "0"]).tcp_port == 0
    assert parse_options(["--protocol", "tcp"]).tcp_port == 0  # the same as not giving it


# ---- a flipped attribute is named (class 14)


def _flip_every(path: Path, needle: bytes, bit: int = 1) -> Path:
    data = bytearray(path.read_bytes())
    spots = [m.start() for m in re.finditer(re.escape(needle), bytes(data))]
    assert spots, needle
    for at in spots:
        data[at + len(needle) // 2] ^= 1 << bit
    flipped = path.with_name("flipped.h5")
    flipped.write_bytes(bytes(data))
    return flipped


@pytest.mark.parametrize(
    ("needle", "where"),
    [
        (struct.pack("<d", 5e-8), "/"),  # clock_read_cost_s
        (b"Open MPI v5.0.11", "/"),  # mpi_library_version
        (b"CPU-time model", "/power/node0/channel0"),  # the meter's description
        (struct.pack("<d", 0.01), "/power/node0/channel0"),  # natural_interval_s, sample_interval_s
    ],
    ids=["root number", "root text", "channel text", "channel number"],
)
def test_a_flipped_bit_in_an_attribute_is_named(tmp_path, needle, where):
    """Before: HDF5 checksums no attribute: such flips were read as the values."""
    from test_reliability_files import write_base

    from npmpi.core.errors import RunFileError
    from npmpi.runfile.reader import load_run

    base = write_base(tmp_path / "base.h5")
    assert load_run(base).notices == []
    with pytest.raises(RunFileError) as info:
        load_run(_flip_every(base, needle))
    message = str(info.value)
    assert f"the attributes of {where} fail their checksum (CRC-32)" in message and "\n" not in message


def test_a_changed_attribute_of_a_file_left_running_is_a_notice(tmp_path):
    from test_reliability_files import write_base

    from npmpi.runfile.reader import load_run

    base = write_base(tmp_path / "base.h5", status="running")
    with h5py.File(base, "r+") as f:
        f.attrs["kernel"] = "c"  # written after the root's last checksum, as a killed writer leaves it
    run = load_run(base)
    assert any("the attributes of / differ from their checksum" in n for n in run.notices), run.notices


def test_a_map_with_a_flipped_attribute_is_refused(tmp_path):
    from npmpi_analysis.map.load import load_map
    from test_reliability_analysis import map_writer, store_rounds

    from npmpi.core.errors import RunFileError
    from npmpi.runfile.format import SAMPLE_FIELDS

    path = tmp_path / "m.h5"
    w = map_writer(path)
    store_rounds(w, 12)
    w.finish("complete")
    assert load_map(path, SAMPLE_FIELDS).notices == []
    with h5py.File(path, "r+") as f:
        f["map"].attrs["window"] = 7  # an edit after the map was finished
    with pytest.raises(RunFileError, match="the attributes of /map fail their checksum"):
        load_map(path, SAMPLE_FIELDS)


# ---- hidden files a killed run or calibration left (class 14)


def test_a_sweep_between_a_files_creation_and_its_lock_never_takes_a_live_runs_file(tmp_path, monkeypatch):
    """Another run's start-up sweep removes every hidden file no process holds locked, however
    young: one made by mkstemp but not yet locked is made again by its owner."""
    from npmpi.core import outpath

    made = []
    real = outpath.tempfile.mkstemp

    def mkstemp_then_swept(**kw):
        fd, name = real(**kw)
        made.append(name)
        if len(made) <= 2:  # the temporary and the ballast, each removed once before being locked
            outpath._sweep(Path(kw["dir"]))
        return fd, name

    monkeypatch.setattr(outpath.tempfile, "mkstemp", mkstemp_then_swept)
    res = outpath.reserve_output(tmp_path / "r.h5", False, ballast_bytes=65536)
    try:
        assert len(made) == 4 and not any(Path(n).exists() for n in made[:2])
        monkeypatch.setattr(outpath.tempfile, "mkstemp", real)
        outpath._sweep(tmp_path)  # a later run's start-up: all three are held
        assert res.temp.exists() and res.ballast.exists() and res.lock_path.exists()
    finally:
        outpath.release(res)
    assert list(tmp_path.iterdir()) == []


def test_what_a_sigkilled_calibrate_left_is_removed_by_the_next_start_at_once(tmp_path):
    """Before: its .npmpi-lock-* and .npmpi-*.tmp stayed until a run started over a minute later."""
    from support.reliability import Job, processes_named, wait_exited

    job = Job(
        ["calibrate", "--meter", "estimate", "--duration", "60", "-o", "cal.json"], 3, tmp_path, "cal.json"
    )
    try:
        assert job.wait_until(lambda: any(p.name.startswith(".npmpi-lock-") for p in tmp_path.iterdir()), 60)
        ranks = processes_named(job.name)
        job.kill_everything()  # SIGKILL: mpirun and every rank
        assert job.leftovers(10) == []
        assert wait_exited(ranks, 10) == []  # every rank's files closed, its locks with them
    finally:
        job.close()
    left = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".npmpi-"))
    assert any(n.startswith(".npmpi-lock-") for n in left) and any(n.endswith(".tmp") for n in left), left
    from npmpi.core.outpath import release, reserve_output

    release(reserve_output(tmp_path / "next.json", False))  # the next run's or calibration's start-up
    after = sorted(p.name for p in tmp_path.iterdir())
    assert after == [], f"before the start-up: {', '.join(left)}; after it: {', '.join(after)}"
