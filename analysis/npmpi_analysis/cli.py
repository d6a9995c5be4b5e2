"""`npmpi-analyze RUN.h5 [MORE.h5 ...]`: tables, exports, figures and a report from run files.

Plain `npmpi-analyze run.h5` prints the per-size table and the summary; each option adds an
output. Several files are overlaid on the same figures and their key figures compared. Exit
status: 0 all went well; 1 a file or part of one could not be analysed (one line on stderr says
what and where; everything else is still analysed and written); 2 bad usage, including an output
that exists without --force.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import shutil
import signal
import sys
import warnings
from pathlib import Path

from npmpi.core.errors import Interrupted, NpmpiError, RunFileError, UsageError
from npmpi_analysis.loading import ANALYSED_SAMPLE_FIELDS, load

PROG = "npmpi-analyze"
FORMATS = ("png", "pdf", "svg")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, no usage dump
        raise UsageError(message)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog=PROG,
        description="Analyse npmpi run files: bandwidth, latency, power, bits per joule. "
        "Several files are compared. Cluster maps (npmpi map) give heatmaps and the slow links and "
        "nodes; several maps are compared with the first (npmpi-analyze before.h5 after.h5). "
        "Outputs are never overwritten without --force.",
    )
    from npmpi import __version__

    p.add_argument("--version", action="version", version=f"{PROG} (npmpi) {__version__}")
    p.add_argument(
        "runs", nargs="+", type=Path, metavar="RUN.h5", help="run file(s) or cluster map(s) written by npmpi"
    )
    p.add_argument(
        "--csv", type=Path, metavar="FILE", help="write every per-size figure as CSV (default: none)"
    )
    p.add_argument(
        "--json",
        type=Path,
        metavar="FILE",
        help="write the summary and per-size figures as JSON (default: none)",
    )
    p.add_argument(
        "--np-out",
        type=Path,
        metavar="FILE",
        help="write NetPIPE's np.out (bytes, Mbps = bits/2^20/s, one-way seconds); with several runs, "
        "one file per run, the run's label added to the name (np.out -> np-LABEL.out; default: none)",
    )
    p.add_argument(
        "--compare-csv",
        type=Path,
        metavar="FILE",
        help="with several runs: one row per message size they all measured, each run's latency, "
        "bandwidth, energy per bit and CPU per KiB (those any run has) and its ratio to the first "
        "run's (default: none)",
    )
    p.add_argument(
        "--plots",
        type=Path,
        metavar="DIR",
        help="write the figures into DIR (created if needed; default: none)",
    )
    p.add_argument(
        "--format", choices=FORMATS, default="png", help="file format of --plots figures (default: png)"
    )
    p.add_argument(
        "--report",
        type=Path,
        metavar="FILE.html",
        help="write one self-contained HTML page with everything (default: none)",
    )
    p.add_argument(
        "--meter-delay",
        type=float,
        metavar="SECONDS",
        help="reporting delay of every meter (samples are moved this much earlier); default: each "
        "channel's calibrated meter_delay_s from the file, else 0",
    )
    p.add_argument(
        "--trend",
        action="store_true",
        help="the runs are one system's series: their latency, peak bandwidth and least energy per bit "
        "in time order, the run-to-run spread and the changes (--csv, --json, --plots, --report of the "
        "series)",
    )
    _add_model_options(p)
    p.add_argument("--force", action="store_true", help="overwrite existing outputs")
    p.add_argument("-q", "--quiet", action="store_true", help="print nothing but problems")
    return p


def _add_model_options(p: argparse.ArgumentParser) -> None:
    """The model's options (numbers/model.py)."""
    p.add_argument(
        "--model-csv",
        type=Path,
        metavar="FILE",
        help="write each run's model as CSV: one row per regime, alpha, beta, energy per message and "
        "per bit with 95 %% intervals (default: none)",
    )
    p.add_argument(
        "--model-breaks",
        metavar="SIZES",
        help="the model's regime breaks, message sizes of the runs that start a regime, e.g. 4K,64K "
        "(default: found in the data)",
    )
    p.add_argument(
        "--model-resamples",
        type=int,
        default=1000,
        metavar="N",
        help="bootstrap resamples of the model's intervals (default: 1000)",
    )
    p.add_argument(
        "--model-seed",
        type=int,
        default=20090,
        metavar="N",
        help="seed of the model's bootstrap: the same file and seed give the same intervals (default: 20090)",
    )


def _say(text: str, stream=None) -> None:
    """Print `text`, which may quote a run file: every control character is shown escaped."""
    from npmpi.core.safetext import printable_lines

    print(printable_lines(text), file=stream or sys.stdout, flush=True)


def _error(text: str) -> None:
    _say(f"{PROG}: error: {text}", sys.stderr)


def _np_out_paths(base: Path, labels: list[str]) -> list[Path]:
    if len(labels) == 1:
        return [base]
    return [base.with_name(f"{base.stem}-{lab}{base.suffix}") for lab in labels]


def main(argv: list[str] | None = None) -> int:
    """The exit status of analysing the files `argv` names (see the module docstring)."""
    from npmpi.core.stdio import run_guarded

    return run_guarded(lambda: _main_reporting(argv), PROG)


def _terminated(signum, _frame) -> None:
    raise Interrupted(signum, signal.Signals(signum).name)


def _main_reporting(argv: list[str] | None) -> int:
    # SIGTERM (a job's end, kill) ends the analysis as Ctrl-C does: the output being written is
    # removed, never left half-written beside its name
    previous = None
    with contextlib.suppress(ValueError):  # not the main thread: left as it is
        previous = signal.signal(signal.SIGTERM, _terminated)
    try:
        return _main_signalled(argv)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _main_signalled(argv: list[str] | None) -> int:
    import numpy as np

    try:
        # undefined figures are NaN by design, and the problems found are reported in one line each:
        # library warnings would only add noise to stderr
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            return _main(argv)
    except UsageError as exc:
        _error(str(exc))
        return 2
    except NpmpiError as exc:
        _error(str(exc))
        return exc.exit_code
    except KeyboardInterrupt:
        _error("interrupted")
        return 130
    except BrokenPipeError:
        _silence_stdout()
        return 1
    except (
        MemoryError
    ):  # what the files declare is capped (npmpi/runfile/opening.py); the machine may have less
        _error("out of memory: this machine has too little free memory for these files' analysis")
        return 1
    except Exception as exc:  # never a traceback: one line a user can report
        _error(f"internal error, please report: {type(exc).__name__}: {exc}")
        return 1


def _analyse_files(args, labels: list[str]) -> tuple[int, list]:
    """Each run file's analysis (one per series of a file its kind splits), its problems said; the
    count of files or series that gave nothing, and the analyses."""
    from npmpi_analysis.numbers.analyse import analyse_run
    from npmpi_analysis.numbers.kinds import series
    from npmpi_analysis.report import summarise_alike

    failed = 0
    analyses = []
    for path, label in zip(args.runs, labels, strict=True):
        try:
            run, load_problems = load(path)
        except RunFileError as exc:
            _error(str(exc))
            failed += 1
            continue
        found: list[str] = []  # the file's series' problems: said once, with its first series
        parts = series(run, label, found)  # a file its kind splits (coll: each op at each rank count)
        if not parts:
            for problem in summarise_alike(load_problems + found):
                _error(problem)
            failed += 1
        for k, (part, name) in enumerate(parts):
            a = analyse_run(part, name, args.meter_delay, args.model_options)
            a.problems[:0] = load_problems + (found if k == 0 else [])
            for problem in summarise_alike(a.problems):
                _error(problem)
            if a.sizes == 0:
                failed += 1
                continue
            analyses.append(a)
        del run
    return failed, analyses


def _main(argv: list[str] | None) -> int:
    from npmpi_analysis.numbers.analyse import run_label
    from npmpi_analysis.outfiles import check_free, write_atomic

    args = build_parser().parse_args(argv)
    if args.meter_delay is not None and not (math.isfinite(args.meter_delay) and args.meter_delay >= 0):
        raise UsageError(f"--meter-delay {args.meter_delay}: give a delay of 0 seconds or more")
    args.model_options = _model_options(args)
    _safe_streams()
    taken: set[str] = set()
    labels = [run_label(p.name, taken) for p in args.runs]
    if args.compare_csv is not None and len(args.runs) < 2:
        raise UsageError("--compare-csv compares several runs: give two run files or more")
    files = [f for f in (args.csv, args.json, args.compare_csv, args.report, args.model_csv) if f is not None]
    np_out = _checked_names(args, labels)
    outputs = files + np_out
    resolved = [_real(p) for p in outputs]
    if len(set(resolved)) < len(resolved):
        raise UsageError("two outputs have the same file name")
    for p in args.runs:
        if _real(p) in resolved:
            raise UsageError(f"{p} is both a run file and an output")
    if args.plots is not None and args.plots.exists() and not args.plots.is_dir():
        raise UsageError(f"--plots {args.plots}: exists and is not a directory")
    for p in outputs:
        check_free(p, args.force, args.plots)
    if args.trend:  # one system's series
        from npmpi_analysis.numbers.kinds import command

        trend_cli = command("trend")
        trend_cli.check_usage(args)
        return trend_cli.run(args, labels, _say, _error)
    from npmpi_analysis.numbers.kinds import file_kind, own_analysis

    kinds = [file_kind(p) for p in args.runs]
    kind, own = own_analysis(kinds)
    if own is not None:  # a kind with an analysis of its own (a map): same options
        own.check_usage(args, [k == kind for k in kinds])
        return own.run(args, labels, ANALYSED_SAMPLE_FIELDS, _say, _error)

    failed, analyses = _analyse_files(args, labels)
    if not analyses:
        return 1
    from npmpi_analysis.numbers.ladder import relabel

    relabel(analyses)  # runs of several protocols are named by protocol (the ladder)
    problems = [p for a in analyses for p in a.problems]

    unprinted = _print_unless_quiet(args, analyses)
    plots = []
    if args.plots is not None or args.report is not None:
        from npmpi_analysis.figures.run import all_plots

        plots = all_plots(analyses)
    plot_files = []
    if args.plots is not None:
        plot_files = [args.plots / f"{p.name}.{args.format}" for p in plots]
        if args.plots.is_dir():
            for f in plot_files:
                check_free(f, args.force)
    _write_outputs(args, analyses, labels, plots, plot_files, np_out, problems, write_atomic)
    if unprinted is not None:
        raise unprinted
    return 1 if (failed or problems) else 0


def _print_unless_quiet(args, analyses):
    """Print the tables and summaries (not with -q); returns the StdoutError of a standard output
    that could not be written (a full disk), raised once the outputs are written."""
    from npmpi.core.stdio import StdoutError

    if args.quiet:
        return None
    try:
        _print_text(analyses)
    except BrokenPipeError:  # `| head`: stop printing, still write the outputs
        _silence_stdout()
        args.quiet = True
    except StdoutError as exc:  # a full disk: still write the outputs, then say so
        _silence_stdout()
        args.quiet = True
        return exc
    return None


def _checked_names(args, labels: list[str]) -> list[Path]:
    """UsageError for an output name the file system would refuse (npmpi_analysis.outfiles.check_name),
    before any work; returns the np.out files' names."""
    from npmpi_analysis.outfiles import check_name

    named = {
        "--csv": args.csv,
        "--json": args.json,
        "--compare-csv": args.compare_csv,
        "--model-csv": args.model_csv,
    }
    named.update({"--report": args.report, "--np-out": args.np_out, "--plots": args.plots})
    for what, path in named.items():
        if path is not None:
            check_name(path, what, directory=what == "--plots")
    np_out = _np_out_paths(args.np_out, labels) if args.np_out else []
    for path in np_out:
        check_name(path, "--np-out")
    return np_out


def _model_options(args):
    """The model's options from the command line; UsageError for a value that is not one."""
    from npmpi.core.units import parse_size_bytes
    from npmpi_analysis.numbers.model_summary import ModelOptions

    if not 10 <= args.model_resamples <= 100_000:
        raise UsageError(f"--model-resamples {args.model_resamples}: give 10 to 100000 resamples")
    if not 0 <= args.model_seed < 2**63:
        raise UsageError(f"--model-seed {args.model_seed}: give a seed from 0 to 2^63 - 1")
    breaks = None
    if args.model_breaks is not None:
        try:
            breaks = [parse_size_bytes(part.strip()) for part in args.model_breaks.split(",")]
        except ValueError as exc:
            raise UsageError(f"--model-breaks {args.model_breaks!r}: {exc}") from None
        if not breaks or any(b < 1 for b in breaks):
            raise UsageError(f"--model-breaks {args.model_breaks!r}: give message sizes of 1 B or more")
    return ModelOptions(breaks, args.model_resamples, args.model_seed)


def _real(p: Path) -> str:
    """The path with links resolved as far as they go (a link loop stays as it is: load says why)."""
    return os.path.realpath(p)


def _silence_stdout() -> None:
    """After a broken pipe: send the rest of stdout nowhere, so exit does not complain either."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def _safe_streams() -> None:
    """Printing ±, σ and µ must not fail on a terminal that cannot encode them."""
    for stream in (sys.stdout, sys.stderr):
        try:
            "±σµ".encode(stream.encoding or "ascii")
        except (UnicodeEncodeError, LookupError):
            reconfigure = getattr(stream, "reconfigure", None)
            if reconfigure:
                reconfigure(errors="replace")


def _print_text(analyses) -> None:
    from npmpi_analysis import report
    from npmpi_analysis.model_report import model_lines
    from npmpi_analysis.numbers import kinds

    rule = "-" * min(shutil.get_terminal_size((120, 24)).columns, 100)
    files = report.by_file(analyses)
    whole = ""
    for series in files:
        whole = kinds.file_text(series, report.render_table)  # a kind's own report of a file (coll)
        if whole:
            _say(whole)
            _say(rule if len(files) > 1 else "")
            continue
        for a in series:
            _say(report.size_table(a))
            _say("")
            own = kinds.text(a, report.render_table)  # a table the kind adds (the ring's of the tests)
            if own:
                _say(own)
                _say("")
            _say(report.summary_text(a))
            _say("\n".join(model_lines(a, report.render_table)))
            _say(rule if len(analyses) > 1 else "")
    if len(analyses) > 1:
        from npmpi_analysis.numbers.kinds import lines
        from npmpi_analysis.numbers.size_comparison import common_sizes, comparison_blocks

        if lines(analyses):
            _say("\n".join(lines(analyses)) + "\n")
        if len(files) == 1 and whole:
            return  # one file's series: its own table of them is the comparison

        _say(report.comparison_text(analyses))
        if not common_sizes(analyses):  # a barrier's 0 B beside the others' sizes: nothing shared
            return
        _say("\nper message size (sizes every run measured; ratios to the first run):")
        for k, (_title, headers, rows) in enumerate(comparison_blocks(analyses)):
            _say(("\n" if k else "") + report.render_table(headers, rows))
        from npmpi_analysis.numbers.verdicts import summary_lines

        _say("\n" + "\n".join(summary_lines(analyses, common_sizes(analyses))))


def _write_outputs(args, analyses, labels, plots, plot_files, np_out, problems, write_atomic) -> None:
    from npmpi_analysis import report
    from npmpi_analysis.outfiles import make_plots_dir

    written = []
    if args.plots is not None:
        make_plots_dir(args.plots)
    if args.csv:
        write_atomic(args.csv, report.csv_bytes(analyses), args.force)
        written.append(str(args.csv))
    if args.json:
        write_atomic(args.json, report.json_bytes(analyses), args.force)
        written.append(str(args.json))
    if args.model_csv:
        from npmpi_analysis.model_report import model_csv_bytes

        write_atomic(args.model_csv, model_csv_bytes(analyses), args.force)
        written.append(str(args.model_csv))
    if args.compare_csv and len(analyses) > 1:
        from npmpi_analysis.numbers.size_comparison import comparison_csv_bytes

        write_atomic(args.compare_csv, comparison_csv_bytes(analyses), args.force)
        written.append(str(args.compare_csv))
    if np_out:  # named after the files (checked free before the analysis), whatever the runs' labels
        from npmpi_analysis.np_out import np_out_bytes

        by_path = {a.path: a for a in analyses}
        for run_path, path in zip(args.runs, np_out, strict=True):
            if str(run_path) in by_path:
                write_atomic(path, np_out_bytes(by_path[str(run_path)]), args.force)
                written.append(str(path))
    from npmpi_analysis.figures.render import write_figures
    from npmpi_analysis.html_report import html_report
    from npmpi_analysis.report import summarise_alike

    files = dict(zip((p.name for p in plots), plot_files, strict=True)) if args.plots is not None else None
    count, figures, skipped = write_figures(
        plots, args.format, files, args.force, args.report is not None, write_atomic
    )
    if count:
        written.append(f"{count} figure(s) in {args.plots}/")
    if args.report is not None:
        shown = summarise_alike(problems) + skipped
        write_atomic(args.report, html_report(analyses, figures, shown), args.force)
        written.append(str(args.report))
    for note in skipped:
        _say(f"{PROG}: note: {note}", sys.stderr)
    if written and not args.quiet:
        _say("wrote " + ", ".join(written))
