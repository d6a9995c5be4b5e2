"""Rank 0's recording of every kind (a run, a map, a group kind), its sequence written once.

writer -> stop-signal hooks -> console -> power set-up (groups, offsets, baseline before, calibration)
-> stall watchdog around the measurement -> final power (baseline after, last samples, offsets) ->
what the kind adds -> every rank released and its end reported -> the file finished -> the console's
last lines -> the job ended with MPI_Abort if a power rank was given up on.

A kind gives its writer and measuring side (`_open`), its first lines (`_announce`), its watchdog and
measurement (`_watchdog`, `_measure`) and, where it differs, its closing steps; any failure on the way
is `FileRecording`'s end (npmpi/commands/filerecording.py): the file closed with its status, every
completed size or round kept, the other ranks released or the job aborted.
"""

from __future__ import annotations

import contextlib
import time
from abc import abstractmethod
from typing import Any

from npmpi.commands.filerecording import FileRecording, now_utc
from npmpi.power.recording import PowerSession, final_power, power_setup


class RecordingSequence(FileRecording):
    """Rank 0 from its file's creation to its close, in the one sequence of every kind. A subclass
    sets, besides FileRecording's, `opts`, `console`, `stop`, `power_nodes` and `calibration`, and
    gives `_open`, `_announce`, `_watchdog`, `_measure` and `_measurer`."""

    opts: Any = None
    console: Any = None
    stop: Any = None  # npmpi.core.messages.StopFlag
    power_nodes: list[dict]  # each power rank's meters (npmpi.power.nodemeters), in node order
    calibration: dict | None = None
    power: PowerSession | None = None  # once the power groups are created (None: no power ranks)

    def _record(self) -> int:
        self._open()
        self.stop.mark_file = self.mark_file
        if self._abandons():  # a trial in one C call: the handlers wait for its end (the signal thread)
            self.stop.abandon = self.abandon
        self._announce()
        if self.collector is not None:
            self.power = PowerSession(
                self.writer,
                self.collector,
                self.layout,
                self.power_nodes,
                self.opts,
                self.calibration,
                self.console,
                self.stop,
            )
            power_setup(self.power)
        with self._watchdog():
            outcome = self._measure()
        if self.power is not None:
            final_power(self.power, outcome)
        self._closing(outcome)
        # every rank released and its end reported before the file says how the recording ended: a
        # rank stopped now is named, the file failed (RankStalled), not a job hung in MPI_Finalize
        self._release_all(outcome.exit_code)
        elapsed = time.monotonic() - self.started
        self.writer.finish(
            outcome.status,
            outcome.message,
            **self._finish_attrs(outcome),
            elapsed_s=elapsed,
            finished_utc=now_utc(),
        )
        self._report(outcome, elapsed)
        kept = self._kept_at_end(outcome)
        if self.collector is not None:
            self.collector.end_job_if_lost(outcome.exit_code, outcome.message + kept)
        self._last_word(outcome, kept)
        return outcome.exit_code

    @abstractmethod
    def _open(self) -> None:
        """The measuring side and the file's writer, created."""

    @abstractmethod
    def _announce(self) -> None:
        """The recording's first lines on the console (before the power's)."""

    @abstractmethod
    def _watchdog(self):
        """Rank 0's stall watchdog around the measurement (npmpi/persize/watchdog.py), its bound's rule
        stored in the file."""

    @abstractmethod
    def _measure(self):
        """Every size (or round) measured, each written as it comes; the outcome (status, message,
        exit_code)."""

    @abstractmethod
    def _measurer(self):
        """The measuring side (a run's transmitter, a coordinator), None before `_open` made it: its
        `progress` (the stall watchdog's) and `release(code)`."""

    def _abandons(self) -> bool:
        """Whether a step can be one C call that never returns to Python before its end, so that a
        stop signal's thread (npmpi.core.signals.watch_signals_in_a_thread) marks the file and abandons
        the trial; it acts only when the main thread has not answered and is inside a timed step."""
        return self.opts.kernel == "c"

    def _closing(self, outcome) -> None:
        """What the kind records after the final power, before the other ranks are released."""

    def _finish_attrs(self, outcome) -> dict[str, Any]:
        """The kind's own attributes of the file's end, besides status, message and times."""
        return {}

    def _report(self, outcome, elapsed_s: float) -> None:
        """The console's last lines."""
        self.console.summary(outcome, self.output, elapsed_s, self.collector)

    def _kept_at_end(self, outcome) -> str:
        """What the file keeps, for the line of a job ended without a power rank."""
        return self._kept()

    def _last_word(self, outcome, kept: str) -> None:
        """What the kind says last (nothing by default)."""

    def mark_file(self, message: str) -> None:
        """Mark the file interrupted at once (a stop signal; mpirun may kill the job any moment)."""
        with contextlib.suppress(Exception), self._watched().lock:  # never fail the stop
            self.writer.mark_soon({"status": "interrupted", "status_message": message})

    def _watched(self):
        measurer = self._measurer()
        return measurer.progress if measurer is not None else None

    def _quiet(self) -> bool:
        return self._measurer() is not None and not self.stop.timing

    def _release(self, code: int) -> bool:
        measurer = self._measurer()
        return measurer is not None and measurer.release(code)

    def _kept(self) -> str:
        return f"; {self.writer.rows} completed sizes are in {self.output}"
