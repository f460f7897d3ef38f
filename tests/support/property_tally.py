"""The exactly-once property tests' tally (tests/unit/transactional/
test_exactly_once_properties.py): per test, the examples run, the distinct fault schedules
among them, the faults drawn and struck and the failing examples, printed at the end of
the session.

Without pytest-xdist the tests fill `TALLY` in this process and the summary prints it.
Under xdist they run on the workers, whose terminals nobody sees, and the controller
never imports the test module: each worker hands its tally over in `config.workeroutput`
when its session ends, and the controller adds them up as the workers go down
(`pytest_testnodedown`), before it prints the summary. Registered by tests/conftest.py.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any

import pytest

WORKEROUTPUT_KEY = "exactly_once_tally"


@dataclass
class Tally:
    """What the property tests ran, per test."""

    examples: Counter[str] = field(default_factory=Counter)
    # Distinct fault schedules, each by its repr(): the same across processes, so the
    # controller's union counts a schedule two workers both drew once.
    schedules: dict[str, set[str]] = field(default_factory=dict)
    struck: Counter[str] = field(default_factory=Counter)  # faults that struck
    drawn: Counter[str] = field(default_factory=Counter)  # faults drawn
    failed: Counter[str] = field(default_factory=Counter)  # failing examples (and shrinks)

    def record(self, test: str, schedule: tuple[Hashable, ...], struck: int) -> None:
        """One example of `test` ran under `schedule`, of which `struck` faults struck."""
        self.examples[test] += 1
        self.schedules.setdefault(test, set()).add(repr(schedule))
        self.drawn[test] += len(schedule)
        self.struck[test] += struck

    def to_json(self) -> dict[str, Any]:
        """Plain data, for a worker's `workeroutput` (execnet carries no sets)."""
        return {
            "examples": dict(self.examples),
            "schedules": {test: sorted(seen) for test, seen in self.schedules.items()},
            "struck": dict(self.struck),
            "drawn": dict(self.drawn),
            "failed": dict(self.failed),
        }

    def add(self, data: dict[str, Any]) -> None:
        """Add another process's tally (`to_json`'s form) to this one."""
        for name in ("examples", "struck", "drawn", "failed"):
            getattr(self, name).update(data.get(name, {}))
        for test, seen in data.get("schedules", {}).items():
            self.schedules.setdefault(test, set()).update(seen)

    def lines(self) -> list[str]:
        return [
            f"{test}: {self.examples[test]} examples, {len(self.schedules.get(test, ()))} "
            f"distinct fault schedules, {self.struck[test]} of {self.drawn[test]} faults "
            f"struck, {self.failed[test]} failing examples"
            for test in sorted(self.examples)
        ]

    def total(self) -> str:
        distinct = len(set().union(*self.schedules.values()))
        return (
            f"in all: {sum(self.examples.values())} examples, {distinct} distinct fault "
            f"schedules, {sum(self.failed.values())} failing examples"
        )


# The tally of the tests run in this process (the test module records into it); on an
# xdist controller, the sum of the workers' tallies.
TALLY = Tally()


def _is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


class Plugin:
    """Hands a worker's tally over at its session's end; prints the tally at the end."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config

    def pytest_sessionfinish(self) -> None:
        if _is_worker(self.config) and TALLY.examples:
            self.config.workeroutput[WORKEROUTPUT_KEY] = TALLY.to_json()  # type: ignore[attr-defined]

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if _is_worker(self.config) or not TALLY.examples:
            return
        terminalreporter.write_sep("-", "exactly-once properties: examples and fault schedules run")
        for line in TALLY.lines():
            terminalreporter.write_line(line)
        terminalreporter.write_line(TALLY.total())


class XdistPlugin(Plugin):
    """The controller's side under pytest-xdist: each worker's tally, as it goes down."""

    def pytest_testnodedown(self, node: Any, error: object) -> None:
        data = getattr(node, "workeroutput", {}).get(WORKEROUTPUT_KEY)
        if data:
            TALLY.add(data)


def register(config: pytest.Config) -> None:
    """The plugin for this session (its xdist hook only where xdist can call it)."""
    xdist = config.pluginmanager.hasplugin("xdist")
    config.pluginmanager.register((XdistPlugin if xdist else Plugin)(config), "property-tally")
