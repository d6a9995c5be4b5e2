"""The `coll` kind's hooks in the analysis's seam of kinds (npmpi_analysis/numbers/kinds.py): what
the analysis of a coll file adds to a run's, each hook importing the module that does it."""

from __future__ import annotations

from npmpi_analysis.numbers.kinds import KindAnalysis

KIND = KindAnalysis(
    "coll",
    rows="npmpi_analysis.coll.kind",
    several=("series of collectives", "files of one op at one rank count"),
)


def series(run, label: str, problems: list[str]) -> list[tuple]:
    from npmpi_analysis.coll.numbers import series_runs

    return series_runs(run, label, problems)


def ranks_moving(attrs: dict) -> float:
    from npmpi_analysis.coll.numbers import ranks_moving as moving

    return moving(attrs)


def figures(run, bw, power):
    from npmpi_analysis.coll.numbers import analyse_coll

    return analyse_coll(run, bw, power)


def file_text(series, render_table) -> str:
    """A coll file in the console: its header once, the table of its series, each series' detail."""
    from npmpi_analysis.coll.report import file_text as text

    return text(series, render_table)


def file_html(series, html_table, escape) -> str:
    """A coll file's summary in the HTML report, as in the console."""
    from npmpi_analysis.coll.report import file_html as html

    return html(series, html_table, escape)


def measurement(attrs: dict) -> str:
    """What a coll file measures, in words: its op and rank count."""
    return f"a coll file of {attrs.get('coll_op', '?')} on {attrs.get('coll_ranks', '?')} ranks"


def plots(runs: list) -> list:
    """The collectives' figures, then the energy of one operation against the rank count."""
    from npmpi_analysis.coll.figures import collective_plots, plot_energy_vs_ranks

    return [*collective_plots(runs), plot_energy_vs_ranks(runs)]


def json_extras(analyses) -> dict:
    """What the models add to the JSON's top level: a collective's growth with the rank count."""
    from npmpi_analysis.coll.scaling import scaling

    rows = scaling(analyses)
    return {"model_scaling": rows} if rows else {}


def lines(analyses) -> list[str]:
    """The console's lines on a collective's growth with the rank count."""
    from npmpi_analysis.coll.scaling import lines as scaling_lines
    from npmpi_analysis.coll.scaling import scaling

    rows = scaling(analyses)
    if not rows:
        return []
    heading = "model against the rank count (alpha of the first regime, beta of the last):"
    return [heading, *scaling_lines(rows)]


def comparison_figures() -> list:
    """Coll files side by side (several ops, rank counts or files): OSU's latency and the energy of one
    operation; beside a pair's run, a round trip against one operation."""
    from npmpi_analysis.coll.numbers import of
    from npmpi_analysis.numbers.size_comparison import Figure

    return [
        Figure(
            "OSU avg latency", lambda a: of(a).latency_avg_s if of(a) else None, 1e6, "us", "latency_avg_s"
        ),
        Figure("round trip or operation", _round_trip_or_op, 1e6, "us", "round_trip_or_op_s", mixed=True),
        Figure(
            "energy per operation",
            lambda a: of(a).energy_per_op_j if of(a) is not None else None,
            1e6,
            "uJ",
            "energy_per_op_j",
        ),
    ]


def _round_trip_or_op(a):
    """A ping-pong's round trip (twice its one-way time) or one collective operation, best trial
    each: a 2-rank allreduce's time is comparable with a round trip (each rank sends and receives);
    None for a run of another mode."""
    from npmpi_analysis.coll.numbers import of
    from npmpi_analysis.numbers.compute import PINGPONG_FACTORS, run_mode_factors

    if of(a) is not None:
        return a.bw.one_way_s
    return 2 * a.bw.one_way_s if run_mode_factors(a.attrs) == PINGPONG_FACTORS else None
