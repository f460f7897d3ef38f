"""What the broker acknowledged, checked against what its log holds (issue 74).

An acknowledgement (`acks=all`, idempotent) says "appended at partition p, offset o".
A single broker killed with `kill -9` just after answering has, in chaos runs, come back
without such a record: its offset reopened and was given to the next one. Whatever the
cause, a terminal told "delivered" must not lose a receipt, so after a connection loss
the producer reads back what it was told and resends what is not there; the pipeline's
deduplication by natural key makes a resend safe in every view.

The check is pure (`unconfirmed`: acknowledgements + the records found at their offsets
-> the ones not there, each with the signature of how it went missing); `read_back` is
its shell (the Kafka port's reader).
"""

from __future__ import annotations

import enum
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from pos_lambda.adapters.kafka_clients import KafkaClients


class Missing(enum.Enum):
    """How an acknowledged record is not where its acknowledgement said."""

    # The offset holds another record: the log was cut below it and the offset reused.
    OFFSET_REUSED = "offset reused by another record"
    # The log ends at or before the offset: cut, and nothing appended since.
    BEYOND_LOG_END = "offset beyond the log end"
    # The log starts after it: deleted by retention before it could be checked.
    BELOW_LOG_START = "offset below the log start"
    # A success without an offset (librdkafka's answer to a retry the broker took for a
    # duplicate), and the same bytes nowhere in its partition's log since the window's
    # first acknowledged offset.
    NO_OFFSET = "acknowledged without an offset, not in the log"


@dataclass(frozen=True)
class Ack:
    """One delivery report that said "appended", and what was sent."""

    partition: int
    offset: int  # -1 when the report gave none
    key: bytes | None
    value: bytes | None
    timestamp_ms: int | None = None


Record = tuple[bytes | None, bytes | None]  # key, value
TO_THE_END = 2**63 - 1  # read a partition up to its log end
# How far before a partition's first acknowledged offset a success without an offset is
# looked for (the window's first acknowledgements may have come after it).
LOOKBACK = 10_000


def unconfirmed(
    acks: Iterable[Ack],
    records: Mapping[tuple[int, int], Record],
    logs: Mapping[int, tuple[int, int]],
) -> list[tuple[Ack, Missing]]:
    """The acknowledgements whose record is not at their offset. `records`: (partition,
    offset) -> (key, value) read back; `logs`: partition -> (log start, log end)."""
    missing = []
    held: dict[int, set[Record]] = {}  # partition -> every record read back
    for (partition, _), record in records.items():
        held.setdefault(partition, set()).add(record)
    for ack in acks:
        if ack.offset < 0:
            if (ack.key, ack.value) not in held.get(ack.partition, set()):
                missing.append((ack, Missing.NO_OFFSET))
            continue
        start, end = logs.get(ack.partition, (0, 0))
        found = records.get((ack.partition, ack.offset))
        if found == (ack.key, ack.value):
            continue
        if ack.offset >= end:
            missing.append((ack, Missing.BEYOND_LOG_END))
        elif ack.offset < start:
            missing.append((ack, Missing.BELOW_LOG_START))
        else:
            missing.append((ack, Missing.OFFSET_REUSED))
    return missing


def read_back(
    clients: KafkaClients, topic: str, acks: Sequence[Ack], timeout_s: float = 60.0
) -> tuple[dict[tuple[int, int], Record], dict[int, tuple[int, int]]]:
    """The records at the acknowledged offsets' range of each partition, and each
    partition's log start and end (read_committed, as the pipeline reads it)."""
    from confluent_kafka import KafkaError, TopicPartition

    wanted: dict[int, tuple[int, int]] = {}
    for ack in acks:
        if ack.offset >= 0:
            low, high = wanted.get(ack.partition, (ack.offset, ack.offset))
            wanted[ack.partition] = (min(low, ack.offset), max(high, ack.offset))
    # A success without an offset is looked for by its bytes: from LOOKBACK records
    # before the partition's first acknowledged offset (it may precede them all) to the
    # end of the log.
    for ack in acks:
        if ack.offset < 0:
            low, _ = wanted.get(ack.partition, (0, 0))
            wanted[ack.partition] = (max(0, low - LOOKBACK), TO_THE_END)
    reader = clients.reader()
    records: dict[tuple[int, int], Record] = {}
    logs: dict[int, tuple[int, int]] = {}
    try:
        todo: dict[int, int] = {}  # partition -> the last offset still to read
        assignment = []
        for partition, (low, high) in wanted.items():
            start, end = reader.get_watermark_offsets(
                TopicPartition(topic, partition), timeout=timeout_s
            )
            logs[partition] = (start, end)
            first, last = max(low, start), min(high, end - 1)
            if first <= last:
                todo[partition] = last
                assignment.append(TopicPartition(topic, partition, first))
        if assignment:
            reader.assign(assignment)
        deadline = time.monotonic() + timeout_s
        while todo:
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"reading {topic} back to check acknowledged records stalled with "
                    f"partitions {sorted(todo)} left after {timeout_s:.0f} s"
                )
            message = reader.poll(1.0)
            if message is None:
                continue
            part, offset = message.partition(), message.offset()
            err = message.error()
            if err is not None:
                # The end of a partition: its last offsets may be transaction markers
                # (the processors forward into this topic), which are never returned.
                if err.code() == KafkaError._PARTITION_EOF and part is not None:
                    todo.pop(part, None)
                continue
            if part is None or offset is None:  # a record always has both
                continue
            records[(part, offset)] = (message.key(), message.value())
            if part in todo and offset >= todo[part]:
                del todo[part]
    finally:
        reader.close()
    return records, logs
