"""The restart of a failed query inside its driver: its budget, and its wait for the
services, with a scripted clock and probe (speed_layer/in_place.py)."""

from __future__ import annotations

import pytest

from pos_lambda.speed_layer import in_place


@pytest.mark.parametrize(
    ("failures", "now", "expected"),
    [
        ([], 0.0, True),
        ([10.0, 20.0], 30.0, True),
        ([10.0, 20.0, 30.0], 40.0, False),  # three within the window: a fresh JVM
        ([10.0, 20.0, 30.0], 610.0, True),  # the first has left the 600 s window
        ([10.0, 20.0, 30.0], 609.9, False),
    ],
)
def test_the_budget_is_a_sliding_window(failures: list[float], now: float, expected: bool) -> None:
    assert in_place.allowed(failures, now, limit=3, window_s=600.0) is expected


def test_no_restart_in_place_when_the_limit_is_zero() -> None:
    assert in_place.allowed([], 0.0, limit=0, window_s=600.0) is False


class Script:
    """A clock that the pauses move, and a probe that answers from the `back_at` time on."""

    def __init__(self, back_at: float, stop_at: float = float("inf")) -> None:
        self.now, self.back_at, self.stop_at = 0.0, back_at, stop_at
        self.probes: list[float] = []

    def probe(self) -> str | None:
        self.probes.append(self.now)
        return None if self.now >= self.back_at else "Cassandra does not answer"

    def pause(self, seconds: float) -> None:
        self.now += seconds

    def await_services(self, wait_s: float) -> bool:
        return in_place.await_services(
            self.probe, lambda: self.now >= self.stop_at, wait_s, lambda: self.now, self.pause
        )


def test_services_that_answer_at_once_restart_at_once() -> None:
    script = Script(back_at=0.0)
    assert script.await_services(wait_s=300.0) is True
    assert script.probes == [0.0]


def test_it_probes_every_second_until_the_services_answer() -> None:
    script = Script(back_at=90.0)  # a 90 s outage, as the chaos run's
    assert script.await_services(wait_s=300.0) is True
    assert script.probes[-1] == 90.0
    assert len(script.probes) == 91


def test_a_wait_past_its_bound_hands_over_to_the_supervisor() -> None:
    script = Script(back_at=1000.0)
    assert script.await_services(wait_s=300.0) is False
    assert script.probes[-1] == 300.0


def test_a_stop_ends_the_wait() -> None:
    script = Script(back_at=1000.0, stop_at=5.0)
    assert script.await_services(wait_s=300.0) is False
    assert script.probes[-1] == 4.0
