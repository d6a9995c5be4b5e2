"""Nothing counted twice in a node's total (npmpi/meters/scope.py): a spec given twice is refused, a
part beside a whole-node meter and a channel reading what another reads stay channels but are not
summed, `auto` keeps a given meter that reads what it would choose; and auto's spec checks."""

from __future__ import annotations

import shutil

import h5py
import numpy as np
import pytest
from fakes.cray_pm import FakePmCounters, Scanner
from fakes.sysfs import FakeHwmon, FakePowercap

from npmpi.core.errors import UsageError
from npmpi.meters.auto import CHOSEN, GIVEN, NOT_TRIED, choose
from npmpi.meters.base import MeterError, make_meter, parse_meter_spec
from npmpi.meters.scope import SCOPE_NODE, SCOPE_PART, mark_totals, scope_of
from npmpi.power.sampler import METERS_ENV, node_meter_specs
from npmpi.run.options import parse_options
from npmpi.runfile.reader import load_run

TWICE = "given twice"


@pytest.mark.parametrize(
    "specs",
    [
        ["cray:root=/T", "cray:root=/T"],
        ["cray", "cray:node"],
        ["estimate", "estimate"],
        ["auto", "auto"],
        ["auto", "auto:cray_root=/T"],
        ["rapl", "rapl"],
    ],
)
def test_a_meter_given_twice_is_one_usage_error(specs):
    args = [a for s in specs for a in ("--meter", s)]
    with pytest.raises(UsageError) as err:
        parse_options(args)
    text = str(err.value)
    assert TWICE in text and "\n" not in text and text.startswith(f"--meter {specs[1]}: ")
    assert "count twice" in text and "give each meter once" in text


def test_a_meter_given_twice_in_npmpi_meters_names_the_variable(monkeypatch):
    monkeypatch.setenv(METERS_ENV, "estimate;rapl;estimate")
    with pytest.raises(MeterError, match=f"^{METERS_ENV} estimate: this meter is {TWICE}"):
        node_meter_specs([])
    monkeypatch.setenv(METERS_ENV, "estimate;rapl")
    assert [s.kind for s in node_meter_specs([])] == ["estimate", "rapl"]


def test_different_meters_and_different_parts_are_accepted():
    ns = parse_options(["--meter", "cray", "--meter", "cray:cpu", "--meter", "nvml:0", "--meter", "nvml:1"])
    assert [s.text for s in ns.meters] == ["cray", "cray:cpu", "nvml:0", "nvml:1"]


def marks(*specs: str) -> list[tuple[str, bool]]:
    return [(m["scope"], m["in_node_total"]) for m in mark_totals([make_meter(s) for s in specs])]


def test_a_part_beside_the_whole_node_is_not_summed():
    assert marks("cray:root=/T", "cray:cpu,root=/T") == [(SCOPE_NODE, True), (SCOPE_PART, False)]
    assert marks("rapl", "cray") == [(SCOPE_PART, False), (SCOPE_NODE, True)]
    (note,) = [m["node_total_note"] for m in mark_totals([make_meter("cray:cpu"), make_meter("cray")])][:1]
    assert note == "a part inside the node, whose total comes from its whole-node meter"


def test_whole_node_meters_count_once_the_measured_one_first():
    assert marks("cray", "ipmi") == [(SCOPE_NODE, True), (SCOPE_NODE, False)]
    assert marks("estimate", "cray") == [(SCOPE_NODE, False), (SCOPE_NODE, True)]  # measured first
    out = mark_totals([make_meter("cray"), make_meter("ipmi")])
    assert out[1]["node_total_note"] == "another whole-node meter: the node's total is cray's"


def test_parts_alone_are_summed_but_the_same_counters_only_once():
    assert marks("rapl", "nvml:0", "nvml:1") == [(SCOPE_PART, True)] * 3
    assert marks("rapl", "perf") == [(SCOPE_PART, True), (SCOPE_PART, False)]  # the same RAPL counters
    assert marks("rapl:domains=dram", "perf:events=pkg") == [(SCOPE_PART, True)] * 2
    assert mark_totals([make_meter("rapl"), make_meter("perf")])[1]["node_total_note"] == (
        "reads what rapl reads: counted once"
    )


def test_wall_plugs_are_summed_and_contain_the_parts():
    assert marks("snmp:pdu,outlet=1,profile=apc-rpdu2", "snmp:pdu,outlet=2,profile=apc-rpdu2", "rapl") == [
        ("supply", True),
        ("supply", True),
        (SCOPE_PART, False),
    ]


def test_an_acpi_power_meter_is_the_whole_node_and_auto_adds_no_gpu_to_it(tmp_path):
    tree = FakeHwmon(tmp_path)
    tree.add("power_meter", average_uw={1: 300_000_000})
    meter = make_meter(f"hwmon:{tree.root}")
    meter.open()
    assert scope_of(meter).scope == SCOPE_NODE
    choice = choose(parse_meter_spec(f"auto:cray_root={tmp_path}/no,rapl_root={tmp_path}/no,perf_root="
                                     f"{tmp_path}/no,hwmon_root={tree.root}"))  # fmt: skip
    steps = {s.kind: s for s in choice.steps}
    assert steps["hwmon"].outcome == CHOSEN
    assert steps["nvml"].outcome == NOT_TRIED and "its GPUs included" in steps["nvml"].reason
    other = FakeHwmon(tmp_path / "gpu")
    other.add("amdgpu", power_uw={1: 90_000_000})
    part = make_meter(f"hwmon:{other.root}")
    part.open()
    assert scope_of(part).scope == SCOPE_PART


def test_auto_keeps_a_given_meter_that_reads_what_it_would_choose(tmp_path):
    """`METERS=auto` in jobs/*.sbatch and `--meter rapl` in NPMPI_ARGS: rapl once, not twice."""
    rapl = FakePowercap(tmp_path / "sys")
    given = make_meter(f"rapl:{rapl.root}")
    given.open()
    spec = parse_meter_spec(f"auto:cray_root={tmp_path}/none,rapl_root={rapl.root}")
    choice = choose(spec, ("rapl",), (given,))
    assert choice.meters == []  # neither a second rapl nor perf nor the estimate
    steps = {s.kind: s for s in choice.steps}
    assert steps["rapl"].outcome == GIVEN and steps["rapl"].spec == f"rapl:{rapl.root}"
    assert steps["rapl"].reason == "given with its own --meter: counted once"
    assert choice.summary().startswith(f"--meter {spec.text} chose rapl:{rapl.root} (given); not used: ")
    assert steps["perf"].reason == "rapl was chosen before it" and steps["estimate"].outcome == NOT_TRIED
    tree = FakePmCounters(tmp_path / "pm")
    given = make_meter(f"cray:root={tree.root}")
    choice = choose(parse_meter_spec(f"auto:cray_root={tree.root}"), ("cray",), (given,))
    assert choice.meters == [] and {s.kind: s.outcome for s in choice.steps}["cray"] == GIVEN


@pytest.mark.parametrize(
    "spec, words",
    [
        ("auto:ipmi=maybe", "ipmi='maybe': give ipmi=yes or ipmi=no"),
        ("auto:cray_root=", "cray_root= is empty: give a directory, or leave cray_root out"),
        ("auto:redfish=", "redfish= is empty: give the BMC's address"),
        ("auto:cray_root=/a,cray_root=/b", "cray_root= is given twice (values not shown): give it once"),
        ("estimate:idle_w=40,idle_w=50", "idle_w= is given twice"),
    ],
)
def test_auto_spec_mistakes_are_one_usage_line(spec, words):
    with pytest.raises(UsageError) as err:
        parse_options(["--meter", spec])
    assert words in str(err.value) and "\n" not in str(err.value)
    assert "/a" not in str(err.value)  # a repeated key's values are never shown
    for fine in ("auto:ipmi=no", "auto:ipmi=YES", "auto:ipmi=1"):
        parse_options(["--meter", fine])


def set_watts(tree: FakePmCounters) -> None:
    """A node drawing 300 W, its CPU 150 W of them."""
    tree.base_w = 40.0
    tree.watts = {"cpu": 150.0, "memory": 30.0, "accel0": 80.0}


@pytest.mark.mpi
def test_a_component_beside_its_node_is_a_channel_but_not_in_the_node_power(npmpi_run, tmp_path, capsys):
    from npmpi_analysis.numbers.analyse import analyse_run

    tree = FakePmCounters(tmp_path / "pm", accels=1)
    set_watts(tree)
    scanner = Scanner(tree)
    scanner.start()
    try:
        args = ["--quick", "-u", "4K", "--baseline", "0.3", "-o", "r.h5"]
        args += ["--meter", f"cray:root={tree.root}", "--meter", f"cray:cpu,root={tree.root}"]
        proc = npmpi_run(args, np=3, timeout=120)
    finally:
        scanner.stop()
    assert proc.returncode == 0, proc.stderr
    assert f"not in the node's total: cray:cpu,root={tree.root}: a part inside the node" in proc.stdout
    run = load_run(tmp_path / "r.h5")
    node, cpu = run.power[0].channels
    assert bool(node.attrs["in_node_total"]) and not bool(cpu.attrs["in_node_total"])
    assert cpu.attrs["scope"] == "part" and abs(float(cpu.power_w.mean()) - 150.0) < 10
    a = analyse_run(run, "r")
    rows = a.summary()["nodes"][0]["channels"]
    assert [r["in_node_total"] for r in rows] == [True, False]
    # the node's power is its node counter's alone: what the same file gives without the cpu channel
    shutil.copy(tmp_path / "r.h5", tmp_path / "node-only.h5")
    with h5py.File(tmp_path / "node-only.h5", "a") as f:
        del f["power/node0/channel1"]
    alone = analyse_run(load_run(tmp_path / "node-only.h5"), "n")
    for which in ("active", "idle_before", "sizes"):
        got, want = getattr(a.power.nodes[0], which).mean, getattr(alone.power.nodes[0], which).mean
        np.testing.assert_allclose(got, want, rtol=1e-12, err_msg=which)
    assert 200 < a.power.active_w < 350  # the node (300 W), not node + cpu (450 W)
