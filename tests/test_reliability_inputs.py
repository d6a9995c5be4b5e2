"""Hostile inputs (issue 15): what npmpi-analyze prints from a file, files that once crashed it,
the calibration and replay files npmpi reads, sizes and meter parameters.

Everything here runs in this process; the same inputs under a real mpirun (every rank exits 2,
one line) are cases of tests/test_reliability_options.py.
"""

from __future__ import annotations

import os
import re
import shutil
import time
import warnings
from pathlib import Path

import h5py
import numpy as np
import pytest
from test_reliability_files import analyze, write_base

from npmpi.core.errors import UsageError
from npmpi.core.inputfiles import json_depth, parse_json, read_regular_file
from npmpi.core.safetext import printable, printable_lines
from npmpi.meters import MeterError, make_meter, parse_meter_spec
from npmpi.power.calibration import check_calibration, load_calibration
from npmpi.run.options import parse_options
from npmpi.runfile.format import TEXT_CHECKSUM, text_crc32

CONTROL = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
ESCAPES = "\x1b[2J\x1b]0;pwned\x07\x9b31m\u202etxt.exe\r\x01"


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    return write_base(tmp_path_factory.mktemp("inputs") / "base.h5")


def copy_with(base: Path, dst: Path, change) -> Path:
    shutil.copy(base, dst)
    with h5py.File(dst, "r+") as f:
        change(f)
    return dst


# ---------------------------------------------------------------- the sanitiser


def test_printable_escapes_every_control_character():
    assert printable("a\x1b[2Jb") == "a\\x1b[2Jb"
    assert printable("bell\x07 del\x7f c1\x9b nul\x00") == "bell\\x07 del\\x7f c1\\x9b nul\\x00"
    assert printable("\u202eabc") == "\\u202eabc"
    assert printable("one\ntwo") == "one\\x0atwo"
    assert printable_lines("one\ntwo\x1b") == "one\ntwo\\x1b"
    assert printable("plain ± µs σ 日本") == "plain ± µs σ 日本"
    assert not CONTROL.search(printable("".join(map(chr, range(0x100)))))


@pytest.mark.parametrize(
    "key", ["status_message", "kernel", "command_line", "platform", "mpi_library_version"]
)
def test_text_from_a_file_is_printed_escaped(base, tmp_path, capsys, key):
    def change(f):
        f.attrs[key] = ESCAPES
        f.attrs["status"] = "failed"

    path = copy_with(base, tmp_path / "esc.h5", change)
    code, out, err = analyze(capsys, str(path))
    assert code == 0, err
    assert not CONTROL.search(out + err), repr(out[-500:])
    assert "\\x1b[2J\\x1b]0;pwned\\x07" in out


def test_the_html_report_escapes_markup_and_controls(base, tmp_path, capsys):
    def change(f):
        f.attrs["status_message"] = "<script>alert(1)</script>" + ESCAPES
        f.attrs["status"] = "failed"
        host = f["layout/host"]
        host[0] = '<img src=x onerror="alert(2)">'
        # a crafted file, not a damaged one: its maker writes the text checksum that matches
        host.attrs[TEXT_CHECKSUM] = text_crc32(host[...])

    path = copy_with(base, tmp_path / "xss.h5", change)
    report = tmp_path / "r.html"
    code, _out, err = analyze(capsys, str(path), "--report", str(report), "-q")
    assert code == 0, err
    page = report.read_text()
    assert "<script>alert" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "<img src=x" not in page
    assert not CONTROL.search(page.replace("\n", ""))
    assert "\\x1b[2J" in page


# ---------------------------------------------------------------- files that once crashed the analysis

FORGED = {
    "sizes-zero": (lambda f: f["pingpong/size_bytes"].__setitem__(..., 0), "below 1 byte"),
    "trial-1e308": (lambda f: f["pingpong/trial_s"].__setitem__(..., 1e308), "impossible"),
    "divisor-inf": (lambda f: f.attrs.__setitem__("one_way_divisor", np.inf), "one_way_divisor = inf"),
    "divisor-minus-inf": (lambda f: f.attrs.__setitem__("one_way_divisor", -np.inf), "one_way_divisor"),
    "divisor-zero": (lambda f: f.attrs.__setitem__("one_way_divisor", 0), "one_way_divisor = 0"),
    "factor-inf": (
        lambda f: f.attrs.__setitem__("bytes_per_iteration_factor", np.inf),
        "bytes_per_iteration",
    ),
    "factor-zero": (lambda f: f.attrs.__setitem__("bytes_per_iteration_factor", 0), "bytes_per_iteration"),
    "options-nested": (
        lambda f: f.attrs.__setitem__("options_json", "[" * 200_000 + "]" * 200_000),
        "nested 200000 levels",
    ),
}


@pytest.mark.parametrize("name", list(FORGED))
def test_forged_values_are_refused_with_one_line(base, tmp_path, capsys, name):
    change, fragment = FORGED[name]
    path = copy_with(base, tmp_path / f"{name}.h5", change)
    out_dir = tmp_path / "out"
    code, out, err = analyze(
        capsys,
        str(path),
        "--report",
        str(tmp_path / "r.html"),
        "--csv",
        str(tmp_path / "r.csv"),
        "--plots",
        str(out_dir),
    )
    errors = [ln for ln in err.splitlines() if ln.startswith("npmpi-analyze: error:")]
    assert code == 1 and len(errors) == 1 and fragment in errors[0], err
    assert "internal error" not in err and "Traceback" not in out + err


def test_a_link_loop_as_input_is_named(tmp_path, capsys):
    loop = tmp_path / "loop.h5"
    loop.symlink_to(loop.name)
    code, _out, err = analyze(capsys, str(loop), "--csv", str(tmp_path / "x.csv"))
    assert code == 1 and "Too many levels of symbolic links" in err and "internal error" not in err, err


def test_a_figure_that_cannot_be_drawn_is_skipped_with_a_note(base):
    """Sizes of 0 B (refused by the reader since) made two log-scaled figures raise at drawing time
    and stopped the report: each figure is drawn on its own, a failed one named in a note."""
    from npmpi_analysis.figures.render import render_all
    from npmpi_analysis.figures.run import all_plots
    from npmpi_analysis.numbers.analyse import analyse_run

    from npmpi.runfile.reader import load_run

    run = load_run(base)
    run.pingpong.size_bytes[:] = 0
    with warnings.catch_warnings(), np.errstate(all="ignore"):  # as npmpi-analyze runs
        warnings.simplefilter("ignore")
        plots = all_plots([analyse_run(run, "zero")])
        done, skipped = render_all(plots, "png")
    assert len(done) + len(skipped) == len(plots) and len(done) >= 5
    assert all(data.startswith(b"\x89PNG") for _, data in done)
    assert skipped and all(re.match(r"figure \w+ not drawn: .*log", note) for note in skipped), skipped


NODE_GROUPS = 5000


@pytest.mark.timeout(300)
def test_5000_empty_node_groups_take_seconds_and_a_few_lines(base, tmp_path, capsys):
    def change(f):
        for i in range(1, NODE_GROUPS + 1):
            f["power"].create_group(f"node{i}")

    path = copy_with(base, tmp_path / "nodes.h5", change)
    t0 = time.monotonic()
    code, out, err = analyze(
        capsys, str(path), "--csv", str(tmp_path / "n.csv"), "--json", str(tmp_path / "n.json")
    )
    seconds = time.monotonic() - t0
    with capsys.disabled():
        print(f"\n{NODE_GROUPS} empty node groups: {seconds:.1f} s, {len(err.splitlines())} error lines")
    assert code == 1 and "internal error" not in err
    assert len(err.splitlines()) <= 10 and "more like the last one" in err, err[:2000]
    assert len(out.splitlines()) < 100
    assert seconds < 20  # about 3 s on an idle 2-core VM; over 200 s before the CSV header was linear
    header = (tmp_path / "n.csv").read_text().splitlines()[0].split(",")
    assert len(header) == len(set(header))


# ---------------------------------------------------------------- input files npmpi reads


def test_read_regular_file_refuses_what_is_not_one(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    big = tmp_path / "big"
    big.write_bytes(b" " * 2000)
    for path, fragment in [
        (fifo, "not a regular file"),  # no writer: the open must not block
        ("/dev/zero", "not a regular file"),
        (tmp_path, "is a directory"),
        (tmp_path / "none", "no such file"),
        (big, "more than the 1000 bytes"),
    ]:
        with pytest.raises(UsageError, match=fragment):
            read_regular_file(str(path), "--x", UsageError, limit=1000)


def test_json_depth_and_parse_refuse_recursion_bombs():
    assert json_depth(b'{"a": [1, {"b": "[[[[["}]}') == 3
    assert json_depth(b"[" * 200_000) == 200_000
    with pytest.raises(UsageError, match="nested 200000 levels"):
        parse_json(b"[" * 200_000, "--x", UsageError)
    with pytest.raises(UsageError, match="not valid JSON"):
        parse_json(b'{"a": NaN}', "--x", UsageError)
    with pytest.raises(UsageError, match="not UTF-8"):
        parse_json(b'{"a": "\xff"}', "--x", UsageError)
    assert parse_json(b'{"a": [1, 2]}', "--x", UsageError) == {"a": [1, 2]}


GOOD_ENTRY = {
    "host": "h",
    "spec": "estimate",
    "kind": "estimate",
    "delay_s": 1.5,
    "uncertainty_s": 0.1,
    "quality": 0.9,
}


@pytest.mark.parametrize(
    "change,fragment",
    [
        ({"version": "abc"}, "version 'abc'"),
        ({"version": None}, "version None"),
        ({"version": 2.5}, "version 2.5"),
        ({"version": 99}, "newer npmpi"),
        ({"results": {}}, "no results list"),
        ({"results": ["x"]}, "results[0] is not an object"),
        ({"results": [{**GOOD_ENTRY, "delay_s": "soon"}]}, "results[0].delay_s is 'soon'"),
        ({"results": [{**GOOD_ENTRY, "delay_s": -1}]}, "results[0].delay_s is -1"),
        ({"results": [{**GOOD_ENTRY, "delay_s": True}]}, "results[0].delay_s is True"),
        ({"results": [GOOD_ENTRY, {**GOOD_ENTRY, "uncertainty_s": [1]}]}, "results[1].uncertainty_s"),
        ({"results": [{**GOOD_ENTRY, "host": None}]}, "results[0].host is None"),
        ({"results": [{**GOOD_ENTRY, "quality": "good"}]}, "results[0].quality"),
        ({"created_utc": 5}, "created_utc"),
    ],
)
def test_calibration_schema_is_checked_in_one_place(change, fragment):
    doc = {"format": "npmpi-calibration", "version": 1, "created_utc": "t", "results": [GOOD_ENTRY]}
    check_calibration(doc, "--calibration c.json")
    with pytest.raises(UsageError, match=re.escape(fragment)):
        check_calibration({**doc, **change}, "--calibration c.json")


def test_load_calibration_reads_a_good_file_and_refuses_devices(tmp_path):
    good = tmp_path / "c.json"
    good.write_text(
        '{"format": "npmpi-calibration", "version": 1, "results": [{"host": "h", "delay_s": null}]}'
    )
    assert load_calibration(str(good))["results"][0]["host"] == "h"
    for path in ("/dev/zero", "/dev/null"):
        with pytest.raises(UsageError, match="not a regular file"):
            load_calibration(path)


def test_replay_files_are_read_defensively(tmp_path):
    fifo = tmp_path / "trace.csv"
    os.mkfifo(fifo)
    for target, fragment in [(fifo, "not a regular file"), ("/dev/zero", "not a regular file")]:
        with pytest.raises(MeterError, match=fragment):
            make_meter(f"replay:{target}").open()
    h5fifo = tmp_path / "t.h5"
    os.mkfifo(h5fifo)
    with pytest.raises(MeterError, match="not a regular file"):
        make_meter(f"replay:{h5fifo}").open()


def test_the_estimate_meter_refuses_a_stat_file_that_is_not_one(tmp_path):
    fifo = tmp_path / "stat"
    os.mkfifo(fifo)
    with pytest.raises(MeterError, match="not a regular file"):
        make_meter(f"estimate:stat={fifo}").open()


# ---------------------------------------------------------------- sizes and meter parameters


@pytest.mark.parametrize("text", ["\u0661\u0660\u0662\u0664", "\uff18K", "1\u0660", "1_000", "\u00b2"])
def test_sizes_accept_ascii_digits_only(text):
    with pytest.raises(UsageError, match="invalid size"):
        parse_options(["-u", text])


def test_ascii_sizes_and_counts_still_work():
    opts = parse_options(["-l", "2", "-u", "8KiB", "-p", "1", "--trials", "5"])
    assert (opts.lower_bytes, opts.upper_bytes, opts.perturbation_bytes, opts.trials) == (2, 8192, 1, 5)
    for argv in (["-l", " 2 "], ["-p", "+1"], ["--trials", "5 "]):  # one grammar: no space, no '+'
        with pytest.raises(UsageError):
            parse_options(argv)
    with pytest.raises(UsageError, match="expected a whole number"):
        parse_options(["--trials", "\u0663"])


@pytest.mark.parametrize(
    "spec,known",
    [
        ("estimate:foo=1", "idle_w, max_w, stat"),
        ("rapl:domain=package", "domains, max_w"),
        ("wattsup:/dev/x,rate=2", "baud, interval"),
        ("replay:t.csv,speed=2", "loop, scale, interval, node, channel"),
        ("ipmi:timout=3", "cmd, timeout"),
        ("hwmon:nam=x", "name, use"),
        ("nvml:0,x=1", "none"),
    ],
)
def test_unknown_meter_parameters_are_refused_naming_the_known_ones(spec, known):
    with pytest.raises(MeterError, match=re.escape(f"known parameters: {known}")):
        parse_meter_spec(spec)


def test_known_meter_parameters_are_accepted():
    assert parse_meter_spec("estimate:idle_w=30,max_w=90").params == {"idle_w": "30", "max_w": "90"}
    assert parse_meter_spec("replay:t.csv,loop=0,scale=2,interval=0.1").target == "t.csv"


def test_analysis_outputs_never_replace_devices_links_or_loops(base, tmp_path, capsys):
    loop = tmp_path / "loop"
    loop.symlink_to(loop.name)
    fifo = tmp_path / "fifo.csv"
    os.mkfifo(fifo)
    for args, fragment in [
        (["--csv", "/dev/null", "--force"], "not a regular file"),
        (["--csv", str(fifo), "--force"], "not a regular file"),
        (["--json", str(loop), "--force"], "symbolic link"),
        (["--plots", str(loop), "--csv", str(loop / "x.csv")], "--plots"),
    ]:
        code, _out, err = analyze(capsys, str(base), "-q", *args)
        assert code == 2 and fragment in err and "internal error" not in err, (args, err)
    assert os.path.exists("/dev/null") and not os.path.isfile("/dev/null")
    assert names_in(tmp_path) == ["fifo.csv", "loop"]


def names_in(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())
