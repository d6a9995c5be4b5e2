"""A coll file's console summary and HTML report read as a collective's: the file's header once (file,
platform, hosts, kernel, command, and the lines every series shares), one table of its series (op,
ranks, time per operation at the smallest size, peak busbw, least J/op, least pJ per bus bit, each
at its size), each series' detail below; no one-way latency and no unnamed peak bandwidth. On the
saved coll file of four series (tests/data/outputs/coll.h5), against the very rows of its JSON."""

from __future__ import annotations

import contextlib
import io
import json
import math
import shutil

import pytest
from test_outputs_unchanged import DATA


@pytest.fixture(scope="module")
def analysed(tmp_path_factory):
    """(console text, HTML, JSON) of npmpi-analyze on the saved coll file."""
    from npmpi_analysis.cli import main

    tmp = tmp_path_factory.mktemp("coll_report")
    shutil.copy(DATA / "coll.h5", tmp / "coll.h5")
    out = io.StringIO()
    argv = [str(tmp / "coll.h5"), "--json", str(tmp / "c.json"), "--report", str(tmp / "c.html")]
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        assert main(argv) == 0
    return out.getvalue(), (tmp / "c.html").read_text(), json.loads((tmp / "c.json").read_text())


def _g(x: float) -> str:
    return f"{x:.4g}"


def test_the_header_is_said_once_and_no_figure_of_a_pair_is_given(analysed):
    text, _, doc = analysed
    lines = text.splitlines()
    assert lines[0].endswith("coll.h5: a coll file of 4 series (allreduce, bcast on 2, 3 ranks)")
    for key in ("  command: ", "  platform: ", "  hosts: ", "  kernel: ", "  power: "):
        assert sum(line.startswith(key) for line in lines) == 1, key
    assert "one-way" not in text and "peak bandwidth:" not in text and "latency:" not in text
    assert "comparison (ratios to the first run)" not in text  # the series table is the comparison
    labels = [r["summary"]["label"] for r in doc["runs"]]
    for label in labels:  # each series' detail: its heading, once
        assert sum(line.strip().startswith(label) for line in lines) == 2  # its row, its heading
    assert "bcast on 2 ranks, char;" in text  # a broadcast reduces nothing: no 'sum' beside its type


def test_the_series_table_gives_each_series_figures_at_their_sizes(analysed):
    text, _, doc = analysed
    rows = {line.split()[0]: line for line in text.splitlines() if line.strip().startswith("coll-")}
    for run in doc["runs"]:
        sizes = run["sizes"]
        row = rows[run["summary"]["label"]]
        assert f" {run['sizes'][0]['coll_op']} " in row and f" {sizes[0]['coll_ranks']} " in row
        assert f"{_g(sizes[0]['time_per_op_s'] * 1e6)} at {sizes[0]['size_bytes']} B" in row
        peak = max(sizes, key=lambda r: r["busbw_bit_s"])
        assert f"{_g(peak['busbw_bit_s'] / 1e9)} at {peak['size_bytes']} B" in row
        least = min(sizes, key=lambda r: r["energy_per_op_j"])
        assert f"{_g(least['energy_per_op_j'] * 1e6)} ± " in row and f"at {least['size_bytes']} B" in row
        bus = min(sizes, key=lambda r: r["energy_pj_bus_bit"])
        assert math.isfinite(bus["energy_pj_bus_bit"]) and f"{_g(bus['energy_pj_bus_bit'])} ± " in row


def test_the_html_report_gives_the_header_once_and_a_table_of_the_series(analysed):
    _, html, doc = analysed
    summary = html[html.index("<h2>Summary</h2>") : html.index("<h2>Figures</h2>")]
    assert summary.count("<th class=l>command</th>") == 1 and summary.count("<th class=l>platform</th>") == 1
    assert "one-way" not in summary and ">peak bandwidth<" not in summary and ">latency<" not in summary
    assert "<h2>Comparison</h2>" not in html
    for run in doc["runs"]:
        assert f"<h3>{run['summary']['label']}</h3>" in summary
