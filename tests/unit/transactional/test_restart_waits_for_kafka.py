"""A processor restarted in place by its watchdog (a call hung when the coordinator's
broker died) waits for Kafka to come back instead of exiting 1 at its first topic
check: the real-broker exactly-once test's hard restart met that exit (issue 74)."""

from __future__ import annotations

from typing import Any

import pytest

from pos_lambda.settings import load_settings
from pos_lambda.transactional import watchdog
from pos_lambda.transactional.run import await_kafka_after_restart


class Broker:
    """Answers from its `back_after`-th probe on."""

    def __init__(self, back_after: int) -> None:
        self.back_after, self.probes = back_after, 0

    def answers(self) -> bool:
        self.probes += 1
        return self.probes >= self.back_after


def waiting(probe: Any, timeout: float, interval: float) -> bool:
    """wait_for's contract without its sleeps: probe until it holds, at most 10 times."""
    return any(probe() for _ in range(10))


def test_a_restarted_process_waits_for_the_broker(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(watchdog.IN_A_ROW_ENV, "1")
    broker = Broker(back_after=4)
    assert await_kafka_after_restart(load_settings(), 300, broker.answers, waiting)
    assert broker.probes == 4


def test_a_broker_that_never_comes_back_is_given_up_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(watchdog.IN_A_ROW_ENV, "2")
    broker = Broker(back_after=99)
    assert not await_kafka_after_restart(load_settings(), 300, broker.answers, waiting)


def test_a_process_an_operator_starts_does_not_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(watchdog.IN_A_ROW_ENV, raising=False)
    broker = Broker(back_after=99)
    assert await_kafka_after_restart(load_settings(), 300, broker.answers, waiting)
    assert broker.probes == 0
