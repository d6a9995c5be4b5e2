"""A coll file's series: each (op, rank count) measured in turn, in one job and one file.

`--op all` (or a comma list) measures several ops and `--ranks 2,4,8` each op on the sub-communicator
of the first N measuring ranks (the others wait for rank 0's next command and take no part); a
series is one op at one rank count with its own sizes. Rows carry their series' index
(/pingpong/coll_series) into the table of the root attribute coll_series_json (docs/file-format.md).

`--iterations osu` gives OSU 7.4's counts (c/util/osu_util.h): COLL_LOOP_SMALL 1000 timed calls after
COLL_SKIP_SMALL 100 up to LARGE_MESSAGE_SIZE 8192 B, COLL_LOOP_LARGE 100 after COLL_SKIP_LARGE 10
above; each call timed on its own with a barrier after it, as osu_allreduce's loop.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from npmpi.coll.ops import OPS, SIZE_MEANING, default_sizes, size_problem
from npmpi.coll.options import CollOptions
from npmpi.core.errors import UsageError
from npmpi.core.units import parse_whole

ITERATION_METHODS = ("target-time", "osu")
OSU_LARGE_MESSAGE_SIZE = 8192
OSU_LOOP = (1000, 100)  # COLL_LOOP_SMALL, COLL_LOOP_LARGE
OSU_SKIP = (100, 10)  # COLL_SKIP_SMALL, COLL_SKIP_LARGE
MAX_SERIES = 1 << 16


@dataclass(frozen=True)
class Series:
    """One op at one rank count, with its sizes."""

    op: str
    ranks: int
    sizes: tuple[int, ...]

    def table_row(self) -> dict:
        """Its row of coll_series_json: what a size means and the bandwidth factors at its ranks."""
        op, n = OPS[self.op], self.ranks
        return {
            "op": self.op,
            "ranks": n,
            "mpi_function": f"MPI_{op.method}",
            "algbw_bytes_factor": n if op.algbw_ranks else 1,
            "bus_factor": float(op.bus_factor(n)),
            "bus_factor_formula": op.bus_factor_text,
            "size_meaning": SIZE_MEANING[op.name],
            "sizes": list(self.sizes),
        }


def ops_arg(text: str) -> tuple[str, ...]:
    """--op: one op, a comma list, or `all` (every op in the table's order)."""
    if text == "all":
        return tuple(OPS)
    names = tuple(part.strip() for part in text.split(","))
    for name in names:
        if name not in OPS:
            raise UsageError(f"--op {name!r}: unknown; choose one of {', '.join(OPS)}, or all")
    if len(set(names)) != len(names):
        raise UsageError(f"--op {text!r}: give each op once")
    return names


def ranks_arg(text: str | None) -> tuple[int, ...] | None:
    """--ranks: distinct rank counts of at least 2, ascending; None: every measuring rank."""
    if text is None:
        return None
    try:  # the shared options' grammar: int() would take '٢', '２', '+2', ' 2' and '0_2'
        counts = [parse_whole(part) for part in text.split(",")]
    except ValueError:
        raise UsageError(f"--ranks {text!r}: give rank counts such as 2,4,8") from None
    if any(n < 2 for n in counts):
        raise UsageError(f"--ranks {text!r}: a collective needs 2 ranks or more in each count")
    if len(set(counts)) != len(counts):
        raise UsageError(f"--ranks {text!r}: give each rank count once")
    return tuple(sorted(counts))


def rank_counts(extra: CollOptions, members: int) -> tuple[int, ...]:
    """The rank counts measured with `members` measuring ranks; UsageError for a count above them."""
    counts = extra.ranks or (members,)
    if counts[-1] > members:
        raise UsageError(
            f"--ranks {','.join(map(str, counts))}: {counts[-1]} ranks asked for, {members} measuring "
            f"ranks started: start more ranks or give counts up to {members}"
        )
    return tuple(counts)


def plan(extra: CollOptions, members: int, sizes_bytes, itemsize: int) -> list[Series]:
    """Every series in the order measured (each op at each rank count, ascending); UsageError when a
    size cannot be measured at a rank count (reduce_scatter's share per rank)."""
    series = []
    for name in extra.ops:
        op = OPS[name]
        for n in rank_counts(extra, members):
            if not op.moves_data:
                sizes = (0,)
            else:
                sizes = tuple(sizes_bytes) if extra.sizes_given else default_sizes(op, itemsize, n)
                problem = size_problem(op, itemsize, n, sizes)
                if problem:
                    raise UsageError(problem if len(extra.ops) == 1 else f"{name}: {problem}")
            series.append(Series(name, n, sizes))
    if len(series) > MAX_SERIES:
        raise UsageError(f"--op and --ranks give {len(series)} series, at most {MAX_SERIES}")
    return series


def table_json(series: list[Series]) -> str:
    return json.dumps([s.table_row() for s in series])


def osu_counts(size: int) -> tuple[int, int]:
    """OSU 7.4's (timed iterations, skipped warm-up) of a collective at `size` bytes."""
    large = int(size > OSU_LARGE_MESSAGE_SIZE)
    return OSU_LOOP[large], OSU_SKIP[large]
