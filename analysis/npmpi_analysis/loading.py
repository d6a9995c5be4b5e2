"""Reading a run file for the analysis: every sample field the analysis uses, text attributes as
printable lines, and a file whose power part is broken still read for its bandwidth and latency."""

from __future__ import annotations

import tempfile
from pathlib import Path

from npmpi.core.errors import RunFileError

# the per-sample datasets the analysis uses: energy only of counter channels (RAPL, NVML energy),
# volts and amps never (half the memory)
ANALYSED_SAMPLE_FIELDS = (
    "time_unix_s",
    "power_w",
    "energy_j_of_counters",  # npmpi.runfile.format.ENERGY_OF_COUNTERS
    "open_epoch",  # the format 1.6 fields the analysis uses: npmpi.runfile.format.OPTIONAL_SAMPLE_FIELDS
    "request_start_unix_s",
    "request_end_unix_s",
)


def _copy_without_power(src: Path, dst: Path) -> None:
    import h5py

    with h5py.File(src, "r") as f, h5py.File(dst, "w") as g:
        for k in f.attrs:
            g.attrs[k] = f.attrs[k]
        for name in ("layout", "pingpong"):
            if name in f:
                f.copy(f[name], g, name=name)


def load(path: Path):
    """load_run, then every text root attribute as one bounded printable line (npmpi.core.safetext:
    a newline in a forged `command_line` is shown as \\x0a, never as a line or an HTML row of its
    own), plus: a file whose power part is broken still gives its bandwidth and latency.

    Returns (run, problems); RunFileError when nothing can be read.
    """
    from npmpi.core.safetext import shown_attrs
    from npmpi.runfile.format import JSON_ATTRS

    run, problems = _load(path)
    run.attrs = shown_attrs(run.attrs, JSON_ATTRS)
    run.notices.extend(status_notices(run.attrs))
    return run, problems


def status_notices(attrs: dict) -> list[str]:
    """A notice for a root `status` no writer gives ('weird', '', 5, none): the reader's notices
    cover running, interrupted and failed; complete needs none."""
    from npmpi.core.safetext import shown
    from npmpi.runfile.format import STATUSES

    status = attrs.get("status")
    if isinstance(status, str) and status in STATUSES:
        return []
    said = "none" if status is None else repr(shown(status, 40))
    return [
        f"the file's status {said} is none a writer gives ({', '.join(STATUSES)}): whether the run "
        "finished is not known; every size in it is analysed"
    ]


def _load(path: Path):
    from npmpi.runfile.reader import load_run

    try:
        return load_run(path, ANALYSED_SAMPLE_FIELDS), []
    except RunFileError as exc:
        message = str(exc)
        if "/power" not in message:
            raise
    except (OSError, ValueError, KeyError, TypeError, RuntimeError) as exc:
        raise RunFileError(f"{path}: cannot be read ({exc}); the file may be truncated or corrupt") from None
    # the power part is broken: read the rest from a copy without it
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / path.name
        try:
            _copy_without_power(path, copy)
            run = load_run(copy, ANALYSED_SAMPLE_FIELDS)
        except (RunFileError, OSError, ValueError, KeyError, TypeError, RuntimeError):
            raise RunFileError(message) from None
    run.path = path
    run.notices = [n.replace(str(copy), str(path)) for n in run.notices]
    return run, [f"{message}; bandwidth and latency are analysed without power"]
