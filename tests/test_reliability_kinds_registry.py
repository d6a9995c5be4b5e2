"""A kind that is no kind is one line (issue 45, classes 9, 12 and 13): a kind from outside npmpi
that is no kind, fails on import or fails in its own code is one line naming it (never a traceback,
a silent exit 3 or 7, or a warning);
a malformed NPMPI_KINDS is said once under mpirun; a kind's factor the analysis would refuse, or its
attrs() failing, refused before any file; `coll --ranks` and `--per-node` take the shared grammar."""

from __future__ import annotations

import signal
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import run_mpi

from npmpi.core.errors import UsageError
from npmpi.core.layout import node_layout

KINDS_DIR = Path(__file__).resolve().parent / "support" / "kinds"
LAUNCHER_ENV = ("OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "MPI_LOCALRANKID", "SLURM_PROCID")


@pytest.fixture
def outside(monkeypatch, tmp_path):
    """npmpi's main in this process, as a lone process (no launcher), with NPMPI_KINDS set to
    `registration` and the test kinds importable: (exit status, stderr lines)."""
    monkeypatch.syspath_prepend(str(KINDS_DIR))
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in LAUNCHER_ENV:
        monkeypatch.delenv(name, raising=False)
    before = signal.getsignal(signal.SIGINT)

    def run(registration: str, argv: list[str], capsys) -> tuple[int, list[str]]:
        from npmpi.cli import main

        monkeypatch.setenv("NPMPI_KINDS", registration)
        try:
            code = main(argv)
        finally:
            signal.signal(signal.SIGINT, before)  # the sequence resets SIGINT before it parses
        return code, capsys.readouterr().err.splitlines()

    return run


def module(tmp_path, name: str, text: str) -> str:
    (tmp_path / f"{name}.py").write_text(text)
    return name


@pytest.mark.parametrize(
    "target, words",
    [
        ("os:sep", "kind 'x': os:sep is str '/', not a kind"),
        ("faulty_kinds:NUMBER", "is int 3, not a kind"),
        ("faulty_kinds:NOTHING", "is NoneType None, not a kind"),
        ("faulty_kinds:function", "is function <function function"),
        (
            "faulty_kinds:CLASS",
            "is the class RingKind, not a kind: register an instance of it (KIND = RingKind())",
        ),
        ("raises_runtime:KIND", "kind 'x': cannot load raises_runtime:KIND: RuntimeError: no licence"),
        ("bad_syntax:KIND", "kind 'x': cannot load bad_syntax:KIND: SyntaxError: "),
        ("raises_interrupt:KIND", "kind 'x': cannot load raises_interrupt:KIND: KeyboardInterrupt"),
        ("faulty_kinds:MISSING", "kind 'x': cannot load faulty_kinds:MISSING: module 'faulty_kinds' has no"),
    ],
)
def test_what_is_no_kind_or_fails_on_import_is_one_line_naming_the_kind(
    outside, tmp_path, capsys, target, words
):
    """Before: AttributeError `'str' object has no attribute 'parse'` (and the like) or the module's
    own exception, as a traceback (one per rank under mpirun)."""
    module(tmp_path, "raises_runtime", "raise RuntimeError('no licence')\n")
    module(tmp_path, "bad_syntax", "def (:\n")
    module(tmp_path, "raises_interrupt", "raise KeyboardInterrupt\n")
    code, err = outside(f"x={target}", ["x"], capsys)
    assert code == 2 and len(err) == 1, err
    assert err[0].startswith("npmpi: error: ") and words in err[0], err


@pytest.mark.parametrize(
    "attribute, words",
    [
        ("PARSE_RAISES", "kind 'x': its parse() failed: RuntimeError: the parser broke"),
        ("PARSE_EXITS", "kind 'x': its parse() ended the process (SystemExit 3) instead of returning"),
        ("PARSE_SYSTEM_EXIT", "kind 'x': its parse() ended the process (SystemExit 7)"),
        ("BOGUS_LEVEL", "kind 'x': its thread_level() gave 'bogus', not an MPI thread level"),
    ],
)
def test_a_kind_failing_before_mpi_is_one_line_and_exit_2(outside, capsys, attribute, words):
    """Before: a traceback; exit 3 or 7 with nothing said; `bogus` only a RuntimeWarning from
    mpi4py and MPI started at its default level."""
    code, err = outside(f"x=faulty_kinds:{attribute}", ["x", "--quick"], capsys)
    assert code == 2 and len(err) == 1 and words in err[0], err


def test_the_sequence_refuses_a_thread_level_mpi_does_not_have(monkeypatch, capsys):
    from npmpi.commands.sequence import MpiCommand

    for name in LAUNCHER_ENV:
        monkeypatch.delenv(name, raising=False)
    before = signal.getsignal(signal.SIGINT)
    command = MpiCommand(parse=lambda argv: None, thread_level=lambda opts: "bogus", agree=None, serve=None)
    try:
        assert command.run([]) == 2
    finally:
        signal.signal(signal.SIGINT, before)
    assert (
        "thread level 'bogus' is not one of single, funneled, serialized, multiple" in capsys.readouterr().err
    )


def _prepared(monkeypatch, tmp_path, attribute: str) -> str | None:
    """The problem rank 0's output preparation finds for an outside kind, 2 members on one node."""
    monkeypatch.syspath_prepend(str(KINDS_DIR))
    import faulty_kinds

    kind = getattr(faulty_kinds, attribute)  # each is a ring but for one method
    opts = kind.parse(["-o", str(tmp_path / "x.h5")])
    layout = kind.groups(node_layout(["h"] * 2, ["h"] * 2, power=False), opts)
    return kind.prepare_output(opts, SimpleNamespace(roles=SimpleNamespace(layout=layout)))


def test_a_kind_s_factor_of_0_is_refused_before_the_file(monkeypatch, tmp_path):
    """Before: a `complete` file the analysis then refused as damaged (bytes_per_iteration_factor 0)."""
    problem = _prepared(monkeypatch, tmp_path, "ZERO_FACTOR")
    assert (
        problem and "kind 'ring': its bytes_factor with 2 members is 0, not a whole number from 1" in problem
    )
    assert list(tmp_path.iterdir()) == []  # nothing reserved


def test_a_kind_s_attrs_failing_is_refused_before_the_file(monkeypatch, tmp_path):
    """Before: `internal error, please report: KeyError: 'coll_whatever'` once the file was begun."""
    problem = _prepared(monkeypatch, tmp_path, "ATTRS_RAISE")
    assert problem == "kind 'ring': its attrs() failed: KeyError: 'coll_whatever'"
    assert list(tmp_path.iterdir()) == []


@pytest.mark.mpi
def test_under_mpirun_a_malformed_registration_and_a_factor_of_0_are_said_once(tmp_path):
    """Before: the NPMPI_KINDS line once per rank; the 0 factor ran and wrote a `complete` file."""
    proc = run_mpi(["ring"], np=2, cwd=tmp_path, env={"NPMPI_KINDS": "ring=no module"})
    assert proc.returncode == 2 and proc.stderr.count("npmpi: error:") == 1, proc.stderr
    env = {"NPMPI_KINDS": "ring=faulty_kinds:ZERO_FACTOR", "PYTHONPATH": str(KINDS_DIR)}
    proc = run_mpi(["ring", "--quick", "--sizes", "1", "-o", "z.h5"], np=2, cwd=tmp_path, env=env)
    assert proc.returncode == 2 and proc.stderr.count("npmpi: error:") == 1, proc.stderr
    assert "its bytes_factor with 2 members is 0" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "z.h5").exists()


@pytest.mark.parametrize(
    "argv",
    [["--ranks", v] for v in ("٢", "２", "+2", " 2", "0_2", "2,+4")]
    + [["--per-node", v] for v in ("٢", "+2", "0_2")],
)
def test_coll_rank_counts_take_the_shared_grammar(argv):
    """Before: int() took other scripts' digits, '+', spaces and '_', and the run wrote a file."""
    from npmpi.coll.kind import KIND

    with pytest.raises(UsageError, match=r"--ranks|--per-node"):
        KIND.parse(argv)
    assert KIND.parse(["--ranks", "2,4", "--per-node", "2"]).extra.ranks == (2, 4)
