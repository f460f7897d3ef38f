"""kill -9 of the speed layer's views driver, in a micro-batch if one can be caught (its
checkpoint then has an offsets entry without a commit): recovered when a new driver
commits its replay, or runs with nothing left to replay."""

from __future__ import annotations

import contextlib
import os
import signal
import time
import urllib.request
from dataclasses import dataclass

from pos_lambda.adapters.service import wait_for
from pos_lambda_dev.demo import steps
from pos_lambda_dev.demo.chaos_context import Chaos
from pos_lambda_dev.demo.faults.base import Fault, Survived
from pos_lambda_dev.demo.steps import StepFailed, await_or_fail, children, driver_jobs


@dataclass(frozen=True)
class Killed:
    pid: int
    in_micro_batch: bool
    commit_before: int  # the views query's last commit before the kill
    standby: str = ""  # with POS_SPEED_STANDBY: whether one stood by at the kill
    at: float = 0.0  # monotonic time of the kill: recovery is timed from it


def views_driver(run: Chaos) -> int | None:
    """The views query's driver process (the supervisor's `--driver` child running it:
    the only one, or one of two when each query has its own)."""
    if run.speed is None or run.speed.poll() is not None:
        return None
    for pid in children(run.speed.pid):
        if "views" in (driver_jobs(pid) or "").split(","):
            return pid
    return None


def in_micro_batch(run: Chaos) -> bool:
    views = run.settings.checkpoint_dir / "views"

    def ids(sub: str) -> list[int]:
        with contextlib.suppress(FileNotFoundError):
            return sorted(int(p.name) for p in (views / sub).iterdir() if p.name.isdigit())
        return []

    offsets, commits = ids("offsets"), ids("commits")
    return bool(offsets) and (not commits or offsets[-1] > commits[-1])


def standby_standing_by(run: Chaos) -> bool:
    """The supervisor says a views standby stands by (`pos_speed_standby_up`, on its
    metrics port: the log is appended to across runs)."""
    url = f"http://{run.settings.bind_host}:{run.settings.speed.metrics_port}/metrics"
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            metrics = answer.read().decode()
    except OSError:  # not serving yet
        return False
    return 'pos_speed_standby_up{query="pos-speed-views"} 1.0' in metrics


# With POS_SPEED_STANDBY the kill waits this long for the standby to stand by (started
# after its driver is ready, it warms up for tens of seconds), the stream held at the
# fault's point: what is measured is a takeover from a standing standby, as in a layer
# that has run a while, mid-stream. Past it, the kill strikes anyway, and says so.
STANDBY_WAIT_S = 120


class SpeedKill(Fault[Killed]):
    name = "speed_kill"
    label = "kill -9 of the speed-layer driver (mid micro-batch)"
    slots = (0, 1, 2)
    table_rank = 0

    def prepare(self, run: Chaos) -> str:
        if not run.settings.speed.standby:
            return ""
        stood = wait_for(lambda: standby_standing_by(run), STANDBY_WAIT_S, interval=0.5)
        return "a standby stood by" if stood else "its standby was still starting"

    def strike(self, run: Chaos) -> Killed:
        got: list[int] = []

        def driver_busy() -> bool:
            pid = views_driver(run)
            if pid is None:
                return False
            got[:] = [pid]
            return in_micro_batch(run)

        flowing = run.stream is not None and run.sent() < len(run.stream.messages)
        # While the stream flows a micro-batch starts every few seconds; after it, the
        # layer may be idle and there is none to catch.
        busy = wait_for(driver_busy, timeout=120 if flowing else 30, interval=0.05)
        if not got:
            raise StepFailed(f"no speed-layer driver to kill; log {run.log('speed')}")
        before = run.last_views_commit()
        os.kill(got[0], signal.SIGKILL)
        return Killed(got[0], busy, before, run.prepared, time.monotonic())

    def await_recovery(self, run: Chaos, made: Killed) -> Survived:
        how: list[str] = []

        def recovered() -> bool:
            if run.last_views_commit() > made.commit_before:
                how[:] = ["a new driver committed its replay"]
                return True
            # Nothing left to replay: a new driver runs and the views query is at the end.
            if views_driver(run) not in (None, made.pid) and steps.speed_caught_up(
                run.settings, ("views",)
            ):
                how[:] = ["a new driver runs, nothing was left to replay"]
                return True
            return False

        await_or_fail(recovered, run.args.step_timeout, "a new speed driver to recover")
        where = "in a micro-batch" if made.in_micro_batch else "between micro-batches"
        beside = f" ({made.standby})" if made.standby else ""
        return Survived(
            f"driver pid {made.pid} killed {where}{beside}; {how[0]}",
            recovered_s=time.monotonic() - made.at,  # not the wait for a micro-batch
        )


FAULT = SpeedKill()
