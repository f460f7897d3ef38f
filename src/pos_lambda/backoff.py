"""Exponential backoff, written once: the policy (`Backoff`) and the retry loop (`retry`).

Pure: no module clock and no module randomness. The loop takes `clock` and `sleep`
callables (a virtual clock in unit tests, tests/unit/test_backoff.py), and a policy
with jitter takes the random source it draws from.

Every wait the project makes between two tries of the same thing comes from here: the
transactional processor's retried client calls and committed-offset reads, its back-off
after aborts in a row (transactional/lifecycle.py), the speed layer's driver restarts
(speed_layer/restart_policy.py) and standby restarts (speed_layer/supervision.py), and
the batch pointer's conditional commit through timeouts (batch_layer/pointer.py).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class Backoff:
    """Waits that grow by `factor` from `initial_s`, never above `cap_s`.

    With `jitter` (a fraction, 0 to 1) each wait is drawn from
    [wait * (1 - jitter), wait], so that many clients retrying at once spread out.
    """

    initial_s: float
    factor: float = 2.0
    cap_s: float = math.inf
    jitter: float = 0.0

    def __post_init__(self) -> None:
        if self.initial_s < 0 or self.factor < 1 or self.cap_s < 0:
            raise ValueError(f"not a backoff: {self}")
        if not 0 <= self.jitter <= 1:
            raise ValueError(f"jitter is a fraction from 0 to 1, not {self.jitter}")

    def delay(self, attempt: int, rand: Callable[[], float] = random.random) -> float:
        """The wait before retry `attempt` (0: the first retry). `rand` (values in
        [0, 1)) is called only when the policy has jitter."""
        if attempt < 0:
            raise ValueError(f"attempt {attempt} < 0")
        try:
            wait = min(self.initial_s * self.factor**attempt, self.cap_s)
        except OverflowError:  # far past the cap
            wait = self.cap_s
        if self.jitter:
            wait -= wait * self.jitter * rand()
        return float(wait)


def retry(
    call: Callable[[], T],
    policy: Backoff,
    *,
    retriable: Callable[[Exception], bool],
    patience_s: float,
    clock: Callable[[], float],
    sleep: Callable[[float], None],
    on_retry: Callable[[Exception, float], None] | None = None,
    wait_may_overrun: bool = True,
) -> T:
    """`call()`'s result, calling it again after the policy's waits while what it
    raises is `retriable` and the patience (from the first call) lasts; the exception
    that ends the retries is raised as it is. `on_retry(exc, wait)` is told before each
    wait (to log it).

    The patience is over once the clock reaches it (`wait_may_overrun`: a wait that
    starts before then is waited in full, and one more call made), or, without
    `wait_may_overrun`, as soon as the next wait would end past it.
    """
    deadline = clock() + patience_s
    attempt = 0
    while True:
        try:
            return call()
        except Exception as exc:
            if not retriable(exc):
                raise
            wait = policy.delay(attempt)
            now = clock()
            if now >= deadline if wait_may_overrun else now + wait > deadline:
                raise
            if on_retry is not None:
                on_retry(exc, wait)
            sleep(wait)
            attempt += 1
