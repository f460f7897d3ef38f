"""Reading topics back in integration tests."""

from __future__ import annotations

import time
import uuid
from typing import NamedTuple

from confluent_kafka import Consumer


class Record(NamedTuple):
    key: bytes | None
    value: bytes
    timestamp_ms: int


def read_committed(bootstrap: str, topic: str, expect: int, timeout: float = 60.0) -> list[Record]:
    """Every committed record of `topic` from the start (read_committed).

    Reads on past `expect` until a few polls come back empty, so records beyond
    `expect` (which must not exist) would be seen too; gives up after `timeout`.
    """
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"test-{uuid.uuid4().hex}",
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    records: list[Record] = []
    quiet_polls, deadline = 0, time.monotonic() + timeout
    try:
        while time.monotonic() < deadline and not (len(records) >= expect and quiet_polls >= 4):
            msg = consumer.poll(0.5)
            if msg is None:
                quiet_polls += 1
            elif not msg.error():
                quiet_polls = 0
                records.append(Record(msg.key(), msg.value(), msg.timestamp()[1]))
    finally:
        consumer.close()
    return records
