"""The simulator against the real Kafka: N unique receipts, N + resends messages."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime

import pytest

from producer.kafka_sink import produce
from producer.simulation import FaultConfig, SimulationConfig, simulate
from schemas.contract import Receipt, parse_message
from tests.integration.kafka_helpers import read_committed

pytestmark = pytest.mark.integration


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

    values = [r.value for r in read_committed(kafka_bootstrap, topic, expect=500 + resends)]
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
