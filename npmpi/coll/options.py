"""The collective's own options (`coll`'s, beside the shared block of npmpi/kinds/options.py), checked
by CollKind.extra_options and kept in GroupOptions.extra; the run file stores them in options_json's
"extra", in the order of the fields."""

from __future__ import annotations

from dataclasses import dataclass

from npmpi.coll.ops import DEFAULT_DTYPE, DEFAULT_REDUCE_OP


@dataclass(frozen=True)
class CollOptions:
    """What `coll` measures: its op(s) and rank counts, how a trial's iterations are chosen, the
    datatype and reduction, the result check, the kernel."""

    op: str = "allreduce"  # the first of --op (a step of one series runs it)
    ops: tuple[str, ...] = ()  # every --op, in the order measured
    ranks: tuple[int, ...] | None = None  # --ranks, ascending (None: every measuring rank)
    per_node: int | None = None  # --per-node (None: every rank but the power rank)
    iterations: str = "target-time"  # --iterations: target-time or osu
    dtype: str = DEFAULT_DTYPE
    reduce_op: str = DEFAULT_REDUCE_OP
    check: bool = False  # --check: every rank compares its result with the expected one
    kernel: str = "python"  # python or c
    sizes_given: bool = False  # --sizes given: every series measures them (else each op's own)
    # rank 0's: the sizes of the command line (its options' sizes_bytes become every series' sizes,
    # the file's); None on the other ranks, whose sizes_bytes are those of the command line
    planned_sizes: tuple[int, ...] | None = None
