"""The alerts processor killed mid-transaction: stopped, started again armed to kill
itself in its first transaction that produces alerts (the alerts on the broker, the
commit not made), sent a conflicting copy held back from the stream (`hold_back`) so
that such a transaction comes even after the stream. The watch notes the kill and starts
the processor again, unarmed. Recovered when its successor commits: the group's
committed offsets move past those at the kill."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

from pos_lambda.producer.simulation import OutgoingMessage
from pos_lambda_dev.demo.chaos_context import Chaos
from pos_lambda_dev.demo.faults.base import Fault, Survived
from pos_lambda_dev.demo.steps import await_or_fail, stop_gracefully


def _natural_key(message: OutgoingMessage) -> tuple[int, int, int]:
    doc = json.loads(message.value)
    return doc["operation_id"], doc["vendor_fiscal_module"], doc["transaction_id"]


def hold_back(run: Chaos, messages: list[OutgoingMessage], count: int) -> list[OutgoingMessage]:
    """The stream without its first `count` conflicting copies (one per alerts kill),
    kept on `run.held` with the number of stream messages to send before each (through
    its original, which must win). A copy sent later, after its original, with its own
    timestamp, feeds only the conflict rule: every view and alert the ledger implies
    stays the same. The first copies, so that their originals are out early."""
    at = [i for i, m in enumerate(messages) if m.kind == "conflict"][:count] if count else []
    skip = set(at)
    stream = [m for i, m in enumerate(messages) if i not in skip]
    first: dict[tuple[int, int, int], int] = {}
    for i, m in enumerate(stream):
        if m.kind == "receipt":
            first.setdefault(_natural_key(m), i)
    run.held = [(messages[i], first[_natural_key(messages[i])] + 1) for i in at]
    return stream


@dataclass(frozen=True)
class KilledItself:
    at: float  # monotonic time the watch saw the kill
    committed: dict[int, int] | None  # the group's offsets then (None: not readable)
    triggered_by_held_copy: bool


class AlertsKill(Fault[KilledItself]):
    name = "alerts_kill"
    label = "kill -9 of the alerts processor mid-transaction"
    slots = (9, 10)
    table_rank = 6

    def strike(self, run: Chaos) -> KilledItself:
        with run.lock:  # the watch must not start it meanwhile
            old, run.alerts = run.alerts, None
        if old is not None:
            stop_gracefully(old, 60)
        made = len(run.alerts_kills)
        with run.lock:
            run.alerts_armed = True
            run.start_alerts()
        # A copy whose original is out already; else the stream's own alerts strike.
        ready = [i for i, (_, after) in enumerate(run.held) if after <= run.sent()]
        trigger = run.held.pop(ready[0])[0] if ready else None
        if trigger is not None:
            run.send(trigger)
        await_or_fail(
            lambda: len(run.alerts_kills) > made,
            run.args.step_timeout,
            "the alerts processor to reach its crash point",
        )
        t_kill, before = run.alerts_kills[made]
        return KilledItself(t_kill, before, trigger is not None)

    def await_recovery(self, run: Chaos, made: KilledItself) -> Survived:
        before = made.committed

        def committed_again() -> bool:
            nonlocal before
            now = run.alerts_committed()
            if before is None:  # no snapshot at the kill: measure from this one
                before = now
                return False
            return now is not None and now != before

        await_or_fail(committed_again, run.args.step_timeout, "the restarted alerts processor "
                      "to commit")  # fmt: skip
        how = "a held-back conflicting copy sent" if made.triggered_by_held_copy else "the stream's"
        return Survived(
            f"killed itself in its first transaction with alerts ({how}), the alerts on "
            "the broker, uncommitted; its successor committed",
            round(time.monotonic() - made.at, 1),
        )


FAULT = AlertsKill()
