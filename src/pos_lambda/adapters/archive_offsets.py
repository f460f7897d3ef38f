"""How far the archiver has archived, in Kafka's own terms.

Spark's Kafka source keeps its offsets in its checkpoint, not in Kafka. The archiver
also commits each micro-batch's end offsets to the consumer group
POS_SPEED_ARCHIVER_GROUP once the master dataset holds them (Spark reports a
micro-batch's progress after its sink has committed it), so that:

- Kafka's own tools show the archiver's lag
  (`kafka-consumer-groups.sh --describe --group pos-archiver`);
- the batch DAG's `await_archive` starts an hour's recompute once every record Kafka
  received before the hour's end is in the master dataset, however far the archiver
  runs behind (it yields the cores to the views query: minutes at 1,000 events/s),
  instead of after a fixed grace that a busy archiver overruns.

The comparison is pure (`lag`); the shell reads the offsets (`archived_until`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pos_lambda.adapters.kafka_clients import ConfluentClients, KafkaAdmin, KafkaOffsetsReader
from pos_lambda.settings import Settings

log = logging.getLogger("pos.archive")

# librdkafka's answer when no record has a timestamp at or after the one asked for.
_NO_OFFSET = -1


def end_offsets(source_end_offset: str | Mapping[str, Any] | None, topic: str) -> dict[int, int]:
    """A Kafka source's endOffset as Spark reports it ({"topic": {"0": 12, ...}}, parsed
    in `StreamingQuery.lastProgress` and the project's listeners, or as its JSON text):
    partition -> the next offset to read, of `topic` only."""
    if not source_end_offset:
        return {}
    parsed = (
        json.loads(source_end_offset) if isinstance(source_end_offset, str) else source_end_offset
    )
    return {int(p): int(o) for p, o in parsed.get(topic, {}).items()}


@dataclass(frozen=True)
class ArchiveLag:
    """Per partition, the offset every record before the instant is below (`needed`),
    and the archiver's committed offset (None: nothing committed yet)."""

    needed: Mapping[int, int]
    committed: Mapping[int, int | None]

    @property
    def behind(self) -> dict[int, int]:
        """Partition -> records still to archive (only partitions that are behind)."""
        return {
            p: need - (self.committed.get(p) or 0)
            for p, need in self.needed.items()
            if need > (self.committed.get(p) or 0)
        }

    @property
    def done(self) -> bool:
        return not self.behind

    def describe(self) -> str:
        if self.done:
            return "the master dataset holds every record before the instant"
        behind = self.behind
        parts = ", ".join(f"partition {p}: {n:,}" for p, n in sorted(behind.items()))
        return f"{sum(behind.values()):,} records still to archive ({parts})"


def lag(
    at_or_after: Mapping[int, int], log_end: Mapping[int, int], committed: Mapping[int, int | None]
) -> ArchiveLag:
    """The archiver's lag behind an instant. at_or_after: per partition, the offset of
    the first record at or after the instant (-1: none yet); log_end: the offset after
    the last committed record. With no record at or after the instant, every record
    there is (up to the log's end) came before it."""
    needed = {
        p: (log_end[p] if offset == _NO_OFFSET else offset) for p, offset in at_or_after.items()
    }
    return ArchiveLag(needed=needed, committed={p: committed.get(p) for p in needed})


def _consumer(settings: Settings) -> KafkaOffsetsReader:
    # read_committed: the log's end as the speed layer reads it, the last stable offset.
    clients = ConfluentClients.from_settings(settings)
    return clients.offsets_reader(settings.speed.archiver_group, log_level=2)


def archived_until(settings: Settings, instant: datetime, timeout_s: float = 10.0) -> ArchiveLag:
    """How far the archiver is from holding every record Kafka received before `instant`
    (by the records' Kafka timestamps)."""
    from confluent_kafka import TopicPartition

    topic = settings.topics.transactions
    consumer = _consumer(settings)
    try:
        metadata = consumer.list_topics(topic, timeout=timeout_s).topics[topic]
        if metadata.error is not None:
            raise RuntimeError(f"topic {topic}: {metadata.error}")
        partitions = sorted(metadata.partitions)
        millis = int(instant.timestamp() * 1000)
        found = consumer.offsets_for_times(
            [TopicPartition(topic, p, millis) for p in partitions], timeout=timeout_s
        )
        log_end = {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout_s)[1]
            for p in partitions
        }
        committed = consumer.committed(
            [TopicPartition(topic, p) for p in partitions], timeout=timeout_s
        )
    finally:
        consumer.close()
    return lag(
        {tp.partition: tp.offset for tp in found},
        log_end,
        {tp.partition: (tp.offset if tp.offset >= 0 else None) for tp in committed},
    )


class OffsetsCommitter:
    """Commits a query's end offsets to the archiver's consumer group, each time Spark
    reports a micro-batch (from a StreamingQueryListener: see archiver_job).

    A commit that fails is sent again: at the next micro-batch, or at the query's next
    idle event when no micro-batch comes (the batch layer's `await_archive` waits for
    these offsets; nothing else would move them). And it is sent by a fresh admin client:
    after a broker's hard restart, librdkafka's client timed out on every commit for as
    long as the chaos run watched (minutes), while a new one commits at once.
    """

    def __init__(self, settings: Settings, admin: Callable[[], KafkaAdmin] | None = None):
        self.group = settings.speed.archiver_group
        self.topic = settings.topics.transactions
        self._new_admin = admin or ConfluentClients.from_settings(settings).admin
        self._admin: KafkaAdmin | None = self._new_admin()
        self._last: dict[int, int] = {}  # committed
        self._wanted: dict[int, int] = {}  # the newest asked for

    def close(self) -> None:
        """Let the client go (its threads end when it is collected); commits stop."""
        self._admin = None

    def commit(self, offsets: Mapping[int, int]) -> None:
        """Commit these partition offsets (unchanged ones are not sent again). A failure
        is logged, never raised: the archive is unaffected, and the offsets are sent
        again by `retry` or the next commit."""
        if self._admin is None or not offsets:
            return
        self._wanted = dict(offsets)
        self.retry()

    def retry(self) -> None:
        """Send the newest offsets asked for, unless they are committed already."""
        from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

        offsets = self._wanted
        admin = self._admin
        if admin is None or not offsets or offsets == self._last:
            return
        request = ConsumerGroupTopicPartitions(
            self.group, [TopicPartition(self.topic, p, o) for p, o in sorted(offsets.items())]
        )
        try:
            for future in admin.alter_consumer_group_offsets([request]).values():
                future.result(timeout=30)
        except Exception as exc:  # Kafka away, or this client wedged since a broker restart
            log.warning(
                "could not commit the archiver's offsets to %s: %s; a fresh client sends "
                "them again",
                self.group,
                str(exc) or type(exc).__name__,  # a timeout's message is empty
            )
            self._admin = self._new_admin()
            return
        self._last = dict(offsets)
