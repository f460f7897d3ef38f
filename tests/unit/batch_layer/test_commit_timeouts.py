"""The pointer's conditional commit through a timeout (a replica killed inside its Paxos
round): sent again on the same condition until it answers, and a "not applied" after a
timeout read as this commit's own success when the pointer holds it."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from pos_lambda.batch_layer.pointer import commit_through_timeouts


class CasTimedOut(Exception):
    pass


@dataclass
class Answer:
    was_applied: bool


class Coordinator:
    """Answers the conditional write from a script: an exception to raise or an answer."""

    def __init__(self, script: list[object]) -> None:
        self.script = script
        self.sent = 0
        self.slept: list[float] = []
        self.now = 0.0

    def execute(self) -> Answer:
        outcome = self.script[self.sent]
        self.sent += 1
        if isinstance(outcome, Exception):
            raise outcome
        assert isinstance(outcome, Answer)
        return outcome

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def commit(c: Coordinator, holds: bool, patience_s: float = 30.0) -> bool:
    return commit_through_timeouts(
        c.execute, lambda: holds, (CasTimedOut,), patience_s, c.sleep, lambda: c.now
    )


def test_a_commit_that_timed_out_is_sent_again_until_it_applies() -> None:
    c = Coordinator([CasTimedOut(), CasTimedOut(), Answer(True)])
    assert commit(c, holds=False)
    assert c.sent == 3
    assert c.slept == [0.5, 1.0]


def test_a_first_attempt_that_applied_is_this_commits_own_not_a_conflict() -> None:
    # Its Paxos round applied before the timeout: the resend finds the counter moved.
    assert commit(Coordinator([CasTimedOut(), Answer(False)]), holds=True)


def test_not_applied_after_a_timeout_and_not_held_is_another_runs_commit() -> None:
    assert not commit(Coordinator([CasTimedOut(), Answer(False)]), holds=False)


def test_not_applied_without_a_timeout_is_a_conflict_whatever_the_pointer_says() -> None:
    assert not commit(Coordinator([Answer(False)]), holds=True)


def test_timeouts_past_the_patience_are_raised() -> None:
    c = Coordinator([CasTimedOut()] * 10)
    with pytest.raises(CasTimedOut):
        commit(c, holds=False, patience_s=3.0)
    assert c.slept == [0.5, 1.0]  # a third wait (2 s) would end past 3 s
