"""A failed query started again inside its driver, keeping the JVM and the Spark session.

Most query failures come from outside: Cassandra or Kafka away for a while. Exiting and
letting the supervisor start a new driver costs the JVM's and the session's start
(8-11 s on this machine) and a cold first micro-batch (9-18 s) after the service is
back. A driver that keeps its JVM waits until the services answer again, then starts
the query from its checkpoint at once, and its first micro-batch runs on a JIT-warm JVM.

The budget is `speed_query_restarts_in_place` restarts within
`speed_restart_window_seconds`, then the driver exits for the supervisor to start a
fresh JVM: a failure that a restart in place does not cure may be the JVM's own. A wait
for the services longer than `speed_query_restart_wait_seconds` also hands over.

`allowed` and `await_services` are pure apart from the ports they are given
(tests/unit/speed_layer/test_in_place.py); the driver (speed_layer/cli.py, `run`) wires
them to its queries.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

log = logging.getLogger("pos.speed")


def allowed(failures_s: Sequence[float], now_s: float, limit: int, window_s: float) -> bool:
    """Whether one more failure at `now_s` may be restarted in place: fewer than `limit`
    restarts in place (`failures_s`, the times of those before) within the window."""
    recent = [t for t in failures_s if now_s - t < window_s]
    return len(recent) < limit


def await_services(
    probe: Callable[[], str | None],
    stopping: Callable[[], bool],
    wait_s: float,
    clock: Callable[[], float],
    pause: Callable[[float], object],
    every_s: float = 1.0,
    say_every_s: float = 10.0,
) -> bool:
    """Probe until the services answer (`probe` returns None; else what is missing).
    True when they do; False when the driver is stopping or `wait_s` ran out."""
    start = clock()
    said = start
    while not stopping():
        missing = probe()
        if missing is None:
            return True
        now = clock()
        if now - start >= wait_s:
            log.warning("%s after %.0f s: handing over to the supervisor", missing, now - start)
            return False
        if now - said >= say_every_s:
            log.info("waiting for the services to restart the query: %s (%.0f s)", missing,
                     now - start)  # fmt: skip
            said = now
        pause(every_s)
    return False
