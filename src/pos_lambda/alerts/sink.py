"""The alert sink: `pos.alerts` (read_committed) into the Cassandra table `alerts`.

    pos-alerts sink                     # continuous, until SIGTERM/Ctrl-C
    pos-alerts sink --until-caught-up   # what is committed now, then exit
    make alerts-sink

Reads only committed alerts (`isolation.level=read_committed`: an aborted transaction's
alerts never reach the table), upserts each by its alert id, and commits the consumer's
offsets only after the writes are acknowledged. A crash in between replays the batch,
which rewrites the same rows: the table shows every alert once.

Only the processor writes the topic, but anything can land there: a record the sink
cannot read as an alert (not JSON, not an object, a field missing or of the wrong type,
an instant out of range) is a *foreign* record: logged with its topic, partition and
offset, counted, skipped and committed past, so it never stops the sink or comes back.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from typing import Any, NamedTuple

from confluent_kafka import KafkaError, KafkaException

from pos_lambda.adapters.kafka_clients import ConfluentClients, KafkaClients
from pos_lambda.adapters.service import ServiceError
from pos_lambda.alerts.rules import Alert, NotAnAlert
from pos_lambda.schemas import cql
from pos_lambda.settings import Settings

log = logging.getLogger("pos.alerts.sink")
COLUMNS = (
    "alert_id",
    "rule",
    "operation_id",
    "vendor_fiscal_module",
    "transaction_id",
    "happened_at",
    "detail",
    "source_partition",
    "source_offset",
    "payload",
)
_BATCH = 500


class SinkResult(NamedTuple):
    written: int  # alert rows upserted (a replay counts its rewrites again)
    foreign: int  # records skipped: not alerts


def row(alert: Alert, payload: bytes) -> tuple[Any, ...]:
    """The `alerts` row of one alert (COLUMNS order)."""
    return (
        alert.alert_id,
        alert.rule,
        alert.operation_id,
        alert.vendor_fiscal_module,
        alert.transaction_id,
        alert.happened_at,
        alert.detail,
        alert.source.partition,
        alert.source.offset,
        payload.decode(),
    )


def run_sink(
    settings: Settings,
    stop: threading.Event,
    until_caught_up: bool = False,
    clients: KafkaClients | None = None,
) -> SinkResult:
    """Copy committed alerts into Cassandra until `stop` (or, with `until_caught_up`, until
    every assigned partition is read to its last stable offset)."""
    from cassandra.cluster import NoHostAvailable
    from cassandra.concurrent import execute_concurrent_with_args

    from pos_lambda.adapters import cassandra_client

    try:
        opened = cassandra_client.open_session(settings, writes=True)
    except NoHostAvailable as exc:
        raise ServiceError(f"cannot reach Cassandra: is it running? try `make up` ({exc})") from exc
    session = opened.session
    insert = cassandra_client.prepare_idempotent(
        session,
        f"INSERT INTO {cql.ALERTS_TABLE} ({', '.join(COLUMNS)}) "
        f"VALUES ({', '.join('?' for _ in COLUMNS)})",
    )
    consumer = (clients or ConfluentClients.from_settings(settings)).group_consumer(
        settings.alerts.sink_group_id, partition_eof=until_caught_up
    )
    consumer.subscribe([settings.topics.alerts])
    written, foreign, at_end = 0, 0, set[int]()
    try:
        while not stop.is_set():
            msgs = consumer.consume(_BATCH, timeout=0.5)
            rows, skipped = _rows(msgs, at_end)
            foreign += skipped
            if rows:
                execute_concurrent_with_args(session, insert, rows, concurrency=32)
                written += len(rows)
            if any(m.error() is None for m in msgs):
                consumer.commit(asynchronous=False)  # after the writes: a replay rewrites
            assigned = {tp.partition for tp in consumer.assignment()}
            if until_caught_up and assigned and assigned <= at_end:
                break
    finally:
        consumer.close()
        opened.close()
    log.info("wrote %d alert rows, skipped %d foreign records", written, foreign)
    return SinkResult(written, foreign)


def _rows(msgs: Iterable[Any], at_end: set[int]) -> tuple[list[tuple[Any, ...]], int]:
    """The rows of the alerts among `msgs` and how many records were foreign."""
    rows: list[tuple[Any, ...]] = []
    foreign = 0
    for msg in msgs:
        err = msg.error()
        if err is not None:
            if err.code() == KafkaError._PARTITION_EOF:
                at_end.add(msg.partition())
                continue
            if err.fatal():
                raise KafkaException(err)
            log.warning("consumer: %s", err)
            continue
        at_end.discard(msg.partition())
        try:
            alert = Alert.from_json(msg.value())
        except NotAnAlert as exc:
            # Only the processor writes this topic; a foreign record is reported, not fatal.
            log.error("foreign record (not an alert) at %s[%d]@%d: %s", msg.topic(),
                      msg.partition(), msg.offset(), exc)  # fmt: skip
            foreign += 1
            continue
        rows.append(row(alert, msg.value()))
    return rows, foreign
