"""Sizes and rates parsed and printed (npmpi/core/units.py), the run's options and their defaults
(npmpi/run/options.py) with bad ones as one line, and the layout of ranks (npmpi/core/layout.py)."""

from __future__ import annotations

import io

import pytest

from npmpi.core.config import DEFAULT_TARGET_TIME_S
from npmpi.core.errors import HelpRequested, UsageError
from npmpi.core.layout import LayoutError, compute_layout
from npmpi.core.units import format_size_bytes, mbps_netpipe, parse_size_bytes
from npmpi.run.options import default_output_name, parse_options


@pytest.mark.parametrize(
    "text,expected",
    [
        ("1", 1),
        ("4096", 4096),
        ("64K", 65536),
        ("64k", 65536),
        ("8M", 8 << 20),
        ("1G", 1 << 30),
        ("2MiB", 2 << 20),
        ("3KB", 3072),
    ],
)
def test_parse_size(text, expected):
    assert parse_size_bytes(text) == expected


@pytest.mark.parametrize("text", ["", "-1", "1.5M", "abc", "8Q", "M", "0x10", " 7 ", "1" * 16])
def test_parse_size_rejects(text):
    with pytest.raises(ValueError, match="invalid size"):
        parse_size_bytes(text)


def test_format_and_rates():
    assert format_size_bytes(1) == "1"
    assert format_size_bytes(1024) == "1K"
    assert format_size_bytes(8 << 20) == "8M"
    # NetPIPE's Mbps: 1 MiB one way in 1 s = 8 Mbps (2^20)
    assert mbps_netpipe(1 << 20, 1.0) == pytest.approx(8.0)


def test_defaults():
    o = parse_options([])
    assert (o.lower_bytes, o.upper_bytes, o.perturbation_bytes) == (1, 8 << 20, 3)
    assert o.trials == 7 and o.target_time_s == DEFAULT_TARGET_TIME_S and o.kernel == "python"
    assert o.repeats is None and not o.integrity and not o.force


def test_quick_and_explicit_values():
    o = parse_options(["--quick"])
    assert o.trials == 3 and o.target_time_s < DEFAULT_TARGET_TIME_S
    o = parse_options(["--quick", "--trials", "5", "-l", "1K", "-u", "64K", "-p", "0", "--kernel", "c"])
    assert (o.trials, o.lower_bytes, o.upper_bytes, o.perturbation_bytes, o.kernel) == (
        5,
        1024,
        65536,
        0,
        "c",
    )
    assert parse_options(["--repeats", "10"]).repeats == 10


def test_help_and_version_are_not_errors():
    with pytest.raises(HelpRequested) as h:
        parse_options(["--help"])
    for option in (
        "--lower",
        "--upper",
        "--perturbation",
        "--trials",
        "--target-time",
        "--repeats",
        "--quick",
        "--kernel",
        "--integrity",
        "--output",
        "--force",
        "--quiet",
        "--max-one-way",
        "--max-round-trip",
        "--buffers",
    ):
        assert option in h.value.text
    assert "default" in h.value.text
    with pytest.raises(HelpRequested, match="npmpi"):
        parse_options(["--version"])


BAD = [
    (["-l", "0", "-u", "0"], "at least 1 byte"),
    (["-l", "2K", "-u", "1K"], "below --lower"),
    (["-u", "abc"], "invalid size"),
    (["-l", "-5"], "invalid size"),
    (["-p", "-1"], "--perturbation"),
    (["-p", "x"], "invalid count"),
    (["--trials", "0"], "--trials"),
    (["--trials", "1.5"], "invalid count"),
    (["--target-time", "0"], "--target-time"),
    (["--target-time", "-1"], "--target-time"),
    (["--target-time", "nan"], "finite"),
    (["--target-time", "soon"], "invalid time"),
    (["--repeats", "0"], "--repeats"),
    (["--repeats", "5", "--target-time", "0.1"], "contradict"),
    (["--max-round-trip", "0"], "--max-round-trip"),
    (["--max-one-way", "0"], "--max-one-way"),
    (["--kernel", "fortran"], "unknown kernel"),
    (["-o", ""], "empty"),
    (["--bogus"], "unrecognized arguments"),
    (["extra"], "unrecognized arguments"),
    (["--lower"], "expected one argument"),
]


@pytest.mark.parametrize("argv,fragment", BAD, ids=[" ".join(a) or "empty" for a, _ in BAD])
def test_bad_options_give_one_line(argv, fragment):
    with pytest.raises(UsageError) as e:
        parse_options(argv)
    message = str(e.value)
    assert fragment in message
    assert "\n" not in message


def _output_problem(path, force: bool) -> str | None:
    """Why the run could not write `path` (None when it could): the start-up reservation, released."""
    from npmpi.core.outpath import release, reserve_output

    try:
        release(reserve_output(path, force))
    except UsageError as exc:
        return str(exc)
    return None


def test_output_path_checks(tmp_path):
    existing = tmp_path / "run.h5"
    existing.write_bytes(b"x")
    assert _output_problem(str(tmp_path / "new.h5"), force=False) is None
    assert "exists" in _output_problem(str(existing), force=False)
    assert _output_problem(str(existing), force=True) is None
    assert "is a directory" in _output_problem(str(tmp_path), force=False)
    assert "does not exist" in _output_problem(str(tmp_path / "nope" / "run.h5"), force=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.h5"]  # nothing left behind


def test_default_output_name_is_unique(tmp_path, monkeypatch):
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    first = default_output_name("20260101-000000", str(tmp_path))
    assert first.endswith("npmpi-20260101-000000-job4242.h5")
    (tmp_path / "npmpi-20260101-000000-job4242.h5").write_bytes(b"")
    second = default_output_name("20260101-000000", str(tmp_path))
    assert second != first and second.endswith("-job4242-1.h5")


def test_layout_single_node_pair():
    lay = compute_layout(["a#0", "a#0"], ["a", "a"], power=False)
    assert lay.pair == (0, 1) and lay.roles == ("transmitter", "reflector") and not lay.pair_crosses_nodes


def test_layout_prefers_a_pair_across_nodes():
    # ranks 0,1 on node a; ranks 2,3 on node b: the reflector is rank 2
    lay = compute_layout(["a#0", "a#0", "b#2", "b#2"], ["a", "a", "b", "b"], power=False)
    assert lay.pair == (0, 2) and lay.pair_crosses_nodes
    assert lay.roles == ("transmitter", "idle", "reflector", "idle")
    assert lay.node_count == 2


def test_layout_with_power_ranks():
    lay = compute_layout(["a#0", "a#0", "b#2", "b#2"], ["a", "a", "b", "b"], power=True)
    assert lay.power_ranks == (1, 3) and lay.pair == (0, 2)
    lay = compute_layout(["a#0"] * 3, ["a"] * 3, power=True)
    assert lay.power_ranks == (2,) and lay.pair == (0, 1)


@pytest.mark.parametrize(
    "keys,power,fragment",
    [
        (["a#0"], False, "mpirun -np 2"),
        (
            ["a#0", "a#0"],
            True,
            "power needs one extra rank per node: 1 node, 2 ranks given; run e.g. mpirun -np 3",
        ),
        (["a#0", "b#1"], True, "node 0"),
    ],
)
def test_layout_errors_say_how_many_ranks(keys, power, fragment):
    with pytest.raises(LayoutError) as e:
        compute_layout(keys, [k.split("#")[0] for k in keys], power=power)
    assert fragment in str(e.value)


def test_the_short_trials_note_is_said_once_and_never_with_quiet(capsys):
    """-q prints nothing but errors: the note on sizes shorter than a meter's interval is kept for the
    summary's count but not printed (the analysis flags those sizes 'short' all the same)."""
    from npmpi.commands.console import Console

    loud, quiet = Console(stream=io.StringIO()), Console(quiet=True, stream=io.StringIO())
    for console in (loud, quiet):
        console.short_trials(8, 0.05, 1.0)
        console.short_trials(16, 0.06, 1.0)
    err = capsys.readouterr().err
    assert err.count("npmpi: note: the trials of 8 B last 0.05 s in all, less than the 1 s sample") == 1
    assert "16 B" not in err and loud.short_sizes == quiet.short_sizes == [8, 16]
