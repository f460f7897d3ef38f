"""The three ViewStores (pos_lambda.adapters.view_store, memory_store) behave alike.

The same writes and reads through the connector's store and the driver's, against
real Cassandra and Spark, and through the in-memory one that the speed layer's unit
tests use: the same rows come back, typed alike. This is what lets those unit tests
stand for the real stores.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any

import pytest
from pyspark.sql import functions as F
from pyspark.sql import types as T

from pos_lambda.adapters import cassandra, cassandra_client
from pos_lambda.adapters.cassandra import Target
from pos_lambda.adapters.driver_lookup import DriverLookup
from pos_lambda.adapters.driver_writes import DriverWriter
from pos_lambda.adapters.memory_store import SPEED_TABLES, InMemoryViewStore, layouts
from pos_lambda.adapters.view_store import ConnectorStore, DriverStore, ViewStore
from pos_lambda.settings import Settings
from pos_lambda.speed_layer.batch_plan import RECEIPT_KEY, STORE_DAY
from pos_lambda.views.increments import SPEED_AGGREGATE_COLUMNS

pytestmark = pytest.mark.integration

BIG = 2**62 + 7  # a bigint that a float64 would round
DAY = date(2026, 3, 29)
# Each store writes its own store (operation_id) in the shared test keyspace.
STORES = {"connector": 9701, "driver": 9702, "memory": 9703}


@pytest.fixture
def driver_store(spark: Any, settings: Settings) -> Iterator[DriverStore]:
    cluster = cassandra_client.cluster(settings)
    session = cluster.connect()
    ks = settings.cassandra.keyspace
    yield DriverStore(
        DriverLookup(spark, session, ks),
        DriverWriter(session, ks, settings.cassandra.write_consistency),
    )
    cluster.shutdown()


@pytest.fixture(params=list(STORES))
def store(
    request: pytest.FixtureRequest, spark: Any, settings: Settings, cql: Any
) -> tuple[ViewStore, int]:
    name = request.param
    found: ViewStore
    if name == "connector":
        found = ConnectorStore(spark, settings.cassandra.keyspace)
    elif name == "driver":
        found = request.getfixturevalue("driver_store")
    else:
        found = InMemoryViewStore(spark)
    return found, STORES[name]


def _utc(rows: list[Any]) -> list[tuple[Any, ...]]:
    """Rows as tuples, instants in UTC (collected naive, in this process's local zone)."""

    def utc(v: Any) -> Any:
        return v.astimezone(UTC) if isinstance(v, datetime) else v

    return sorted((tuple(map(utc, r)) for r in rows), key=repr)


def test_the_in_memory_tables_are_typed_as_the_connector_reads_them(
    spark: Any, settings: Settings
) -> None:
    for table, layout in layouts(SPEED_TABLES).items():
        read = cassandra.read_table(spark, settings.cassandra.keyspace, table).schema
        assert sorted(read.names) == sorted(layout.schema.names), table
        for column in layout.schema.names:
            expected = read[column].dataType.simpleString()
            assert layout.schema[column].dataType.simpleString() == expected, (table, column)


def test_writes_replace_by_primary_key_and_reads_by_key_give_the_same_rows(
    spark: Any, settings: Settings, store: tuple[ViewStore, int]
) -> None:
    views, op = store
    read = cassandra.read_table(spark, settings.cassandra.keyspace, "agg_15m_speed").schema
    schema = T.StructType([read[c] for c in SPEED_AGGREGATE_COLUMNS])
    first = [
        (op, DAY, datetime(2026, 3, 29, 1, 45, 0, 123456, tzinfo=UTC), 3, BIG,
         Decimal("19999999999980000.01"), 1, {0: BIG, 3: 5}),
        (op, DAY, datetime(2026, 3, 29, 2, 0, tzinfo=UTC), 1, None, Decimal("0.10"), 0, None),
    ]  # fmt: skip
    written: list[str] = []
    views.upsert_each(
        spark.createDataFrame(first, schema), [Target("agg_15m_speed")], written.append
    )
    # The 02:00 window again, with a count and offsets only: its other cells stay.
    again = [(op, DAY, datetime(2026, 3, 29, 2, 0, tzinfo=UTC), 2, 7, Decimal("9"), 1, {1: 4})]
    some = ("operation_id", "day", "window_start", "receipt_count", "applied_offsets")
    views.upsert_each(
        spark.createDataFrame(again, schema), [Target("agg_15m_speed", some)], written.append
    )
    assert written == ["agg_15m_speed", "agg_15m_speed"]

    expected = [
        # Cassandra keeps instants to the millisecond.
        (op, DAY, datetime(2026, 3, 29, 1, 45, 0, 123000, tzinfo=UTC), 3, BIG,
         Decimal("19999999999980000.01"), 1, {0: BIG, 3: 5}),
        (op, DAY, datetime(2026, 3, 29, 2, 0, tzinfo=UTC), 2, None, Decimal("0.10"), 0, {1: 4}),
    ]  # fmt: skip
    columns = SPEED_AGGREGATE_COLUMNS
    by_values = views.rows(
        "agg_15m_speed", STORE_DAY, [(op, DAY), (op, date(2026, 3, 30))], columns
    )
    keys = spark.createDataFrame([(op, DAY)], "operation_id int, day date")
    by_frame = views.lookup("agg_15m_speed", keys, columns)
    for found in (by_values, by_frame):
        assert found.columns == list(columns)
        assert found.schema["revenue"].dataType.simpleString() == "decimal(38,18)"
        assert _utc(found.collect()) == expected


def test_a_targets_rows_go_to_its_table_and_are_read_by_receipt_or_by_partition(
    spark: Any, store: tuple[ViewStore, int]
) -> None:
    views, op = store
    rows = spark.createDataFrame(
        [(op, 7, 0, 5, "a", True), (op, 7, 0, 6, "b", False), (op, 8, 0, 5, "c", True)],
        "operation_id int, vendor_fiscal_module int, key_bucket bigint, transaction_id bigint,"
        " content_hash string, keep boolean",
    )
    columns = ("operation_id", "vendor_fiscal_module", "key_bucket", "transaction_id",
               "content_hash")  # fmt: skip
    views.upsert_each(rows, [Target("receipt_keys", columns, F.col("keep"))])

    by_receipt = views.rows("receipt_keys", RECEIPT_KEY, [(op, 7, 0, 5), (op, 7, 0, 6)], columns)
    assert _utc(by_receipt.collect()) == [(op, 7, 0, 5, "a")]
    partitions = spark.createDataFrame(
        [(op, 7, 0), (op, 8, 0)], "operation_id int, vendor_fiscal_module int, key_bucket bigint"
    )
    by_partition = views.lookup("receipt_keys", partitions, columns)
    assert _utc(by_partition.collect()) == [(op, 7, 0, 5, "a"), (op, 8, 0, 5, "c")]


def test_a_raw_row_is_read_by_its_whole_primary_key_where_the_driver_refuses_it(
    spark: Any, settings: Settings, store: tuple[ViewStore, int]
) -> None:
    views, op = store
    read = cassandra.read_table(spark, settings.cassandra.keyspace, "receipts_by_store_day").schema
    key = ("operation_id", "day", "happened_at", "vendor_fiscal_module", "transaction_id")
    columns = (*key, "revenue", "line_items")
    at = datetime(2026, 3, 29, 9, 3, 0, 250000, tzinfo=UTC)
    items = [("Tea", Decimal("1.50"), 2)]
    rows = spark.createDataFrame(
        [(op, DAY, at, 7, BIG, Decimal("3.00"), items), (op, DAY, at, 7, 1, Decimal("1"), [])],
        T.StructType([read[c] for c in columns]),
    )
    views.upsert_each(rows, [Target("receipts_by_store_day", columns)])

    wanted = spark.createDataFrame([(op, DAY, at, 7, BIG)], T.StructType([read[c] for c in key]))
    if isinstance(views, DriverStore):  # by the partition key, or it and one column more
        with pytest.raises(ValueError, match="not by"):
            views.lookup("receipts_by_store_day", wanted, columns)
        return
    found = views.lookup("receipts_by_store_day", wanted, columns).collect()
    assert _utc(found) == [(op, DAY, at, 7, BIG, Decimal("3.00"), [("Tea", Decimal("1.50"), 2)])]
