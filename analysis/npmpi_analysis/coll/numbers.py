"""A `coll` file's own figures beside the rows' (docs/collectives.md): OSU's latency across ranks,
nccl-tests' algbw and busbw, and the energy of one operation.

Per size, with i iterations per trial and every member's own trial times (/pingpong/member_trial_s):
- OSU's latency: each rank's mean time per operation over the trials, t_r = mean(trial_r) / i;
  avg = the mean of t_r over the ranks, min and max = their least and largest (osu_* -f).
- the time of one operation, t = the mean over the trials of each trial's slowest member / i (a
  trial is done when every rank is: the rows' trial_s), sigma_t = the sigma of that mean / i.
- algbw = S / t with S = coll_algbw_bytes_factor x m (the rows' mean bandwidth: the file's
  bytes_per_iteration_factor is that factor); busbw = algbw x coll_bus_factor.
- energy per operation E = P t, P the summed power of every node over the size's trials, sigma_E =
  sqrt((sigma_P t)^2 + (P sigma_t)^2); dynamic: (P - P_idle) t with sigma_P and the idle's sigma
  combined (where that power is not above its own sigma, only its 2-sigma bound is shown); per node:
  that node's P t.
- energy per bit counts every rank's bits, as the energy counts every node's: pJ per algorithm bit
  (the rows' energy_pj_bit) = P / (n algbw) = E / (8 n S), pJ per bus bit = P / (n busbw). algbw and
  busbw are one rank's (nccl-tests'); every rank moves as much, so the job moves n times that. A
  2-rank allreduce of m bytes then costs what a ping-pong round trip of m bytes does per bit (each
  moves m bytes each way), and a figure does not grow with n when every node's power is the same.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np

from npmpi_analysis.numbers.compute import PJ_PER_J, Bandwidth, float_attr
from npmpi_analysis.numbers.said import Said

KIND_COLL = "coll"


@dataclass
class CollFigures:
    """The collective's figures per size (one element per message size)."""

    attrs: dict
    latency_avg_s: np.ndarray
    latency_min_s: np.ndarray
    latency_max_s: np.ndarray
    op_s: np.ndarray  # the time of one operation: the mean of each trial's slowest member / i
    op_sigma_s: np.ndarray
    algbw_bit_s: np.ndarray
    busbw_bit_s: np.ndarray
    energy_per_op_j: np.ndarray | None = None
    energy_per_op_sigma_j: np.ndarray | None = None
    dynamic_energy_per_op_j: np.ndarray | None = None
    dynamic_energy_per_op_sigma_j: np.ndarray | None = None
    energy_pj_bus_bit: np.ndarray | None = None
    energy_sigma_pj_bus_bit: np.ndarray | None = None
    node_energy_per_op_j: dict[int, np.ndarray] | None = None
    # where the power above idle is not above its sigma: the dynamic energy is only bounded (2 sigma)
    dynamic_not_above_idle: np.ndarray | None = None
    dynamic_energy_per_op_bound_j: np.ndarray | None = None

    row_is_operation = True  # a row's time is one operation's (the comparisons' "round trip or operation")

    @property
    def bus_factor(self) -> float:
        value = float_attr(self.attrs, "coll_bus_factor")
        return value if value is not None else math.nan

    def summary(self) -> dict:
        return summary(self)

    def size_columns(self, k: int) -> dict:
        return size_columns(self, k)


def of(a) -> CollFigures | None:
    """An analysed run's collective figures, None for a run of any other kind."""
    c = getattr(a, "kind_figures", None)
    return c if isinstance(c, CollFigures) else None


def coll_ranks(attrs: dict) -> int:
    """A coll file's (or series') rank count, coll_ranks; 0 where it is missing or no whole number
    from 1 up (a damaged or forged file: text, NaN, a fraction)."""
    n = float_attr(attrs, "coll_ranks")
    return int(n) if n is not None and n >= 1 and n == int(n) else 0


def is_coll(attrs: dict) -> bool:
    return str(attrs.get("kind", "")) == KIND_COLL


def ranks_moving(attrs: dict) -> float:
    """How many ranks' bits one row's bandwidth stands for when energy is divided by bits: the file's
    (or series') coll_ranks, its algbw being one rank's (NaN where that count is no count)."""
    n = float_attr(attrs, "coll_ranks")
    return n if n is not None and n >= 1 else math.nan


SERIES_ATTRS = {  # coll_series_json's keys -> the attributes of a file of that one series
    "op": "coll_op",
    "ranks": "coll_ranks",
    "mpi_function": "coll_mpi_function",
    "algbw_bytes_factor": "coll_algbw_bytes_factor",
    "bus_factor": "coll_bus_factor",
    "bus_factor_formula": "coll_bus_factor_formula",
    "size_meaning": "coll_size_meaning",
}


def series_table(attrs: dict) -> list[dict] | None:
    """A coll file's series (root coll_series_json), None without one or when it is not a list of
    objects."""
    import json

    text = attrs.get("coll_series_json")
    if not isinstance(text, str):
        return None
    try:
        table = json.loads(text)
    except (ValueError, RecursionError):
        return None
    ok = isinstance(table, list) and all(isinstance(row, dict) for row in table)
    return table if ok and table else None


MAX_ALGBW_FACTOR = 1 << 20  # the reader's bound on bytes_per_iteration_factor
BUS_FACTOR_RANGE = (0.0, 2.0)  # every op's bus factor: 0 (barrier) up to 2(n-1)/n < 2
ALGBW_KEYS = ("coll_algbw_bytes_factor", "bytes_per_iteration_factor")


def op_factors(op: str, n: int) -> tuple[int, float, str] | None:
    """(algbw bytes factor, bus factor, its formula) npmpi gives `op` on `n` ranks
    (npmpi/coll/series.py, Series.table_row); None for an op it does not know or no rank count."""
    from npmpi.coll.ops import OPS

    o = OPS.get(op)
    if o is None or n < 1:
        return None
    return (n if o.algbw_ranks else 1), float(o.bus_factor(n)), o.bus_factor_text


def _number(value) -> float | None:
    ok = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_))
    return float(value) if ok else None


def checked_factors(attrs: dict, said: Said) -> dict | None:
    """A coll run's (or series') attributes with its factors as npmpi derives them from coll_op and
    coll_ranks: a stored value that disagrees is replaced (a notice names both). For an op npmpi does
    not know, its own factors are kept when sane, else a problem: a bus factor outside 0 to 2 is not
    used (busbw unknown); an algbw factor that is no whole number from 1 to 2^20 leaves the series
    out (None)."""
    op, n = str(attrs.get("coll_op", "")), coll_ranks(attrs)
    want = op_factors(op, n)
    where = f"{shown_op(op)} on {n or '?'} ranks"
    if want is None:
        from npmpi.coll.ops import OPS

        why = "no rank count in the file" if op in OPS else "an op npmpi does not know"
        out = dict(attrs)
        bus = _number(attrs.get("coll_bus_factor"))
        if "coll_bus_factor" in attrs and not (
            bus is not None and (math.isnan(bus) or BUS_FACTOR_RANGE[0] <= bus <= BUS_FACTOR_RANGE[1])
        ):
            said.problem(
                f"{where} ({why}): coll_bus_factor = "
                f"{shown_op(attrs['coll_bus_factor'])} is not from {BUS_FACTOR_RANGE[0]:g} to "
                f"{BUS_FACTOR_RANGE[1]:g}: busbw is not given"
            )
            out["coll_bus_factor"] = math.nan
        for key in ALGBW_KEYS:
            x = _number(attrs.get(key))
            if key in attrs and not (x is not None and 1 <= x <= MAX_ALGBW_FACTOR and x == int(x)):
                said.problem(
                    f"{where} ({why}): {key} = {shown_op(attrs[key])} is no whole "
                    f"number from 1 to {MAX_ALGBW_FACTOR}: its rows are left out"
                )
                return None
        return out
    algbw, bus, formula = want
    fixed = {}
    for key, value in ((*ALGBW_KEYS[:1], algbw), (ALGBW_KEYS[1], algbw), ("coll_bus_factor", bus)):
        x = _number(attrs.get(key))
        if key in attrs and not (x is not None and math.isclose(x, value, rel_tol=1e-9, abs_tol=1e-12)):
            fixed[key] = (attrs[key], value)
    if "coll_bus_factor_formula" in attrs and str(attrs["coll_bus_factor_formula"]) != formula:
        fixed["coll_bus_factor_formula"] = (attrs["coll_bus_factor_formula"], formula)
    if not fixed:
        return attrs
    changes = "; ".join(
        f"{key} {shown_op(old)} -> {new:g}"
        if not isinstance(new, str)
        else f"{key} {shown_op(old)!r} -> {new!r}"
        for key, (old, new) in fixed.items()
    )
    said.notice(f"the file's factors are not {where}'s ({changes}): npmpi's for {where} are used")
    return {**attrs, **{key: new for key, (_, new) in fixed.items()}}


def shown_op(value) -> str:
    """A stored value in a line: printable, at most 40 characters."""
    from npmpi.core.safetext import shown

    return shown(
        value if isinstance(value, str) else f"{value!r}" if not isinstance(value, float) else f"{value:g}",
        40,
    )


def series_runs(run, label: str, problems: list[str] | None = None) -> list[tuple]:
    """A coll file as one (run, label) per series (each op at each rank count), every row of a series
    with its own factors, the members beyond its ranks left out; the file itself when it has one
    series or none. A series' power is every node's over its own rows' trials (numbers/node_power).
    Each one's factors are checked (`checked_factors`); rows of no series in the table are said, as
    are a series left out, in `problems`."""
    from dataclasses import replace

    from npmpi.core.safetext import shown_attrs

    problems = [] if problems is None else problems
    pp = run.pingpong
    table = series_table(run.attrs) if is_coll(run.attrs) else None
    if table is None or pp.coll_series is None:
        return _checked([(run, label)], problems)
    out = []
    unplaced = ~np.isin(pp.coll_series, np.arange(len(table)))
    if unplaced.any():
        others = sorted({int(x) for x in pp.coll_series[unplaced]})
        problems.append(
            f"{run.path.name}: {int(unplaced.sum())} of its {len(pp)} rows belong to series "
            f"{', '.join(map(str, others[:5]))}{' ...' if len(others) > 5 else ''}, which its series "
            f"table (coll_series_json) of {len(table)} does not hold: those rows are left out"
        )
    for index, row in enumerate(table):
        keep = pp.coll_series == index
        if not keep.any():
            continue
        extra = {SERIES_ATTRS[k]: v for k, v in row.items() if k in SERIES_ATTRS}
        extra["bytes_per_iteration_factor"] = extra.get("coll_algbw_bytes_factor", 1)
        attrs = {**run.attrs, **shown_attrs(extra), "coll_series": index}
        part = replace(run, attrs=attrs, pingpong=_rows(pp, keep, row.get("ranks")))
        name = (
            label
            if len(table) == 1
            else f"{label}-{attrs.get('coll_op', index)}-{attrs.get('coll_ranks', '')}"
        )
        out.append((part, name))
    return _checked(out, problems) if out else _checked([(run, label)], problems)


def _checked(parts: list[tuple], problems: list[str]) -> list[tuple]:
    """The parts with their factors checked (`checked_factors`), those that cannot be used left out."""
    from dataclasses import replace

    out = []
    for part, name in parts:
        if not is_coll(part.attrs):
            out.append((part, name))
            continue
        said = Said(list(part.notices), problems)
        attrs = checked_factors(part.attrs, said)
        if attrs is not None:
            out.append((replace(part, attrs=attrs, notices=said.notices), name))
    return out


def _rows(pp, keep: np.ndarray, ranks):
    """The rows `keep` of /pingpong, the per-member times of the series' first `ranks` members."""
    from dataclasses import fields, replace

    out = {}
    for f in fields(pp):
        value = getattr(pp, f.name)
        if isinstance(value, np.ndarray) and value.ndim >= 1 and len(value) == len(keep):
            out[f.name] = value[keep]
    if pp.member_trial_s is not None and isinstance(ranks, int) and ranks > 0:
        out["member_trial_s"] = pp.member_trial_s[keep][:, :ranks]
    if pp.cpu is not None:  # its columns in member order (npmpi/coll/coordinator.py): the first `ranks`
        cpu = pp.cpu
        cols = slice(ranks) if isinstance(ranks, int) and 0 < ranks <= len(cpu.ranks) else slice(None)
        out["cpu"] = replace(
            cpu,
            ranks=cpu.ranks[cols],
            **{f.name: getattr(cpu, f.name)[keep][:, cols] for f in fields(cpu) if f.name != "ranks"},
        )
    if pp.conditions is not None:  # the same columns as the CPU's (the coordinator places both alike)
        c = pp.conditions
        cols = slice(ranks) if isinstance(ranks, int) and 0 < ranks <= len(c.ranks) else slice(None)
        values = {name: v[keep][:, cols] for name, v in c.values.items()}
        out["conditions"] = replace(c, ranks=c.ranks[cols], values=values)
    return replace(pp, **out)


def osu_latency_s(member_trial_s: np.ndarray | None, iterations: np.ndarray, n: int):
    """(avg, min, max) across ranks of each rank's mean time per operation; NaN without member times."""
    if member_trial_s is None or member_trial_s.ndim != 3 or member_trial_s.shape[0] != n:
        nan = np.full(n, np.nan)
        return nan, nan, nan
    with np.errstate(invalid="ignore", divide="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a size where no trial ran: NaN
        per_rank = np.nanmean(member_trial_s, axis=2) / np.asarray(iterations, dtype=float)[:, None]
        return np.nanmean(per_rank, axis=1), np.nanmin(per_rank, axis=1), np.nanmax(per_rank, axis=1)


def analyse_coll(run, bw: Bandwidth, power) -> CollFigures | None:
    """A coll file's figures (None for any other kind)."""
    attrs = run.attrs
    if not is_coll(attrs):
        return None
    n = len(bw.size_bytes)
    avg, least, most = osu_latency_s(run.pingpong.member_trial_s, bw.iterations, n)
    with np.errstate(invalid="ignore", divide="ignore"):
        op_s = bw.trial_mean_s / bw.iterations
        op_sigma_s = bw.trial_sigma_s / bw.iterations
    factor = float_attr(attrs, "coll_bus_factor")
    c = CollFigures(
        attrs=attrs,
        latency_avg_s=avg,
        latency_min_s=least,
        latency_max_s=most,
        op_s=op_s,
        op_sigma_s=op_sigma_s,
        algbw_bit_s=bw.mean_bit_s,
        busbw_bit_s=bw.mean_bit_s * (factor if factor is not None else math.nan),
    )
    if power is not None:
        _add_energy(c, power, bw)
    return c


def energy_per_op_j(p, sigma_p, t, sigma_t) -> tuple[np.ndarray, np.ndarray]:
    """E = P t and sigma_E = sqrt((sigma_P t)^2 + (P sigma_t)^2)."""
    p, sigma_p, t, sigma_t = (np.asarray(x, dtype=float) for x in (p, sigma_p, t, sigma_t))
    return p * t, np.sqrt((sigma_p * t) ** 2 + (p * sigma_t) ** 2)


def _add_energy(c: CollFigures, power, bw: Bandwidth) -> None:
    c.energy_per_op_j, c.energy_per_op_sigma_j = energy_per_op_j(
        power.job_w, power.job_sigma_w, c.op_s, c.op_sigma_s
    )
    if math.isfinite(power.idle_w):
        dyn_w = power.job_w - power.idle_w
        dyn_sigma_w = np.sqrt(power.job_sigma_w**2 + power.idle_sigma_w**2)
        c.dynamic_energy_per_op_j, c.dynamic_energy_per_op_sigma_j = energy_per_op_j(
            dyn_w, dyn_sigma_w, c.op_s, c.op_sigma_s
        )
        with np.errstate(invalid="ignore"):
            low = np.isfinite(dyn_w) & ~(dyn_w > dyn_sigma_w)
        c.dynamic_not_above_idle = low
        c.dynamic_energy_per_op_bound_j = np.where(
            low, (np.maximum(dyn_w, 0) + 2 * dyn_sigma_w) * c.op_s, np.nan
        )
    with np.errstate(invalid="ignore", divide="ignore"):
        every = bw.mean_bit_s * ranks_moving(c.attrs) * c.bus_factor  # every rank's bus bits per second
        bus = np.where(every > 0, every, np.nan)
        rel_b = bw.sigma_bit_s / bw.mean_bit_s
        c.energy_pj_bus_bit = PJ_PER_J * power.job_w / bus
        c.energy_sigma_pj_bus_bit = c.energy_pj_bus_bit * np.sqrt(
            (power.job_sigma_w / power.job_w) ** 2 + rel_b**2
        )
    c.node_energy_per_op_j = {
        node.index: np.asarray(node.sizes.mean, dtype=float) * c.op_s for node in power.nodes
    }


def size_columns(c: CollFigures, k: int) -> dict:
    """A size's coll columns (CSV/JSON): OSU's latencies replace the rows' trial-based ones."""
    row = {
        "coll_op": str(c.attrs.get("coll_op", "")),
        "coll_ranks": coll_ranks(c.attrs),
        "latency_avg_s": float(c.latency_avg_s[k]),
        "latency_min_s": float(c.latency_min_s[k]),
        "latency_max_s": float(c.latency_max_s[k]),
        "time_per_op_s": float(c.op_s[k]),
        "time_per_op_sigma_s": float(c.op_sigma_s[k]),
        "algbw_bit_s": float(c.algbw_bit_s[k]),
        "busbw_bit_s": float(c.busbw_bit_s[k]),
        "bus_factor": c.bus_factor,
    }
    if c.energy_per_op_j is not None:
        row["energy_per_op_j"] = float(c.energy_per_op_j[k])
        row["energy_per_op_sigma_j"] = float(c.energy_per_op_sigma_j[k])
        dyn, dyn_sigma = c.dynamic_energy_per_op_j, c.dynamic_energy_per_op_sigma_j
        row["dynamic_energy_per_op_j"] = float(dyn[k]) if dyn is not None else math.nan
        row["dynamic_energy_per_op_sigma_j"] = float(dyn_sigma[k]) if dyn_sigma is not None else math.nan
        low = c.dynamic_not_above_idle is not None and bool(c.dynamic_not_above_idle[k])
        row["dynamic_energy_per_op_bound_j"] = float(c.dynamic_energy_per_op_bound_j[k]) if low else math.nan
        row["energy_pj_bus_bit"] = float(c.energy_pj_bus_bit[k])
        row["energy_sigma_pj_bus_bit"] = float(c.energy_sigma_pj_bus_bit[k])
        for index, values in (c.node_energy_per_op_j or {}).items():
            row[f"node{index}_energy_per_op_j"] = float(values[k])
    return row


SUMMARY_ATTRS = (
    "coll_op",
    "coll_mpi_function",
    "coll_ranks",
    "coll_dtype",
    "coll_mpi_datatype",
    "coll_reduce_op",
    "coll_size_meaning",
    "coll_algbw_bytes_factor",
    "coll_bus_factor",
    "coll_bus_factor_formula",
    "coll_checked",
    "coll_iterations",
    "coll_per_node",
)


def summary(c: CollFigures) -> dict:
    """The collective's description for the JSON summary: what was run, how the columns are made."""
    out = {}
    for key in SUMMARY_ATTRS:
        value = c.attrs.get(key)
        if isinstance(value, np.generic):
            value = value.item()
        out[key.removeprefix("coll_")] = value
    return {"collective": out}
