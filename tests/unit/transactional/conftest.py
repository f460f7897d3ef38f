"""The exactly-once property tests' tally, printed at the end of the session."""

from __future__ import annotations

import sys
from typing import Any


def pytest_terminal_summary(terminalreporter: Any) -> None:
    module = sys.modules.get("tests.unit.transactional.test_exactly_once_properties")
    stats = getattr(module, "STATS", None)
    if stats is None or not stats.examples:
        return
    terminalreporter.write_sep("-", "exactly-once properties: examples and fault schedules run")
    for line in stats.lines():
        terminalreporter.write_line(line)
    total = sum(stats.examples.values())
    distinct = len(set().union(*stats.schedules.values()))
    terminalreporter.write_line(
        f"in all: {total} examples, {distinct} distinct fault schedules, "
        f"{sum(stats.failed.values())} failing examples"
    )
