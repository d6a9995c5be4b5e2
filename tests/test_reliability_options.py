"""Invalid command lines under a real mpirun: exit status 2 on every rank within seconds, one clear
`npmpi: error:` line, no traceback, no file left behind.

Every case runs in its own directory; each rank's exit status is recorded by a shell wrapper
(`sh -c 'python -m npmpi …; echo $? > rc-RANK'`). By default mpirun kills the other ranks as soon
as one exits with a non-zero status, so the table runs with that policy off
(PRTE_MCA_state_base_error_non_zero_exit=0): each rank must reach exit status 2 by itself. A few
cases also run with mpirun's default policy, whose status (what a user sees) must be 2. The jobs
run a few at a time (they mostly wait for MPI to start) and each case is checked on its own.

A case the options parser refuses is refused before MPI starts, on every rank alike (the same
argv, the same parser): such cases are checked in-process through `npmpi.cli.main` (exit status 2,
one line, nothing left), and every eighth of them, with every case the parser lets through (meters,
layouts, output paths, files: refused by the ranks' collective check), under mpirun.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from support.launcher import local_mpi_env, npmpi_command

from npmpi import cli
from npmpi.calibrate.command import parse_calibrate_options
from npmpi.core.errors import HelpRequested, UsageError
from npmpi.map.options import parse_map_options
from npmpi.run.options import parse_options

pytestmark = pytest.mark.mpi

WITHIN_S = 30  # per job; about 1 s on an idle machine (2 s for a serial port that never answers)
PARALLEL_JOBS = 3
RC_SCRIPT = '"$0" -m npmpi "$@"; rc=$?; echo $rc > "$NPMPI_TEST_RC_DIR/rc-$OMPI_COMM_WORLD_RANK"; exit $rc'
CALIBRATE = ["calibrate", "--meter", "estimate"]


@dataclass(frozen=True)
class Case:
    id: str
    args: list[str]
    fragment: str
    np: int = 2
    files: dict[str, str] = field(default_factory=dict)  # made in the job's directory first
    links: dict[str, str] = field(default_factory=dict)  # symbolic links made there: name -> target
    fifos: tuple[str, ...] = ()  # named pipes made there (nothing ever writes to them)
    default_policy: bool = False  # also run under mpirun's default policy, checking its status


CASES = [
    # message sizes
    Case("upper-zero", ["-l", "0", "-u", "0"], "at least 1 byte", default_policy=True),
    Case("lower-not-a-size", ["-l", "abc"], "-l/--lower"),
    Case("upper-bad-suffix", ["-u", "1X"], "-u/--upper"),
    Case("upper-negative", ["-u", "-5"], "-u/--upper"),
    Case("upper-below-lower", ["-l", "2K", "-u", "1K"], "below --lower"),
    Case("upper-beyond-int-count", ["-u", "3G"], "largest message this MPI can carry"),
    Case("perturbation-negative", ["-p", "-1"], "--perturbation -1"),
    Case("perturbation-not-a-number", ["-p", "x"], "-p/--perturbation"),
    # repetition
    Case("trials-zero", ["--trials", "0"], "--trials 0"),
    Case("trials-too-many", ["--trials", "1001"], "--trials 1001"),
    Case("trials-fraction", ["--trials", "2.5"], "expected a whole number"),
    Case("trials-missing-value", ["--trials"], "expected one argument"),
    Case("target-time-zero", ["--target-time", "0"], "--target-time 0"),
    Case("target-time-negative", ["--target-time", "-1"], "--target-time -1"),
    Case("target-time-nan", ["--target-time", "nan"], "finite number"),
    Case("target-time-inf", ["--target-time", "inf"], "finite number"),
    Case("target-time-too-long", ["--target-time", "7200"], "at most 3600"),
    Case("repeats-zero", ["--repeats", "0"], "--repeats 0"),
    Case("repeats-too-many", ["--repeats", "1000000001"], "--repeats 1000000001"),
    Case(
        "repeats-and-target-time",
        ["--repeats", "10", "--target-time", "0.01"],
        "contradict",
        default_policy=True,
    ),
    Case("max-round-trip-zero", ["--max-round-trip", "0"], "--max-round-trip 0"),
    Case("max-one-way-zero", ["--max-one-way", "0"], "--max-one-way 0"),
    Case("kernel-unknown", ["--kernel", "fortran"], "unknown kernel"),
    Case("option-unknown", ["--bogus"], "unrecognized arguments: --bogus"),
    # power: meter specs, their values, rank counts
    Case("meter-empty", ["--meter", ""], "--meter is empty", np=3),
    Case("meter-unknown-kind", ["--meter", "geiger"], "unknown meter", np=3, default_policy=True),
    Case("meter-wattsup-interval", ["--meter", "wattsup:/dev/null,interval=0.5"], "interval=0.5", np=3),
    Case("meter-wattsup-baud", ["--meter", "wattsup:/dev/null,baud=-3"], "baud=-3", np=3),
    Case(
        "meter-wattsup-missing-port", ["--meter", "wattsup:/dev/ttyNOPE9"], "cannot open /dev/ttyNOPE9", np=3
    ),
    Case("meter-wattsup-not-a-tty", ["--meter", "wattsup:/dev/null"], "cannot open /dev/null", np=3),
    Case(
        "meter-wattsup-silent-port", ["--meter", "wattsup:{silent_tty}"], "no answer from a Watts Up?", np=3
    ),
    Case("meter-rapl-domain", ["--meter", "rapl:/nonexistent,domains=bogus"], "unknown RAPL domain", np=3),
    Case("meter-rapl-missing-root", ["--meter", "rapl:/nonexistent"], "no powercap directory", np=3),
    Case(
        "meter-replay-missing-file",
        ["--meter", "replay:nope.csv"],
        "nope.csv does not exist",
        np=3,
        default_policy=True,
    ),
    Case(
        "meter-without-a-power-rank",
        ["--meter", "estimate"],
        "power needs one extra rank per node",
        default_policy=True,
    ),
    Case("meter-optional-without-rank", ["--meter", "estimate", "--meter-optional"], "one extra rank"),
    Case(
        "sample-interval-zero", ["--meter", "estimate", "--sample-interval", "0"], "--sample-interval 0", np=3
    ),
    Case("sample-interval-text", ["--sample-interval", "soon"], "invalid time 'soon'"),
    Case("baseline-negative", ["--meter", "estimate", "--baseline", "-1"], "--baseline -1", np=3),
    Case("baseline-too-long", ["--meter", "estimate", "--baseline", "4000"], "--baseline 4000", np=3),
    Case("one-rank", [], "a ping-pong needs 2 ranks", np=1),
    # output and calibration files
    Case("output-empty", ["-o", ""], "--output is empty"),
    Case("output-missing-directory", ["-o", "missing-dir/run.h5"], "does not exist"),
    Case("output-is-a-directory", ["-o", "."], "is a directory"),
    Case("output-exists", ["-o", "run.h5"], "--force", files={"run.h5": "keep me"}, default_policy=True),
    Case("calibration-missing", ["--meter", "estimate", "--calibration", "cal.json"], "no such file", np=3),
    Case(
        "calibration-not-json",
        ["--meter", "estimate", "--calibration", "cal.json"],
        "not a readable calibration file",
        np=3,
        files={"cal.json": "{"},
    ),
    Case(
        "calibration-other-format",
        ["--meter", "estimate", "--calibration", "cal.json"],
        "not an npmpi calibration file",
        np=3,
        files={"cal.json": '{"format": "x"}'},
    ),
    # output paths checked by creating the file at start-up (docs/reliability.md, issue 15)
    Case(
        "output-name-too-long", ["-o", "a" * 300], "longer than the file system allows", default_policy=True
    ),
    Case("output-in-proc", ["-o", "/proc/x"], "cannot create a file in /proc"),
    Case("output-in-sys", ["-o", "/sys/x.h5"], "cannot create a file in /sys"),
    Case(
        "output-dangling-link",
        ["-o", "r.h5", "--force"],
        "symbolic link (dangling)",
        links={"r.h5": "nowhere"},
    ),
    Case(
        "output-link-to-a-file",
        ["-o", "r.h5"],
        "symbolic link",
        files={"v.h5": "victim"},
        links={"r.h5": "v.h5"},
    ),
    Case("output-dev-null-force", ["-o", "/dev/null", "--force"], "not a regular file", default_policy=True),
    Case("output-fifo-force", ["-o", "r.h5", "--force"], "not a regular file", fifos=("r.h5",)),
    Case(
        "calibrate-output-in-proc",
        [*CALIBRATE, "-o", "/proc/cal.json"],
        "cannot create a file in /proc",
        np=3,
    ),
    Case("calibrate-output-dev-null", [*CALIBRATE, "-o", "/dev/null", "--force"], "not a regular file", np=3),
    # hostile calibration files: refused at start-up by every rank, one line
    *[
        Case(
            f"calibration-{name}",
            ["--meter", "estimate", "--calibration", "cal.json"],
            fragment,
            np=3,
            files={"cal.json": text},
            default_policy=name == "nested",
        )
        for name, text, fragment in [
            (
                "version-text",
                '{"format": "npmpi-calibration", "version": "abc", "results": []}',
                "version 'abc'",
            ),
            (
                "version-null",
                '{"format": "npmpi-calibration", "version": null, "results": []}',
                "version None",
            ),
            (
                "version-bool",
                '{"format": "npmpi-calibration", "version": true, "results": []}',
                "version True",
            ),
            ("nested", "[" * 200_000, "nested 200000 levels"),
            ("too-large", " " * ((1 << 20) + 1), "more than the 1048576 bytes"),
            ("not-utf8", '{"format": "\udcff"}', "not a readable calibration file"),
            (
                "delay-text",
                '{"format": "npmpi-calibration", "version": 1, "results": '
                '[{"host": "h", "spec": "estimate", "kind": "estimate", "delay_s": "soon"}]}',
                "results[0].delay_s is 'soon'",
            ),
            (
                "delay-nan",
                '{"format": "npmpi-calibration", "version": 1, "results": [{"host": "h", "delay_s": NaN}]}',
                "not a readable calibration file",
            ),
            (
                "host-number",
                '{"format": "npmpi-calibration", "version": 1, "results": [{"host": 3, "delay_s": 1}]}',
                "results[0].host is 3",
            ),
            (
                "results-not-objects",
                '{"format": "npmpi-calibration", "version": 1, "results": [1]}',
                "results[0]",
            ),
        ]
    ],
    Case(
        "calibration-fifo",
        ["--meter", "estimate", "--calibration", "cal.json"],
        "not a regular file",
        np=3,
        fifos=("cal.json",),
        default_policy=True,
    ),
    Case(
        "calibration-dev-zero",
        ["--meter", "estimate", "--calibration", "/dev/zero"],
        "not a regular file",
        np=3,
        default_policy=True,
    ),
    Case("calibration-directory", ["--meter", "estimate", "--calibration", "."], "is a directory", np=3),
    # replay traces and other files a meter reads
    Case(
        "meter-replay-fifo", ["--meter", "replay:trace.csv"], "not a regular file", np=3, fifos=("trace.csv",)
    ),
    Case("meter-replay-dev-zero", ["--meter", "replay:/dev/zero"], "not a regular file", np=3),
    Case(
        "meter-replay-run-file-fifo", ["--meter", "replay:t.h5"], "not a regular file", np=3, fifos=("t.h5",)
    ),
    Case(
        "meter-estimate-stat-fifo", ["--meter", "estimate:stat=s"], "not a regular file", np=3, fifos=("s",)
    ),
    # sizes in ASCII digits only, meter parameters known to the backend
    Case("upper-arabic-indic-digits", ["-u", "\u0661\u0660\u0662\u0664"], "-u/--upper"),
    Case("upper-full-width-digit", ["-u", "\uff18K"], "-u/--upper"),
    Case("trials-arabic-indic-digit", ["--trials", "\u0663"], "expected a whole number"),
    Case(
        "meter-unknown-parameter",
        ["--meter", "estimate:foo=1"],
        "known parameters: idle_w, max_w, stat",
        np=3,
    ),
    # the calibrate subcommand
    Case("calibrate-no-meter", ["calibrate"], "calibrate needs a meter", np=3),
    Case("calibrate-duration", [*CALIBRATE, "--duration", "2"], "--duration 2", np=3, default_policy=True),
    Case("calibrate-bursts", [*CALIBRATE, "--burst-min", "3", "--burst-max", "2"], "min <= max", np=3),
    Case("calibrate-too-short", [*CALIBRATE, "--duration", "10", "--burst-max", "4"], "too short", np=3),
    Case("calibrate-max-delay", [*CALIBRATE, "--max-delay", "0"], "--max-delay 0", np=3),
    Case("calibrate-matrix", [*CALIBRATE, "--matrix", "4"], "--matrix 4", np=3),
    Case("calibrate-sample-interval", [*CALIBRATE, "--sample-interval", "100"], "--sample-interval", np=3),
    Case("calibrate-unknown-option", [*CALIBRATE, "--trials", "3"], "unrecognized arguments", np=3),
    Case("calibrate-output-missing-dir", [*CALIBRATE, "-o", "nodir/c.json"], "does not exist", np=3),
    Case("calibrate-output-exists", [*CALIBRATE, "-o", "c.json"], "--force", np=3, files={"c.json": "keep"}),
    Case("calibrate-one-load-rank-short", ["calibrate", "--meter", "estimate"], "power needs", np=1),
]


@dataclass
class Outcome:
    returncode: int
    stdout: str
    stderr: str
    seconds: float
    rank_codes: dict[int, int]
    left: list[str]
    work: Path


def _run_case(case: Case, root: Path, default_policy: bool, silent_tty: str) -> Outcome:
    key = case.id + ("-default-policy" if default_policy else "")
    work = root / key
    rc_dir = root / f"{key}.rc"
    work.mkdir()
    rc_dir.mkdir()
    for name, text in case.files.items():
        (work / name).write_bytes(text.encode(errors="surrogateescape"))
    for name, target in case.links.items():
        (work / name).symlink_to(target)
    for name in case.fifos:
        os.mkfifo(work / name)
    cmd = npmpi_command(case.np, [a.replace("{silent_tty}", silent_tty) for a in case.args])
    at = cmd.index("-m")
    cmd[at - 1 : at + 2] = ["sh", "-c", RC_SCRIPT, cmd[at - 1]]  # python -m npmpi -> sh -c '…' python
    env = {"NPMPI_TEST_RC_DIR": str(rc_dir)}
    if not default_policy:
        env["PRTE_MCA_state_base_error_non_zero_exit"] = "0"
    t0 = time.monotonic()
    try:
        proc = subprocess.run(
            cmd,
            cwd=work,
            env=local_mpi_env(env),
            capture_output=True,
            text=True,
            timeout=WITHIN_S * 3,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        return Outcome(-1, str(exc.stdout), str(exc.stderr), WITHIN_S * 3, {}, [], work)
    seconds = time.monotonic() - t0
    # under mpirun's default policy a rank may be killed between creating its file and writing it
    texts = {int(p.name[3:]): p.read_text().strip() for p in rc_dir.glob("rc-*")}
    codes = {rank: int(text) for rank, text in texts.items() if text}
    given = {*case.files, *case.links, *case.fifos}
    left = sorted(p.name for p in work.iterdir() if p.name not in given)
    return Outcome(proc.returncode, proc.stdout, proc.stderr, seconds, codes, left, work)


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory) -> dict[tuple[str, bool], Outcome]:
    root = tmp_path_factory.mktemp("options")
    runs = [(c, False) for c in LAUNCHED] + [(c, True) for c in LAUNCHED if c.default_policy]
    master, slave = os.openpty()  # a serial port where no meter ever answers
    try:
        tty = os.ttyname(slave)
        with ThreadPoolExecutor(PARALLEL_JOBS) as pool:
            futures = {(c.id, policy): pool.submit(_run_case, c, root, policy, tty) for c, policy in runs}
        return {key: f.result() for key, f in futures.items()}
    finally:
        os.close(master)
        os.close(slave)


def _parser_refuses(case: Case) -> bool:
    """Whether the options parser refuses the case's command line (before MPI starts)."""
    if case.files or case.links or case.fifos:
        return False
    args = [a.replace("{silent_tty}", "/dev/null") for a in case.args]
    parsers = {"calibrate": parse_calibrate_options, "map": parse_map_options}
    parse = parsers.get(args[0] if args else "")
    try:
        parse(args[1:]) if parse is not None else parse_options(args)
    except UsageError:
        return True
    except HelpRequested:
        return False
    return False


PARSER_CASES = [c for c in CASES if _parser_refuses(c)]
LAUNCHED = [c for c in CASES if c not in PARSER_CASES or c.default_policy or PARSER_CASES.index(c) % 8 == 0]
IN_PROCESS = [c for c in CASES if c not in LAUNCHED]


def _one_clear_error(got: Outcome, case: Case) -> None:
    lines = [ln.strip() for ln in got.stderr.splitlines() if ln.strip().startswith("npmpi: error:")]
    assert len(lines) == 1, got.stderr
    assert case.fragment in lines[0], lines[0]
    assert "Traceback" not in got.stdout + got.stderr
    assert got.left == [], f"files left behind: {got.left}"
    assert got.seconds < WITHIN_S
    for name, text in case.files.items():  # nothing given was touched
        assert (got.work / name).read_bytes() == text.encode(errors="surrogateescape")


def test_the_table_is_large_and_unique():
    assert len(CASES) >= 30
    assert len({c.id for c in CASES}) == len(CASES)


def test_both_ways_cover_the_table():
    assert len(IN_PROCESS) >= 20 and len(LAUNCHED) >= 20 and len(IN_PROCESS) + len(LAUNCHED) == len(CASES)
    assert any(c in LAUNCHED for c in PARSER_CASES)


@pytest.mark.parametrize("case", IN_PROCESS, ids=[c.id for c in IN_PROCESS])
def test_a_command_line_the_parser_refuses_exits_2_with_one_line(case, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    sigint = signal.getsignal(signal.SIGINT)
    try:
        code = cli.main(list(case.args))
    finally:
        signal.signal(signal.SIGINT, sigint)
    out, err = capsys.readouterr()
    assert code == 2, err
    got = Outcome(code, out, err, 0.0, {0: code}, sorted(p.name for p in tmp_path.iterdir()), tmp_path)
    _one_clear_error(got, case)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("case", LAUNCHED, ids=[c.id for c in LAUNCHED])
def test_invalid_command_line_every_rank_exits_2(outcomes, case):
    got = outcomes[(case.id, False)]
    assert got.rank_codes == dict.fromkeys(range(case.np), 2), (got.rank_codes, got.stderr)
    _one_clear_error(got, case)


DEFAULT_POLICY = [c for c in LAUNCHED if c.default_policy]


@pytest.mark.timeout(600)
@pytest.mark.parametrize("case", DEFAULT_POLICY, ids=[c.id for c in DEFAULT_POLICY])
def test_invalid_command_line_mpirun_exits_2(outcomes, case):
    got = outcomes[(case.id, True)]
    assert got.returncode == 2, got.stdout + got.stderr
    _one_clear_error(got, case)
