"""The simulator against the real Kafka: N unique receipts, N + resends messages."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime

import pytest
from confluent_kafka import Consumer

from producer.kafka_sink import produce
from producer.simulation import FaultConfig, SimulationConfig, simulate
from schemas.contract import Receipt, parse_message

pytestmark = pytest.mark.integration


def _consume_all(bootstrap: str, topic: str, expect: int, timeout: float = 60) -> list[bytes]:
    """Every committed record of `topic`, reading on past `expect` until it stays quiet."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"producer-test-{uuid.uuid4().hex}",
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    values: list[bytes] = []
    quiet_polls, deadline = 0, time.monotonic() + timeout
    try:
        while time.monotonic() < deadline and not (len(values) >= expect and quiet_polls >= 4):
            msg = consumer.poll(0.5)
            if msg is None:
                quiet_polls += 1
            elif not msg.error():
                quiet_polls = 0
                values.append(msg.value())
    finally:
        consumer.close()
    return values


def test_n_receipts_with_resends_reach_kafka_exactly(
    kafka_bootstrap: str, new_topic: Callable[..., str]
) -> None:
    topic = new_topic(partitions=4)
    result = simulate(
        SimulationConfig(
            count=500,
            seed=42,
            start=datetime(2026, 3, 2, 8, tzinfo=UTC),
            faults=FaultConfig(resend_rate=0.05),
        )
    )
    resends = result.summary["faults"]["resend"]
    assert resends > 0
    stats = produce(result.messages, kafka_bootstrap, topic, quiet=True)
    assert stats.acked == 500 + resends

    values = _consume_all(kafka_bootstrap, topic, expect=500 + resends)
    assert len(values) == 500 + resends
    receipts = [parse_message(v) for v in values]
    assert all(isinstance(r, Receipt) for r in receipts)
    assert len({r.natural_key for r in receipts if isinstance(r, Receipt)}) == 500


def test_cli_says_what_to_fix_for_a_missing_topic(
    kafka_bootstrap: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from producer.cli import main

    code = main(["simulate", "--count", "1", "--topic", f"missing.{uuid.uuid4().hex}",
                 "--bootstrap-servers", kafka_bootstrap, "--quiet"])  # fmt: skip
    assert code == 1
    err = capsys.readouterr().err
    assert "does not exist" in err and "--create-topic" in err
