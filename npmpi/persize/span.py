"""A measuring rank's span over a size's trials: its CPU time (npmpi/persize/cputime.py) and the
conditions it ran under (npmpi/conditions/span.py), read around the trials and between them, never
inside a timed loop. Started before the first trial, `lap` after each, `stop` after the last; a member
sends both to rank 0 after its result (CPU_TAG, then COND_TAG), rank 0 puts everyone's in the row.

The conditions are read before the CPU span starts and after it stops, so their reading (a few dozen
sysfs files) is not in the CPU figures. A failure to read them is a recorded unknown, never the end
of the run. `CondReading` is the conditions' part alone: a map's pair sides read it the same way
around their part of a pair's trials (npmpi/map/pair.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from npmpi.conditions.span import ConditionSpan
from npmpi.core.messages import COND_TAG
from npmpi.core.safetext import shown
from npmpi.persize.cputime import CpuSpan
from npmpi.runfile.format import COND_DATASETS


@dataclass
class SpanFigures:
    """What one rank measured over a size: CPU_DATASETS' and COND_DATASETS' values, and its text."""

    cpu: np.ndarray
    cond: np.ndarray
    info: dict


def _unknown(exc: BaseException) -> tuple[np.ndarray, dict]:
    return not_measured(
        f"unknown, because reading the conditions failed: {shown(str(exc) or type(exc).__name__)}"
    )


class CondReading:
    """The conditions alone over a part's trials: start before the first trial, `lap` after each,
    `stop` after the last (a map's pair side, npmpi/map/pair.py; the conditions part of TrialSpan).
    A reader's failure is a recorded unknown with its reason, never the end of the measurement."""

    def __init__(self) -> None:
        self.failed: BaseException | None = None
        try:
            self.cond: ConditionSpan | None = ConditionSpan()
        except Exception as exc:  # a reader's surprise: the size is measured, its conditions unknown
            self.cond, self.failed = None, exc

    def lap(self, value=None):
        """After a trial (returns `value`: it wraps a trial's result)."""
        if self.cond is not None:
            try:
                self.cond.lap()
            except Exception as exc:
                self.cond, self.failed = None, exc
        return value

    def stop(self) -> tuple[np.ndarray, dict]:
        """(COND_DATASETS' values, the rank's text)."""
        if self.cond is None:
            return _unknown(self.failed or RuntimeError("no span"))
        try:
            return self.cond.stop()
        except Exception as exc:
            return _unknown(exc)


def not_measured(why: str) -> tuple[np.ndarray, dict]:
    """The values and text of a part whose trials never ran (a stop before the first)."""
    return np.full(len(COND_DATASETS), math.nan), {"cpu_freq_source": "unknown", "cpu_freq_reason": why}


class TrialSpan:
    """CPU time and conditions over one size's trials."""

    def __init__(self) -> None:
        self.reading = CondReading()  # read before the CPU span starts and after it stops
        self.cpu = CpuSpan()

    def lap(self, value=None):
        """After a trial (returns `value`: it wraps a trial's result)."""
        return self.reading.lap(value)

    def stop(self) -> SpanFigures:
        cpu = self.cpu.stop()
        return SpanFigures(cpu, *self.reading.stop())


def send(comm, figures: SpanFigures) -> None:
    """A member's conditions to rank 0, after its CPU time."""
    comm.send((figures.cond.tolist(), figures.info), 0, COND_TAG)


def receive(comm, ranks: list[int]) -> list[tuple[list[float], dict]]:
    """Each member's conditions (rank 0's side); anything malformed read as unknown."""
    out = []
    for rank in ranks:
        got = comm.recv(source=rank, tag=COND_TAG)
        out.append(got if is_side(got) else ([math.nan] * len(COND_DATASETS), {}))
    return out


def is_side(got) -> bool:
    """Whether `got` is one side's (values, text) as CondReading gives them: COND_DATASETS' numbers
    and a dict."""
    try:
        values, text = got
        numbers = all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in values)
        return isinstance(text, dict) and len(values) == len(COND_DATASETS) and numbers
    except (TypeError, ValueError):
        return False


def row_fields(ranks: list[int], own: SpanFigures, others: list[tuple[list[float], dict]]) -> dict:
    """SizeResult's condition fields: per COND_DATASETS name one value per rank, and each rank's text."""
    rows = [(own.cond.tolist(), own.info), *others]
    return {
        "conditions": {name: [float(v[i]) for v, _ in rows] for i, name in enumerate(COND_DATASETS)},
        "condition_info": [dict(info, rank=rank) for rank, (_, info) in zip(ranks, rows, strict=True)],
    }
