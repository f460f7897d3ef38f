"""When the speed layer's supervisor starts a dead driver again, and when it gives up.

Pure: the decision is a function of the times at which one driver died (unit-tested
with literal schedules, tests/unit/speed_layer/test_supervisor_restarts.py); the supervisor
(speed_layer/supervisor.py) watches the processes, keeps the times and waits the delays.

A driver that died is started again whatever killed it (a failed query's exit, a
signal, an unexpected exit 0): its checkpoints and the sinks' upserts make the new one
resume where the old one committed. The budget is a sliding window: at most
`max_restarts` restarts of one driver within any `window_s` seconds. The first restart
in a window is immediate (a lone kill or crash: waiting gains nothing, and a fresh
driver needs tens of seconds to start anyway); each further one waits twice as long as
the one before, from `backoff_s` up to `backoff_max_s` (a cause outside, Cassandra or
Kafka away, gets time to go away). A driver that has not died for `window_s` has its
whole budget back.
"""

from __future__ import annotations

import signal
from collections.abc import Sequence
from dataclasses import dataclass

from pos_lambda.backoff import Backoff
from pos_lambda.settings import SpeedSettings

# The driver's exit code for "a query failed, start me again" (sysexits EX_TEMPFAIL).
EXIT_RETRY = 75


@dataclass(frozen=True)
class RestartPolicy:
    max_restarts: int  # restarts of one driver allowed within any window_s
    window_s: float
    backoff_s: float  # the second restart's delay within a window; doubled after each
    backoff_max_s: float

    @classmethod
    def of(cls, speed: SpeedSettings) -> RestartPolicy:
        return cls(
            speed.max_restarts,
            speed.restart_window_seconds,
            speed.restart_backoff_seconds,
            speed.restart_backoff_max_seconds,
        )

    def backoff(self) -> Backoff:
        """The waits before the second restart within a window and the ones after it."""
        return Backoff(self.backoff_s, cap_s=self.backoff_max_s)


@dataclass(frozen=True)
class Restart:
    """Start the driver again after `delay_s`; it is restart `nth` within the window."""

    delay_s: float
    nth: int


@dataclass(frozen=True)
class GiveUp:
    """The budget is spent: `deaths` within the window, more than the restarts allowed."""

    deaths: int


def decide(policy: RestartPolicy, deaths: Sequence[float]) -> Restart | GiveUp:
    """What to do about a driver whose deaths happened at `deaths` (seconds on one
    monotonic clock, ascending), the last one just now."""
    recent = in_window(policy, deaths)
    if len(recent) > policy.max_restarts:
        return GiveUp(len(recent))
    nth = len(recent)
    return Restart(0.0 if nth == 1 else policy.backoff().delay(nth - 2), nth)


def in_window(policy: RestartPolicy, deaths: Sequence[float]) -> list[float]:
    """The deaths that count against the budget now (the last one is now): those less
    than window_s ago. The supervisor keeps only these."""
    if not deaths:
        return []
    now = deaths[-1]
    return [t for t in deaths if t > now - policy.window_s]


def describe_exit(code: int) -> str:
    """How a driver's process ended, for the log (`Popen.returncode`: -N for signal N)."""
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    if code == EXIT_RETRY:
        return f"exited {code} (a query failed; its cause is logged above)"
    if code == 0:
        return "exited 0 while the speed layer was running"
    return f"exited {code}"


def exit_status(code: int) -> int:
    """A process's exit status as a shell shows it: killed by signal N is 128 + N."""
    return code if code >= 0 else 128 - code
