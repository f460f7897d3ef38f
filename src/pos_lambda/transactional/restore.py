"""Rebuild a partition's state by re-reading the input up to an offset, silently.

A step's state is a pure function of the partition's records before the committed
offset (transactional/step.py), so re-applying them and dropping the outputs gives exactly
the state the previous owner had when it committed. A separate consumer outside the
group (`assign`, never commits) reads them, so the group's offsets are never touched.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Mapping
from typing import Any, TypeVar

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition

from pos_lambda.transactional.step import Source, Step

log = logging.getLogger(__name__)
BATCH = 1000
S = TypeVar("S")


def rebuild(
    bootstrap: str,
    topic: str,
    partition: int,
    until: int,
    step: Step[S],
    timeout_s: float = 120.0,
    security: Mapping[str, str] | None = None,
) -> tuple[S, int]:
    """The state after applying every record of `topic`/`partition` with offset < `until`,
    and how many records that was.

    Raises KafkaException when the records cannot be read within `timeout_s`.
    """
    state = step.initial()
    if until <= 0:
        return state, 0
    consumer = Consumer(
        {
            **(security or {}),  # Settings.kafka.security_config: SASL login, TLS
            "bootstrap.servers": bootstrap,
            # Required by the client, never used: assign() only, no commits.
            "group.id": f"pos-restore-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            "log_level": 3,
        }
    )
    started = time.monotonic()
    applied = 0
    try:
        low, _ = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=30)
        if low > 0:
            # Retention removed records the step once saw: the rebuilt state misses them.
            log.warning(
                "%s[%d]: records before offset %d are gone (retention): copies, conflicts "
                "and silences involving them cannot be recognised",
                topic, partition, low,
            )  # fmt: skip
        consumer.assign([TopicPartition(topic, partition, OFFSET_BEGINNING)])
        while True:
            if time.monotonic() - started > timeout_s:
                raise KafkaException(
                    KafkaError(KafkaError._TIMED_OUT, f"rebuilding {topic}[{partition}]")
                )
            # consume() waits its whole timeout unless BATCH records arrive: keep it short,
            # a restore of a few records must not cost a second per partition.
            for msg in consumer.consume(BATCH, timeout=0.1):
                if _done(msg, until):
                    return state, applied
                source = Source(partition, int(msg.offset() or 0), msg.timestamp()[1])
                step.apply(state, msg.value(), source)  # outputs dropped: already committed
                applied += 1
            if _position(consumer, topic, partition) >= until:
                return state, applied
    finally:
        consumer.close()


def _done(msg: Any, until: int) -> bool:
    err = msg.error()
    if err is not None:
        if err.code() == KafkaError._PARTITION_EOF:
            return True  # the end of what read_committed may see: nothing more below `until`
        raise KafkaException(err)
    return bool(msg.offset() >= until)


def _position(consumer: Consumer, topic: str, partition: int) -> int:
    # Transaction markers occupy offsets but are never returned: the position still
    # passes them, so `until` is reached even when the last offsets below it are markers.
    [tp] = consumer.position([TopicPartition(topic, partition)])
    return int(tp.offset)
