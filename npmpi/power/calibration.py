"""Calibration files (written by `python -m npmpi calibrate`, npmpi/calibrate/command.py): their format,
reading and checking one, and applying its meter delays in a run or a map.

A calibration file holds each node's meter delay measured under a known load; a run given
`--calibration FILE` copies the delays into its file, where npmpi-analyze applies them.
"""

from __future__ import annotations

from npmpi.core.errors import UsageError

CALIBRATION_FORMAT = "npmpi-calibration"
CALIBRATION_VERSION = 1
# a meter reports power seconds after it is drawn (2 ± 0.3 s for the Watts Up? of the 2009 paper, a
# BMC's rolling average up to tens of seconds); a delay of minutes is no meter, and every delay
# becomes a wait (the baseline after the sweep): the largest `calibrate --max-delay` searches
MAX_METER_DELAY_S = 60.0


def load_calibration(path: str) -> dict:
    """Read and check a calibration file (npmpi/core/inputfiles.py); UsageError says what is wrong with it."""
    from npmpi.core.inputfiles import parse_json, read_regular_file

    what = f"--calibration {path}"
    data = read_regular_file(path, what, UsageError)
    try:
        doc = parse_json(data, what, ValueError)
    except ValueError as exc:
        raise UsageError(
            f"{what}: not a readable calibration file ({str(exc).removeprefix(what + ': ')})"
        ) from None
    check_calibration(doc, what)
    return doc


def _calibration_match(usable: list[dict], host: str, desc: dict) -> dict | None:
    """The calibration result for one channel: matched by host and spec, else host and kind."""
    match = next((r for r in usable if r.get("host") == host and r.get("spec") == desc.get("spec")), None)
    return match or next(
        (r for r in usable if r.get("host") == host and r.get("kind") == desc.get("kind")), None
    )


def _usable_results(doc: dict) -> list[dict]:
    return [r for r in doc["results"] if isinstance(r, dict) and r.get("delay_s") is not None]


def largest_delay_s(doc: dict | None, layout, power_nodes: list[dict]) -> float:
    """The largest calibrated delay plus three times its uncertainty over this run's channels (0 if none)."""
    if doc is None:
        return 0.0
    usable = _usable_results(doc)
    worst = 0.0
    for node, info in enumerate(power_nodes):
        host = layout.hosts[layout.power_ranks[node]]
        for desc in info["channels"]:
            match = _calibration_match(usable, host, desc)
            if match is not None:
                delay = float(match["delay_s"]) + 3.0 * abs(float(match.get("uncertainty_s") or 0.0))
                worst = max(worst, delay)
    return worst


# (key, what it must be, may it be null?) of each entry of a calibration's results
_RESULT_FIELDS = (
    ("host", "a host name", False),
    ("spec", "a meter spec", True),
    ("kind", "a meter kind", True),
    ("delay_s", f"a meter delay in seconds from 0 to {MAX_METER_DELAY_S:g}", True),
    ("uncertainty_s", f"an uncertainty in seconds from 0 to {MAX_METER_DELAY_S:g}", True),
    ("quality", "a number from -1 to 1", True),
)


def _field_problem(key: str, value) -> bool:
    from npmpi.core.inputfiles import is_number

    if key in ("host", "spec", "kind"):
        return not isinstance(value, str)
    if key in ("delay_s", "uncertainty_s"):  # each becomes a wait: bounded by what a meter can be
        return not (is_number(value) and 0 <= value <= MAX_METER_DELAY_S)
    return not (is_number(value) and -1 <= value <= 1)


def check_calibration(doc, what: str) -> None:
    """The one place a calibration document's shape and types are checked: UsageError naming the
    first wrong field, so that a run never starts with a file it would fail on later."""
    if not isinstance(doc, dict) or doc.get("format") != CALIBRATION_FORMAT:
        raise UsageError(f"{what}: not an npmpi calibration file (write one with python -m npmpi calibrate)")
    version = doc.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise UsageError(
            f"{what}: version {version!r:.40} is not a whole number from 1 up; the file is damaged"
        )
    if version > CALIBRATION_VERSION:
        raise UsageError(f"{what}: written by a newer npmpi (version {version}); upgrade to read it")
    results = doc.get("results")
    if not isinstance(results, list):
        raise UsageError(f"{what}: has no results list")
    if not isinstance(doc.get("created_utc", ""), str):
        raise UsageError(f"{what}: created_utc is not text")
    for i, r in enumerate(results):
        if not isinstance(r, dict):
            raise UsageError(f"{what}: results[{i}] is not an object")
        for key, expected, nullable in _RESULT_FIELDS:
            value = r.get(key)
            if (value is None and nullable) or not _field_problem(key, value):
                continue
            raise UsageError(f"{what}: results[{i}].{key} is {value!r:.40}, expected {expected}")


def apply_calibration(writer, doc: dict, layout, power_nodes: list[dict], source: str) -> list[str]:
    """Store each channel's calibrated delay (matched by host and spec, else host and kind)."""
    notes = []
    usable = _usable_results(doc)
    for node, info in enumerate(power_nodes):
        host = layout.hosts[layout.power_ranks[node]]
        for channel, desc in enumerate(info["channels"]):
            match = _calibration_match(usable, host, desc)
            where = f"node {node} ({host}) {desc.get('spec')}"
            if match is None:
                notes.append(f"calibration: no delay for {where} in {source}; its delay is taken as 0")
                continue
            writer.set_group_attrs(
                f"power/node{node}/channel{channel}",
                meter_delay_s=float(match["delay_s"]),
                meter_delay_uncertainty_s=float(match.get("uncertainty_s") or 0.0),
                meter_delay_quality=float(match.get("quality") or 0.0),
                meter_delay_source=f"{source} ({doc.get('created_utc', '')})",
            )
            notes.append(f"calibration: {where} delay {match['delay_s']:.3f} s from {source}")
    writer.flush()
    return notes
