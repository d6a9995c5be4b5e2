"""ReFrame site configuration for npmpi's checks (npmpi_checks.py): this machine, with two partitions,
`local` (ReFrame's local scheduler, mpirun) and `slurm` (the one-node Slurm of scripts/slurm-local.sh,
jobs submitted with sbatch and followed with squeue). A template for a site: copy the `slurm`
partition into your system's entry, set its `access` (partition, account), `nodes`, `meter` and the
references measured on your machine (docs/clusters.md, "ReFrame").

Everything npmpi's checks read is in a partition's `extras`:
  nodes              how many nodes a job may have (the pair across nodes needs 2; the map uses all)
  meter              npmpi's --meter spec ('' for none: no power figures); e.g. "auto", "ipmi"
  measured_power     True: a power that is only estimated (no meter on the node) fails the check
  mpirun_options     options after `mpirun -np N` (Open MPI's --bind-to none: the power rank must not
                     share the pair's cores)
  npmpi_args         npmpi's options per check: sweep-one-node, sweep-two-nodes, map, coll
  npmpi_references   per check, per variable: (reference, lower, upper, unit); lower and upper are
                     fractions of the reference (-0.5: 50 % below), None for no bound. The units are the
                     variables': latency_small us, bandwidth_peak Gbit/s, energy_least pJ/bit,
                     power_idle and power_active W, energy_per_op J/op
"""

import os

# pip's Open MPI refuses root unless told twice (containers, test clusters); a node of 2 cores
# runs the pair and the power rank oversubscribed
_ROOT = (
    [["OMPI_ALLOW_RUN_AS_ROOT", "1"], ["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1"]] if os.geteuid() == 0 else []
)
_QUICK = "--quick -p 0 -u 64K --target-time 0.05 --baseline 0.5"  # some 10 s a check here
_ARGS = {
    "sweep-one-node": _QUICK,
    "sweep-two-nodes": _QUICK,
    "map": "--quick --target-time 0.05 --sizes 1,64K --baseline 0.5",
    "coll": "--op allreduce --sizes 8,64K --trials 3 --target-time 0.1 --check --baseline 0.5",
}
# this machine's figures, loose: a shared 2-core virtual machine (the same bounds on both partitions)
_REFERENCES = {
    "sweep-one-node": {
        "latency_small": (5.0, None, 4.0, "us"),  # up to 5x the reference: a loaded machine
        "bandwidth_peak": (5.0, -0.95, None, "Gbit/s"),
    },
    "coll": {"latency_small": (20.0, None, 9.0, "us")},
}
_EXTRAS = {
    "nodes": 1,
    "meter": "estimate",  # no real meter here: the estimate, labelled ESTIMATED in every output
    "measured_power": False,
    "mpirun_options": ["--oversubscribe", "--bind-to", "none"],
    "npmpi_args": _ARGS,
    "npmpi_references": _REFERENCES,
}

site_configuration = {
    "systems": [
        {
            "name": "npmpi-local",
            "descr": "this machine: its local scheduler, and the local Slurm of scripts/slurm-local.sh",
            "hostnames": [".*"],
            "modules_system": "nomod",
            "partitions": [
                {
                    "name": "local",
                    "descr": "jobs run here with mpirun",
                    "scheduler": "local",
                    "launcher": "mpirun",
                    "environs": ["npmpi"],
                    "max_jobs": 1,
                    "extras": _EXTRAS,
                },
                {
                    "name": "slurm",
                    "descr": "sbatch, followed with squeue (sacct needs accounting, which it has not)",
                    "scheduler": "squeue",
                    "launcher": "mpirun",
                    "access": [],  # a site: ["--partition=NAME", "--account=NAME"]
                    "environs": ["npmpi"],
                    "max_jobs": 1,
                    "time_limit": "5m",
                    "extras": _EXTRAS,
                },
            ],
        }
    ],
    "environments": [
        {
            "name": "npmpi",
            "env_vars": [["OMPI_MCA_btl", "^ofi"], ["OMPI_MCA_mpi_yield_when_idle", "1"], *_ROOT],
        }
    ],
    "logging": [
        {
            "handlers_perflog": [
                {
                    "type": "filelog",
                    "prefix": "%(check_system)s/%(check_partition)s",
                    "level": "info",
                    "format": (
                        "%(check_job_completion_time)s|%(check_name)s|%(check_system)s:%(check_partition)s|"
                        "%(check_environ)s|%(check_result)s|%(check_perfvalues)s"
                    ),
                    # one group per variable: NAME_value|NAME_unit|NAME_ref|NAME_lower_thres|NAME_upper_thres
                    "format_perfvars": (
                        "%(check_perf_value)s|%(check_perf_unit)s|%(check_perf_ref)s|"
                        "%(check_perf_lower_thres)s|%(check_perf_upper_thres)s|"
                    ),
                    "append": True,
                }
            ]
        }
    ],
}
