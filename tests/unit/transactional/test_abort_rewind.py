"""Issue 61: an aborted transaction must not lose its records' outputs.

The first commit_transaction of a run fails with an abortable error
(`txn_requires_abort`): the shell aborts, rewinds the consumer to the committed offsets
and replays. The replay must emit the very outputs the aborted transaction had: the
states of the partitions it read ran ahead of the committed offsets and must be rebuilt
(before the fix they were kept, so every replayed receipt looked like a resend of
itself: the output was empty and the offsets were committed past all 5 records).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from pos_lambda.alerts import processor as alerts
from pos_lambda.alerts.rules import alert_id
from pos_lambda.dedup import processor as dedup
from pos_lambda.producer.simulation import encode
from pos_lambda.schemas.contract import LineItem, Receipt
from pos_lambda.settings import Settings, load_settings
from tests.support.memory_kafka import ABORTABLE, Fault, MemoryBroker, MemoryClients
from tests.support.processor_harness import run_to_completion

IN, RECEIPTS, ALERTS = "pos.transactions", "pos.receipts", "pos.alerts"
FIRST_COMMIT_ABORTS = [Fault("producer.commit_transaction", 1, ABORTABLE)]


def settings() -> Settings:
    # One transaction holds all 5 records (the 100 ms window is virtual time).
    return load_settings(
        receipts_transaction_max_messages=10,
        alerts_transaction_max_messages=10,
        receipts_transaction_max_ms=100,
        alerts_transaction_max_ms=100,
    )


def receipts() -> list[bytes]:
    """5 receipts of one device, 5 minutes apart; the third one is worth 150.00."""
    start = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
    return [
        encode(
            Receipt(
                start + timedelta(minutes=5 * i),
                101,
                i + 1,
                1001,
                (LineItem("bread", Decimal("75.00") if i == 2 else Decimal("2.50"), 2),),
            )
        )
        for i in range(5)
    ]


def broker_with(values: list[bytes]) -> MemoryBroker:
    broker = MemoryBroker({IN: 1, RECEIPTS: 1, ALERTS: 1})
    for value in values:
        broker.append(IN, 0, value)
    broker.arm(FIRST_COMMIT_ABORTS)
    return broker


def test_receipts_survive_an_aborted_first_commit() -> None:
    inputs = receipts()
    broker = broker_with(inputs)

    run = run_to_completion(
        broker, lambda clients: dedup.processor(settings(), clients=clients), restarts=0
    )

    assert [str(f) for f in broker.faults.fired] == [str(FIRST_COMMIT_ABORTS[0])]
    out = broker.read_committed(RECEIPTS)
    assert [m.value() for m in out] == inputs, run.exits  # all 5, once, byte for byte
    assert [m.key() for m in out] == [f"101:1001:{i}".encode() for i in range(1, 6)]
    assert broker.committed_offsets("pos-receipts", IN) == {0: 5}
    assert run.exits == ["exit 0", "final: exit 0"]


def test_alerts_survive_an_aborted_first_commit() -> None:
    broker = broker_with(receipts())

    def make(clients: MemoryClients) -> alerts.Processor:
        s = settings()
        return alerts.Processor(s, alerts.rules_from(s), clients=clients)

    run = run_to_completion(broker, make, restarts=0)

    out = broker.read_committed(ALERTS)
    assert len(out) == 1, (run.exits, [m.value() for m in out])
    [alert] = out
    doc = json.loads(alert.value() or b"")
    assert (doc["rule"], doc["transaction_id"], doc["detail"]["revenue"]) == (
        "high_value", 3, "150.00",
    )  # fmt: skip
    assert alert.key() == alert_id("high_value", (101, 1001, 3)).encode()
    assert doc["source"]["offset"] == 2
    assert broker.committed_offsets("pos-alerts", IN) == {0: 5}
    assert run.exits == ["exit 0", "final: exit 0"]
