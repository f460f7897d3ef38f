"""The backoff policy and the retry loop, with literal waits on a virtual clock."""

from __future__ import annotations

import math

import pytest

from pos_lambda.backoff import Backoff, retry


class Flaky(Exception):
    pass


class Broken(Exception):
    pass


class Clock:
    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


class Script:
    """Raises the scripted exceptions in turn, then answers "done"."""

    def __init__(self, *failures: Exception) -> None:
        self.failures = list(failures)
        self.calls = 0

    def __call__(self) -> str:
        self.calls += 1
        if self.failures:
            raise self.failures.pop(0)
        return "done"


def run(script: Script, clock: Clock, patience_s: float, **kwargs: object) -> str:
    return retry(
        script,
        Backoff(0.5, cap_s=4.0),
        retriable=lambda exc: isinstance(exc, Flaky),
        patience_s=patience_s,
        clock=clock,
        sleep=clock.sleep,
        **kwargs,  # type: ignore[arg-type]
    )


def test_the_waits_double_up_to_the_cap() -> None:
    assert [Backoff(0.1, cap_s=5.0).delay(n) for n in range(8)] == [
        0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0,
    ]  # fmt: skip
    assert [Backoff(2.0, factor=3.0, cap_s=30.0).delay(n) for n in range(4)] == [2, 6, 18, 30]


def test_no_cap_grows_without_bound_and_a_huge_attempt_stays_at_the_cap() -> None:
    assert Backoff(1.0).delay(10) == 1024.0
    assert Backoff(1.0).delay(5000) == math.inf
    assert Backoff(0.1, cap_s=5.0).delay(5000) == 5.0


def test_a_zero_initial_wait_stays_zero() -> None:
    assert [Backoff(0.0, cap_s=5.0).delay(n) for n in range(3)] == [0.0, 0.0, 0.0]


def test_jitter_takes_off_up_to_its_fraction_and_draws_only_when_set() -> None:
    policy = Backoff(1.0, cap_s=8.0, jitter=0.5)
    assert policy.delay(3, rand=lambda: 0.0) == 8.0
    assert policy.delay(3, rand=lambda: 0.5) == 6.0
    assert policy.delay(0, rand=lambda: 0.999) == pytest.approx(0.5005)

    def never() -> float:
        raise AssertionError("no jitter, no draw")

    assert Backoff(1.0).delay(2, rand=never) == 4.0


@pytest.mark.parametrize(
    "kwargs",
    [{"initial_s": -1}, {"factor": 0.5}, {"cap_s": -1}, {"jitter": 1.5}, {"jitter": -0.1}],
)
def test_what_is_not_a_backoff_is_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        Backoff(**{"initial_s": 1.0, **kwargs})
    with pytest.raises(ValueError):
        Backoff(1.0).delay(-1)


def test_retry_waits_the_policy_between_tries_and_returns_the_answer() -> None:
    clock, script = Clock(), Script(Flaky(), Flaky(), Flaky())
    told: list[tuple[str, float]] = []
    answer = run(script, clock, 30.0, on_retry=lambda exc, w: told.append((type(exc).__name__, w)))
    assert answer == "done"
    assert script.calls == 4
    assert clock.slept == [0.5, 1.0, 2.0]
    assert told == [("Flaky", 0.5), ("Flaky", 1.0), ("Flaky", 2.0)]


def test_an_error_that_is_not_retriable_is_raised_at_once() -> None:
    clock, script = Clock(), Script(Flaky(), Broken())
    with pytest.raises(Broken):
        run(script, clock, 30.0)
    assert clock.slept == [0.5]


def test_by_default_a_wait_started_before_the_deadline_is_waited_and_tried_after() -> None:
    # Patience 3 s: waits 0.5, 1, 2 (starting at 0, 0.5, 1.5); at 3.5 the patience is over.
    clock, script = Clock(), Script(*[Flaky() for _ in range(10)])
    with pytest.raises(Flaky):
        run(script, clock, 3.0)
    assert clock.slept == [0.5, 1.0, 2.0]
    assert script.calls == 4


def test_without_overrun_no_wait_ends_past_the_deadline() -> None:
    clock, script = Clock(), Script(*[Flaky() for _ in range(10)])
    with pytest.raises(Flaky):
        run(script, clock, 3.0, wait_may_overrun=False)
    assert clock.slept == [0.5, 1.0]  # a third wait (2 s) would end at 3.5
    assert script.calls == 3


def test_the_waits_stay_at_the_cap() -> None:
    clock, script = Clock(), Script(*[Flaky() for _ in range(7)])
    assert run(script, clock, 60.0) == "done"
    assert clock.slept == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0, 4.0]
