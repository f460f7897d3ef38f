"""The auditor's reads (imperative shell): the views as users read them, plus progress.

Cassandra views go through the serving layer's own adapter (`pos_lambda.serving.views.Views`:
the batch pointer, the committed batch versions, the speed views, conflicts) and its
API (`serving.Serving.windows`, the merged answer); the tables the serving layer does
not read (receipt_keys, dead letters with their raw bytes, the alerts table) through
a session from the one driver builder (`pos_lambda.adapters.cassandra_client`). Alerts and the
deduplicated receipts in Kafka are read with `read_committed`, as every consumer of
`pos.alerts` and `pos.receipts` must; a receipt record's message is read here, with the
standard library and Decimal, not with the pipeline's contract code. Rows leave here
as the plain tuples of `pos_lambda.audit.expectations`.
"""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

from pos_lambda.adapters.cassandra_client import OpenSession
from pos_lambda.adapters.kafka_clients import KafkaConsumer
from pos_lambda.audit.expectations import (
    AlertIdentity,
    IndexRow,
    RawRow,
    TopicRow,
    WindowKey,
)
from pos_lambda.schemas import cql
from pos_lambda.schemas.aggregate import Aggregate
from pos_lambda.schemas.contract import NaturalKey
from pos_lambda.serving import Serving
from pos_lambda.serving.errors import UnknownStore
from pos_lambda.serving.gaps import GapsAnswer
from pos_lambda.serving.merge import day_bounds
from pos_lambda.serving.model import Pointer, Receipt, Segment, Window
from pos_lambda.serving.views import utc
from pos_lambda.settings import Settings
from pos_lambda.views.windows import window_start

PAGE = 1000
KAFKA_TIMEOUT_S = 120.0
# Where pos-speed keeps its views query's checkpoint (src/pos_lambda/speed_layer/views_job.py).
SPEED_VIEWS_CHECKPOINT = "views"


class AuditError(Exception):
    """The audit cannot run (a service unreachable, a source unreadable): says what to do."""


def _raw(r: Receipt) -> RawRow:
    return RawRow(r.happened_at, r.item_quantity, r.revenue, r.late, len(r.line_items))


class Sources:
    """Cassandra reads of one keyspace; `close()` when done."""

    def __init__(self, settings: Settings) -> None:
        # The final proof reads every replica (POS_CASSANDRA_AUDIT_CONSISTENCY, ALL): a
        # replica that missed a write must not hide it.
        settings = settings.with_overrides(
            cassandra_read_consistency=settings.cassandra.audit_consistency
        )
        self.settings = settings
        self.serving = Serving(settings)
        self.views = self.serving.views
        self._opened: OpenSession | None = None

    def close(self) -> None:
        self.serving.close()
        if self._opened is not None:
            self._opened.close()

    def _cql(self) -> Any:
        if self._opened is None:
            from cassandra.cluster import NoHostAvailable

            from pos_lambda.adapters import cassandra_client

            try:
                self._opened = cassandra_client.open_session(self.settings, timeout=30)
            except NoHostAvailable as exc:
                raise AuditError(
                    f"cannot reach Cassandra ({exc}): is it running? try `make up`"
                ) from exc
        return self._opened.session

    # --- through the serving layer -------------------------------------------------

    def pointer(self, first: date, last: date) -> Pointer:
        return self.views.pointer(first, last)

    def _all_receipts(self, store: int, segment: Segment) -> Iterator[Receipt]:
        state: bytes | None = None
        while True:
            rows, state = self.views.receipts(store, segment, PAGE, state)
            yield from rows
            if state is None:
                return

    def speed_receipts(self, store_days: list[tuple[int, date]]) -> list[tuple[NaturalKey, RawRow]]:
        """receipts_by_store_day: every row of these store-days."""
        return [
            ((store, r.vendor_fiscal_module, r.transaction_id), _raw(r))
            for store, day in store_days
            for r in self._all_receipts(store, Segment("speed", day, *day_bounds(day)))
        ]

    def batch_receipts(
        self, store_days: list[tuple[int, date]], pointer: Pointer
    ) -> list[tuple[NaturalKey, RawRow]]:
        """receipts_batch of the committed versions, in the windows the batch answers."""
        out = []
        for store, day in store_days:
            version = pointer.days.get(day)
            if version is None:
                continue
            whole_day = Segment("batch", day, *day_bounds(day), version.receipts_ref)
            for r in self._all_receipts(store, whole_day):
                if pointer.covering(window_start(r.happened_at)) is not None:
                    out.append(((store, r.vendor_fiscal_module, r.transaction_id), _raw(r)))
        return out

    def aggregates(
        self, store_days: list[tuple[int, date]], pointer: Pointer
    ) -> tuple[list[tuple[WindowKey, Aggregate]], list[tuple[WindowKey, Aggregate]]]:
        """(agg_15m_batch rows of committed versions in covered windows, agg_15m_speed rows)."""
        batch: list[tuple[WindowKey, Aggregate]] = []
        speed: list[tuple[WindowKey, Aggregate]] = []
        for store, day in store_days:
            b, s = self.views.store_days(store, [day], pointer)
            for row in b:
                committed = pointer.covering(row.window_start)
                if committed is not None and committed.version == row.version:
                    batch.append(((store, row.window_start), row.aggregate))
            speed += [((store, row.window_start), row.aggregate) for row in s]
        return batch, speed

    def gaps(self, store: int, day: date) -> GapsAnswer:
        """The gaps answer of a store's UTC day (`Serving.gaps`); an unknown store has no
        devices (every expected one is then lost)."""
        try:
            return self.serving.gaps(store, day)
        except UnknownStore:
            return GapsAnswer(store, day, "provisional")

    def windows(self, store: int, first: datetime, end: datetime) -> list[Window]:
        """The merged answer (`Serving.windows`) for [first, end), in allowed ranges."""
        step = timedelta(days=self.settings.serve.max_range_days)
        out: list[Window] = []
        at = first
        while at < end:
            try:
                out += self.serving.windows(store, at, min(at + step, end)).windows
            except UnknownStore:
                return []  # no view holds the store: every expected window is lost
            at += step
        return out

    def serving_receipts(
        self, store_days: list[tuple[int, date]]
    ) -> list[tuple[NaturalKey, RawRow, str]]:
        """The merged receipts (`Serving.receipts`, every page) with their source."""
        out: list[tuple[NaturalKey, RawRow, str]] = []
        for store, day in store_days:
            page: str | None = None
            while True:
                try:
                    answer = self.serving.receipts(store, day, page_size=PAGE, page=page)
                except UnknownStore:
                    break  # no view holds the store: every expected receipt is lost
                out += [
                    ((store, r.vendor_fiscal_module, r.transaction_id), _raw(r), r.source)
                    for r in answer.receipts
                ]
                page = answer.next_page
                if page is None:
                    break
        return out

    def conflicts(self, store_days: list[tuple[int, date]]) -> list[NaturalKey]:
        return [
            (store, c.vendor_fiscal_module, c.transaction_id)
            for store, day in store_days
            for c in self.views.conflicts(store, day)
        ]

    # --- tables the serving layer does not read -----------------------------------------

    def receipt_keys(self, keys: list[NaturalKey]) -> list[tuple[NaturalKey, IndexRow]]:
        session = self._cql()
        stmt = session.prepare(
            "SELECT transaction_id, happened_at, late, beyond_bound "
            f"FROM {cql.RECEIPT_KEYS_TABLE} "
            "WHERE operation_id = ? AND vendor_fiscal_module = ? AND key_bucket = ?"
        )
        buckets = sorted({(k[0], k[1], k[2] // cql.KEY_BUCKET_SIZE) for k in keys})
        out = []
        for op, vfm, bucket in buckets:
            for r in session.execute(stmt, (op, vfm, bucket)):
                row = IndexRow(_instant(r.happened_at), bool(r.late), bool(r.beyond_bound))
                out.append(((op, vfm, r.transaction_id), row))
        return out

    def dead_letters(self, topic: str) -> list[tuple[str, str]]:
        """(sha256 of the raw value, reason) of every dead letter of `topic`."""
        session = self._cql()
        parts = session.execute(
            f"SELECT DISTINCT kafka_topic, kafka_partition FROM {cql.DEAD_LETTERS_TABLE}"
        )
        stmt = session.prepare(
            f"SELECT raw_value, value_sha256, reason FROM {cql.DEAD_LETTERS_TABLE} "
            "WHERE kafka_topic = ? AND kafka_partition = ?"
        )
        out = []
        for p in parts:
            if p.kafka_topic != topic:
                continue
            for r in session.execute(stmt, (topic, p.kafka_partition)):
                out.append((dead_letter_sha256(r.value_sha256, r.raw_value), r.reason or ""))
        return out

    def alerts_table(self) -> list[AlertIdentity]:
        session = self._cql()
        rows = session.execute(
            f"SELECT rule, operation_id, vendor_fiscal_module, transaction_id "
            f"FROM {cql.ALERTS_TABLE}"
        )
        return [(r.rule, r.operation_id, r.vendor_fiscal_module, r.transaction_id) for r in rows]


def dead_letter_sha256(value_sha256: str | None, raw_value: bytes | None) -> str:
    """The SHA-256 of a dead letter's whole value: the stored one (raw_value holds only a
    prefix since dead letters are bounded), else, for a row written before, the hash of
    raw_value, which then holds the whole value (empty for a record without one)."""
    if value_sha256 is not None:
        return value_sha256
    return hashlib.sha256(bytes(raw_value or b"")).hexdigest()


def _instant(value: datetime) -> datetime:
    out = utc(value)  # the driver's naive UTC
    assert out is not None, "happened_at is part of the key"
    return out


# --- Kafka -------------------------------------------------------------------------------


@contextmanager
def _consumer(settings: Settings, group: str, **extra: Any) -> Iterator[KafkaConsumer]:
    """A consumer, closed after use; Kafka trouble becomes an AuditError saying so."""
    from confluent_kafka import KafkaException

    from pos_lambda.adapters.kafka_clients import ConfluentClients

    # Never subscribes: reads committed offsets, never joins the group. No librdkafka
    # log lines: a failure surfaces once, as the AuditError below.
    c = ConfluentClients.from_settings(settings).offsets_reader(group, log_level=0, **extra)
    try:
        yield c
    except KafkaException as exc:
        raise AuditError(
            f"Kafka at {settings.bootstrap_servers} did not answer: {exc.args[0]} "
            "(is it running and ready? `make status`)"
        ) from exc
    finally:
        c.close()


def _partitions(consumer: KafkaConsumer, topic: str) -> list[int] | None:
    t = consumer.list_topics(topic, timeout=30).topics.get(topic)
    if t is None or t.error is not None or not t.partitions:
        return None
    return sorted(t.partitions)


def end_offsets(settings: Settings, topic: str) -> dict[int, int] | None:
    """High watermark per partition; None when the topic does not exist."""
    from confluent_kafka import TopicPartition

    with _consumer(settings, f"pos-audit-{uuid.uuid4().hex[:8]}") as c:
        parts = _partitions(c, topic)
        if parts is None:
            return None
        return {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in parts}


def committed_offsets(settings: Settings, group: str, topic: str) -> dict[int, int] | None:
    """The group's committed offsets on `topic`; None when it never committed any."""
    from confluent_kafka import TopicPartition

    with _consumer(settings, group, **{"isolation.level": "read_committed"}) as c:
        parts = _partitions(c, topic)
        if parts is None:
            return None
        got = c.committed([TopicPartition(topic, p) for p in parts], timeout=30)
        return {tp.partition: tp.offset for tp in got if tp.offset >= 0} or None


# What a record of the alerts topic that is no alert reads as.
FOREIGN_RECORD: AlertIdentity = ("not_an_alert", 0, 0, 0)


def alerts_in_topic(settings: Settings) -> list[AlertIdentity] | None:
    """Every committed alert of settings.topics.alerts (read_committed, start to end);
    None when the topic does not exist."""
    records = _committed_records(settings, settings.topics.alerts)
    return None if records is None else [_alert_identity(value) for _, value in records]


# What a record of the receipts topic that is no receipt reads as: (None, None).
TopicRecord = tuple[NaturalKey | None, TopicRow | None]


def receipts_in_topic(settings: Settings) -> list[TopicRecord] | None:
    """Every committed record of settings.topics.receipts (read_committed, start to end)
    as (natural key, what its message says); (None, None) for a record that is no receipt
    or whose key is not its message's natural key. None when the topic does not exist."""
    records = _committed_records(settings, settings.topics.receipts)
    return None if records is None else [_topic_record(k, v) for k, v in records]


def _committed_records(
    settings: Settings, topic: str
) -> list[tuple[bytes | None, bytes | None]] | None:
    """(key, value) of every committed record of `topic`, start to end; None when the
    topic does not exist."""
    from confluent_kafka import OFFSET_BEGINNING, KafkaError, TopicPartition

    extra = {"isolation.level": "read_committed", "enable.partition.eof": True}
    with _consumer(settings, f"pos-audit-{uuid.uuid4().hex[:8]}", **extra) as c:
        parts = _partitions(c, topic)
        if parts is None:
            return None
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in parts])
        out: list[tuple[bytes | None, bytes | None]] = []
        at_end: set[int] = set()
        deadline = time.monotonic() + KAFKA_TIMEOUT_S
        while len(at_end) < len(parts):
            if time.monotonic() > deadline:
                raise AuditError(f"{topic} not read to its end in {KAFKA_TIMEOUT_S:.0f} s")
            for msg in c.consume(500, timeout=0.5):
                err = msg.error()
                if err is not None:
                    if err.code() != KafkaError._PARTITION_EOF:
                        raise AuditError(f"reading {topic}: {err}")
                    at_end.add(msg.partition() or 0)  # an end of partition names one
                    continue
                at_end.discard(msg.partition() or 0)
                out.append((msg.key(), msg.value()))
        return out


def _topic_record(key: bytes | None, value: bytes | None) -> TopicRecord:
    """A receipt record as its consumer reads it: the message's natural key and content,
    computed here (Decimal sums of its line items)."""
    try:
        doc = json.loads(value or b"", parse_float=Decimal)
        natural = (int(doc["operation_id"]), int(doc["vendor_fiscal_module"]),
                   int(doc["transaction_id"]))  # fmt: skip
        items = doc["transactions"]
        happened_at = datetime.fromisoformat(doc["happened_at"]).astimezone(UTC)
        row = TopicRow(
            happened_at,
            sum(int(i["amount"]) for i in items),
            sum((Decimal(i["price"]) * int(i["amount"]) for i in items), Decimal("0.00")),
            len(items),
        )
    except (ValueError, KeyError, TypeError, AttributeError, ArithmeticError):
        return None, None
    if key != ":".join(map(str, natural)).encode():
        return None, None  # keyed otherwise than by its natural key
    return natural, row


def _alert_identity(value: bytes | None) -> AlertIdentity:
    try:
        doc = json.loads(value or b"")
        return (str(doc["rule"]), int(doc["operation_id"]), int(doc["vendor_fiscal_module"]),
                int(doc["transaction_id"]))  # fmt: skip
    except (ValueError, KeyError, TypeError):
        return FOREIGN_RECORD  # not the processor's: reported beside the comparison


# --- the speed layer's progress ---------------------------------------------------------------


def speed_processed(settings: Settings, topic: str) -> dict[int, int] | None:
    """Offsets up to which the speed views query has committed micro-batches on `topic`
    (its checkpoint's last committed batch); None when there is no checkpoint for it."""
    root: Path = settings.checkpoint_dir / SPEED_VIEWS_CHECKPOINT
    commits = [int(p.name) for p in (root / "commits").glob("*") if p.name.isdigit()]
    if not commits:
        return None
    offsets_file = root / "offsets" / str(max(commits))
    try:
        lines = offsets_file.read_text().splitlines()
    except OSError:
        return None
    # "v1", the batch metadata, then one JSON line of offsets per source.
    for line in lines[2:]:
        try:
            source = json.loads(line)
        except ValueError:
            continue
        if isinstance(source, dict) and topic in source:
            return {int(p): int(o) for p, o in source[topic].items()}
    return None
