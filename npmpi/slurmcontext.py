"""The Slurm context of a run: job and step ids, node lists, and at the end the step's energy as
Slurm's own accounting counted it (`ConsumedEnergy`), stored beside npmpi's for the same nodes.

Slurm counts a step's energy only when the site configures an energy plugin
(`AcctGatherEnergyType`, e.g. acct_gather_energy/rapl, /ipmi, /pm_counters on Cray EX);
`sstat` reports it for a running step, `sacct` once the accounting database has it. Without
that plugin the field is empty or 0: the run file then says the energy is absent and why, and
nothing fails. The step npmpi runs in is SLURM_STEP_ID's under srun; under mpirun inside a batch
script, the batch step (`JOBID.batch`).
"""

from __future__ import annotations

import math
import subprocess
import time
from collections.abc import Callable, Mapping

QUERY_TIMEOUT_S = 10.0
FIELDS = "JobID,ConsumedEnergyRaw"


def context_attrs(env: Mapping[str, str]) -> dict[str, str]:
    """Root attributes naming the job, its step and its nodes ('' outside Slurm)."""
    return {
        "slurm_job_id": env.get("SLURM_JOB_ID", ""),
        "slurm_step_id": step_of(env) if env.get("SLURM_JOB_ID") else "",
        "slurm_job_nodelist": env.get("SLURM_JOB_NODELIST", env.get("SLURM_NODELIST", "")),
        "slurm_step_nodelist": env.get("SLURM_STEP_NODELIST", ""),
        "slurm_cluster_name": env.get("SLURM_CLUSTER_NAME", ""),
    }


def step_of(env: Mapping[str, str]) -> str:
    """The step this process runs in: srun's step id, else the batch script's step."""
    step = env.get("SLURM_STEP_ID", env.get("SLURM_STEPID", ""))
    return step if step.isdigit() else "batch"


def parse_energy(stdout: str, step: str) -> tuple[float, str]:
    """(joules, why absent) from `--parsable2 --noheader` lines `JOBID.STEP|JOULES`."""
    for line in stdout.splitlines():
        job_id, _, value = line.strip().partition("|")
        if job_id != step:
            continue
        value = value.strip()
        if value.isdigit() and int(value) > 0:
            return float(value), ""
        return math.nan, (
            f"ConsumedEnergy of step {step} is {value or 'empty'}: Slurm's energy accounting is not "
            "configured here (AcctGatherEnergyType)"
        )
    return math.nan, f"no accounting record of step {step}"


def consumed_energy_attrs(
    env: Mapping[str, str], run: Callable[..., subprocess.CompletedProcess] = subprocess.run
) -> dict[str, object]:
    """The step's ConsumedEnergy by sstat, else sacct, as root attributes; absent with its reason ({}
    outside Slurm)."""
    job = env.get("SLURM_JOB_ID", "")
    if not job:  # not a Slurm job: nothing to compare with, nothing recorded
        return {}
    out: dict[str, object] = {
        "slurm_consumed_energy_j": math.nan,
        "slurm_energy_source": "",
        "slurm_energy_query_unix_s": time.time(),
    }
    step = f"{job}.{step_of(env)}"
    out["slurm_energy_step"] = step
    notes = []
    for tool in ("sstat", "sacct"):
        argv = [tool, "--noheader", "--parsable2", f"--format={FIELDS}", "-j", step]
        try:
            proc = run(argv, capture_output=True, text=True, timeout=QUERY_TIMEOUT_S)
        except (OSError, subprocess.SubprocessError) as exc:
            notes.append(f"{tool}: {exc}")
            continue
        if proc.returncode != 0:
            last = (proc.stderr or "").strip().splitlines()[-1:] or [f"exit status {proc.returncode}"]
            notes.append(f"{tool}: {last[0]}")
            continue
        joules, why = parse_energy(proc.stdout, step)
        if not math.isnan(joules):
            out.update(slurm_consumed_energy_j=joules, slurm_energy_source=tool, slurm_energy_note="")
            return out
        notes.append(f"{tool}: {why}")
    return {**out, "slurm_energy_note": "absent: " + "; ".join(notes)}
