"""jobs/reframe/: npmpi's ReFrame checks under real ReFrame (reframe-hpc from PyPI), once with the local
scheduler (every check) and once on the local Slurm cluster (the sweep), their perflogs read for the
variables and units; what the checks read from npmpi-analyze's JSON, and npmpi's failure modes in
its own words, in-process."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
from conftest import REPO, VENV
from npmpi_analysis.cli import main
from npmpi_analysis.synthetic import write_run
from support.slurm_cluster import SlurmCluster, SlurmUnavailable
from test_analysis_outputs import T0, make_run
from test_api import coll_file
from test_map_analysis import power_map

RFM = REPO / "jobs" / "reframe"
sys.path.insert(0, str(RFM))
import npmpi_results  # noqa: E402

UNITS = {"latency_small": "us", "bandwidth_peak": "Gbit/s", "energy_least": "pJ/bit", "power_idle": "W"}
UNITS |= {"power_active": "W", "energy_per_op": "J/op", "model_alpha": "us", "model_beta": "Gbit/s"}
UNITS |= {"model_energy_per_bit": "pJ/bit"}


def analysed(tmp_path, path) -> dict:
    out = tmp_path / f"{path.stem}.json"
    main([str(path), "--json", str(out), "-q"])
    return npmpi_results.read(out)


def test_the_figures_are_npmpi_analyze_s(tmp_path):
    doc = analysed(tmp_path, make_run(tmp_path / "r.h5"))
    s = doc["runs"][0]["summary"]
    f = npmpi_results.figures(doc)
    assert set(f) == {"latency_small", "bandwidth_peak", "energy_least", "power_idle", "power_active"} | {
        "model_alpha",
        "model_beta",
        "model_energy_per_bit",
    }
    regimes = s["model"]["regimes"]
    assert (
        f["model_alpha"] == regimes[0]["alpha_s"] * 1e6
        and f["model_beta"] == regimes[-1]["beta_bit_s"] * 1e-9
    )
    assert f["model_energy_per_bit"] == regimes[-1]["energy_per_bit_j"] * 1e12
    assert (
        f["bandwidth_peak"] == s["peak_bandwidth_bit_s"] * 1e-9
        and f["energy_least"] == s["min_energy_pj_bit"]
    )
    small = [r["latency_min_s"] for r in doc["runs"][0]["sizes"] if r["size_bytes"] <= 64]
    assert f["latency_small"] == pytest.approx(sorted(small)[len(small) // 2] * 1e6)  # 5 sizes: the middle
    assert f["power_idle"] == s["idle_power_w"] and npmpi_results.problems(doc, 0, {"meter": True}) == []
    m = npmpi_results.figures(analysed(tmp_path, power_map(tmp_path / "m.h5")))
    assert set(m) == {"latency_small", "bandwidth_peak", "energy_least", "power_idle"} | {
        "model_alpha",
        "model_beta",
        "model_energy_per_bit",
    }
    c = analysed(tmp_path, coll_file(tmp_path / "c.h5"))
    fc = npmpi_results.figures(c)
    assert fc["energy_per_op"] == c["runs"][0]["sizes"][-1]["energy_per_op_j"] and "energy_least" not in fc
    assert set(npmpi_results.FIGURE_UNITS) == set(UNITS) and npmpi_results.FIGURE_UNITS == UNITS


def test_npmpi_s_failure_modes_are_said_in_its_words(tmp_path):
    """No meter on the node, an estimate where measured power is required, every size flagged, the
    pair on the wrong side of a node boundary, an interrupted file, a failed integrity check."""
    no_power = analysed(tmp_path, make_run(tmp_path / "n.h5", power=False))
    (p,) = npmpi_results.problems(no_power, 0, {"meter": True})
    assert p.startswith("no power in the file: no meter could be read on the node(s)")
    est = analysed(tmp_path, make_run(tmp_path / "e.h5", label="estimated"))
    (p,) = npmpi_results.problems(est, 0, {"meter": True, "measured": True})
    assert p == "no meter on this node: its power is ESTIMATED, not measured; give a meter (docs/meters.md)"
    # windows of 0.01 s, samples every 0.1 s: every size 'short'
    starts = [[T0, T0 + 0.01], [T0 + 2, T0 + 2.01]]
    short = write_run(tmp_path / "s.h5", [1, 64], [10, 10], [[0.01, 0.01]] * 2, starts, nodes=make_nodes(),
                      baseline=(T0 - 8, T0 - 3))  # fmt: skip
    flagged = analysed(tmp_path, short)
    (p,) = npmpi_results.problems(flagged, 0, {})
    assert p.startswith("every size is flagged (2 'short')")
    assert npmpi_results.problems(flagged, 0, {"allow_flagged": True}) == []
    est["runs"][0]["summary"]["pair_crosses_nodes"] = False  # as a real run within one node says
    (p,) = npmpi_results.problems(est, 0, {"pair_crosses_nodes": True})
    assert p == "the pair was to be across nodes and was not: check the placement (tasks per node)"
    cut = analysed(tmp_path, make_run(tmp_path / "i.h5", status="interrupted"))
    assert npmpi_results.problems(cut, 1, {})[:2] == [
        "the run file's status is 'interrupted': synthetic interrupted run",  # its status_message
        "npmpi-analyze's integrity check failed (exit 1)",
    ]
    assert npmpi_results.problems({}, None, {}) == [
        "npmpi-analyze wrote no JSON: npmpi wrote no readable run file (see the job's output)"
    ]


def make_nodes():
    import numpy as np
    from npmpi_analysis.synthetic import SynthChannel, SynthNode

    t = T0 - 10 + 0.1 * np.arange(200)
    return [SynthNode([SynthChannel(t, np.full(200, 50.0), sample_interval_s=0.1)], host="n0")]


def reframe(tmp_path, partition: str, names: list[str], env: dict | None = None) -> tuple[dict, str]:
    """Run ReFrame on `partition` with the installed npmpi (the fixture's option); its JSON report
    and its console."""
    exe = shutil.which("reframe", path=str(VENV / "bin"))
    if exe is None:
        pytest.fail("reframe-hpc is not installed: scripts/setup.sh installs the test extra")
    report = tmp_path / "report.json"
    cmd = [exe, "-C", str(RFM / "settings.py"), "-c", str(RFM / "npmpi_checks.py"), "--system",
           f"npmpi-local:{partition}", *[a for n in names for a in ("-n", n)], "-S",
           f"npmpi_install.venv={VENV}", "--prefix", str(tmp_path), "--report-file", str(report),
           "--exec-policy=serial", "-r"]  # fmt: skip
    run_env = {**(env or os.environ), "TMPDIR": str(tmp_path)}
    run_env.pop("PYTHONPATH", None)
    proc = subprocess.run(cmd, cwd=tmp_path, env=run_env, capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    return json.loads(report.read_text()), proc.stdout


def perflog(tmp_path, partition: str, check: str) -> dict[str, str]:
    """The last record of a check's perflog, by its header's names."""
    header, *records = (
        (tmp_path / "perflogs" / "npmpi-local" / partition / f"{check}.log").read_text().splitlines()
    )
    return dict(zip(header.split("|"), records[-1].split("|"), strict=False))


def check_variables(record: dict[str, str], names: set[str]) -> None:
    for name in names:
        assert record[f"{name}_unit"] == UNITS[name], (name, record)
        assert float(record[f"{name}_value"]) > 0, (name, record)


@pytest.mark.mpi
@pytest.mark.slow
@pytest.mark.timeout(420)
def test_the_checks_under_reframe_on_this_machine(tmp_path):
    report, console = reframe(tmp_path, "local", ["Npmpi"])
    cases = {c["display_name"]: c for run in report["runs"] for c in run["testcases"]}
    results = {name: c["result"] for name, c in cases.items()}
    assert results == {
        "npmpi_install ~npmpi-local": "pass",
        "NpmpiSweep %placement=one-node": "pass",
        "NpmpiSweep %placement=two-nodes": "skip",
        "NpmpiMap": "pass",
        "NpmpiColl": "pass",
    }, results
    assert "[the pair across nodes needs two nodes: partition npmpi-local:local has one]" in console
    power = {"energy_least", "power_idle", "power_active"}
    sweep = perflog(tmp_path, "local", "NpmpiSweep")
    check_variables(sweep, {"latency_small", "bandwidth_peak"} | power)
    assert sweep["result"] == "pass" and sweep["latency_small_ref"] == "5.0"  # the site config's
    check_variables(
        perflog(tmp_path, "local", "NpmpiMap"), {"latency_small", "bandwidth_peak", "energy_least"}
    )
    check_variables(perflog(tmp_path, "local", "NpmpiColl"), {"latency_small", "energy_per_op", "power_idle"})


@pytest.mark.mpi
@pytest.mark.slow
@pytest.mark.timeout(480)
def test_the_sweep_under_reframe_on_the_local_slurm(tmp_path):
    try:
        cluster = SlurmCluster.start()
    except SlurmUnavailable as exc:
        pytest.skip(f"no local Slurm: {exc}")
    try:
        report, _ = reframe(tmp_path, "slurm", ["NpmpiSweep%placement=one-node"], cluster.env())
    finally:
        cluster.stop()
    (sweep,) = [c for run in report["runs"] for c in run["testcases"] if c["name"].startswith("NpmpiSweep")]
    assert sweep["result"] == "pass" and sweep["scheduler"] == "squeue" and sweep["jobid"]
    record = perflog(tmp_path, "slurm", "NpmpiSweep")
    check_variables(record, {"latency_small", "bandwidth_peak", "energy_least", "power_idle", "power_active"})
    assert record["system:partition"] == "npmpi-local:slurm"
