"""Print the corpus metrics in pytest's terminal summary (visible without ``-s``)."""

from __future__ import annotations

from typing import Any

#: Attribute of the pytest config where the corpus test leaves its report lines.
REPORT_ATTR = "compaction_gate_corpus_report"


def pytest_terminal_summary(terminalreporter: Any) -> None:
    lines = getattr(terminalreporter.config, REPORT_ATTR, None)
    if lines:
        terminalreporter.section("compaction-gate corpus")
        for line in lines:
            terminalreporter.write_line(line)
