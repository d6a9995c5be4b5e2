"""A large map's CSV written by a second process beside its JSON and figures
(npmpi_analysis.side_output, map/cli.SIDE_PAIR_SIZES): the same bytes as written in one process,
and what goes wrong there said as it would be here, in one line, with the exit status it has."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from npmpi_analysis.map import cli as map_cli
from npmpi_analysis.map.synthetic import MapTruth, write_map
from npmpi_analysis.outfiles import OutputError
from npmpi_analysis.side_output import SideOutput


@pytest.fixture(scope="module")
def map_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("side") / "m.h5"
    write_map(path, MapTruth([f"node{k:03d}" for k in range(70)], slow_links={(0, 2): 0.3}))
    return path


def _analyse(capsys, path: Path, out: Path, side: int, *more: str) -> tuple[int, str]:
    from npmpi_analysis.cli import main

    saved = map_cli.SIDE_PAIR_SIZES
    map_cli.SIDE_PAIR_SIZES = side
    try:
        capsys.readouterr()
        code = main([str(path), "--json", str(out / "m.json"), "--csv", str(out / "m.csv"), "--quiet", *more])
    finally:
        map_cli.SIDE_PAIR_SIZES = saved
    got = capsys.readouterr()
    assert "Traceback" not in got.out + got.err
    return code, got.err


def test_the_csv_written_beside_is_the_one_written_here(map_file, tmp_path, capsys):
    here, beside = tmp_path / "here", tmp_path / "beside"
    here.mkdir(), beside.mkdir()
    assert _analyse(capsys, map_file, here, 10**12)[0] == 0
    assert _analyse(capsys, map_file, beside, 0)[0] == 0
    for name in ("m.csv", "m.json"):
        assert (beside / name).read_bytes() == (here / name).read_bytes()
    sizes = len(MapTruth(["a", "b"]).size_bytes)
    assert (here / "m.csv").read_bytes().count(b"\n") == 1 + 70 * 69 // 2 * sizes
    assert not [p for p in beside.iterdir() if p.name.endswith(".tmp")]


def test_a_csv_that_exists_is_refused_as_here(map_file, tmp_path, capsys):
    """The second process' refusal reaches the user as the one-process refusal: one line, exit 2."""
    (tmp_path / "m.csv").write_text("mine\n")
    code, err = _analyse(capsys, map_file, tmp_path, 0)
    assert code == 2 and err.count("\n") == 1 and "m.csv exists" in err and "--force" in err
    assert (tmp_path / "m.csv").read_text() == "mine\n"


def test_a_second_process_that_dies_is_a_clear_error(tmp_path):
    def killed(f) -> None:
        f.write(b"half")
        os.kill(os.getpid(), signal.SIGKILL)

    job = SideOutput(tmp_path / "x.csv", killed, force=False)
    with pytest.raises(OutputError, match=r"x\.csv: the process writing it ended with exit status -9"):
        job.join()
    assert list(tmp_path.iterdir()) == []  # nor its temporary file


def test_an_error_making_the_output_is_said_by_its_name(tmp_path):
    def broken(f) -> None:
        f.write(b"half")
        raise ValueError("a column of the wrong length")

    job = SideOutput(tmp_path / "x.csv", broken, force=False)
    with pytest.raises(OutputError, match=r"cannot write .*x\.csv: ValueError: a column of the wrong length"):
        job.join()
    assert list(tmp_path.iterdir()) == []


def test_stopping_the_second_process_leaves_no_file(tmp_path):
    """The analysis stopped (an error, Ctrl-C, SIGTERM) while the second process writes: it is
    stopped too, and neither the output nor its temporary file stays."""
    import time

    def slow(f) -> None:
        for _ in range(600):
            f.write(b"x" * 1000)
            f.flush()
            time.sleep(0.1)

    job = SideOutput(tmp_path / "x.csv", slow, force=False)
    while not list(tmp_path.iterdir()):  # its temporary file is being written
        time.sleep(0.01)
    started = time.monotonic()
    job.stop()
    assert time.monotonic() - started < 10 and list(tmp_path.iterdir()) == []


def test_sigterm_ends_the_analysis_in_one_line(map_file, tmp_path):
    """npmpi-analyze sent SIGTERM while it writes a map's outputs: one line, exit status 143, no
    output nor temporary file left (the CSV's second process stopped with it)."""
    import subprocess
    import sys
    import time

    cmd = [sys.executable, "-c", SLOW_ANALYSIS, str(map_file), str(tmp_path)]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not (tmp_path / "writing").exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    proc.terminate()
    err = proc.communicate(timeout=60)[1]
    assert proc.returncode == 143, err
    assert err.strip().splitlines() == ["npmpi-analyze: error: interrupted by SIGTERM"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["writing"]


# the analysis with the CSV beside the JSON, both of whose writing waits once begun (the signal then
# comes while both outputs are being written)
SLOW_ANALYSIS = """
import sys, time
from pathlib import Path
from npmpi_analysis.map import cli, report
cli.SIDE_PAIR_SIZES = 0
write_json = report.write_json
def slow_json(f, analyses, changes):
    f.write(b"{")
    Path(sys.argv[2], "writing").touch()
    time.sleep(60)
def slow_csv(f, analyses):
    f.write(b"map")
    time.sleep(60)
report.write_json, report.write_csv = slow_json, slow_csv
from npmpi_analysis.cli import main
out = Path(sys.argv[2])
sys.exit(main([sys.argv[1], "--quiet", "--json", str(out / "m.json"), "--csv", str(out / "m.csv")]))
"""


def test_stopped_at_once_the_second_process_writes_nothing(tmp_path):
    """stop() right after the start: the signal reaches a process still starting (it waits, blocked
    across the fork) and the output is not written."""
    import time

    def slowish(f) -> None:
        for _ in range(20):
            f.write(b"x" * 1000)
            time.sleep(0.05)

    from npmpi_analysis.cli import _terminated

    previous = signal.signal(signal.SIGTERM, _terminated)  # npmpi-analyze's: a Python handler
    try:
        for k in range(3):
            job = SideOutput(tmp_path / f"x{k}.csv", slowish, force=False)
            job.stop()
            job.stop()  # once is enough; again does nothing
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert list(tmp_path.iterdir()) == []
