"""The `coll` benchmark kind: one MPI collective over every measuring rank, per size, with a power rank
per node (a group kind: npmpi/kinds/recording.py gives the sequence, the file and the power).

The file is a group kind's run file (docs/file-format.md) with the collective's root attributes
(`coll_*`): the analysis reads its rows as a run's, with bytes_per_iteration_factor = S / m so that
its bandwidth is nccl-tests' algbw, and adds OSU's and nccl-tests' columns and the energy per
operation for a `coll` file (analysis/npmpi_analysis/coll/numbers.py; docs/collectives.md).
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
    SIZE_MEANING,
    check_choice,
    size_problem,
)
from npmpi.coll.options import CollOptions
from npmpi.coll.series import ITERATION_METHODS, ops_arg, plan, rank_counts, ranks_arg, table_json
from npmpi.core.errors import UsageError
from npmpi.core.layout import ROLE_IDLE
from npmpi.kinds.recording import GroupKind

KERNELS = ("python", "c")


class CollKind(GroupKind):
    name = "coll"
    description = (
        "MPI collectives across every measuring rank (one per core or slot, a power rank per node): "
        "OSU's avg/min/max latency, nccl-tests' algbw and busbw, and the energy of one operation. "
        "A size is OSU's message size per rank (docs/collectives.md)."
    )
    one_way_divisor = 1  # a trial's time / iterations: the time of one operation
    _factor = 1  # S / m of the file's one series (1 with several: per row), set by record()

    def parser(self):
        """The full parser (its --help: tests/data/help/coll.txt)."""
        from npmpi.kinds.options import group_parser

        parser = group_parser(self.name, self.description)
        self.add_options(parser)
        return parser

    def add_options(self, parser) -> None:
        from npmpi.commands.parser import count_arg

        g = parser.add_argument_group("collective")
        g.add_argument(
            "--op",
            default="allreduce",
            metavar="OP",
            help=f"the collective: {', '.join(OPS)}; several as a comma list, or all: one series "
            "each in one file (default: %(default)s)",
        )
        g.add_argument(
            "--ranks",
            default=None,
            metavar="LIST",
            help="rank counts, e.g. 2,4,8: each op on the first N measuring ranks, one series per "
            "count, the others waiting (default: every measuring rank)",
        )
        g.add_argument(
            "--per-node",
            type=count_arg,
            default=None,
            metavar="N",
            help="N measuring ranks per node, the node's other ranks idle but its power rank "
            "(default: every rank but the power rank)",
        )
        g.add_argument(
            "--iterations",
            default="target-time",
            metavar="METHOD",
            help="target-time: a trial of about --target-time, iterations from the last size's time; "
            "osu: OSU 7.4's counts (1000 after 100 warm-up up to 8 KiB, 100 after 10 above), each call "
            "timed with a barrier after it (default: %(default)s)",
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

    def extra_options(self, ns) -> CollOptions:
        ops = ops_arg(ns.op)
        for name in ops:
            check_choice(name, ns.dtype, ns.reduce_op)
        if ns.kernel not in KERNELS:
            raise UsageError(f"--kernel {ns.kernel!r}: choose python or c")
        if ns.iterations not in ITERATION_METHODS:
            raise UsageError(f"--iterations {ns.iterations!r}: choose {' or '.join(ITERATION_METHODS)}")
        if ns.per_node is not None and ns.per_node < 1:
            raise UsageError(f"--per-node {ns.per_node}: give 1 measuring rank per node or more")
        given = ns.sizes is not None
        if given:
            from npmpi.kinds.options import sizes_arg

            moving = [name for name in ops if OPS[name].moves_data]
            if len(ops) == 1 or moving:  # with several ops a barrier ignores --sizes
                problem = size_problem(
                    OPS[(moving or ops)[0]], _itemsize(ns.dtype), None, sizes_arg(ns.sizes)
                )
                if problem:
                    raise UsageError(problem)
        return CollOptions(
            op=ops[0],
            ops=ops,
            ranks=ranks_arg(ns.ranks),
            per_node=ns.per_node,
            iterations=ns.iterations,
            dtype=ns.dtype,
            reduce_op=ns.reduce_op,
            check=bool(ns.check),
            kernel=ns.kernel,
            sizes_given=given,
        )

    def groups(self, layout, opts):
        layout = super().groups(layout, opts)
        extra: CollOptions = opts.extra
        if extra.per_node is not None:
            layout = per_node(layout, extra.per_node, self.name)
        n = len(layout.groups[0])
        rank_counts(extra, n)
        plan(extra, n, opts.sizes_bytes, _itemsize(extra.dtype))
        return layout

    def member_problem(self, MPI, opts, agreed) -> str | None:
        if opts.extra.kernel != "c":
            return None
        from npmpi.persize.kernels import c_kernel_status

        ok, why = c_kernel_status()
        if ok:
            from npmpi import _ckernel

            if not hasattr(_ckernel, "collective"):
                return (
                    "the C kernel has no collective loop (built by an older npmpi): rebuild it "
                    "(scripts/setup.sh), or use --kernel python"
                )
            if opts.extra.iterations == "osu" and not hasattr(_ckernel, "COLLECTIVE_PER_CALL"):
                return (
                    "the C kernel cannot time each call as --iterations osu needs (built by an older "
                    "npmpi): rebuild it (scripts/setup.sh), or use --kernel python"
                )
        return None if ok else why

    def series(self, opts, members: int):
        """Every series measured (npmpi/coll/series.py)."""
        extra: CollOptions = opts.extra
        planned = extra.planned_sizes  # rank 0's opts hold every series' sizes: its own are these
        sizes = planned if planned is not None else opts.sizes_bytes
        return plan(extra, members, sizes, _itemsize(extra.dtype))

    def step(self, opts, agreed):
        from npmpi.coll.step import CollStep

        series = self.series(opts, agreed.group_comm.Get_size())
        return CollStep(agreed.group_comm, opts.extra, [(s.op, s.ranks) for s in series])

    def serve(self, MPI, comm, opts, agreed, stop) -> int:
        from npmpi.kinds.group import serve_group

        # a member outside a series' ranks waits for its next command without spinning a core
        return serve_group(comm, self.step(opts, agreed), stop, quiet=True)

    def coordinator(self, recording, step):
        from npmpi.coll.coordinator import CollCoordinator

        return CollCoordinator(recording, step, self.series(recording.opts, len(recording.layout.groups[0])))

    def bytes_factor(self, members: int) -> int:
        return self._factor

    def record(self, MPI, comm, opts, argv, agreed, stop) -> int:
        series = self.series(opts, len(agreed.roles.layout.groups[0]))
        self._factor = series[0].table_row()["algbw_bytes_factor"] if len(series) == 1 else 1
        sizes = tuple(sorted({size for s in series for size in s.sizes}))
        extra = replace(opts.extra, planned_sizes=opts.sizes_bytes)
        return super().record(MPI, comm, replace(opts, sizes_bytes=sizes, extra=extra), argv, agreed, stop)

    def attrs(self, opts, layout) -> dict[str, Any]:
        """The collective's root attributes (docs/file-format.md, "coll"): the series' table, and
        the op's own attributes when the file holds one series."""
        from mpi4py import MPI

        from npmpi.coll.step import mpi_datatype

        extra: CollOptions = opts.extra
        n = len(layout.groups[0])
        series = self.series(opts, n)
        one = series[0] if len(series) == 1 else None
        op = OPS[one.op] if one else None
        reduction = any(OPS[s.op].reduction for s in series)
        return {
            "kernel": extra.kernel,
            "coll_op": one.op if one else ",".join(extra.ops),
            "coll_mpi_function": f"MPI_{op.method}" if op else "",
            "coll_dtype": extra.dtype,
            "coll_mpi_datatype": mpi_datatype(MPI, extra.dtype, reduction).Get_name(),
            "coll_dtype_bytes": _itemsize(extra.dtype),
            "coll_reduce_op": extra.reduce_op if reduction else "",
            "coll_root": 0 if any(OPS[s.op].rooted for s in series) else -1,
            "coll_ranks": one.ranks if one else n,
            "coll_size_meaning": SIZE_MEANING[op.name] if op else "per series (coll_series_json)",
            "coll_algbw_bytes_factor": (one.ranks if op.algbw_ranks else 1) if op else 1,
            "coll_bus_factor": float(op.bus_factor(one.ranks)) if op else float("nan"),
            "coll_bus_factor_formula": op.bus_factor_text if op else "per series (coll_series_json)",
            "coll_checked": bool(extra.check),
            "coll_iterations": extra.iterations,
            "coll_per_node": extra.per_node or 0,
            "coll_series_json": table_json(series),
        }


def per_node(layout, count: int, name: str):
    """The layout with `count` measuring ranks on each node (its lowest ranks that may measure), the
    node's other ranks idle; UsageError (one line) when a node has fewer."""
    members = layout.groups[0]
    chosen = []
    for node in range(layout.node_count):
        mine = [r for r in members if layout.node_of_rank[r] == node]
        if len(mine) < count:
            host = layout.hosts[mine[0]] if mine else f"node {node}"
            raise UsageError(
                f"--per-node {count}: node {node} ({host}) has {len(mine)} rank(s) that can measure: "
                f"start more ranks per node or give --per-node {len(mine)}"
            )
        chosen += mine[:count]
    if len(chosen) < 2:
        raise UsageError(f"--per-node {count}: {name} needs 2 measuring ranks, {len(chosen)} chosen")
    roles = tuple(
        ROLE_IDLE if r in members and r not in chosen else role for r, role in enumerate(layout.roles)
    )
    return replace(layout, roles=roles, groups=(tuple(chosen),))


def _itemsize(dtype: str) -> int:
    import numpy as np

    return np.dtype(DTYPES[dtype].numpy).itemsize


KIND = CollKind()
