"""The driver's writes (adapters.driver_writes) against real Cassandra and Spark: the rows
land exactly as the Spark connector's writes of the same DataFrame land them."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any

import pytest
from pyspark.sql import functions as F
from pyspark.sql import types as T

from pos_lambda.adapters import cassandra
from pos_lambda.adapters.cassandra import Target
from pos_lambda.adapters.driver_writes import MAX_BATCH_ROWS, DriverWriter
from pos_lambda.settings import Settings
from pos_lambda.speed_layer.views_job import KEY_COLUMNS, RAW_COLUMNS
from pos_lambda.views.increments import SPEED_AGGREGATE_COLUMNS

BIG = 2**62 + 7  # a bigint that a float64 would round
# 2026-10-25 01:30 UTC is 02:30 CEST, an hour before 02:30 CET: a local time that
# happens twice in Central Europe. The sub-millisecond part is truncated, as the
# connector truncates it.
AMBIGUOUS = datetime(2026, 10, 25, 0, 30, 0, 123999, tzinfo=UTC)
# line_items' struct fields in an order other than the user type's (title, price, amount).
ITEM = T.StructType(
    [
        T.StructField("amount", T.IntegerType()),
        T.StructField("title", T.StringType()),
        T.StructField("price", T.DecimalType(12, 2)),
    ]
)


@pytest.fixture
def berlin_clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """This process in Central European time, as PySpark's collected instants then are."""
    monkeypatch.setenv("TZ", "Europe/Berlin")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


@pytest.fixture
def writer(cql: Any, settings: Settings) -> DriverWriter:
    return DriverWriter(cql, settings.cassandra.keyspace, settings.cassandra.write_consistency)


def _raw_frame(spark: Any, operation_id: int) -> Any:
    schema = T.StructType(
        [
            T.StructField("operation_id", T.IntegerType()),
            T.StructField("day", T.DateType()),
            T.StructField("happened_at", T.TimestampType()),
            T.StructField("vendor_fiscal_module", T.IntegerType()),
            T.StructField("transaction_id", T.LongType()),
            T.StructField("line_items", T.ArrayType(ITEM)),
            T.StructField("item_quantity", T.LongType()),
            T.StructField("revenue", T.DecimalType(14, 2)),
            T.StructField("kafka_partition", T.IntegerType()),
            T.StructField("kafka_offset", T.LongType()),
            T.StructField("kafka_timestamp", T.TimestampType()),
            T.StructField("late", T.BooleanType()),
            T.StructField("beyond_bound", T.BooleanType()),  # not written
        ]
    )
    day = date(2026, 10, 25)
    items = [(10000, "x" * 200, Decimal("9999999999.99")), (1, "ü", Decimal("0.01"))]
    rows = [
        (operation_id, day, AMBIGUOUS, 3, BIG, items, 10001, Decimal("99999999999.91"),
         2, BIG, datetime(2026, 10, 25, 1, 30, 0, 999, tzinfo=UTC), True, False),
        # Nulls where the contract allows none, written as the connector writes them.
        (operation_id, day, AMBIGUOUS, 4, 1, None, None, None, 0, 0, None, None, False),
    ]  # fmt: skip
    return spark.createDataFrame(rows, schema)


def _stored(cql: Any, table: str, operation_id: int, columns: tuple[str, ...]) -> list[Any]:
    """`columns` of a store's rows, as plain Python values."""

    def plain(v: Any) -> Any:
        from cassandra.util import Date

        if isinstance(v, Date):
            return v.date()
        return dict(v) if hasattr(v, "items") else v

    rows = cql.execute(
        f"SELECT {', '.join(columns)} FROM {table} WHERE operation_id = %s ALLOW FILTERING",
        [operation_id],
    )
    return sorted((tuple(map(plain, r)) for r in rows), key=repr)


def test_raw_rows_land_as_the_connectors_do(
    spark: Any, cql: Any, settings: Settings, writer: DriverWriter, berlin_clock: None
) -> None:
    keyspace = settings.cassandra.keyspace
    cassandra.upsert(_raw_frame(spark, 9301), keyspace, "receipts_by_store_day", RAW_COLUMNS)
    writer.upsert(_raw_frame(spark, 9302), "receipts_by_store_day", RAW_COLUMNS)

    stored = RAW_COLUMNS[1:]
    by_driver = _stored(cql, "receipts_by_store_day", 9302, stored)
    assert len(by_driver) == 2
    assert by_driver == _stored(cql, "receipts_by_store_day", 9301, stored)
    first = cql.execute(
        "SELECT happened_at, transaction_id, kafka_timestamp, revenue, line_items"
        " FROM receipts_by_store_day WHERE operation_id = 9302 AND day = '2026-10-25'"
        " AND happened_at = '2026-10-25 00:30:00.123+0000' AND vendor_fiscal_module = 3"
    ).one()
    assert first.happened_at == datetime(2026, 10, 25, 0, 30, 0, 123000)  # naive UTC
    assert first.transaction_id == BIG
    assert first.kafka_timestamp == datetime(2026, 10, 25, 1, 30, 0, 0)
    assert first.revenue == Decimal("99999999999.91")
    assert [(i.title, i.price, i.amount) for i in first.line_items] == [
        ("x" * 200, Decimal("9999999999.99"), 10000),
        ("ü", Decimal("0.01"), 1),
    ]


def test_aggregates_with_offsets_land_as_the_connectors_do(
    spark: Any, cql: Any, settings: Settings, writer: DriverWriter
) -> None:
    read = cassandra.read_table(spark, settings.cassandra.keyspace, "agg_15m_speed").schema

    def frame(operation_id: int) -> Any:
        rows = [
            (operation_id, date(2026, 3, 29), datetime(2026, 3, 29, 1, 45, tzinfo=UTC), 3, BIG,
             Decimal("19999999999980000.01"), 1, {0: BIG, 3: 5}),
            (operation_id, date(2026, 3, 29), datetime(2026, 3, 29, 2, 0, tzinfo=UTC), 1, None,
             Decimal("0.10"), 0, None),
        ]  # fmt: skip
        return spark.createDataFrame(rows, T.StructType([read[c] for c in SPEED_AGGREGATE_COLUMNS]))

    cassandra.upsert(frame(9401), settings.cassandra.keyspace, "agg_15m_speed")
    writer.upsert(frame(9402), "agg_15m_speed", SPEED_AGGREGATE_COLUMNS)

    stored = SPEED_AGGREGATE_COLUMNS[1:]
    by_driver = _stored(cql, "agg_15m_speed", 9402, stored)
    assert by_driver == _stored(cql, "agg_15m_speed", 9401, stored)
    assert by_driver == [
        (date(2026, 3, 29), datetime(2026, 3, 29, 1, 45), 3, BIG,
         Decimal("19999999999980000.01"), 1, {0: BIG, 3: 5}),
        (date(2026, 3, 29), datetime(2026, 3, 29, 2, 0), 1, None, Decimal("0.10"), 0, None),
    ]  # fmt: skip


def test_dead_letters_bytes_and_no_rows(
    spark: Any, cql: Any, settings: Settings, writer: DriverWriter
) -> None:
    schema = T.StructType(
        [
            T.StructField("kafka_topic", T.StringType()),
            T.StructField("kafka_partition", T.IntegerType()),
            T.StructField("kafka_offset", T.LongType()),
            T.StructField("kafka_key", T.BinaryType()),
            T.StructField("raw_value", T.BinaryType()),
            T.StructField("kafka_timestamp", T.TimestampType()),
            T.StructField("reason", T.StringType()),
            T.StructField("detail", T.StringType()),
        ]
    )
    when = datetime(2026, 3, 2, 9, 3, tzinfo=UTC)
    rows = [("dl-driver", 1, 7, None, b"\xff\x00{", when, "not_json", "byte 0")]
    writer.upsert(spark.createDataFrame(rows, schema), "dead_letters")
    writer.upsert(spark.createDataFrame([], schema), "dead_letters")  # nothing to write

    stored = cql.execute(
        "SELECT kafka_offset, kafka_key, raw_value, kafka_timestamp, reason FROM dead_letters"
        " WHERE kafka_topic = 'dl-driver' AND kafka_partition = 1"
    ).all()
    assert [tuple(r) for r in stored] == [
        (7, None, b"\xff\x00{", datetime(2026, 3, 2, 9, 3), "not_json")
    ]


@pytest.mark.parametrize("by", ["driver", "connector"])
def test_each_target_gets_the_rows_it_selects_in_order(
    spark: Any, cql: Any, settings: Settings, writer: DriverWriter, by: str
) -> None:
    # Store 9501 through the driver, 9502 through the connector: the same split.
    operation_id = 9501 if by == "driver" else 9502
    rows = _raw_frame(spark, operation_id)  # vendor_fiscal_module 3 and 4
    targets = (
        Target("receipts_by_store_day", RAW_COLUMNS, F.col("vendor_fiscal_module") == 4),
        Target("receipt_keys", KEY_COLUMNS),
    )
    written: list[str] = []
    keyed = rows.withColumns(
        {
            "key_bucket": F.lit(0).cast("long"),
            "content_hash": F.lit("h"),
            "beyond_bound": F.lit(False),
        }
    )
    if by == "driver":
        writer.upsert_each(keyed, targets, written.append)
    else:
        cassandra.upsert_each(keyed, settings.cassandra.keyspace, targets, written.append)

    assert written == ["receipts_by_store_day", "receipt_keys"]
    raw = _stored(cql, "receipts_by_store_day", operation_id, ("vendor_fiscal_module",))
    assert raw == [(4,)]
    keys = _stored(cql, "receipt_keys", operation_id, ("vendor_fiscal_module", "transaction_id"))
    assert keys == [(3, BIG), (4, 1)]


def test_a_partitions_many_rows_land_in_several_batches(
    spark: Any, cql: Any, settings: Settings, writer: DriverWriter
) -> None:
    # More receipts of one receipt_keys partition than one batch takes, and one of another.
    many = 2 * MAX_BATCH_ROWS + 3
    schema = T.StructType(
        [
            T.StructField("operation_id", T.IntegerType()),
            T.StructField("vendor_fiscal_module", T.IntegerType()),
            T.StructField("key_bucket", T.LongType()),
            T.StructField("transaction_id", T.LongType()),
        ]
    )
    rows = [(9601, 1, 0, n) for n in range(many)] + [(9601, 2, 0, 5)]
    columns = ("operation_id", "vendor_fiscal_module", "key_bucket", "transaction_id")
    writer.upsert(spark.createDataFrame(rows, schema), "receipt_keys", columns)

    stored = _stored(cql, "receipt_keys", 9601, ("vendor_fiscal_module", "transaction_id"))
    assert len(stored) == many + 1
    assert sorted(stored) == sorted([(1, n) for n in range(many)] + [(2, 5)])
