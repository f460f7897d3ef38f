"""Rebuild a partition's state by re-reading the input up to an offset, silently.

A step's state is a pure function of the partition's records before the committed
offset (transactional/step.py), so re-applying them and dropping the outputs gives exactly
the state the previous owner had when it committed. A reader outside the group (`assign`,
never commits; adapters/kafka_clients.py) reads them, so the group's offsets are never
touched.

The rebuild is bounded by progress, not by a total: a long partition (about 1 s per 100k
records here) keeps going as long as records keep coming, logging how far it is; a
rebuild that reads nothing for `stall_s` fails with a message that says where it stopped.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, TypeVar

from confluent_kafka import OFFSET_BEGINNING, KafkaError, KafkaException, TopicPartition

from pos_lambda.adapters.kafka_clients import KafkaClients, KafkaConsumer
from pos_lambda.transactional.step import Source, Step

log = logging.getLogger(__name__)
BATCH = 1000
PROGRESS_EVERY_S = 10.0
S = TypeVar("S")


def rebuild(
    clients: KafkaClients,
    topic: str,
    partition: int,
    until: int,
    step: Step[S],
    stall_s: float = 120.0,
    clock: Callable[[], float] = time.monotonic,
) -> tuple[S, int]:
    """The state after applying every record of `topic`/`partition` with offset < `until`,
    and how many records that was.

    Raises KafkaException (`_TIMED_OUT`) when the reader's position has not moved for
    `stall_s`: the partition cannot be read (a leader gone, records unreadable).
    """
    state = step.initial()

    def apply(msg: Any, source: Source) -> bool:
        step.apply(state, msg.value(), source)  # outputs dropped: already committed
        return True

    applied = replay(clients, topic, partition, until, apply, stall_s, clock)
    return state, applied


def replay(
    clients: KafkaClients,
    topic: str,
    partition: int,
    until: int,
    apply: Callable[[Any, Source], bool],
    stall_s: float = 120.0,
    clock: Callable[[], float] = time.monotonic,
) -> int:
    """Hand every committed record of `topic`/`partition` with offset < `until` to
    `apply(message, source)`, in offset order; how many it applied (returned True for).
    The caller decides which state a record feeds (transactional/layout.py: after a
    change of the partition count, one partition's records feed several states).

    Raises KafkaException (`_TIMED_OUT`) when the reader's position has not moved for
    `stall_s`: the partition cannot be read (a leader gone, records unreadable).
    """
    if until <= 0:
        return 0
    consumer = clients.reader()
    started = last_progress = last_report = clock()
    applied, position = 0, -1
    try:
        low = _low_watermark(consumer, topic, partition)
        if low > 0:
            # Retention removed records the step once saw: the rebuilt state misses them.
            log.warning(
                "%s[%d]: records before offset %d are gone (retention): copies, conflicts "
                "and silences involving them cannot be recognised",
                topic, partition, low,
            )  # fmt: skip
        consumer.assign([TopicPartition(topic, partition, OFFSET_BEGINNING)])
        while True:
            # consume() waits its whole timeout unless BATCH records arrive: keep it short,
            # a restore of a few records must not cost a second per partition.
            for msg in consumer.consume(BATCH, timeout=0.1):
                err = msg.error()
                if err is not None and _informational(err, topic, partition):
                    continue
                if _done(msg, until):
                    return applied
                source = Source(partition, int(msg.offset() or 0), msg.timestamp()[1])
                applied += apply(msg, source)
            now_at = _position(consumer, topic, partition)
            if now_at >= until:
                return applied
            now = clock()
            if now_at > position:
                position, last_progress = now_at, now
            elif now - last_progress > stall_s:
                raise KafkaException(
                    KafkaError(
                        KafkaError._TIMED_OUT,
                        f"rebuilding {topic}[{partition}]: no progress for {stall_s:.0f} s at "
                        f"offset {max(position, 0)} of {until} (is the partition's leader "
                        "available? POS_<PROCESSOR>_RESTORE_STALL_S sets the limit)",
                    )
                )
            if now - last_report >= PROGRESS_EVERY_S:
                last_report = now
                log.info(
                    "%s[%d]: rebuilding, offset %d of %d (%d records applied, %.0f s)",
                    topic, partition, max(position, 0), until, applied, now - started,
                )  # fmt: skip
    finally:
        consumer.close()


def _low_watermark(consumer: KafkaConsumer, topic: str, partition: int) -> int:
    """The partition's first offset, for the retention warning only: 0 when the broker
    does not answer in time (the rebuild itself goes on and is bounded by progress)."""
    try:
        low, _ = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=30)
    except KafkaException as exc:
        log.warning("%s[%d]: no watermarks (%s): retention not checked", topic, partition, exc)
        return 0
    return int(low)


def _informational(err: KafkaError, topic: str, partition: int) -> bool:
    """A consumer error the client recovers from by itself (a connection lost, a broker
    moving): logged and read past; the stall limit bounds how long that may last."""
    if err.code() == KafkaError._PARTITION_EOF or err.fatal():
        return False
    log.warning("%s[%d]: rebuilding: %s", topic, partition, err)
    return True


def _done(msg: Any, until: int) -> bool:
    err = msg.error()
    if err is not None:
        if err.code() == KafkaError._PARTITION_EOF:
            return True  # the end of what read_committed may see: nothing more below `until`
        raise KafkaException(err)
    return bool(msg.offset() >= until)


def _position(consumer: KafkaConsumer, topic: str, partition: int) -> int:
    # Transaction markers occupy offsets but are never returned: the position still
    # passes them, so `until` is reached even when the last offsets below it are markers.
    [tp] = consumer.position([TopicPartition(topic, partition)])
    return int(tp.offset)
