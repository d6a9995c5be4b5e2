"""The `coll` benchmark kind: one MPI collective over every measuring rank, per size, with a power rank
per node (a group kind: npmpi/kinds/recording.py gives the sequence, the file and the power).

The file is a group kind's run file (docs/file-format.md) with the collective's root attributes
(`coll_*`): the analysis reads its rows as a run's, with bytes_per_iteration_factor = S / m so that
its bandwidth is nccl-tests' algbw, and adds OSU's and nccl-tests' columns and the energy per
operation for a `coll` file (analysis/npmpi_analysis/numbers/collectives.py; docs/collectives.md).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from npmpi.coll.ops import (
    DEFAULT_DTYPE,
    DEFAULT_REDUCE_OP,
    DTYPES,
    OPS,
    REDUCE_OPS,
    check_choice,
    default_sizes,
    size_problem,
)
from npmpi.core.errors import UsageError
from npmpi.kinds.recording import GroupKind

KERNELS = ("python", "c")
SIZE_MEANING = {
    "allreduce": "bytes of the vector each rank gives (and receives)",
    "reduce": "bytes of the vector each rank gives (root 0 receives the result)",
    "bcast": "bytes root 0 sends to every rank",
    "allgather": "bytes each rank gives (each receives ranks x size)",
    "alltoall": "bytes each rank sends to each rank (each sends and receives ranks x size)",
    "reduce_scatter": "bytes of the vector each rank gives (each receives size / ranks)",
    "barrier": "none (a barrier moves no data)",
}


class CollKind(GroupKind):
    name = "coll"
    description = (
        "MPI collectives across every measuring rank (one per core or slot, a power rank per node): "
        "OSU's avg/min/max latency, nccl-tests' algbw and busbw, and the energy of one operation. "
        "A size is OSU's message size per rank (docs/collectives.md)."
    )
    one_way_divisor = 1  # a trial's time / iterations: the time of one operation
    _op = "allreduce"  # rank 0's op, set by record() for bytes_factor()

    def parser(self):
        """The full parser (its --help: tests/data/help/coll.txt)."""
        from npmpi.kinds.options import group_parser

        parser = group_parser(self.name, self.description)
        self.add_options(parser)
        return parser

    def add_options(self, parser) -> None:
        g = parser.add_argument_group("collective")
        g.add_argument(
            "--op",
            default="allreduce",
            metavar="OP",
            help=f"the collective: {', '.join(OPS)} (default: %(default)s)",
        )
        g.add_argument(
            "--dtype",
            default=DEFAULT_DTYPE,
            metavar="TYPE",
            help=f"the datatype: {', '.join(DTYPES)} (default: %(default)s, OSU's MPI_CHAR)",
        )
        g.add_argument(
            "--reduce-op",
            default=DEFAULT_REDUCE_OP,
            metavar="OP",
            help=f"the reduction of allreduce, reduce and reduce_scatter: {', '.join(REDUCE_OPS)} "
            "(default: %(default)s)",
        )
        g.add_argument(
            "--check",
            action="store_true",
            help="after each size's trials every rank compares its result with the expected one "
            "(OSU's -c); a wrong result fails the size",
        )
        g.add_argument(
            "--kernel", default="python", metavar="NAME", help="python (mpi4py) or c (default: %(default)s)"
        )

    def extra_options(self, ns) -> dict:
        op, _, _ = check_choice(ns.op, ns.dtype, ns.reduce_op)
        if ns.kernel not in KERNELS:
            raise UsageError(f"--kernel {ns.kernel!r}: choose python or c")
        given = ns.sizes is not None
        if given:
            from npmpi.kinds.options import sizes_arg

            problem = size_problem(op, _itemsize(ns.dtype), None, sizes_arg(ns.sizes))
            if problem:
                raise UsageError(problem)
        return {
            "op": ns.op,
            "dtype": ns.dtype,
            "reduce_op": ns.reduce_op,
            "check": bool(ns.check),
            "kernel": ns.kernel,
            "sizes_given": given,
        }

    def groups(self, layout, opts):
        layout = super().groups(layout, opts)
        extra = opts.extra
        if extra["sizes_given"]:
            n = len(layout.groups[0])
            problem = size_problem(OPS[extra["op"]], _itemsize(extra["dtype"]), n, opts.sizes_bytes)
            if problem:
                raise UsageError(problem)
        return layout

    def member_problem(self, MPI, opts, agreed) -> str | None:
        if opts.extra["kernel"] != "c":
            return None
        from npmpi.sweep.kernels import c_kernel_status

        ok, why = c_kernel_status()
        if ok:
            from npmpi import _ckernel

            if not hasattr(_ckernel, "collective"):
                return (
                    "the C kernel has no collective loop (built by an older npmpi): rebuild it "
                    "(scripts/setup.sh), or use --kernel python"
                )
        return None if ok else why

    def step(self, opts, agreed):
        from npmpi.coll.step import CollStep

        return CollStep(agreed.group_comm, opts.extra)

    def bytes_factor(self, members: int) -> int:
        return members if OPS[self._op].algbw_ranks else 1

    def record(self, MPI, comm, opts, argv, agreed, stop) -> int:
        extra = opts.extra
        self._op = extra["op"]
        if not extra["sizes_given"]:
            n = len(agreed.roles.layout.groups[0])
            opts = replace(opts, sizes_bytes=default_sizes(OPS[extra["op"]], _itemsize(extra["dtype"]), n))
        return super().record(MPI, comm, opts, argv, agreed, stop)

    def attrs(self, opts, layout) -> dict[str, Any]:
        """The collective's root attributes (docs/file-format.md, "coll")."""
        from mpi4py import MPI

        from npmpi.coll.step import mpi_datatype

        extra = opts.extra
        op = OPS[extra["op"]]
        n = len(layout.groups[0])
        return {
            "kernel": extra["kernel"],
            "coll_op": op.name,
            "coll_mpi_function": f"MPI_{op.method}",
            "coll_dtype": extra["dtype"],
            "coll_mpi_datatype": mpi_datatype(MPI, extra["dtype"], op.reduction).Get_name(),
            "coll_dtype_bytes": _itemsize(extra["dtype"]),
            "coll_reduce_op": extra["reduce_op"] if op.reduction else "",
            "coll_root": 0 if op.rooted else -1,
            "coll_ranks": n,
            "coll_size_meaning": SIZE_MEANING[op.name],
            "coll_algbw_bytes_factor": n if op.algbw_ranks else 1,
            "coll_bus_factor": float(op.bus_factor(n)),
            "coll_bus_factor_formula": op.bus_factor_text,
            "coll_checked": bool(extra["check"]),
        }


def _itemsize(dtype: str) -> int:
    import numpy as np

    return np.dtype(DTYPES[dtype].numpy).itemsize


KIND = CollKind()
