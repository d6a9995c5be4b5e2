#!/usr/bin/env python3
"""Why mpi4py.bench reports more shared-memory bandwidth than npmpi at 1 MiB: untouched buffers.

mpi4py.bench allocates its buffers with numpy.empty and never writes them. Pages never written are
all mapped to the kernel's one zero page, so a single-copy transport (Open MPI's CMA) reads the
same 4 KiB again and again, from cache. This job times the same mpi4py ping-pong on buffers never
written and on buffers written before use, interleaved round by round (fresh buffers each time):

    mpirun -np 2 --bind-to core --mca pml ob1 --mca btl vader,self \\
        .venv-debian-mpi/bin/python bench/untouched_buffers.py --sizes 65536,1048576,8388608

Prints, per size, the best and median one-way time of each kind over the rounds.
"""

from __future__ import annotations

import argparse
import statistics
import time


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="65536,1048576,8388608", help="sizes in bytes, comma-separated")
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds per size (default 5)")
    ap.add_argument("--round-trips", type=int, default=300, help="timed round trips per round (default 300)")
    args = ap.parse_args()

    import mpi4py

    mpi4py.rc.thread_level = "single"
    import numpy as np
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    if comm.Get_size() != 2:
        raise SystemExit("untouched_buffers: run with exactly 2 ranks")
    rank = comm.Get_rank()
    peer = 1 - rank

    def one_way_us(sbuf, rbuf, round_trips: int) -> float:
        smsg, rmsg = [sbuf, MPI.BYTE], [rbuf, MPI.BYTE]
        comm.Barrier()
        t0 = time.perf_counter()
        for _ in range(round_trips):
            if rank == 0:
                comm.Send(smsg, peer, 1)
                comm.Recv(rmsg, peer, 1)
            else:
                comm.Recv(rmsg, peer, 1)
                comm.Send(smsg, peer, 1)
        return (time.perf_counter() - t0) / round_trips / 2 * 1e6

    kinds = ("never written", "written")
    for size in (int(s) for s in args.sizes.split(",") if s):
        times: dict[str, list[float]] = {k: [] for k in kinds}
        for _ in range(args.rounds):
            for kind in kinds:
                sbuf, rbuf = np.empty(size, "B"), np.empty(size, "B")
                if kind == "written":
                    sbuf[:] = rank + 1
                    rbuf[:] = 0
                one_way_us(sbuf, rbuf, max(2, args.round_trips // 10))  # warm-up
                times[kind].append(one_way_us(sbuf, rbuf, args.round_trips))
        if rank == 0:
            for kind in kinds:
                v = times[kind]
                print(
                    f"{size:10d} B, send buffer {kind:13s}: one-way best {min(v):9.2f} us, "
                    f"median {statistics.median(v):9.2f} us ({len(v)} rounds)",
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
