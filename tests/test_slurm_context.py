"""The Slurm context of a run (npmpi/slurmcontext.py): ids and node lists from the environment, and
the step's ConsumedEnergy from sstat, else sacct, recorded as absent with its reason otherwise."""

from __future__ import annotations

import math
import subprocess

from npmpi.slurmcontext import consumed_energy_attrs, context_attrs, parse_energy

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
    outside = consumed_energy_attrs({}, Commands())
    assert outside["slurm_energy_note"] == "absent: not run inside a Slurm job"
    joules, why = parse_energy("4242.1|77\n", "4242.0")
    assert math.isnan(joules) and why == "no accounting record of step 4242.0"
