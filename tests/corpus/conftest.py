"""Print the corpus metrics in pytest's terminal summary (visible without ``-s``)."""

from __future__ import annotations

from typing import Any

#: Lines the corpus test leaves for the terminal summary.
REPORT: list[str] = []


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if REPORT:
        terminalreporter.section("compaction-gate corpus")
        for line in REPORT:
            terminalreporter.write_line(line)
