"""What an analysis says beside its numbers, carried as one value through the functions that find it:
notices (what a reader should know: a baseline that could not be used, a machine counted once, a
meter without a clock offset) and problems (what could not be analysed: said on stderr, and the exit
status is 1). A run's and a power part's lists are its two fields (RunAnalysis.notices, .problems)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Said:
    notices: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def notice(self, line: str) -> None:
        self.notices.append(line)

    def problem(self, line: str) -> None:
        self.problems.append(line)
