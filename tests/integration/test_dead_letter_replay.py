"""`pos-speed replay-dead-letters` against real Kafka, Cassandra, Spark and Delta.

Records are produced by hand (literal values), the speed layer runs over them once,
and dead letters are replayed with a filter. Two dead letters stand for records that an
older release's validator refused and today's accepts (rows written as that release
wrote them: the whole value, a reason, Kafka coordinates of a topic incarnation the
current views never read): one is a copy of a receipt the views already count, one a
receipt they lack. Expected views are literal sums of the records' line items.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest

from pos_lambda.schemas import cql as tables
from pos_lambda.settings import Settings
from tests.integration.speed_helpers import (
    VENV_BIN,
    device_key,
    env_for,
    ms,
    produce_raw,
    raw_rows,
    receipt_json,
    run_available_now,
    speed_aggregates,
)

pytestmark = pytest.mark.integration

STORE = 7
AT = datetime(2026, 3, 2, 8, tzinfo=UTC)
SENT_AFTER = timedelta(seconds=5)  # Kafka received each record 5 s after it happened


def _at(minute: int) -> datetime:
    return AT + timedelta(minutes=minute)


def _item(title: str, price: str, amount: int) -> dict[str, Any]:
    return {"title": title, "price": price, "amount": amount}


R1 = receipt_json(STORE, 1, 1, _at(1), [_item("Espresso", "1.90", 2)])  # 3.80, qty 2
R2 = receipt_json(STORE, 1, 2, _at(2), [_item("Tea", "2.50", 1)])  # 2.50, qty 1
R3 = receipt_json(STORE, 2, 1, _at(20), [_item("Cake", "3.20", 3)])  # 9.60, qty 3
S2 = receipt_json(STORE, 2, 2, _at(21), [_item("Water", "1.10", 4)])  # 4.40, qty 4
NOT_JSON = b'{"happened_at": "2026-03-02T08:03:00+00:00", "operation_id": 7'
# 201 line items: too many (the contract allows 200), and over the dead letter's
# 4 KiB prefix, so a replay takes its bytes from the master dataset.
TOO_MANY = receipt_json(STORE, 1, 3, _at(4), [_item("Gum", "0.50", 1)] * 201)
WRONG_TYPE = json.dumps(
    {"happened_at": _at(5).isoformat(), "operation_id": "seven", "transaction_id": 4,
     "vendor_fiscal_module": 1, "transactions": [_item("Tea", "2.50", 1)]}
).encode()  # fmt: skip

BEFORE_REPLAY = {
    (STORE, datetime(2026, 3, 2, 8, 0)): (2, 3, Decimal("6.30"), 0),  # R1, R2
    (STORE, datetime(2026, 3, 2, 8, 15)): (1, 3, Decimal("9.60"), 0),  # R3
}
AFTER_REPLAY = {
    (STORE, datetime(2026, 3, 2, 8, 0)): (2, 3, Decimal("6.30"), 0),  # R1 (+ its copy), R2
    (STORE, datetime(2026, 3, 2, 8, 15)): (2, 7, Decimal("14.00"), 0),  # R3, S2
}


def _older_release_dead_letter(
    cql: Any, topic: str, partition: int, offset: int, value: bytes, at: datetime, key: bytes
) -> None:
    cql.execute(
        f"INSERT INTO {tables.DEAD_LETTERS_TABLE} (kafka_topic, kafka_partition, kafka_offset, "
        "kafka_timestamp, kafka_key, raw_value, value_length, value_sha256, reason, detail) "
        "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
        (topic, partition, offset, at + SENT_AFTER, key, value, len(value),
         hashlib.sha256(value).hexdigest(), "bad_price", "an older validator's bug"),
    )  # fmt: skip


def _replay(settings: Settings, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(VENV_BIN / "pos-speed"), "replay-dead-letters", *args],
        env=env_for(settings),
        capture_output=True,
        text=True,
        timeout=300,
    )


def _summary(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    summary: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return summary


def _log_end(settings: Settings) -> int:
    """Records in the topic: the sum of its partitions' high watermarks."""
    from confluent_kafka import Consumer, TopicPartition

    topic = settings.topics.transactions
    consumer = Consumer({"bootstrap.servers": settings.bootstrap_servers, "group.id": "t"})
    try:
        parts = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        return sum(
            consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in parts
        )
    finally:
        consumer.close()


def _dead_letters(cql: Any) -> list[Any]:
    return cql.execute(f"SELECT * FROM {tables.DEAD_LETTERS_TABLE}").all()


def test_replay_sends_what_a_fix_makes_valid_once_and_a_second_replay_counts_nothing_twice(
    spark: Any, isolated: tuple[Settings, Any]
) -> None:
    settings, cql = isolated
    topic = settings.topics.transactions
    records = [  # (value, happened at minute, device)
        (R1, 1, 1), (R2, 2, 1), (NOT_JSON, 3, 1), (TOO_MANY, 4, 1), (WRONG_TYPE, 5, 1),
        (R3, 20, 2),
    ]  # fmt: skip
    produce_raw(
        settings,
        [v for v, _, _ in records],
        timestamps=[ms(_at(m) + SENT_AFTER) for _, m, _ in records],
        keys=[device_key(STORE, d) for _, _, d in records],
    )
    run_available_now(spark, settings)
    assert speed_aggregates(cql) == BEFORE_REPLAY
    reasons = sorted(r.reason for r in _dead_letters(cql))
    assert reasons == ["invalid_json", "too_many_items", "wrong_type:operation_id"]
    # An older release refused a copy of R1 and the receipt S2 (its "bad_price").
    _older_release_dead_letter(cql, topic, 0, 900_001, R1, _at(1), device_key(STORE, 1))
    _older_release_dead_letter(cql, topic, 1, 900_002, S2, _at(21), device_key(STORE, 2))

    # Bad arguments: exit 2, what is valid, nothing sent.
    bad = _replay(settings, "--reason", "bad_prices", "--since", "2026-03-01T00:00Z")
    assert bad.returncode == 2 and "valid reasons" in bad.stderr and "  bad_price  " in bad.stderr
    bad = _replay(settings, "--reason", "bad_price", "--since", "last week")
    assert bad.returncode == 2 and "(90m, 24h, 7d)" in bad.stderr

    # A dry run lists the two and sends nothing; --since after them selects none.
    dry = _replay(settings, "--reason", "bad_price", "--since", "2026-03-02T00:00Z", "--dry-run")
    listed = dry.stdout.splitlines()[:-1]
    assert [line.split()[0] for line in listed] == [f"{topic}/0@900001", f"{topic}/1@900002"]
    assert _summary(dry)["would_send"] == 2 and _summary(dry)["sent"] == 0
    assert _log_end(settings) == 6
    late = _summary(_replay(settings, "--reason", "bad_price", "--since", "2026-03-02T08:30Z"))
    assert (late["selected"], late["sent"]) == (0, 0)

    # The replay: S2 counts now, R1's copy is a resend (one receipt per natural key).
    sent = _summary(_replay(settings, "--reason", "bad_price", "--since", "2026-03-02T00:00Z"))
    assert (sent["selected"], sent["sent"], sent["from_master_dataset"]) == (2, 2, 0)
    assert _log_end(settings) == 8
    run_available_now(spark, settings)
    assert speed_aggregates(cql) == AFTER_REPLAY
    assert set(raw_rows(cql)) == {(STORE, 1, 1), (STORE, 1, 2), (STORE, 2, 1), (STORE, 2, 2)}

    # A dead letter holding a prefix: the whole value from the master dataset; still
    # invalid, so it is a dead letter again, with the same bytes at a new offset.
    big = _summary(_replay(settings, "--reason", "too_many_items", "--since", "2026-03-02T00:00Z"))
    assert (big["sent"], big["from_master_dataset"]) == (1, 1)
    run_available_now(spark, settings)
    copies = [r for r in _dead_letters(cql) if r.reason == "too_many_items"]
    assert len(copies) == 2
    assert {(r.value_length, r.value_sha256) for r in copies} == {
        (len(TOO_MANY), hashlib.sha256(TOO_MANY).hexdigest())
    }
    assert len(TOO_MANY) > 4096 and all(len(r.raw_value) == 4096 for r in copies)

    # Both replays again: the same records are sent (one per value: the two dead
    # letters of TOO_MANY are one value), and the views count nothing twice.
    again = _summary(_replay(settings, "--reason", "bad_price", "--since", "2026-03-02T00:00Z"))
    assert again["sent"] == 2
    big = _summary(_replay(settings, "--reason", "too_many_items", "--since", "2026-03-02T00:00Z"))
    assert (big["selected"], big["sent"], big["same_value_skipped"]) == (1, 1, 1)
    assert _log_end(settings) == 8 + 1 + 2 + 1
    run_available_now(spark, settings)
    assert speed_aggregates(cql) == AFTER_REPLAY
    assert len(raw_rows(cql)) == 4
    assert sorted(r.reason for r in _dead_letters(cql)) == [
        "bad_price", "bad_price", "invalid_json", "too_many_items", "too_many_items",
        "too_many_items", "wrong_type:operation_id",
    ]  # fmt: skip
