"""Entry point of `python -m npmpi`: the command word chooses the kind or command (npmpi/kinds/).

`python -m npmpi [OPTIONS]` runs the sweep (npmpi/run/), `python -m npmpi map …` a map (npmpi/map/),
`calibrate` and `meters` their commands; a kind registered elsewhere runs by its name.

Guarantees: bad usage prints one line on rank 0 and every rank exits 2 without creating a file;
a stop signal (Ctrl-C, SIGTERM from Slurm) ends the current trial, marks the file interrupted and
releases every rank; an error on any rank ends the whole job with one message, never leaving a
rank blocked (the sequence: npmpi/commands/sequence.py; the job's plumbing: npmpi/core/startup.py,
signals.py, abort.py, ending.py and guards.py).
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; returns the process exit status."""
    from npmpi.kinds import KindRegistryError, dispatch

    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        return dispatch(argv)
    except KindRegistryError as exc:  # every rank finds it: rank 0 says it
        from npmpi.core.startup import usage_error_status

        return usage_error_status(str(exc))
