"""The analysis's one registry of kinds: which analysis a file gets, and what a kind adds to it.

A file's kind is its root attribute `kind` (format 1.8: "run", "map", or a registered kind's name);
a file from before 1.8 is a map when it holds a /map group, else a run. Every kind's /pingpong rows
are analysed as a run's are (bandwidth, latency, power and energy per bit from the rows and the root
attributes bytes_per_iteration_factor and one_way_divisor: docs/file-format.md), so a kind that adds
nothing needs no entry here. A kind that does is one `KindAnalysis` value, named here as
"module:attribute" and imported only when a file of that kind is analysed (as the measuring side's
registry, npmpi/kinds/__init__.py):

- a kind with an analysis of its own (the map) gives `own`: a module with check_usage(args, kinds),
  run(args, labels, sample_fields, say, error) and api_fields(path, label, meter_delay_s) (the
  fields of npmpi_analysis.api.RunData);
- a kind whose rows are a run's, with numbers of its own (coll), gives `rows`: a module with any of
  series(run, label, problems) (the file as one (run, label) per series); ranks_moving(attrs) (how
  many ranks' bits one row's bandwidth stands for when energy is divided by bits); figures(run, bw,
  power) (its numbers: an object with summary() and size_columns(k), None for a run it adds nothing
  to); text(a, render_table) and html(a, html_table, escape) (a table it adds to a run's report);
  file_text(series, render_table) and file_html(series, html_table, escape) (its own report of a
  file's analyses, in place of a run's); plots(runs);
  comparison_figures() (its figures of several runs side by side, numbers/size_comparison.Figure);
  json_extras(analyses) and lines(analyses) (what it says of several runs together); and
  measurement(attrs) (what a file measures, in words, for a series of runs).

Kinds from elsewhere join by name: the `npmpi_analysis.numbers.kinds` entry-point group of an installed
package, or NPMPI_ANALYSIS_KINDS="NAME=module:attribute,…" in the environment.
docs/architecture.md, "Adding a benchmark kind".
"""

from __future__ import annotations

import importlib
import os
import re
from dataclasses import dataclass
from pathlib import Path

RUN = "run"
BUILTIN_KINDS = {"map": "npmpi_analysis.map.cli:KIND", "coll": "npmpi_analysis.coll.kind:KIND"}
# analyses of several files that are no kind's: npmpi-analyze --trend (a module with check_usage, run)
COMMANDS = {"trend": "npmpi_analysis.trend.cli"}
KINDS_ENV = "NPMPI_ANALYSIS_KINDS"
ENTRY_POINT_GROUP = "npmpi_analysis.numbers.kinds"
_NAME = re.compile(r"[a-z][a-z0-9_-]{0,31}")
_TARGET = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*")


@dataclass(frozen=True)
class KindAnalysis:
    """What one kind adds to the analysis, or replaces: the modules that do it, by name."""

    name: str
    own: str | None = None  # a module with an analysis of its own, the rows' not read
    rows: str | None = None  # a module adding its numbers to the rows' analysis
    series: bool = True  # its files can be a series of one system (--trend)
    words: str = ""  # a file of the kind, in words ("a cluster map"; default "a KIND file")
    # a file of several series, in words, and the files a series of runs takes instead
    several: tuple[str, str] = ("series", "files of one series each")


def _registered() -> dict[str, str]:
    """Every kind's "module:attribute": the built-in ones, installed packages', the environment's."""
    out = dict(BUILTIN_KINDS)
    try:
        from importlib.metadata import entry_points

        for ep in entry_points(group=ENTRY_POINT_GROUP):
            out.setdefault(ep.name, ep.value)
    except Exception:  # a broken installed distribution must not stop the analysis of a run
        pass
    for item in filter(None, (part.strip() for part in os.environ.get(KINDS_ENV, "").split(","))):
        name, _, target = item.partition("=")
        if _NAME.fullmatch(name) and _TARGET.fullmatch(target):
            out[name] = target
    return out


_LOADED: dict[str, KindAnalysis | None] = {}


def analysis_of(kind: str) -> KindAnalysis | None:
    """The registered analysis of `kind`, None for a kind that adds nothing (a run's rows only).
    A registration that cannot be imported is taken as nothing added: the rows are still analysed."""
    if kind not in _LOADED:
        target = _registered().get(kind)
        value = None
        if target is not None:
            module, _, attr = target.partition(":")
            try:
                value = getattr(importlib.import_module(module), attr)
            except (ImportError, AttributeError):
                if kind in BUILTIN_KINDS:
                    raise
                value = None
        _LOADED[kind] = value if isinstance(value, KindAnalysis) else None
    return _LOADED[kind]


def _module(name: str | None):
    return importlib.import_module(name) if name else None


def own_analysis(kinds: list[str]):
    """(kind, its module) for the first kind among `kinds` that has an analysis of its own, else
    (None, None): the rows' analysis."""
    for kind in kinds:
        found = analysis_of(kind)
        if found is not None and found.own:
            return kind, _module(found.own)
    return None, None


def rows_hook(attrs: dict, name: str):
    """The function `name` of the rows module of the kind in `attrs`, None when it gives none."""
    found = analysis_of(str(attrs.get("kind", "")))
    module = _module(found.rows) if found is not None else None
    return getattr(module, name, None)


def series(run, label: str, problems: list[str]) -> list[tuple]:
    """The file as one (run, label) per series its kind makes of it; the file itself by default."""
    split = rows_hook(run.attrs, "series")
    return split(run, label, problems) if split is not None else [(run, label)]


def ranks_moving(attrs: dict) -> float:
    """How many ranks' bits one row's bandwidth stands for when energy is divided by bits: 1 for a
    run, whose bandwidth already counts both directions of every pair."""
    count = rows_hook(attrs, "ranks_moving")
    return count(attrs) if count is not None else 1.0


def figures(run, bw, power):
    """The kind's own numbers of an analysed run (None: it adds none)."""
    make = rows_hook(run.attrs, "figures")
    return make(run, bw, power) if make is not None else None


def measurement(attrs: dict, kind: str) -> str:
    """What a file measures, in words (a series of runs is of one measurement)."""
    words = rows_hook(attrs, "measurement")
    if words is not None:
        return words(attrs)
    found = analysis_of(kind)
    if found is not None and found.words:
        return found.words
    return "a ping-pong run" if kind == RUN else f"a {kind} file"


def several_words(kind: str) -> tuple[str, str]:
    """(a file of several series, in words; the files a series of runs takes instead)."""
    found = analysis_of(kind)
    return found.several if found is not None else KindAnalysis(kind).several


def text(a, render_table) -> str:
    """The console's block of the kind's own table of an analysed run ("" when it has none)."""
    block = rows_hook(a.attrs, "text")
    return block(a, render_table) if block is not None else ""


def file_text(series, render_table) -> str:
    """The console's whole report of one file's analyses (its series), when its kind gives its own
    ("" when it does not: each analysis is reported as a run's)."""
    whole = rows_hook(series[0].attrs, "file_text") if series else None
    return whole(series, render_table) if whole is not None else ""


def file_html(series, html_table, escape) -> str:
    """The HTML report's summary of one file's analyses when its kind gives its own ("" if not)."""
    whole = rows_hook(series[0].attrs, "file_html") if series else None
    return whole(series, html_table, escape) if whole is not None else ""


def html(a, html_table, escape) -> str:
    """The HTML report's block of the kind's own table of an analysed run ("" when it has none)."""
    block = rows_hook(a.attrs, "html")
    return block(a, html_table, escape) if block is not None else ""


def can_be_series(kind: str) -> bool:
    found = analysis_of(kind)
    return found is None or found.series


def _present(analyses) -> list:
    """The rows modules of the kinds among `analyses`, each once, in the analyses' order."""
    out: list = []
    for a in analyses:
        found = analysis_of(str(a.attrs.get("kind", "")))
        module = _module(found.rows) if found is not None else None
        if module is not None and module not in out:
            out.append(module)
    return out


def plots(runs) -> list:
    """The figures the kinds among `runs` add (their lists of Plot or None)."""
    return [p for m in _present(runs) if hasattr(m, "plots") for p in m.plots(runs)]


def json_extras(analyses) -> dict:
    """What the kinds among `analyses` add to the JSON's top level."""
    out: dict = {}
    for m in _present(analyses):
        out.update(m.json_extras(analyses) if hasattr(m, "json_extras") else {})
    return out


def comparison_figures(analyses) -> list:
    """The per-size figures (numbers/size_comparison.Figure) the kinds among `analyses` add."""
    return [f for m in _present(analyses) if hasattr(m, "comparison_figures") for f in m.comparison_figures()]


def lines(analyses) -> list[str]:
    """The console's lines the kinds among several analyses add before their comparison."""
    return [line for m in _present(analyses) if hasattr(m, "lines") for line in m.lines(analyses)]


def command(name: str):
    """The module of an analysis of several files named in COMMANDS (`--trend`: one system's series)."""
    return importlib.import_module(COMMANDS[name])


def file_kind(path: Path) -> str:
    """The kind of the file at `path`; "run" for anything unreadable (the run reader then says what
    is wrong with it)."""
    import h5py

    from npmpi.runfile.format import KIND_MAP

    try:
        if not Path(path).is_file() or not h5py.is_hdf5(path):
            return RUN
        with h5py.File(path, "r", locking=False) as f:
            kind = f.attrs.get("kind")
            if isinstance(kind, bytes):
                kind = kind.decode("utf-8", "replace")
            if isinstance(kind, str) and kind.strip():
                return kind.strip()
            return KIND_MAP if isinstance(f.get(KIND_MAP, getlink=True), h5py.HardLink) else RUN
    except (OSError, ValueError, RuntimeError, TypeError, KeyError):
        return RUN
