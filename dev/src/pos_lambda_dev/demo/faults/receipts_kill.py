"""kill -9 of the deduplicated topic's processor (`pos-receipts run`) from outside while
the stream flows, once it has committed: whatever transaction it had open stays on the
broker uncommitted (its successor, with the same transactional.id, aborts it). The watch
starts it again, as a process manager would. Recovered when the successor runs and the
group's committed offsets are past those at the kill (or, nothing left to read, the
group is at the topic's end)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass

from pos_lambda_dev.demo import steps
from pos_lambda_dev.demo.chaos_context import Chaos, committed_past
from pos_lambda_dev.demo.faults.base import Fault, Survived
from pos_lambda_dev.demo.steps import await_or_fail


@dataclass(frozen=True)
class Killed:
    process: subprocess.Popen[bytes]
    at: float  # monotonic time of the kill
    committed: dict[int, int]  # the group's offsets at the kill


class ReceiptsKill(Fault[Killed]):
    name = "receipts_kill"
    label = "kill -9 of the receipts processor (the deduplicated topic)"
    slots = (11,)
    table_rank = 7

    def strike(self, run: Chaos) -> Killed:
        before: list[dict[int, int]] = []

        def running_and_committed() -> bool:
            now = run.receipts_committed()
            proc = run.receipts
            if proc is None or proc.poll() is not None or not now or not any(now.values()):
                return False
            before[:] = [now]
            return True

        await_or_fail(running_and_committed, run.args.step_timeout,
                      "the receipts processor to run and commit", 0.5)  # fmt: skip
        with run.lock:  # the watch starts its successor only after this snapshot
            old = run.receipts
            assert old is not None
            os.kill(old.pid, signal.SIGKILL)
            t_kill = time.monotonic()
            old.wait(timeout=30)
            # Where the dead one was: nothing moves the group's offsets until its
            # successor commits (a read failing while the broker restarts: the last seen).
            at_kill = next((c for _ in range(3) if (c := run.receipts_committed())), before[0])
        return Killed(old, t_kill, at_kill)

    def await_recovery(self, run: Chaos, made: Killed) -> Survived:
        how: list[str] = []

        def committed_again() -> bool:
            run.watch()
            proc = run.receipts
            if proc is None or proc is made.process or proc.poll() is not None:
                return False
            now = run.receipts_committed()
            if now is not None and committed_past(made.committed, now):
                how[:] = ["its successor committed past the kill's offsets"]
                return True
            s = run.settings
            if (
                run.stream_over()
                and now == made.committed
                and steps.group_caught_up(s, s.receipts.group_id, s.topics.transactions)
            ):
                how[:] = ["its successor runs, the group at the topic's end"]
                return True
            return False

        await_or_fail(committed_again, run.args.step_timeout,
                      "the restarted receipts processor to commit")  # fmt: skip
        return Survived(
            f"pid {made.process.pid} killed at {sum(made.committed.values()):,} committed "
            f"input offsets; {how[0]}",
            round(time.monotonic() - made.at, 1),
        )


FAULT = ReceiptsKill()
