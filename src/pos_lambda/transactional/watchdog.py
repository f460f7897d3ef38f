"""A deadline for blocking client calls that may never return, and the in-place restart
the processor takes when one is missed.

Why: librdkafka's `send_offsets_to_transaction()` can block forever, past its own
timeout, when the group coordinator goes away mid-call (a broker hard restart):
the timeout of coordinator requests is never checked (confluentinc/librdkafka#5456;
#5511 is the same hang when the coordinator is decommissioned). Open in librdkafka
2.14.x, not fixed in confluent-kafka 2.16.1. A thread stuck in C cannot be
interrupted, and the producer's transaction state machine is unusable from then on.

What: `Watchdog.guard(what, seconds)` arms a deadline around one call; a daemon
thread calls `on_expire(what)` if the call is still running when it passes. The
processor's `on_expire` is `restart_in_place`: `os.execv` of the same command line, so
the instance starts over under the same pid and `transactional.id`, at most
`POS_ALERTS_MAX_RESTARTS_IN_PLACE` (`POS_RECEIPTS_...`) times in a row without a
committed transaction (then it exits EXIT_RESTARTS_EXHAUSTED). That is exactly the
fault the exactly-once design already survives: the new producer's
`init_transactions` fences the old epoch and aborts its open transaction, the state is
rebuilt from the committed offsets, and (static membership) the consumer takes its
partitions back at once.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

log = logging.getLogger(__name__)

# Counts in-place restarts across execs (logged; not a POS_* setting, which must be known).
RESTARTS_ENV = "ALERTS_RESTARTED_IN_PLACE"
# ... and those since the last committed transaction: a hang that comes back after every
# restart (a coordinator that never answers) must not restart the instance forever.
IN_A_ROW_ENV = "ALERTS_RESTARTS_IN_A_ROW"
DEFAULT_MAX_IN_A_ROW = 5  # Settings.alerts.max_restarts_in_place
EXIT_RESTARTS_EXHAUSTED = 6  # hung again after the last allowed in-place restart


class Watchdog:
    """One deadline at a time (the processor's calls are sequential)."""

    def __init__(self, on_expire: Callable[[str], None]) -> None:
        self._on_expire = on_expire
        self._cond = threading.Condition()
        self._armed: tuple[str, float] | None = None
        self._closed = False
        self._thread = threading.Thread(target=self._watch, name="watchdog", daemon=True)
        self._thread.start()

    @contextmanager
    def guard(self, what: str, seconds: float) -> Iterator[None]:
        with self._cond:
            self._armed = (what, time.monotonic() + seconds)
            self._cond.notify()
        try:
            yield
        finally:
            with self._cond:
                self._armed = None
                self._cond.notify()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify()
        self._thread.join(timeout=5)

    def _watch(self) -> None:
        with self._cond:
            while not self._closed:
                if self._armed is None:
                    self._cond.wait()
                    continue
                what, deadline = self._armed
                left = deadline - time.monotonic()
                if left > 0:
                    self._cond.wait(left)
                    continue
                self._armed = None
                break
            else:
                return
        self._on_expire(what)  # outside the lock; usually does not return


def may_restart(in_a_row: int, limit: int) -> bool:
    """Whether a hang after `in_a_row` in-place restarts with no commit between them may
    restart the instance again (at most `limit` in a row)."""
    return in_a_row < limit


def restarts() -> tuple[int, int]:
    """(in-place restarts of this process in all, those since its last commit)."""
    return int(os.environ.get(RESTARTS_ENV, "0")), int(os.environ.get(IN_A_ROW_ENV, "0"))


def committed() -> None:
    """A transaction committed: the instance makes progress, the next hang starts a new row."""
    if os.environ.get(IN_A_ROW_ENV, "0") != "0":
        os.environ[IN_A_ROW_ENV] = "0"


def restart_in_place(
    why: str,
    limit: int = DEFAULT_MAX_IN_A_ROW,
    setting: str = "POS_ALERTS_MAX_RESTARTS_IN_PLACE",
) -> None:
    """Replace this process by a fresh run of the same command line (same pid), unless it
    already restarted `limit` times in a row without a commit: then exit
    EXIT_RESTARTS_EXHAUSTED (a supervisor, or an operator, takes it from there).
    `setting`: the environment variable that sets `limit` (named in the log)."""
    total, in_a_row = restarts()
    if not may_restart(in_a_row, limit):
        log.error(
            "%s; not restarting: %d in-place restarts in a row without a commit "
            "(%s=%d; %d in all): exiting %d",
            why, in_a_row, setting, limit, total, EXIT_RESTARTS_EXHAUSTED,
        )  # fmt: skip
        _flush()
        os._exit(EXIT_RESTARTS_EXHAUSTED)
    os.environ[RESTARTS_ENV] = str(total + 1)
    os.environ[IN_A_ROW_ENV] = str(in_a_row + 1)
    log.error(
        "restarting in place (restart %d, %d of %d in a row): %s",
        total + 1, in_a_row + 1, limit, why,
    )  # fmt: skip
    _flush()
    # librdkafka's sockets are close-on-exec, its internal pipes not all: keep only
    # stdin/stdout/stderr across the exec.
    for fd in _open_fds():
        if fd > 2:
            with contextlib.suppress(OSError):  # closed meanwhile
                os.set_inheritable(fd, False)
    os.execv(sys.executable, sys.orig_argv)


def _flush() -> None:
    logging.shutdown()  # flush the handlers
    sys.stdout.flush()
    sys.stderr.flush()


def _open_fds() -> list[int]:
    try:
        return [int(name) for name in os.listdir("/proc/self/fd")]
    except OSError:
        return []
