#!/usr/bin/env python3
"""One buffer or two, big or exact: npmpi's C ping-pong loop on NetPIPE's and npmpi's buffers.

Run under mpirun with 2 ranks. For each size, every round runs one trial of each configuration
back to back (so machine noise hits all alike), each trial timing npmpi's C kernel loop (blocking
MPI_Send/MPI_Recv, the loop of `python -m npmpi --kernel c`). Reported: the best trial's one-way
time per configuration, in microseconds (best over rounds, as NetPIPE and npmpi report).

A configuration is LAYOUT/ALLOCATION; the loop is the same, only the buffers passed to it differ.
Layouts:
  two    separate send and receive buffers (npmpi)
  one    one buffer to send from and receive into (NetPIPE's default "cache" mode)
  mixed  rank 0 one buffer, rank 1 two: only rank 0 sends back what it has just received
Allocations:
  big    allocated once for the largest size with numpy, as npmpi's sweep does (numpy advises
         transparent huge pages for arrays of 4 MiB and more)
  exact  allocated per size, size + 16 KiB, aligned to 16 KiB, without the huge-page advice, as
         NetPIPE 3.7 does (malloc per size, 16 KiB alignment)

    mpirun -np 2 --bind-to core python bench/buffer_probe.py --sizes 1,1024,65536,1048576
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys

import numpy as np

ALIGN = 16 * 1024  # NetPIPE 3.7's default buffer alignment (bufalign)
LAYOUTS = ("two", "one", "mixed")
ALLOCATIONS = ("big", "exact")


@contextlib.contextmanager
def huge_page_advice(enabled: bool):
    """numpy's madvise(MADV_HUGEPAGE) for large arrays, switched for the allocations inside."""
    try:
        from numpy._core import multiarray as ma
    except ImportError:  # numpy 1.x
        from numpy.core import multiarray as ma
    before = ma._get_madvise_hugepage()
    ma._set_madvise_hugepage(enabled)
    try:
        yield
    finally:
        ma._set_madvise_hugepage(before)


def exact(nbytes: int) -> np.ndarray:
    """nbytes on a 16 KiB boundary, without huge pages (NetPIPE: malloc(size + 16 KiB), aligned)."""
    with huge_page_advice(False):
        raw = np.empty(nbytes + ALIGN, dtype=np.uint8)
    skip = (-raw.ctypes.data) % ALIGN
    return raw[skip : skip + nbytes]


class Buffers:
    """The (send, receive) pair of every configuration for one size, on this rank."""

    def __init__(self, configs: list[str], largest: int, rank: int) -> None:
        self.configs, self.rank = configs, rank
        self.big: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        for cfg in configs:
            layout, alloc = cfg.split("/")
            if alloc == "big":  # npmpi: np.zeros(largest) once, reused for every size
                self.big[cfg] = self._pair(layout, lambda n: np.zeros(n, dtype=np.uint8), largest)

    def _pair(self, layout: str, make, n: int) -> tuple[np.ndarray, np.ndarray]:
        if layout == "mixed":
            layout = "one" if self.rank == 0 else "two"
        if layout == "one":
            b = make(n)
            return b, b
        return make(n), make(n)

    def for_size(self, size: int) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        out = {}
        for cfg in self.configs:
            layout, alloc = cfg.split("/")
            out[cfg] = self.big[cfg] if alloc == "big" else self._pair(layout, exact, max(size, 1))
            s, r = out[cfg]
            s[:size] = 1  # touch the pages now, out of the timed loops
            r[:size] = 0
        return out


def main() -> int:
    configs_all = [f"{lay}/{alloc}" for alloc in ALLOCATIONS for lay in LAYOUTS]
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1,1024,65536,1048576,8388608", help="comma-separated bytes")
    ap.add_argument("--rounds", type=int, default=5, help="trials per configuration and size (default 5)")
    ap.add_argument("--target-time", type=float, default=0.05, help="seconds per trial (default 0.05)")
    ap.add_argument("--configs", default=",".join(configs_all), help=f"subset of {','.join(configs_all)}")
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    ap.add_argument(
        "--thread-level",
        default="funneled",
        choices=["single", "funneled"],
        help="MPI thread level to request (default funneled, as npmpi does; NetPIPE's MPI_Init is single)",
    )
    args = ap.parse_args()

    import mpi4py

    mpi4py.rc.thread_level = args.thread_level
    from mpi4py import MPI

    from npmpi import _ckernel

    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    if comm.Get_size() != 2:
        if rank == 0:
            print("buffer_probe: run with exactly 2 ranks", file=sys.stderr)
        return 2
    peer = 1 - rank
    transmitter = rank == 0
    sizes = [int(s) for s in args.sizes.split(",")]
    configs = [c for c in args.configs.split(",") if c]
    for cfg in configs:
        if cfg not in configs_all:
            raise SystemExit(f"buffer_probe: unknown configuration {cfg!r}")
    buffers = Buffers(configs, max(sizes), rank)
    best: dict[str, dict[int, float]] = {cfg: {} for cfg in configs}
    for size in sizes:
        bufs = buffers.for_size(size)
        # calibrate on the first configuration: iterations so that one trial lasts about target-time
        s, r = bufs[configs[0]]
        _ckernel.pingpong(comm, peer, s, r, size, 5, transmitter)
        probe = _ckernel.pingpong(comm, peer, s, r, size, 20, transmitter) / 20
        guess = max(3, int(args.target_time / max(probe, 1e-9)))
        iters = comm.bcast(guess if rank == 0 else None, root=0)
        for cfg in configs:  # warm-up for every configuration
            s, r = bufs[cfg]
            _ckernel.pingpong(comm, peer, s, r, size, max(2, iters // 10), transmitter)
        for _ in range(args.rounds):
            for cfg in configs:
                s, r = bufs[cfg]
                comm.Barrier()
                elapsed = _ckernel.pingpong(comm, peer, s, r, size, iters, transmitter)
                best[cfg][size] = min(best[cfg].get(size, float("inf")), elapsed / (2 * iters))
        del bufs
    if rank == 0:
        if args.json:
            print(json.dumps({cfg: {str(k): v for k, v in d.items()} for cfg, d in best.items()}))
        else:
            print(f"{'size (B)':>10s}" + "".join(f"{cfg:>14s}" for cfg in configs) + "   (one-way us)")
            for size in sizes:
                print(f"{size:10d}" + "".join(f"{best[cfg][size] * 1e6:14.3f}" for cfg in configs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
