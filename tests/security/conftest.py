"""The abuse suite's session summary: how many examples each fuzzed decoder ran (``fuzzkit.STATS``)."""

from __future__ import annotations

from typing import Any

from tests.security import fuzzkit


def pytest_terminal_summary(terminalreporter: Any) -> None:
    lines = fuzzkit.summary_lines()
    if not lines:
        return
    terminalreporter.section("decoder fuzzing")
    for line in lines:
        terminalreporter.write_line(line)
