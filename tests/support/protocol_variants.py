"""Run under `mpirun -np 2 python tests/support/protocol_variants.py KERNEL` (tests/test_rma_memcpy.py):
every rma and memcpy variant swept in-process through npmpi.persize.benchmark.sweep with --integrity
(every message checked), and two with a message corrupted on purpose, which must fail. Rank 0
prints one JSON line per variant: its name, status, sizes measured, iterations and message."""

from __future__ import annotations

import json
import os
import sys

from mpi4py import MPI

from npmpi.persize.benchmark import sweep
from npmpi.run.options import parse_options

TINY = ["-u", "8", "-p", "0", "--trials", "2", "--repeats", "4", "--integrity"]
VARIANTS = {
    "rma put fence pingpong": ["--protocol", "rma"],
    "rma get lock pingpong": ["--protocol", "rma", "--rma-op", "get", "--rma-sync", "lock"],
    "rma put fence stream": ["--protocol", "rma", "--mode", "stream", "--window", "3"],
    "rma put lock stream cold": [
        "--protocol",
        "rma",
        "--rma-sync",
        "lock",
        "--mode",
        "stream",
        "--cache-cold",
    ],
    "rma get fence bidir cold": ["--protocol", "rma", "--rma-op", "get", "--mode", "bidir", "--cache-cold"],
    "rma put lock bidir": ["--protocol", "rma", "--rma-sync", "lock", "--mode", "bidir"],
    "rma put fence separate": ["--protocol", "rma", "--buffers", "separate"],
    "memcpy pingpong": ["--protocol", "memcpy"],
    "memcpy stream cold": ["--protocol", "memcpy", "--mode", "stream", "--cache-cold"],
}
# a message corrupted at 4 B (npmpi/persize/reflector.py's fault injection): the check must see it
CORRUPTED = {
    "rma put corrupted": ["--protocol", "rma", "--buffers", "separate"],
    "memcpy corrupted": ["--protocol", "memcpy", "--buffers", "separate"],
}


def main() -> None:
    kernel = sys.argv[1]
    comm = MPI.COMM_WORLD
    for table, fault in ((VARIANTS, None), (CORRUPTED, "4")):
        for name, args in table.items():
            if fault:
                os.environ["NPMPI_FAULT_CORRUPT_SIZE"] = fault
            outcome = sweep(comm, parse_options([*TINY, "--kernel", kernel, *args]))
            os.environ.pop("NPMPI_FAULT_CORRUPT_SIZE", None)
            if comm.Get_rank() == 0:
                row = {
                    "name": name,
                    "status": outcome.status,
                    "sizes": [r.size_bytes for r in outcome.rows],
                    "iterations": sorted({r.iterations for r in outcome.rows}),
                    "message": outcome.message,
                }
                print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
