"""`npmpi-analyze map.h5 [more maps]`: the cluster-map path of the command (npmpi_analysis.cli
hands over when its files hold a /map group). Same options, exit statuses and output rules as a
sweep's analysis; several maps are compared with the first (before / after a repair)."""

from __future__ import annotations

from functools import partial

from npmpi.core.errors import RunFileError, UsageError
from npmpi_analysis.numbers.kinds import KindAnalysis

# a map CSV of at least this many pair-sizes (rows) is written by a second process (side_output)
SIDE_PAIR_SIZES = 1 << 18

KIND = KindAnalysis("map", own="npmpi_analysis.map.cli", series=False, words="a cluster map")


def check_usage(args, kinds: list[bool]) -> None:
    """UsageError for what a map cannot give, or map and run files mixed."""
    if not all(kinds):
        maps = [str(p) for p, k in zip(args.runs, kinds, strict=True) if k]
        runs = [str(p) for p, k in zip(args.runs, kinds, strict=True) if not k]
        raise UsageError(
            f"{', '.join(maps)} {'is a map' if len(maps) == 1 else 'are maps'} and {', '.join(runs)} not: "
            "analyse cluster maps and sweep runs separately"
        )
    if args.compare_csv is not None:
        raise UsageError("--compare-csv compares sweep runs size by size; two maps are compared as they are")
    if args.np_out is not None:
        raise UsageError(
            "--np-out is NetPIPE's output of a sweep: a cluster map has none (use --csv or --json)"
        )


def run(args, labels: list[str], sample_fields: tuple[str, ...], say, error) -> int:
    """Analyse, print and write the maps; `say` and `error` print a line (npmpi_analysis.cli's)."""
    from npmpi_analysis.map.load import load_map
    from npmpi_analysis.map.outliers import compare_maps
    from npmpi_analysis.report import summarise_alike

    failed = 0
    analyses = []
    for path, label in zip(args.runs, labels, strict=True):
        try:
            m = load_map(path, sample_fields)
        except RunFileError as exc:
            error(str(exc))
            failed += 1
            continue
        a = _analysed(m, label, args.meter_delay)
        del m
        for problem in summarise_alike(a.problems):
            error(problem)
        if not (a.best_s == a.best_s).any():  # nothing measured
            failed += 1
            continue
        analyses.append(a)
    if not analyses:
        return 1
    changes = [compare_maps(analyses[0], a) for a in analyses[1:]]
    problems = [p for a in analyses for p in a.problems]
    show = (lambda: None) if args.quiet else partial(_print, analyses, changes, say)
    _write(args, analyses, changes, problems, say, show)
    return 1 if (failed or problems) else 0


def _print(analyses, changes, say) -> None:
    from npmpi_analysis.map import report as map_report

    for a in analyses:
        say(map_report.summary_text(a))
        say("")
    for c in changes:
        say(map_report.change_text(c))
        say("")


def _write(args, analyses, changes, problems, say, show=lambda: None) -> None:
    """The output files, `show()` (the text) first; a large map's CSV by a second process, begun
    before the text is shown (the text of a 4,096-node map takes 9 s: the CSV gains it)."""
    import sys

    from npmpi_analysis.figures.render import write_figures
    from npmpi_analysis.map import report as map_report
    from npmpi_analysis.map.csv_rows import BULK_NOTE, is_bulk, pair_sizes
    from npmpi_analysis.map.html_report import html_report
    from npmpi_analysis.outfiles import write_atomic, write_with
    from npmpi_analysis.report import summarise_alike
    from npmpi_analysis.side_output import side_output

    written, beside, made = [], None, None

    def shown() -> None:  # the text, then the note of the largest maps' outputs
        show()
        if (args.csv or args.json) and is_bulk(analyses):
            say(f"npmpi-analyze: note: {pair_sizes(analyses):,} pair-sizes: {BULK_NOTE}", sys.stderr)

    side = args.json is not None or args.plots is not None or args.report is not None
    side = bool(args.csv) and side and pair_sizes(analyses) >= SIDE_PAIR_SIZES
    fill = partial(map_report.write_csv, analyses=analyses)
    beside = side_output(args.csv, fill, args.force) if side else None
    if beside is None:
        shown()
        made = _plots_checked(args, analyses, changes)  # the figures' names checked before writing
        if args.csv:
            write_with(args.csv, fill, args.force)
    if args.csv:
        written.append(str(args.csv))
    try:
        if beside is not None:
            shown()
        plots, files = made or _plots_checked(args, analyses, changes)
        if args.json:
            fill_json = partial(map_report.write_json, analyses=analyses, changes=changes)
            write_with(args.json, fill_json, args.force)
            written.append(str(args.json))
        count, figures, skipped = write_figures(
            plots,
            args.format,
            files if args.plots is not None else None,
            args.force,
            args.report is not None,
            write_atomic,
        )
        if beside is not None:
            beside.join()
    except BaseException:
        if beside is not None:  # the CSV stops too: no output is left half-written
            beside.stop()
        raise
    if count:
        written.append(f"{count} figure(s) in {args.plots}/")
    if args.report is not None:
        listed = summarise_alike(problems) + skipped
        write_atomic(args.report, html_report(analyses, changes, figures, listed), args.force)
        written.append(str(args.report))
    for note in skipped:
        say(f"npmpi-analyze: note: {note}", sys.stderr)
    if written and not args.quiet:
        say("wrote " + ", ".join(written))


def _plots_checked(args, analyses, changes) -> tuple[list, dict]:
    """The figures to draw and, with --plots, their files (checked free, their directory made)."""
    from npmpi_analysis.map.figures import change_plots, map_plots
    from npmpi_analysis.outfiles import check_free, make_plots_dir

    plots = []
    if args.plots is not None or args.report is not None:
        plots = map_plots(analyses) + [p for c in changes for p in change_plots(c)]
    files = {}
    if args.plots is not None:
        files = {p.name: args.plots / f"{p.name}.{args.format}" for p in plots}
        if args.plots.is_dir():
            for f in files.values():
                check_free(f, args.force)
        make_plots_dir(args.plots)
    return plots, files


def _analysed(m, label: str, meter_delay_s: float | None):
    """A loaded map's analysis, its text attributes made printable first (npmpi-analyze's and the API's)."""
    from npmpi.core.safetext import shown_attrs
    from npmpi.runfile.format import JSON_ATTRS
    from npmpi_analysis.map.analyse import analyse_map

    m.attrs, m.map_attrs = shown_attrs(m.attrs, JSON_ATTRS), shown_attrs(m.map_attrs)
    return analyse_map(m, label, meter_delay_s, release=True)  # the callers keep no more of m than its power


def api_fields(p, label: str, meter_delay_s: float | None) -> dict:
    """The fields of a map's npmpi_analysis.api.RunData (its tables as lists of rows): the pairs'
    rows, the summary, the power's faults and channels."""
    from npmpi_analysis.loading import ANALYSED_SAMPLE_FIELDS
    from npmpi_analysis.map.load import load_map
    from npmpi_analysis.map.report import pair_rows, summary
    from npmpi_analysis.numbers.faults import channel_rows, fault_rows

    m = load_map(p, ANALYSED_SAMPLE_FIELDS)
    a = _analysed(m, label, meter_delay_s)
    return {
        "kind": "map",
        "attrs": {**a.attrs, **{f"map_{k}": v for k, v in a.map_attrs.items()}},
        "sizes": pair_rows(a),
        "summary": summary(a),
        "faults": fault_rows(a.power, None, None),
        "channels": channel_rows(a.power, None),
        "notices": list(a.notices),
        "problems": list(a.problems),
        "node_attrs": [dict(n.attrs) for n in m.power],
        "analysis": a,
        "_loaded": m,
    }
