"""Faults where users look: fault records in the run file (counts, first/last time, gaps), the text
summary's fault lines, sizes flagged `recorded gap` with the reason, the HTML report's fault table
and the power-over-time figure, checked in a real browser (headless Chromium) where one can run."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from npmpi_analysis.cli import main
from npmpi_analysis.numbers.analyse import analyse_run
from npmpi_analysis.synthetic import SynthChannel, SynthNode, write_run

from npmpi.runfile.faults import KIND_GAP, FaultLog, FaultRecord, gap_record
from npmpi.runfile.reader import load_run

T0 = 1_700_000_000.0
SIZES = [1, 2, 4, 8, 1024, 65536]


def faulty_run(path: Path) -> Path:
    """Six sizes of 3 s from T0; a reset fault repeated 40 times from T0+1.5 s to T0+6 s; the power
    rank stopped from T0+9.5 s to T0+15.5 s (sizes 2, 3 and 4 start at 8, 12, 16 s): no samples then."""
    log = FaultLog()
    assert log.record("counter went back from 123 to 4 µJ", T0 + 1.5)
    for k in range(39):
        assert not log.record(f"counter went back from {500 + k} to {k} µJ", T0 + 1.6 + 0.11 * k)
    faults = [*log.drain(), gap_record(T0 + 9.5, T0 + 15.5, "replay on node 0")]
    t = T0 - 10 + 0.1 * np.arange(400)
    keep = (t < T0 + 9.5) | (t > T0 + 15.5)
    node = SynthNode(
        [
            SynthChannel(
                t[keep], np.full(keep.sum(), 80.0), label="measured", sample_interval_s=0.1, faults=faults
            )
        ],
        host="host0",
        offset_start_s=0.0,
        measured_start_unix_s=T0,
    )
    starts = [[T0 + 4 * k, T0 + 4 * k + 1.0, T0 + 4 * k + 2.0] for k in range(len(SIZES))]
    return write_run(
        path,
        SIZES,
        [1000] * len(SIZES),
        [[0.9, 0.9, 0.9]] * len(SIZES),
        starts,
        nodes=[node],
        baseline=(T0 - 8, T0 - 3),
    )


def test_fault_records_round_trip_with_counts_and_gaps(tmp_path):
    run = load_run(faulty_run(tmp_path / "f.h5"))
    (ch,) = run.power[0].channels
    assert len(ch.fault_message) == 2  # 40 resets stored once, one gap
    assert ch.fault_extra["count"].tolist() == [40, 1]
    assert ch.fault_extra["kind"].tolist() == ["meter", KIND_GAP]
    assert ch.fault_time_unix_s.tolist() == [T0 + 1.5, T0 + 9.5]
    assert ch.fault_extra["last_time_unix_s"][0] == pytest.approx(T0 + 1.6 + 0.11 * 38)
    assert ch.fault_extra["last_time_unix_s"][1] == T0 + 15.5


def test_a_repeat_sent_in_a_later_batch_updates_its_row(tmp_path):
    from npmpi.runfile.writer import RunWriter

    w = RunWriter(tmp_path / "r.h5", {}, {"host": ["a"], "node_index": [0], "role": ["power"]}, 1)
    w.create_power({}, [{"host": "a"}], [[{"kind": "rapl"}]])
    nan = np.zeros(0)
    empty = {k: nan for k in ("time_unix_s", "power_w", "energy_j", "volts", "amps")}
    w.append_samples(0, 0, empty, [FaultRecord(10.0, 10.0, 1, "reset", fault_id=0)])
    w.append_samples(
        0,
        0,
        empty,
        [FaultRecord(10.0, 12.0, 7, "reset", fault_id=0), FaultRecord(11, 11, 1, "x", fault_id=1)],
    )
    w.append_samples(0, 0, empty, [(13.0, "an old-style fault")])
    w.finish("complete")
    ch = load_run(tmp_path / "r.h5").power[0].channels[0]
    assert ch.fault_message == ["reset", "x", "an old-style fault"]
    assert ch.fault_extra["count"].tolist() == [7, 1, 1]
    assert ch.fault_extra["last_time_unix_s"].tolist() == [12.0, 11.0, 13.0]


def test_summary_lists_faults_and_flags_the_sizes_of_a_gap(tmp_path, capsys):
    path = faulty_run(tmp_path / "f.h5")
    a = analyse_run(load_run(path), "f")
    flags = a.flag_names()
    # windows 8-11, 12-15, 16-19 s overlap the gap 9.5-15.5 s; only 8 and 1024 B do (16-19 s does not)
    assert flags[2] == "recorded gap" and flags[3] == "recorded gap"
    assert flags[0] == "" and flags[1] == "" and flags[4] != "recorded gap"
    assert "did not run for 6.0 s" in a.power.gap_reasons[2] and a.power.gap_reasons[1] == ""
    code = main([str(path), "--json", str(tmp_path / "f.json")])
    out = capsys.readouterr().out
    assert code == 0
    assert "fault, channel 0 replay, at +1.5 s x40 until +5.8 s: counter went back from 123 to 4 µJ" in out
    assert "fault, channel 0 replay, at +9.5 s x1 until +15.5 s" not in out  # count 1 is not printed
    assert re.search(r"fault, channel 0 replay, at \+9\.5 s until \+15\.5 s: the power rank's sampling", out)
    assert "flagged 'recorded gap': 2 size(s)" in out and "    4 B: node 0 (host0) replay: the power" in out
    doc = json.loads((tmp_path / "f.json").read_text())
    faults = doc["runs"][0]["summary"]["nodes"][0]["channels"][0]["faults"]
    assert [f["count"] for f in faults] == [40, 1] and faults[1]["kind"] == "gap"
    assert faults[1]["since_first_trial_s"] == pytest.approx(9.5)
    sizes = doc["runs"][0]["sizes"]
    assert sizes[2]["power_flag"] == "recorded gap" and "did not run" in sizes[2]["power_flag_reason"]


def _chromium() -> str:
    """The chromium executable, installed from Debian's package when root and missing; else skip."""
    exe = shutil.which("chromium")
    if exe:
        return exe
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        pytest.skip("chromium is not installed and apt-get cannot install it here (not root)")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in (["apt-get", "update"], ["apt-get", "install", "-y", "--no-install-recommends", "chromium"]):
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
        if proc.returncode != 0:
            pytest.skip(f"chromium cannot be installed: {' '.join(cmd)}: {proc.stderr.strip()[-300:]}")
    exe = shutil.which("chromium")
    if not exe:
        pytest.skip("chromium was installed but is not on PATH")
    return exe


CHECK_IMAGES = """<script>
window.addEventListener('load', () => {
  const imgs = [...document.images];
  const broken = imgs.filter(i => !i.complete || i.naturalWidth === 0).map(i => i.alt);
  const out = document.createElement('pre');
  out.id = 'image-check';
  out.textContent = JSON.stringify({images: imgs.length, broken: broken,
    faultTable: !!document.querySelector('#faults table')});
  document.body.appendChild(out);
});
</script></body>"""


@pytest.mark.timeout(600)
def test_report_with_faults_renders_in_chromium(tmp_path, capsys):
    path = faulty_run(tmp_path / "f.h5")
    report = tmp_path / "report.html"
    assert main([str(path), "-q", "--report", str(report)]) == 0
    html = report.read_text()
    assert "<h4>Meter faults</h4><div id=faults><table>" in html
    exe = _chromium()
    checked = tmp_path / "checked.html"
    checked.write_text(html.replace("</body>", CHECK_IMAGES, 1))
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--virtual-time-budget=5000"]
    dom = subprocess.run(
        [exe, *flags, "--dump-dom", checked.as_uri()], capture_output=True, text=True, timeout=120
    )
    found = re.search(r'<pre id="image-check">(.*?)</pre>', dom.stdout)
    assert found, (dom.stdout[-500:], dom.stderr[-2000:])
    result = json.loads(found.group(1).replace("&quot;", '"'))
    figures = html.count("<img ")
    assert figures >= 8 and result["images"] == figures, result  # every figure the report holds
    assert result["broken"] == [] and result["faultTable"], result
    png = Path(os.environ.get("NPMPI_REPORT_PNG", tmp_path / "report.png"))
    shot = subprocess.run(
        [exe, *flags, "--window-size=1280,6000", f"--screenshot={png}", report.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert png.exists() and png.stat().st_size > 50_000, shot.stderr[-2000:]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
