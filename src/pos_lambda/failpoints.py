"""Named failpoints: where a test or the chaos run makes a process die, freeze or wait.

A failpoint is a name at a place in the code (`speed.after_aggregates`: the speed
layer's aggregates are written, its raw rows not yet) and an action armed from the
settings' `faults` section (POS_SPEED_CRASH_POINT=after_aggregates). In production
nothing is armed, and a failpoint costs a dictionary lookup. The points prove what the
design claims: a micro-batch or batch run killed between any two of its writes is
replayed to the same rows; readers keep the previous batch version; a zombie alerts
processor is fenced.

    speed.after_aggregates | after_raw_rows | after_receipt_keys   kill -9 (POS_SPEED_CRASH_POINT)
    batch.after_receipts                                           kill -9 (POS_BATCH_CRASH_POINT)
    batch.before_commit         wait for a file (POS_BATCH_PAUSE_BEFORE_COMMIT)
    alerts.after_produce        kill -9 or SIGSTOP in the Nth transaction with alerts
                                (POS_ALERTS_CRASH_POINT, POS_ALERTS_CRASH_AT_TRANSACTION)
    receipts.after_produce      the same for the deduplicated topic's processor
                                (POS_RECEIPTS_CRASH_POINT, POS_RECEIPTS_CRASH_AT_TRANSACTION)
"""

from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path

from pos_lambda.settings import FaultSettings

log = logging.getLogger(__name__)

PAUSE_LIMIT_S = 600.0


class Action(Enum):
    KILL = "kill -9"  # SIGKILL: no cleanup, no flush, as a crash or the OOM killer
    STOP = "SIGSTOP"  # frozen, resumed by SIGCONT: a zombie its successor must fence
    PAUSE = "pause"  # wait until a file exists: a test stages a race in between


@dataclass(frozen=True)
class Armed:
    action: Action
    occurrence: int | None = None  # only at this occurrence (the Nth transaction, ...)
    until: Path | None = None  # PAUSE: the file to wait for


@dataclass(frozen=True)
class Failpoints:
    armed: Mapping[str, Armed] = field(default_factory=dict)
    # Killed first on KILL: the process that would otherwise restart this one (the speed
    # layer's supervisor), so the whole layer dies as with `kill -9` of both.
    supervisor_pid: int | None = None

    @classmethod
    def from_settings(cls, faults: FaultSettings, supervisor_pid: int | None = None) -> Failpoints:
        armed: dict[str, Armed] = {}
        if faults.speed_crash_point:
            armed[f"speed.{faults.speed_crash_point}"] = Armed(Action.KILL)
        if faults.batch_crash_point:
            armed[f"batch.{faults.batch_crash_point}"] = Armed(Action.KILL)
        if faults.batch_pause_before_commit:
            armed["batch.before_commit"] = Armed(
                Action.PAUSE, until=faults.batch_pause_before_commit
            )
        for name, point, occurrence in (
            ("alerts", faults.alerts_crash_point, faults.alerts_crash_at_transaction),
            ("receipts", faults.receipts_crash_point, faults.receipts_crash_at_transaction),
        ):
            if point:
                action = Action.KILL if point.startswith("kill") else Action.STOP
                armed[f"{name}.after_produce"] = Armed(action, occurrence)
        return cls(armed, supervisor_pid)

    def is_armed(self, name: str, occurrence: int | None = None) -> bool:
        """Whether `hit(name, occurrence)` would act (to prepare, e.g. flush, first)."""
        armed = self.armed.get(name)
        return armed is not None and armed.occurrence in (None, occurrence)

    def hit(self, name: str, occurrence: int | None = None) -> None:
        """Act if `name` is armed (for this occurrence); else return at once."""
        if not self.is_armed(name, occurrence):
            return
        armed = self.armed[name]
        log.warning("failpoint %s reached: %s (testing)", name, armed.action.value)
        if armed.action is Action.PAUSE:
            assert armed.until is not None
            _await_file(armed.until)
            return
        if armed.action is Action.KILL:
            if self.supervisor_pid:
                os.kill(self.supervisor_pid, signal.SIGKILL)
            os.kill(os.getpid(), signal.SIGKILL)
        os.kill(os.getpid(), signal.SIGSTOP)  # resumes here on SIGCONT


NONE = Failpoints()


def _await_file(path: Path) -> None:
    deadline = time.monotonic() + PAUSE_LIMIT_S
    while not path.exists():
        if time.monotonic() >= deadline:
            raise RuntimeError(f"failpoint: {path} did not appear within {PAUSE_LIMIT_S:.0f} s")
        time.sleep(0.2)
