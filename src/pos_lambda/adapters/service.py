"""What every adapter of an external service shares: the error a missing, misconfigured
or unreachable service raises (its message says what to do), awaiting a condition,
and whether a process still runs.

The local runtime (`pos_lambda_dev.runtime`) builds on these too; production code imports
them from here, never from the runtime.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable


class ServiceError(RuntimeError):
    """A service could not be started, stopped or reached; the message says why."""


def wait_for(condition: Callable[[], bool], timeout: float, interval: float = 0.5) -> bool:
    """Poll `condition` until it holds or `timeout` seconds pass; True if it held."""
    deadline = time.monotonic() + timeout
    while True:
        if condition():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)


def alive(pid: int) -> bool:
    """Whether process `pid` runs (a zombie child of ours is reaped and is not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child of ours still answers kill(0); reap it if it is ours.
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
        return done == 0
    except ChildProcessError:
        return _not_zombie(pid)


def _not_zombie(pid: int) -> bool:
    """A killed JVM's main thread turns zombie before its other threads have exited and
    released the process's sockets: only when no thread is left are its ports free."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            if f.read().split(")")[-1].split()[0] != "Z":
                return True
        return len(os.listdir(f"/proc/{pid}/task")) > 1
    except OSError:
        return False
