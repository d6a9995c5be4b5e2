"""One strict number grammar (issue 28, item 4): every numeric option of a run, a map and calibrate,
every numeric field of every meter kind's spec (as --meter and --fabric-meter) and the numeric
environment variables refuse other scripts' digits, signs, spaces, exponents, nan/inf and 40-digit
numbers with exit 2 and one `npmpi: error:` line, before any MPI work, never a traceback.

In-process through `npmpi.cli.main`: a refusal here happens before mpi4py is imported, on every rank
alike (same argv, same parser), so no rank can be left behind by it.
"""

from __future__ import annotations

import io
import signal
import sys

import pytest

from npmpi import cli
from npmpi.calibrate.command import build_parser as calibrate_parser
from npmpi.commands.console import Console
from npmpi.commands.threadlevel import local_position
from npmpi.core.abort import error_line
from npmpi.core.errors import UsageError
from npmpi.core.outpath import reserve_output
from npmpi.core.startup import launcher_rank
from npmpi.core.units import parse_number, parse_whole
from npmpi.map.options import build_parser as map_parser
from npmpi.run.arguments import build_parser, count_arg, seconds_arg

# hostile spellings of "a number": other scripts' digits (superscript, Arabic-Indic, full-width),
# signs, spaces, exponents, nan/inf, 40 digits, '_' and hexadecimal
HOSTILE = ["²", "٤٤٣", "８", "+1", "-1", " 1", "1 ", "1e3", "nan", "inf", "-inf", "1" * 40, "1_0", "0x10"]


def _numeric_options(parser) -> list[str]:
    """Every option of a parser whose value is a number (read from the parser, so none is missed)."""
    numeric = {count_arg, seconds_arg}
    out = []
    for action in parser._actions:
        kind = getattr(action.type, "__name__", "")
        if action.type in numeric or kind in ("_size", "_pairs", "_sizes", "_count"):
            out.append(max(action.option_strings, key=len))
    return out


RUN_OPTIONS = _numeric_options(build_parser())
MAP_OPTIONS = _numeric_options(map_parser())
CALIBRATE_OPTIONS = _numeric_options(calibrate_parser())

# every numeric field of every meter kind: its spec with X in the number's place
METER_FIELDS = [
    "estimate:idle_w=X",
    "estimate:max_w=X",
    "rapl:max_w=X",
    "ipmi:timeout=X",
    "nvml:X",
    "wattsup:/dev/null,baud=X",
    "wattsup:/dev/null,interval=X",
    "replay:trace.csv,node=X",
    "replay:trace.csv,channel=X",
    "replay:trace.csv,loop=X",
    "replay:trace.csv,scale=X",
    "replay:trace.csv,interval=X",
    "redfish:127.0.0.1:X",
    "redfish:[::1]:X",
    "redfish:127.0.0.1,timeout=X",
    "snmp:127.0.0.1:X,profile=apc-rpdu2",
    "snmp:127.0.0.1,profile=apc-rpdu2,outlet=X",
    "snmp:127.0.0.1,profile=raritan-pdu2,index=X",
    "snmp:127.0.0.1,profile=entity-sensor,index=X",
    "snmp:127.0.0.1,profile=apc-rpdu2,timeout=X",
    "snmp:127.0.0.1,profile=apc-rpdu2,retries=X",
    "snmp:127.0.0.1,profile=apc-rpdu2,max_w=X",
    "snmp:127.0.0.1,oid=1.3.6.1.4.1,scale=X",
    "snmp:127.0.0.1,oid=X",
]


def _main(argv: list[str], capsys) -> tuple[int, str, str]:
    sigint = signal.getsignal(signal.SIGINT)
    try:
        code = cli.main(argv)
    finally:
        signal.signal(signal.SIGINT, sigint)
    out, err = capsys.readouterr()
    return code, out, err


def _one_line_exit_2(argv: list[str], capsys, before_mpi: bool = True) -> str:
    had_mpi = "mpi4py.MPI" in sys.modules
    code, out, err = _main(argv, capsys)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2, (argv, out, err)
    assert len(lines) == 1 and lines[0].startswith("npmpi: error:"), (argv, err)
    assert "Traceback" not in out + err
    assert had_mpi or not before_mpi or "mpi4py.MPI" not in sys.modules, (
        "MPI was started before the refusal",
        argv,
    )
    assert not any(ord(c) < 32 or 0x7F <= ord(c) < 0xA0 for c in lines[0]), lines[0]
    return lines[0]


def test_the_option_lists_are_read_from_the_parsers():
    assert {
        "--trials",
        "--target-time",
        "--upper",
        "--baseline",
        "--sample-interval",
        "--fabric-rank",
    } <= set(RUN_OPTIONS)
    assert {"--sizes", "--trials", "--window", "--baseline"} <= set(MAP_OPTIONS)
    assert {"--duration", "--seed", "--matrix", "--max-delay"} <= set(CALIBRATE_OPTIONS)


@pytest.mark.parametrize("value", HOSTILE)
def test_the_grammar_refuses_every_hostile_spelling(value):
    if value == "-1":
        assert parse_number(value) == -1 and parse_whole(value) == -1  # a sign is left to the bounds
        return
    with pytest.raises(ValueError):
        parse_number(value)
    with pytest.raises(ValueError):
        parse_whole(value)


def test_the_environment_never_turns_other_digits_into_numbers(monkeypatch):
    for value in ("²", "٤", "８", "1e3", " 1_0", "1" * 40):
        monkeypatch.setenv("OMPI_COMM_WORLD_RANK", value)
        for name in ("PMIX_RANK", "PMI_RANK", "MPI_LOCALRANKID", "SLURM_PROCID"):
            monkeypatch.delenv(name, raising=False)
        assert launcher_rank() is None
        assert (
            local_position({"OMPI_COMM_WORLD_LOCAL_RANK": value, "OMPI_COMM_WORLD_LOCAL_SIZE": "4"}) is None
        )
        slurm = {"SLURM_LOCALID": "0", "SLURM_NODEID": "0", "SLURM_STEP_ID": "1"}
        assert local_position({**slurm, "SLURM_STEP_TASKS_PER_NODE": value}) is None


@pytest.mark.parametrize(
    ("command", "option"),
    [([], o) for o in RUN_OPTIONS]
    + [(["map"], o) for o in MAP_OPTIONS]
    + [(["calibrate"], o) for o in CALIBRATE_OPTIONS],
    ids=lambda x: x if isinstance(x, str) else (x[0] if x else "run"),
)
def test_every_numeric_option_refuses_every_hostile_number(command, option, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    base = [*command, "--meter", "estimate"] if command == ["calibrate"] else list(command)
    if option == "--fabric-rank":
        base += ["--meter", "estimate", "--fabric-meter", "estimate"]
    for value in HOSTILE:
        line = _one_line_exit_2([*base, f"{option}={value}"], capsys)
        assert option in line or "--max-round-trip" in line, line
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("field", METER_FIELDS)
def test_every_numeric_meter_field_refuses_every_hostile_number(field, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "trace.csv").write_text("time_s,power_w\n0,100\n1,200\n")
    for value in HOSTILE:
        spec = field.replace("X", value)
        if value in ("-1",) and field.startswith("snmp:127.0.0.1,oid="):
            continue  # '-1' is no OID either; refused below by the same check
        _one_line_exit_2(["--meter", spec], capsys)
        _one_line_exit_2(["map", "--meter", spec], capsys)
        _one_line_exit_2(["calibrate", "--meter", spec], capsys)
        _one_line_exit_2(["--meter", "estimate", "--fabric-meter", spec], capsys)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["trace.csv"]


# -- issue 28 item 11 and issue 22 item 7: secrets and control characters never reach the terminal --

SECRET = "S3cr3t-value"


@pytest.mark.parametrize(
    "spec",
    [
        f"redfish:admin:{SECRET}@127.0.0.1",
        f"redfish:admin@{SECRET}.example",
        f"snmp:public:{SECRET}@127.0.0.1,profile=apc-rpdu2",
        f"redfish:127.0.0.1,pw={SECRET}",
        f"redfish:127.0.0.1,pwd={SECRET}",
        f"redfish:127.0.0.1,passphrase={SECRET}",
        f"snmp:127.0.0.1,profile=apc-rpdu2,comm={SECRET}",
        f"snmp:127.0.0.1,profile=apc-rpdu2,{SECRET}",
        f"estimate:key={SECRET}",
        f"nosuchmeter:pw={SECRET}",
        f"pw={SECRET}",
    ],
)
def test_a_secret_in_a_spec_is_refused_without_echo(spec, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    for argv in (["--meter", spec], ["map", "--meter", spec], ["calibrate", "--meter", spec]):
        line = _one_line_exit_2(argv, capsys)
        assert SECRET not in line and SECRET.lower() not in line.lower(), line
    line = _one_line_exit_2(["--meter", "estimate", "--fabric-meter", spec], capsys)
    assert SECRET.lower() not in line.lower(), line


def test_bidi_and_escapes_from_a_spec_or_an_output_name_are_shown_escaped(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    line = _one_line_exit_2(["--meter", "redfish:127.0.0.1,sensor=\u202eevil,timeout=0"], capsys)
    assert "\u202e" not in line and "\\u202e" in line, line
    # an output name with a newline and an escape: refused (its directory does not exist) in one line,
    # and where it is accepted, every line the console prints with it shows them escaped
    name = "x\n\x1b[31mred/y.h5"
    with pytest.raises(UsageError) as refused:
        reserve_output(name, False)
    line = error_line(str(refused.value))
    assert "\x1b" not in line and "\n" not in line and "\\x1b" in line and "\\x0a" in line, line
    stream = io.StringIO()
    Console(stream=stream).note(f"output: {name}")
    assert stream.getvalue() == "output: x\\x0a\\x1b[31mred/y.h5\n"
