"""Keep a bench's printed results in a dated file of bench/results/, the files the docs quote.

A bench ends with `sys.exit(keep_results.run(main, "NAME"))`: what `main` prints still goes to
standard output and, when `main` returns 0 after measuring (not with --help or --report-from), is
also kept in bench/results/YYYY-MM-DD-NAME.txt (UTC date; -2, -3, ... for a later run the same day)
under the command that made it. Progress on standard error is not kept. NPMPI_BENCH_RESULTS=DIR
keeps them in DIR instead, NPMPI_BENCH_RESULTS= (empty) not at all.
"""

from __future__ import annotations

import io
import os
import shlex
import sys
import time
from collections.abc import Callable
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
NOT_MEASURING = {"-h", "--help", "--report-from"}


def results_dir() -> Path | None:
    """Where results are kept: NPMPI_BENCH_RESULTS when set (empty: nowhere), else bench/results/."""
    where = os.environ.get("NPMPI_BENCH_RESULTS")
    if where is None:
        return RESULTS
    return Path(where) if where else None


def save(name: str, text: str, argv: list[str]) -> Path | None:
    """Write `text` under the command line `python3 bench/NAME.py ARGV` to the day's file; its path."""
    where = results_dir()
    if where is None:
        return None
    where.mkdir(parents=True, exist_ok=True)
    day = time.strftime("%Y-%m-%d", time.gmtime())
    path, n = where / f"{day}-{name}.txt", 2
    while path.exists():
        path, n = where / f"{day}-{name}-{n}.txt", n + 1
    path.write_text(f"$ {shlex.join(['python3', f'bench/{name}.py', *argv])}\n{text.rstrip()}\n")
    return path


class _Tee(io.TextIOBase):
    """Standard output that also keeps what was written (flushed at once: a bench may exec itself)."""

    def __init__(self, out):
        self.out, self.kept = out, io.StringIO()

    def write(self, text: str) -> int:
        self.kept.write(text)
        n = self.out.write(text)
        self.out.flush()
        return n

    def flush(self) -> None:
        self.out.flush()


def run(main: Callable[[], int | None], name: str) -> int:
    """Run a bench's `main`, keeping what it printed when it measured and succeeded; main's status."""
    argv = sys.argv[1:]
    if NOT_MEASURING & {a.split("=", 1)[0] for a in argv}:
        return main() or 0
    real, tee = sys.stdout, _Tee(sys.stdout)
    sys.stdout = tee
    try:
        status = main() or 0
    finally:
        sys.stdout = real
    text = tee.kept.getvalue()
    if status == 0 and text.strip():
        kept = save(name, text, argv)
        if kept is not None:
            print(f"results kept in {kept}", file=sys.stderr)
    return status
