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
the instance starts over under the same pid and `transactional.id`. That is exactly the
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

log = logging.getLogger("pos.alerts")

# Counts in-place restarts across execs (logged; not a POS_* setting, which must be known).
RESTARTS_ENV = "ALERTS_RESTARTED_IN_PLACE"


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


def restart_in_place(why: str) -> None:
    """Replace this process by a fresh run of the same command line (same pid)."""
    restarts = int(os.environ.get(RESTARTS_ENV, "0")) + 1
    os.environ[RESTARTS_ENV] = str(restarts)
    log.error("restarting in place (restart %d): %s", restarts, why)
    logging.shutdown()  # flush the handlers
    sys.stdout.flush()
    sys.stderr.flush()
    # librdkafka's sockets are close-on-exec, its internal pipes not all: keep only
    # stdin/stdout/stderr across the exec.
    for fd in _open_fds():
        if fd > 2:
            with contextlib.suppress(OSError):  # closed meanwhile
                os.set_inheritable(fd, False)
    os.execv(sys.executable, sys.orig_argv)


def _open_fds() -> list[int]:
    try:
        return [int(name) for name in os.listdir("/proc/self/fd")]
    except OSError:
        return []
