"""The producer against the real Kafka: N unique receipts, N + resends messages.

.venv/bin/python -m pytest tests/integration/test_producer_kafka.py
"""

from __future__ import annotations

import json
import uuid
from collections import Counter
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

import pytest

from pos_lambda.producer import ledger
from pos_lambda.producer.cli import main
from pos_lambda.schemas.contract import Receipt, parse_message
from tests.integration.kafka_helpers import read_committed

pytestmark = pytest.mark.integration


def test_n_receipts_with_resends_reach_kafka_exactly(
    kafka_bootstrap: str, new_topic: Callable[..., str], tmp_path: Path
) -> None:
    topic, led = new_topic(partitions=4), tmp_path / "ledger"
    code = main(["simulate", "--count", "500", "--seed", "42", "--resend-rate", "0.05",
                 "--start", "2026-03-02T08:00:00+00:00", "--ledger", str(led),
                 "--topic", topic, "--bootstrap-servers", kafka_bootstrap, "--quiet"])  # fmt: skip
    assert code == 0
    summary = ledger.load_summary(led)
    resends = summary["faults"]["resend"]
    assert resends > 0
    assert summary["topic"] == topic
    assert summary["delivery"]["status"] == "complete"
    assert summary["delivery"]["acked"] == 500 + resends == summary["messages"]

    records = read_committed(kafka_bootstrap, topic, expect=500 + resends)
    assert len(records) == 500 + resends
    receipts = [parse_message(r.value) for r in records]
    assert all(isinstance(r, Receipt) for r in receipts)
    keys = [r.natural_key for r in receipts if isinstance(r, Receipt)]
    expected = ledger.load_receipts(led)
    assert len(set(keys)) == 500 and set(keys) == set(expected)

    # The record timestamp is the simulated send time: the first copy's is first_sent_at.
    first_ms: dict[tuple[int, int, int], int] = {}
    for key, record in zip(keys, records, strict=True):
        first_ms[key] = min(first_ms.get(key, record.timestamp_ms), record.timestamp_ms)
        assert record.key == f"{key[0]}:{key[1]}".encode()
    for key, line in expected.items():
        assert first_ms[key] == datetime.fromisoformat(line["first_sent_at"]).timestamp() * 1000


def test_cli_says_what_to_fix_for_a_missing_topic(
    kafka_bootstrap: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    led = tmp_path / "ledger"
    code = main(["simulate", "--count", "1", "--topic", f"missing.{uuid.uuid4().hex}",
                 "--bootstrap-servers", kafka_bootstrap, "--quiet",
                 "--ledger", str(led)])  # fmt: skip
    assert code == 1
    err = capsys.readouterr().err
    assert "does not exist" in err and "make topics" in err and "--create-topic" in err
    assert not led.exists()  # checked before anything was written


def test_create_topic_then_replay_a_file(
    kafka_bootstrap: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    topic, out = f"test.replay.{uuid.uuid4().hex[:10]}", tmp_path / "m.jsonl"
    assert main(["simulate", "--count", "20", "--seed", "1", "--output", str(out),
                 "--malformed-rate", "0.5"]) == 0  # fmt: skip
    summary = json.loads(capsys.readouterr().out)
    assert main(["replay", str(out), "--topic", topic, "--create-topic",
                 "--bootstrap-servers", kafka_bootstrap, "--quiet"]) == 0  # fmt: skip
    records = read_committed(kafka_bootstrap, topic, expect=summary["messages"])
    lines = out.read_bytes().splitlines()
    assert len(records) == len(lines) == 20 + summary["faults"]["malformed"]
    # Partitions interleave, so compare as multisets; valid receipts carry their device key.
    assert Counter(r.value for r in records) == Counter(lines)
    assert {r.value for r in records if r.key is not None} == {
        line for line in lines if isinstance(parse_message(line), Receipt)
    }


def test_acknowledgements_are_checked_against_the_real_log(
    kafka_bootstrap: str, new_topic: Callable[..., str]
) -> None:
    """A producer passed in (its connection not watched) has every acknowledgement read
    back from the real broker: all there, nothing resent. The same read-back finds an
    acknowledgement whose offset holds another record, or lies past the log's end."""
    from pos_lambda.adapters.kafka_clients import ConfluentClients
    from pos_lambda.producer.acknowledged import Ack, Missing, read_back, unconfirmed
    from pos_lambda.producer.kafka_sink import produce
    from pos_lambda.producer.simulation import OutgoingMessage

    topic = new_topic(partitions=2)
    clients = ConfluentClients(kafka_bootstrap)
    messages = [
        OutgoingMessage(f"101:{n % 4}".encode(), f"receipt {n}".encode(), 0, "receipt")
        for n in range(200)
    ]
    stats = produce(messages, kafka_bootstrap, topic, quiet=True, producer=clients.producer())
    assert (stats.acked, stats.checked, stats.resent, stats.unconfirmed) == (200, 200, 0, {})

    acks = [Ack(0, 0, b"101:9", b"not what is at offset 0"), Ack(1, 10_000, b"k", b"v")]
    records, logs = read_back(clients, topic, acks)
    assert unconfirmed(acks, records, logs) == [
        (acks[0], Missing.OFFSET_REUSED),
        (acks[1], Missing.BEYOND_LOG_END),
    ]
