"""Rank 0's side of a coll run: every series (npmpi/coll/series.py) in turn, each size as a group
kind's (npmpi/kinds/group.py), on the first N measuring ranks of the series.

The members of a series receive its sizes' commands, with the series' index (they select its op and
sub-communicator); the other members wait for rank 0's next command, taking no part. Each row is
stored with its series' index (/pingpong/coll_series) and with every member's place in the per-member
datasets (NaN for a member not in the series), so a row's columns always name the same ranks.
"""

from __future__ import annotations

import math

from npmpi.coll.series import Series, osu_counts
from npmpi.core import sampling
from npmpi.kinds.group import GroupCoordinator, GroupOutcome
from npmpi.persize.driver import SizeDriver
from npmpi.runfile.format import CPU_DATASETS


class CollCoordinator(GroupCoordinator):
    """GroupCoordinator over the series; `recording` is rank 0's GroupRecording."""

    def __init__(self, recording, step, series: list[Series]) -> None:
        r = recording
        members = sorted(r.layout.groups[0])  # the group communicator's order: world ranks
        super().__init__(r.comm, members, step, r.opts, r.stop, r.on_row)
        self.all_members, self.all_idle = list(members), list(self.idle)
        self.plan, self.console = series, r.console
        self.osu = r.opts.extra.iterations == "osu"

    def enter(self, index: int, series: Series) -> None:
        """Series `index` from its first size: its members, the others idle until the next."""
        self.series = index
        self.step.select(index)
        self.members = self.all_members[: series.ranks]
        self.others = self.members[1:]
        self.idle = self.all_idle + self.all_members[series.ranks :]
        self.driver = SizeDriver(self.comm, self.others, self.others, self.progress, self.stop)
        self.watched = self.others[0]
        if self.watchdog is not None:  # inside a step rank 0 waits for this series' members only
            self.watchdog.group = tuple(self.members)
        self.console.factor = series.table_row()["algbw_bytes_factor"]
        if len(self.plan) > 1:
            self.console.note(f"{series.op} on {series.ranks} ranks: {len(series.sizes)} sizes")

    def size_iterations(self, size: int, prev_s: float) -> int:
        if self.osu:
            return osu_counts(size)[0]
        return self._iterations(prev_s)  # --repeats, or from the last size's (or the probe's) time

    def rate_before(self, size: int, prev_s: float) -> float | None:
        return prev_s if self.osu else super().rate_before(size, prev_s)  # OSU's counts need no probe

    def run(self) -> GroupOutcome:
        """Every series' sizes until done or stopped."""
        outcome = GroupOutcome()
        abandoned = False
        counts = [len(s.sizes) for s in self.plan]
        shuffled = self.opts.size_order == sampling.ORDER_RANDOM and not self.osu
        for index, series in enumerate(self.plan):
            if self.stop or abandoned:
                break
            self.enter(index, series)
            prev_s = 0.0
            measured: dict[int, float] = {}  # --order random: each measured size's time per step
            for size in self.ordered(series.sizes, index, counts):
                if self.stop:
                    break
                # a series' first size (or, random, one with no measured size near): a probe first
                rate = self.rate_near(size, measured) if shuffled else self.rate_before(size, prev_s)
                if rate is None:
                    abandoned = True
                    break
                iterations = self.size_iterations(size, rate)
                row = self.measure_size(size, iterations)
                if row is None:
                    abandoned = True
                    break
                self.spread(row, index)
                self.on_row(len(outcome.rows), row)
                outcome.rows.append(row)
                prev_s = measured[size] = min(row.trial_s) / iterations
        if self.stop:
            self.stop.mark_interrupted(outcome, f"; stopped after {len(outcome.rows)} sizes")
        return outcome

    def spread(self, row, index: int) -> None:
        """The row's series, and its CPU figures and conditions in every member's place (NaN: not in
        the series)."""
        row.row_columns = {**(row.row_columns or {}), "coll_series": index}
        if row.cpu_ranks is None:
            return
        where = {rank: i for i, rank in enumerate(row.cpu_ranks)}

        def placed(values) -> list[float]:
            values = values or []
            return [
                values[where[r]] if r in where and where[r] < len(values) else math.nan
                for r in self.all_members
            ]

        for name in CPU_DATASETS:
            setattr(row, name, placed(getattr(row, name)))
        if row.conditions is not None:
            row.conditions = {name: placed(values) for name, values in row.conditions.items()}
        row.cpu_ranks = list(self.all_members)
