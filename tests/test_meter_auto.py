"""`--meter auto` and `python -m npmpi meters`: on this machine (no meter but the estimate), on fake
Cray, RAPL and perf trees, and under a real mpirun on the fake Cray tree."""

from __future__ import annotations

import json
import re
from pathlib import Path

import h5py
import pytest
from fakes.cray_pm import FakePmCounters, Scanner
from fakes.perf_pmu import software_clock_tree
from fakes.sysfs import FakeHwmon, FakePowercap, make_fifo

from npmpi.commands import meters as meterscmd
from npmpi.meters.auto import CHOSEN, EXTRA, NOT_OPENED, NOT_TRIED, choose
from npmpi.meters.base import MeterError, known_meters, make_meter, parse_meter_spec
from npmpi.runfile.reader import load_run

NOTHING_HERE = not any(
    Path(p).exists()
    for p in (
        "/sys/cray/pm_counters",
        "/sys/class/powercap",
        "/sys/bus/event_source/devices/power",
        "/dev/ipmi0",
    )
)


def outcomes(choice) -> dict[str, str]:
    return {s.kind: s.outcome for s in choice.steps}


def closed(choice):
    for m in choice.meters:
        m.close()
    return choice


@pytest.mark.skipif(not NOTHING_HERE, reason="this host has a meter auto would choose before the estimate")
def test_auto_on_this_machine_is_the_estimate_labelled_so():
    choice = closed(choose(parse_meter_spec("auto")))
    assert [m.kind for m in choice.meters] == ["estimate"]
    assert choice.meters[0].label == "estimated"
    steps = outcomes(choice)
    assert steps["estimate"] == CHOSEN
    assert steps["cray"] == steps["rapl"] == steps["perf"] == NOT_OPENED
    assert steps["ipmi"] == steps["redfish"] == NOT_TRIED
    line = choice.summary()
    assert line.startswith("--meter auto chose estimate (chosen); not used: ")
    for kind in ("cray", "ipmi", "redfish", "rapl", "perf", "hwmon", "nvml"):
        assert f"{kind}: " in line  # every kind says why it was not used
    assert "\n" not in line


def test_auto_prefers_the_cray_node_counter_and_leaves_out_gpus_and_packages(tmp_path):
    tree = FakePmCounters(tmp_path / "pm")
    rapl = FakePowercap(tmp_path / "sys")
    choice = closed(choose(parse_meter_spec(f"auto:cray_root={tree.root},rapl_root={rapl.root}")))
    assert [m.spec.text for m in choice.meters] == [f"cray:root={tree.root}"]
    steps = {s.kind: s for s in choice.steps}
    assert steps["cray"].outcome == CHOSEN
    assert steps["rapl"].outcome == NOT_TRIED and steps["rapl"].reason == "cray was chosen before it"
    assert "its GPUs included" in steps["nvml"].reason and steps["estimate"].outcome == NOT_TRIED
    record = json.loads(json.dumps(choice.record()))
    assert record["chosen"] == [f"cray:root={tree.root}"]


def test_auto_falls_to_packages_then_perf_then_adds_gpus(tmp_path, monkeypatch):
    rapl = FakePowercap(tmp_path / "sys")
    choice = closed(choose(parse_meter_spec(f"auto:cray_root={tmp_path}/none,rapl_root={rapl.root}")))
    assert [m.kind for m in choice.meters] == ["rapl"]
    assert outcomes(choice)["perf"] == NOT_TRIED
    assert outcomes(choice)["nvml"] in (NOT_OPENED, EXTRA)  # tried: rapl does not see GPUs
    spec = parse_meter_spec(f"auto:cray_root={tmp_path}/none,rapl_root={rapl.root}")
    both = closed(choose(spec, given=("nvml",)))
    assert {s.kind: s.reason for s in both.steps}["nvml"] == "given with its own --meter"
    pmu = software_clock_tree(tmp_path / "power")
    spec = parse_meter_spec(f"auto:cray_root={tmp_path}/none,rapl_root={tmp_path}/none,perf_root={pmu}")
    choice = choose(spec)
    closed(choice)
    if outcomes(choice)["perf"] == NOT_OPENED:
        pytest.skip("perf_event_open is refused here")
    assert choice.meters[0].kind == "perf"


def test_auto_parameters_and_auto_as_a_single_meter():
    with pytest.raises(
        MeterError,
        match=re.escape(
            "unknown parameter 'root' for auto (its value is not shown); known parameters: cray_root"
        ),
    ):
        parse_meter_spec("auto:root=/x")
    with pytest.raises(MeterError, match="auto chooses a node's own meters; it cannot be a fabric meter"):
        make_meter("auto").open()


def test_meters_command_lists_every_kind_with_a_reason(capsys):
    assert meterscmd.main([]) == 0
    out = capsys.readouterr().out
    kinds = [k for k in known_meters() if k != "auto"]
    rows = [line.split()[0] for line in out.splitlines()[2:] if line[:1].strip()]
    assert sorted(rows[: len(kinds)]) == sorted(kinds)
    assert "--meter auto would use: " in out
    assert meterscmd.main(["--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert sorted(f["kind"] for f in doc["meters"]) == sorted(kinds)
    for f in doc["meters"]:
        assert f["opens"] or (f["reason"] and f["fix"]), f
    estimate = next(f for f in doc["meters"] if f["kind"] == "estimate")
    assert estimate["opens"] and estimate["label"] == "estimated" and estimate["interval_s"] == 0.1


def test_meters_command_on_a_fake_cray_node(tmp_path, capsys):
    tree = FakePmCounters(tmp_path / "pm", accels=2)
    assert meterscmd.main(["--json", "--auto", f"auto:cray_root={tree.root}"]) == 0
    doc = json.loads(capsys.readouterr().out)
    cray = next(f for f in doc["meters"] if f["kind"] == "cray")
    assert cray["opens"] and cray["channels"] == ["node", "accel0", "accel1", "cpu", "memory"]
    assert cray["how"] == "counter" and cray["interval_s"] == pytest.approx(0.1)
    assert doc["auto"]["chosen"] == [f"cray:root={tree.root}"]
    assert meterscmd.main(["--auto", "rapl"]) == 2
    assert "give an auto spec" in capsys.readouterr().err


@pytest.mark.mpi
def test_run_with_meter_auto_on_a_fake_cray_node(npmpi_run, tmp_path):
    tree = FakePmCounters(tmp_path / "pm")
    scanner = Scanner(tree)
    scanner.start()
    try:
        proc = npmpi_run(
            [
                "--quick",
                "-u",
                "4K",
                "--meter",
                f"auto:cray_root={tree.root}",
                "--baseline",
                "0.3",
                "-o",
                "r.h5",
            ],
            np=3,
            timeout=120,
        )
    finally:
        scanner.stop()
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("--meter auto:cray_root=") == 1  # the choice, printed once
    run = load_run(tmp_path / "r.h5")
    (ch,) = run.power[0].channels
    assert ch.attrs["kind"] == "cray" and ch.label == "measured"
    assert len(ch.power_w) >= 5 and abs(float(ch.power_w.mean()) - 620.0) < 20.0
    with h5py.File(tmp_path / "r.h5") as f:
        node = f["power/node0"].attrs
        record = json.loads(node["meter_auto"])
        assert record[0]["chosen"] == [f"cray:root={tree.root}"]
        assert "cray" in node["meter_auto_summary"] and f.attrs["format_version"] == "1.11"


def test_meters_command_with_fifos_in_the_trees_ends_and_says_why(tmp_path):
    """A FIFO as a pm_counters freshness, a RAPL energy_uj and a hwmon power file: `npmpi meters` and
    auto read none of them (a read would wait for ever) and say which file is not a file."""
    import subprocess
    import sys

    cray = FakePmCounters(tmp_path / "pm")
    make_fifo(cray.root / "freshness")
    rapl = FakePowercap(tmp_path / "rapl")
    make_fifo(rapl.zone("package-0").energy_file)
    hwmon = FakeHwmon(tmp_path / "hwmon")
    make_fifo(hwmon.add("power_meter", power_uw={1: 5_000_000}).path("name"))
    auto = (
        f"auto:cray_root={cray.root},rapl_root={rapl.root},perf_root={tmp_path}/none,hwmon_root={hwmon.root}"
    )
    for json_flag in ([], ["--json"]):
        proc = subprocess.run(
            [sys.executable, "-m", "npmpi", "meters", *json_flag, "--auto", auto],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert proc.returncode == 0, proc.stderr
        assert "Traceback" not in proc.stderr
    doc = json.loads(proc.stdout)
    found = {f["kind"]: f for f in doc["meters"]}
    assert re.search(r"freshness is not a regular file but a FIFO", found["cray"]["reason"])
    assert re.search(r"energy_uj is not a regular file but a FIFO", found["rapl"]["reason"])
    assert found["cray"]["fix"].startswith("a file of the tree was replaced by something else")
    assert found["hwmon"]["opens"]  # its name is unreadable ('?'), its power file is not
    assert doc["auto"]["chosen"] == [f"hwmon:{hwmon.root}"]


def test_meters_command_into_a_closed_pipe_ends_quietly():
    """`npmpi meters --json | head -1`: the reader closes the pipe early; no traceback, exit 0."""
    import subprocess
    import sys

    proc = subprocess.Popen(
        [sys.executable, "-m", "npmpi", "meters", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        bufsize=0,
    )
    assert proc.stdout.read(1) == b"{"
    proc.stdout.close()
    with proc.stderr:
        err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 0, err
    assert "Traceback" not in err and "BrokenPipe" not in err, err


@pytest.mark.parametrize("kind", ["cray", "rapl", "hwmon", "perf"])
def test_meters_command_escapes_control_characters_of_the_roots(kind, tmp_path, capsys):
    """A root holding ESC, BEL, CR, U+202E, U+009B and a newline (which would forge an
    `npmpi: error:` line): the table shows them escaped, every line is the table's own."""
    root = f"{tmp_path}/x\nnpmpi: error: forged\x1b[2J\u202e\x9b\x07\ry"
    assert meterscmd.main(["--auto", f"auto:{kind}_root={root}"]) == 0
    out = capsys.readouterr().out
    assert not any(c in out for c in "\x1b\x07\r\u202e\x9b"), repr(out)
    assert not any(line.startswith("npmpi: error") for line in out.splitlines())
    assert "x\\x0anpmpi: error: forged\\x1b[2J\\u202e\\x9b\\x07\\x0dy" in out
