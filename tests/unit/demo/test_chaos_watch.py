"""The chaos run's process manager: an alerts crash point the processor did not reach
is armed again in the next process, so every planned kill is made (faked processes)."""

from __future__ import annotations

import argparse
import signal
from pathlib import Path
from typing import Any

import pytest

from pos_lambda.demo import chaos, figures


class Exited:
    """A started process as `watch` sees it: running (None) or its exit code."""

    def __init__(self) -> None:
        self.returncode: int | None = None
        self.pid = 1

    def poll(self) -> int | None:
        return self.returncode


def test_a_crash_point_not_reached_is_armed_again(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    started: list[tuple[Exited, dict[str, str]]] = []

    def start_logged(argv: list[str], env: dict[str, str], log: Path) -> Exited:
        started.append((Exited(), env))
        return started[-1][0]

    monkeypatch.setattr(chaos, "start_logged", start_logged)
    said: list[str] = []
    plan = figures.Plan([], [26, 12])
    # No settings: watch and start_alerts read none (start_logged is faked).
    run: Any = chaos.Chaos(None, None, argparse.Namespace(logs=tmp_path), said.append, plan)
    run.alerts_armed = list(plan.alerts_crash_at)

    def crash_at() -> str | None:
        return started[-1][1].get("POS_ALERTS_CRASH_AT_TRANSACTION")

    run.start_alerts()
    assert crash_at() == "26"
    started[-1][0].returncode = 1  # Cassandra down: exited before transaction 26
    run.watch()
    assert crash_at() == "26"  # the same kill, still to be made
    started[-1][0].returncode = -signal.SIGKILL  # its crash point struck
    run.watch()
    assert crash_at() == "12"
    started[-1][0].returncode = -signal.SIGKILL
    run.watch()
    assert crash_at() is None  # every planned kill made: no crash point any more
    assert [o.kind for o in run.outcomes] == ["alerts_kill", "alerts_kill"]
    assert [o.detail.split(" with")[0] for o in run.outcomes] == [
        "crash point in its transaction 26",
        "crash point in its transaction 12",
    ]
