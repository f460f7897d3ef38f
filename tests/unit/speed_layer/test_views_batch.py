"""The views micro-batch (ViewsBatch) on literal Kafka records, with an in-memory store.

Local Spark, no services: the micro-batch's own reads and writes go to an
`InMemoryViewStore`, handed to it as two paths ("connector" and "driver") over the
same tables, so that a test sees what was written, in which order, and by which path.
Expected rows are written out by hand from the messages (1.90 x 2 = 3.80, ...).

Store 1, device 7, on 2 March 2026; every receipt in the 09:00-09:15 UTC window and
in Kafka 5 s after it happened (on time), partition 0.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any

import pytest
from pyspark.sql import DataFrame

from pos_lambda.adapters.cassandra import Target
from pos_lambda.adapters.memory_store import InMemoryViewStore
from pos_lambda.speed_layer.batch_plan import Thresholds
from pos_lambda.speed_layer.progress import BatchCounts
from pos_lambda.speed_layer.views_batch import ViewsBatch

KAFKA_DDL = (
    "key binary, value binary, topic string, partition int, offset bigint, timestamp timestamp"
)
MAR_2 = date(2026, 3, 2)
WINDOW = datetime(2026, 3, 2, 9, 0)  # naive UTC, as Spark collects it (tests pin TZ=UTC)
AGG, RAW, KEYS = "agg_15m_speed", "receipts_by_store_day", "receipt_keys"
CONFLICTS, DEAD = "conflicts", "dead_letters"
ESPRESSO = [{"title": "Espresso", "price": "1.90", "amount": 2}]  # 2 items, 3.80
TEA_CAKE = [{"title": "Tea", "price": "1.50", "amount": 1},
            {"title": "Cake", "price": "4.00", "amount": 1}]  # fmt: skip  # 2 items, 5.50
WATER = [{"title": "Water", "price": "1.00", "amount": 3}]  # 3 items, 3.00
LATE_US, BOUND_US = 900 * 10**6, 48 * 3600 * 10**6
CONNECTOR_ONLY = Thresholds(
    driver_reads_below=0, driver_writes_below=0, bucket_reads_from=50.0, native_check_from=4000
)


def receipt(tid: int, minute: int, items: list[dict[str, Any]]) -> bytes:
    at = datetime(2026, 3, 2, 9, minute, tzinfo=UTC)
    return json.dumps(
        {
            "happened_at": at.isoformat(),
            "operation_id": 1,
            "transaction_id": tid,
            "vendor_fiscal_module": 7,
            "transactions": items,
        }
    ).encode()


def kafka(spark: Any, records: Sequence[tuple[int, bytes | None]]) -> DataFrame:
    """(offset, value) records of partition 0, each in Kafka 5 s after 09:0m (its value's
    minute, or 09:00 for a value without one)."""
    rows = []
    for offset, value in records:
        minute = json.loads(value)["happened_at"][14:16] if value and value[:1] == b"{" else "00"
        sent = datetime(2026, 3, 2, 9, int(minute), 5, tzinfo=UTC)
        rows.append((b"1:7", value, "pos.transactions", 0, offset, sent))
    return spark.createDataFrame(rows, KAFKA_DDL)


def job(store: InMemoryViewStore, limits: Thresholds = CONNECTOR_ONLY) -> ViewsBatch:
    return ViewsBatch(
        store=store.via("connector"),
        late_threshold_us=LATE_US,
        max_lateness_us=BOUND_US,
        limits=limits,
        driver=store.via("driver"),
    )


# The driver's paths for every micro-batch below (the keys collected, see `process`).
DRIVER_ALWAYS = Thresholds(
    driver_reads_below=10**9,
    driver_writes_below=10**9,
    bucket_reads_from=50.0,
    native_check_from=4000,
)
# The connector's, whole receipt_keys partitions (a backlog's path).
BY_PARTITION = Thresholds(
    driver_reads_below=0, driver_writes_below=0, bucket_reads_from=0.5, native_check_from=4000
)
ROUTES = {"connector": CONNECTOR_ONLY, "driver": DRIVER_ALWAYS, "partitions": BY_PARTITION}
RECEIPT_KEY = ("operation_id", "vendor_fiscal_module", "key_bucket", "transaction_id")
# How each route reads receipt_keys: by receipt, or by partition (the key bucket).
KEY_READS = {
    "connector": ("connector", RECEIPT_KEY),
    "driver": ("driver", RECEIPT_KEY),
    "partitions": ("connector", RECEIPT_KEY[:3]),
}


def process(batch: ViewsBatch, df: DataFrame) -> BatchCounts:
    """As the views query runs it: the keys collected when the driver may read them."""
    return batch.process(df, collect_keys=batch.limits.driver_reads_below > 0)


def aggregates(store: InMemoryViewStore) -> dict[Any, tuple[Any, ...]]:
    return {
        (r["operation_id"], r["day"], r["window_start"]): (
            r["receipt_count"], r["item_quantity"], r["revenue"], r["late_count"],
            r["applied_offsets"],
        )
        for r in store.table(AGG)
    }  # fmt: skip


def receipts(store: InMemoryViewStore) -> dict[int, tuple[Any, ...]]:
    """Raw rows by receipt number: (kafka offset, item quantity, revenue, first title)."""
    return {
        r["transaction_id"]: (
            r["kafka_offset"],
            r["item_quantity"],
            r["revenue"],
            r["line_items"][0]["title"],
        )
        for r in store.table(RAW)
    }


def index(store: InMemoryViewStore) -> dict[int, tuple[Any, ...]]:
    """receipt_keys rows by receipt number: (key bucket, kafka offset)."""
    return {r["transaction_id"]: (r["key_bucket"], r["kafka_offset"]) for r in store.table(KEYS)}


def resent(store: InMemoryViewStore) -> dict[int, tuple[Any, ...]]:
    """receipt_keys rows by receipt number: the last resend's (partition, offset, time)."""
    return {
        r["transaction_id"]: (
            r.get("resent_kafka_partition"), r.get("resent_kafka_offset"),
            r.get("resent_kafka_timestamp"),
        )
        for r in store.table(KEYS)
    }  # fmt: skip


class Crashed(Exception):
    """The driver process died (kill -9) at a crash point."""


class CrashAfter:
    """A store that dies once `table` is written: a micro-batch stopped between two of
    its writes, as by kill -9 (its other writes never happen)."""

    def __init__(self, store: InMemoryViewStore, table: str) -> None:
        self.store, self.table = store, table

    def rows(self, table: str, key_columns: Any, keys: Iterable[Any], columns: Any) -> DataFrame:
        return self.store.rows(table, key_columns, keys, columns)

    def lookup(self, table: str, keys: DataFrame, columns: tuple[str, ...]) -> DataFrame:
        return self.store.lookup(table, keys, columns)

    def upsert_each(
        self,
        df: DataFrame,
        targets: Sequence[Target],
        written: Callable[[str], None] = lambda table: None,
    ) -> None:
        def then(table: str) -> None:
            written(table)
            if table == self.table:
                raise Crashed(table)

        self.store.upsert_each(df, targets, then)


FIRST = [(0, receipt(1, 3, ESPRESSO)), (1, receipt(2, 5, TEA_CAKE))]
# A and B in the 9:00 window: 2 receipts, 4 items, 3.80 + 5.50, Kafka offsets up to 1.
AFTER_FIRST = {(1, MAR_2, WINDOW): (2, 4, Decimal("9.30"), 0, {0: 1})}


@pytest.mark.parametrize("crash_after", [AGG, RAW, KEYS])
def test_a_micro_batch_replayed_after_a_crash_between_its_writes_lands_on_the_same_rows(
    local_spark: Any, crash_after: str
) -> None:
    store = InMemoryViewStore(local_spark)
    batch = kafka(local_spark, FIRST)
    crashing = ViewsBatch(
        store=CrashAfter(store.via("connector"), crash_after),
        late_threshold_us=LATE_US,
        max_lateness_us=BOUND_US,
        limits=CONNECTOR_ONLY,
    )
    with pytest.raises(Crashed):
        crashing.process(batch)
    written_before = store.writes
    assert written_before[-1] == crash_after

    counts = job(store).process(batch)  # the replay: the same records, the same offsets

    assert counts == BatchCounts(valid_rows=2, invalid_rows=0)
    assert aggregates(store) == AFTER_FIRST  # counted once, not twice
    assert receipts(store) == {
        1: (0, 2, Decimal("3.80"), "Espresso"),
        2: (1, 2, Decimal("5.50"), "Tea"),
    }
    assert index(store) == {1: (0, 0), 2: (0, 1)}
    assert store.table(CONFLICTS) == []


@pytest.mark.parametrize("route", ROUTES)
def test_a_resend_in_a_later_micro_batch_is_absorbed(local_spark: Any, route: str) -> None:
    store = InMemoryViewStore(local_spark)
    views = job(store, ROUTES[route])
    assert process(views, kafka(local_spark, FIRST)) == BatchCounts(2, 0)
    assert aggregates(store) == AFTER_FIRST

    # Receipt 1 again, byte for byte, and a new receipt 3 in the same window.
    later = kafka(local_spark, [(2, receipt(1, 3, ESPRESSO)), (3, receipt(3, 9, WATER))])
    counts = process(views, later)

    assert counts == BatchCounts(valid_rows=2, invalid_rows=0, resends_absorbed=1)
    # Receipts 1, 2, 3: 3 receipts, 7 items, 3.80 + 5.50 + 3.00; offset 3 counted.
    assert aggregates(store) == {(1, MAR_2, WINDOW): (3, 7, Decimal("12.30"), 0, {0: 3})}
    assert receipts(store) == {
        1: (0, 2, Decimal("3.80"), "Espresso"),  # the first copy stays the receipt
        2: (1, 2, Decimal("5.50"), "Tea"),
        3: (3, 3, Decimal("3.00"), "Water"),
    }
    assert index(store) == {1: (0, 0), 2: (0, 1), 3: (0, 3)}
    # Receipt 1's index row records the resend (offset 2, in Kafka at 09:03:05); the
    # others were received once.
    assert resent(store) == {
        1: (0, 2, datetime(2026, 3, 2, 9, 3, 5)),
        2: (None, None, None),
        3: (None, None, None),
    }
    # ... whichever path read the stored keys.
    assert [(path, by) for path, op, table, by in store.log if op == "read" and table == KEYS] == [
        KEY_READS[route]
    ] * 2


@pytest.mark.parametrize("route", ["connector", "driver"])
def test_a_conflicting_copy_is_kept_with_both_versions_and_the_first_stays_the_winner(
    local_spark: Any, route: str
) -> None:
    store = InMemoryViewStore(local_spark)
    views = job(store, ROUTES[route])
    process(views, kafka(local_spark, FIRST))

    # Receipt 1 with other line items: same natural key, other content.
    counts = process(views, kafka(local_spark, [(2, receipt(1, 3, WATER))]))

    assert counts == BatchCounts(valid_rows=1, invalid_rows=0, conflicts=1)
    assert aggregates(store) == AFTER_FIRST  # nothing added: the winner was counted
    assert receipts(store)[1] == (0, 2, Decimal("3.80"), "Espresso")
    [conflict] = store.table(CONFLICTS)
    assert (
        conflict["transaction_id"], conflict["kafka_offset"], conflict["winner_kafka_offset"],
        conflict["winner_day"], conflict["line_items"][0]["title"],
        conflict["winner_line_items"][0]["title"], conflict["revenue"],
        conflict["winner_revenue"], conflict["differs"],
    ) == (1, 2, 0, MAR_2, "Water", "Espresso", Decimal("3.00"), Decimal("3.80"),
          ["line_items"])  # fmt: skip
    # The stored winner's content comes from its raw row, by the connector (full key).
    assert store.log[-2:] == [
        ("connector", "read", RAW,
         ("operation_id", "day", "happened_at", "vendor_fiscal_module", "transaction_id")),
        (route, "write", CONFLICTS, ()),
    ]  # fmt: skip


def test_invalid_records_become_dead_letters_keyed_by_their_coordinates(
    local_spark: Any,
) -> None:
    store = InMemoryViewStore(local_spark)
    missing = b'{"happened_at": "2026-03-02T09:00:00Z"}'
    batch = kafka(local_spark, [(0, b"not json"), (1, receipt(1, 3, ESPRESSO)), (2, missing)])

    counts = job(store).process(batch)

    assert counts == BatchCounts(valid_rows=1, invalid_rows=2)
    assert sorted(
        (r["kafka_topic"], r["kafka_partition"], r["kafka_offset"], r["reason"],
         bytes(r["raw_value"]), r["value_length"], r["value_sha256"])
        for r in store.table(DEAD)
    ) == [
        ("pos.transactions", 0, 0, "invalid_json", b"not json", 8,
         hashlib.sha256(b"not json").hexdigest()),
        ("pos.transactions", 0, 2, "missing_field:operation_id", missing, len(missing),
         hashlib.sha256(missing).hexdigest()),
    ]  # fmt: skip
    assert receipts(store) == {1: (1, 2, Decimal("3.80"), "Espresso")}
    # The natural key each value claims, where its JSON says it: junk claims none.
    assert sorted(
        (r["kafka_offset"], r["operation_id"], r["vendor_fiscal_module"], r["transaction_id"])
        for r in store.table(DEAD)
    ) == [(0, None, None, None), (2, None, None, None)]


def test_a_dead_letter_remembers_the_natural_key_its_value_claims(local_spark: Any) -> None:
    store = InMemoryViewStore(local_spark)
    at = '"happened_at": "2026-03-02T09:03:00Z"'
    no_items = f'{{{at}, "operation_id": 1, "vendor_fiscal_module": 7, "transaction_id": 42}}'
    not_numbers = (
        f'{{{at}, "operation_id": "one", "vendor_fiscal_module": 7, "transaction_id": 4.5e99}}'
    )
    cut = b" " + no_items.encode()[:60]  # cut short: no longer JSON
    values = [no_items.encode(), not_numbers.encode(), cut]
    batch = kafka(local_spark, list(enumerate(values)))

    assert job(store).process(batch) == BatchCounts(valid_rows=0, invalid_rows=3)

    assert sorted(
        (r["kafka_offset"], r["operation_id"], r["vendor_fiscal_module"], r["transaction_id"])
        for r in store.table(DEAD)
    ) == [(0, 1, 7, 42), (1, None, 7, None), (2, None, None, None)]


def test_a_resend_and_its_winner_in_one_micro_batch_record_the_last_resend(
    local_spark: Any,
) -> None:
    store = InMemoryViewStore(local_spark)
    copies = [(0, receipt(1, 3, ESPRESSO)), (1, receipt(1, 3, ESPRESSO)),
              (2, receipt(1, 3, ESPRESSO)), (3, receipt(2, 5, TEA_CAKE))]  # fmt: skip

    counts = job(store).process(kafka(local_spark, copies))

    assert counts == BatchCounts(valid_rows=4, invalid_rows=0, resends_absorbed=2)
    assert index(store) == {1: (0, 0), 2: (0, 3)}  # the first copy is the winner
    assert resent(store) == {1: (0, 2, datetime(2026, 3, 2, 9, 3, 5)), 2: (None, None, None)}


def test_writes_go_aggregates_first_then_receipts_keys_conflicts_dead_letters(
    local_spark: Any,
) -> None:
    store = InMemoryViewStore(local_spark)
    views = job(store)
    # In one micro-batch: receipt 1, a conflicting copy of it, receipt 2, a junk record.
    batch = kafka(
        local_spark,
        [(0, receipt(1, 3, ESPRESSO)), (1, receipt(1, 3, WATER)), (2, receipt(2, 5, TEA_CAKE)),
         (3, b"junk")],
    )  # fmt: skip

    counts = views.process(batch)

    assert counts == BatchCounts(valid_rows=3, invalid_rows=1, conflicts=1)
    assert store.writes == [AGG, RAW, KEYS, CONFLICTS, DEAD]


def test_the_driver_reads_and_writes_a_small_micro_batch_and_the_connector_a_larger_one(
    local_spark: Any,
) -> None:
    store = InMemoryViewStore(local_spark)
    limits = Thresholds(
        driver_reads_below=2, driver_writes_below=3, bucket_reads_from=50.0, native_check_from=4000
    )
    views = job(store, limits)
    receipt_key = RECEIPT_KEY
    store_day = ("operation_id", "day")

    # 1 valid + 1 junk record, keys collected: both below their thresholds.
    views.process(kafka(local_spark, [(0, receipt(1, 3, ESPRESSO)), (1, b"x")]), collect_keys=True)
    assert store.log == [
        ("driver", "read", KEYS, receipt_key),
        ("driver", "read", AGG, store_day),
        ("driver", "write", AGG, ()),
        ("driver", "write", RAW, ()),
        ("driver", "write", KEYS, ()),
        ("driver", "write", DEAD, ()),
    ]

    # 2 valid records: at the reads' threshold, below the writes'.
    start = len(store.log)
    two = [(2, receipt(2, 5, TEA_CAKE)), (3, receipt(3, 9, WATER))]
    views.process(kafka(local_spark, two), collect_keys=True)
    assert store.log[start:] == [
        ("connector", "read", KEYS, receipt_key),
        ("connector", "read", AGG, store_day),
        ("driver", "write", AGG, ()),
        ("driver", "write", RAW, ()),
        ("driver", "write", KEYS, ()),
    ]
    assert aggregates(store) == {(1, MAR_2, WINDOW): (3, 7, Decimal("12.30"), 0, {0: 3})}


def test_driver_thresholds_without_a_driver_store_are_refused(local_spark: Any) -> None:
    with pytest.raises(ValueError, match="need a driver store"):
        ViewsBatch(
            store=InMemoryViewStore(local_spark),
            late_threshold_us=LATE_US,
            max_lateness_us=BOUND_US,
            limits=DRIVER_ALWAYS,
        )
