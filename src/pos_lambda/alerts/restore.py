"""Rebuild a partition's rule state by re-reading the input up to an offset, silently.

The rule state is a pure function of the partition's records before the committed
offset (alerts/rules.py), so re-applying them without producing anything gives exactly
the state the previous owner had when it committed. A separate consumer outside the
group (`assign`, never commits) reads them, so the group's offsets are never touched.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Mapping
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition

from pos_lambda.alerts.rules import PartitionState, Rules, Source

log = logging.getLogger("pos.alerts")
BATCH = 1000


def rebuild(
    bootstrap: str,
    topic: str,
    partition: int,
    until: int,
    rules: Rules,
    timeout_s: float = 120.0,
    security: Mapping[str, str] | None = None,
) -> PartitionState:
    """The state after applying every record of `topic`/`partition` with offset < `until`.

    Raises KafkaException when the records cannot be read within `timeout_s`.
    """
    state = PartitionState()
    if until <= 0:
        return state
    consumer = Consumer(
        {
            **(security or {}),  # Settings.kafka.security_config: SASL login, TLS
            "bootstrap.servers": bootstrap,
            # Required by the client, never used: assign() only, no commits.
            "group.id": f"pos-alerts-restore-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            "log_level": 3,
        }
    )
    started = time.monotonic()
    try:
        low, _ = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=30)
        if low > 0:
            # Retention removed records the rules once saw: the rebuilt state misses them.
            log.warning(
                "%s[%d]: records before offset %d are gone (retention): conflicts and "
                "silences involving them cannot be detected",
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
                    return state
                source = Source(partition, int(msg.offset() or 0), msg.timestamp()[1])
                state.apply(rules, msg.value(), source)
            if _position(consumer, topic, partition) >= until:
                return state
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
