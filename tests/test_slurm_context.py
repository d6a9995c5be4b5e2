"""The Slurm context of a run (npmpi/core/slurmcontext.py): ids and node lists from the environment, and
the step's ConsumedEnergy from sstat, else sacct, recorded as absent with its reason otherwise."""

from __future__ import annotations

import math
import subprocess

from npmpi.core.slurmcontext import consumed_energy_attrs, context_attrs, parse_energy

JOB = {"SLURM_JOB_ID": "4242", "SLURM_JOB_NODELIST": "nid[001-002]", "SLURM_CLUSTER_NAME": "frontier"}


class Commands:
    """sstat and sacct as scripted answers (stdout, status), recording how they were called."""

    def __init__(self, **answers) -> None:
        self.answers = answers
        self.calls: list[list[str]] = []

    def __call__(self, argv, **kwargs):
        self.calls.append(argv)
        answer = self.answers.get(argv[0])
        if isinstance(answer, Exception):
            raise answer
        out, status = answer if answer else ("", 1)
        return subprocess.CompletedProcess(
            argv, status, out, "sstat: error: no steps running" if status else ""
        )


def test_context_names_the_job_step_and_nodes():
    attrs = context_attrs({**JOB, "SLURM_STEP_ID": "0", "SLURM_STEP_NODELIST": "nid001"})
    assert attrs == {
        "slurm_job_id": "4242",
        "slurm_step_id": "0",
        "slurm_job_nodelist": "nid[001-002]",
        "slurm_step_nodelist": "nid001",
        "slurm_cluster_name": "frontier",
    }
    assert context_attrs(JOB)["slurm_step_id"] == "batch"  # mpirun inside the batch script
    assert set(context_attrs({}).values()) == {""}


def test_step_energy_from_sstat():
    commands = Commands(sstat=("4242.0|183456\n", 0))
    attrs = consumed_energy_attrs({**JOB, "SLURM_STEP_ID": "0"}, commands)
    assert attrs["slurm_consumed_energy_j"] == 183456.0 and attrs["slurm_energy_source"] == "sstat"
    assert attrs["slurm_energy_step"] == "4242.0" and attrs["slurm_energy_note"] == ""
    assert commands.calls == [
        ["sstat", "--noheader", "--parsable2", "--format=JobID,ConsumedEnergyRaw", "-j", "4242.0"]
    ]


def test_sacct_when_sstat_has_nothing():
    commands = Commands(sstat=("", 1), sacct=("4242|0\n4242.batch|2900\n4242.extern|3000\n", 0))
    attrs = consumed_energy_attrs(JOB, commands)
    assert attrs["slurm_consumed_energy_j"] == 2900.0 and attrs["slurm_energy_source"] == "sacct"


def test_no_energy_accounting_is_recorded_as_absent_not_an_error():
    commands = Commands(sstat=("4242.batch|0\n", 0), sacct=("4242.batch|\n", 0))
    attrs = consumed_energy_attrs(JOB, commands)
    assert math.isnan(attrs["slurm_consumed_energy_j"]) and attrs["slurm_energy_source"] == ""
    note = attrs["slurm_energy_note"]
    assert note.startswith("absent: sstat: ConsumedEnergy of step 4242.batch is 0: Slurm's energy accounting")
    assert "sacct: ConsumedEnergy of step 4242.batch is empty" in note


def test_missing_commands_and_no_job():
    commands = Commands(sstat=FileNotFoundError(2, "No such file or directory", "sstat"), sacct=("", 1))
    note = consumed_energy_attrs(JOB, commands)["slurm_energy_note"]
    assert "sstat: [Errno 2] No such file or directory" in note and "sacct: sstat: error" in note
    commands = Commands()
    assert consumed_energy_attrs({}, commands) == {} and commands.calls == []  # not a Slurm job
    joules, why = parse_energy("4242.1|77\n", "4242.0")
    assert math.isnan(joules) and why == "no accounting record of step 4242.0"


def fake_run(attrs, watts=(100.0, 100.0), label="measured"):
    """A loaded run's shape as slurm_energy reads it: attributes, path, nodes with one channel each."""
    from pathlib import Path
    from types import SimpleNamespace

    import numpy as np

    t = 1.7e9 + np.arange(0.0, 10.01, 0.1)
    nodes = [
        SimpleNamespace(channels=[SimpleNamespace(time_unix_s=t, power_w=np.full(len(t), w), label=label)])
        for w in watts
    ]
    return SimpleNamespace(attrs=attrs, path=Path("r.h5"), power=nodes)


def test_analysis_sets_slurms_count_beside_npmpis():
    from npmpi_analysis.numbers.slurm_energy import slurm_energy_notice

    attrs = {"slurm_consumed_energy_j": 2300.0, "slurm_energy_step": "4242.0", "slurm_energy_source": "sstat"}
    note = slurm_energy_notice(fake_run(attrs))
    assert note == (
        "r.h5: Slurm's ConsumedEnergy of step 4242.0 (sstat): 2300 J over the whole step; npmpi: 2000 J on "
        "its 2 power node(s) over its 10.0 s of samples (ratio 1.15; the step's span also holds the start-up)"
    )
    assert "(estimated, not measured)" in slurm_energy_notice(fake_run(attrs, label="estimated"))
    absent = {"slurm_consumed_energy_j": math.nan, "slurm_energy_note": "absent: sstat: ConsumedEnergy is 0"}
    assert slurm_energy_notice(fake_run(absent)) == (
        "r.h5: Slurm's energy count of the step: absent: sstat: ConsumedEnergy is 0"
    )
    assert slurm_energy_notice(fake_run({})) is None  # a 1.5 file
