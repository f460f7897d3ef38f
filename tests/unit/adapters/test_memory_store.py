"""The in-memory ViewStore keeps Cassandra's rules (local Spark, no services).

tests/integration/test_view_store.py holds it to the real adapters; here, the rules
themselves on literal rows: tables read from the DDL, upserts by primary key, reads
by a key prefix only, instants to the millisecond.
"""

from __future__ import annotations

from datetime import date, datetime
from decimal import Decimal
from typing import Any

import pytest
from pyspark.sql import functions as F

from pos_lambda.adapters.cassandra import Target
from pos_lambda.adapters.memory_store import InMemoryViewStore, layouts

AGG_DDL = (
    "operation_id int, day date, window_start timestamp, receipt_count int, "
    "item_quantity bigint, revenue decimal(38,2), late_count int, "
    "applied_offsets map<int,bigint>"
)
MAR_2 = date(2026, 3, 2)
NINE, NINE_15 = datetime(2026, 3, 2, 9, 0), datetime(2026, 3, 2, 9, 15)


def test_a_tables_key_and_types_come_from_the_ddl() -> None:
    agg = layouts(["agg_15m_speed"])["agg_15m_speed"]
    assert (agg.partition_key, agg.clustering) == (("operation_id", "day"), ("window_start",))
    assert agg.schema.simpleString() == (
        "struct<operation_id:int,day:date,window_start:timestamp,receipt_count:int,"
        "item_quantity:bigint,revenue:decimal(38,18),late_count:int,"
        "applied_offsets:map<int,bigint>>"
    )
    raw = layouts(["receipts_by_store_day"])["receipts_by_store_day"]
    assert raw.schema["line_items"].dataType.simpleString() == (
        "array<struct<title:string,price:decimal(38,18),amount:int>>"
    )
    with pytest.raises(ValueError, match="no such tables"):
        layouts(["no_such_table"])


def _agg(spark: Any, *rows: tuple[Any, ...]) -> Any:
    return spark.createDataFrame(list(rows), AGG_DDL)


def test_a_write_replaces_the_cells_it_names_of_the_row_with_its_key(local_spark: Any) -> None:
    store = InMemoryViewStore(local_spark)
    store.upsert_each(
        _agg(
            local_spark,
            (1, MAR_2, NINE, 1, 2, Decimal("3.80"), 0, {0: 4}),
            (1, MAR_2, NINE_15, 1, 1, Decimal("1.50"), 0, {0: 5}),
        ),
        [Target("agg_15m_speed")],
    )
    # The 9:00 window again, fewer columns: the others keep their values.
    again = _agg(local_spark, (1, MAR_2, NINE, 2, 5, Decimal("9.30"), 1, {0: 7}))
    some = ("operation_id", "day", "window_start", "receipt_count", "applied_offsets")
    store.upsert_each(again, [Target("agg_15m_speed", some)])
    assert store.table("agg_15m_speed") == [
        {"operation_id": 1, "day": MAR_2, "window_start": NINE, "receipt_count": 2,
         "item_quantity": 2, "revenue": Decimal("3.80"), "late_count": 0,
         "applied_offsets": {0: 7}},
        {"operation_id": 1, "day": MAR_2, "window_start": NINE_15, "receipt_count": 1,
         "item_quantity": 1, "revenue": Decimal("1.50"), "late_count": 0,
         "applied_offsets": {0: 5}},
    ]  # fmt: skip
    assert store.writes == ["agg_15m_speed", "agg_15m_speed"]


def test_reads_by_partition_key_or_a_longer_prefix_only(local_spark: Any) -> None:
    store = InMemoryViewStore(local_spark)
    store.upsert_each(
        _agg(
            local_spark,
            (1, MAR_2, NINE, 1, 2, Decimal("3.80"), 0, {0: 4}),
            (1, MAR_2, NINE_15, 1, 1, Decimal("1.50"), 0, {0: 5}),
            (2, MAR_2, NINE, 1, 1, Decimal("1.00"), 0, {1: 3}),
        ),
        [Target("agg_15m_speed")],
    )
    columns = ("operation_id", "window_start", "revenue")
    by_day = store.rows("agg_15m_speed", ("operation_id", "day"), [(1, MAR_2)], columns)
    assert by_day.schema.simpleString() == (
        "struct<operation_id:int,window_start:timestamp,revenue:decimal(38,18)>"
    )
    assert sorted(tuple(r) for r in by_day.collect()) == [
        (1, NINE, Decimal("3.80")),
        (1, NINE_15, Decimal("1.50")),
    ]
    keys = local_spark.createDataFrame(
        [(1, MAR_2, NINE_15), (2, MAR_2, NINE_15)],
        "operation_id int, day date, window_start timestamp",
    )
    assert [tuple(r) for r in store.lookup("agg_15m_speed", keys, columns).collect()] == [
        (1, NINE_15, Decimal("1.50"))
    ]
    with pytest.raises(ValueError, match="partition key"):
        store.rows("agg_15m_speed", ("operation_id",), [(1,)], columns)
    assert [(op, table, by) for _, op, table, by in store.log] == [
        ("write", "agg_15m_speed", ()),
        ("read", "agg_15m_speed", ("operation_id", "day")),
        ("read", "agg_15m_speed", ("operation_id", "day", "window_start")),
    ]


def test_no_row_without_its_whole_key_and_instants_kept_to_the_millisecond(
    local_spark: Any,
) -> None:
    store = InMemoryViewStore(local_spark)
    at = datetime(2026, 3, 2, 9, 3, 0, 123456)
    row = _agg(local_spark, (1, MAR_2, at, 1, 2, Decimal("3.80"), 0, {0: 4}))
    store.upsert_each(row, [Target("agg_15m_speed")])
    assert store.table("agg_15m_speed")[0]["window_start"] == datetime(2026, 3, 2, 9, 3, 0, 123000)
    with pytest.raises(ValueError, match="a null in the primary key"):
        store.upsert_each(
            row.withColumn("day", F.lit(None).cast("date")), [Target("agg_15m_speed")]
        )
    with pytest.raises(ValueError, match=r"primary key columns \['window_start'\] not written"):
        store.upsert_each(row, [Target("agg_15m_speed", ("operation_id", "day"))])
    with pytest.raises(ValueError, match="no table"):
        store.upsert_each(row, [Target("alerts")])


def test_views_share_the_tables_and_log_under_their_own_path(local_spark: Any) -> None:
    store = InMemoryViewStore(local_spark)
    driver, connector = store.via("driver"), store.via("connector")
    row = _agg(local_spark, (1, MAR_2, NINE, 1, 2, Decimal("3.80"), 0, {0: 4}))
    written: list[str] = []
    driver.upsert_each(row, [Target("agg_15m_speed")], written.append)
    found = connector.rows("agg_15m_speed", ("operation_id", "day"), [(1, MAR_2)], ("revenue",))
    assert [r.revenue for r in found.collect()] == [Decimal("3.80")]
    assert written == ["agg_15m_speed"]
    assert [(path, op) for path, op, _, _ in store.log] == [
        ("driver", "write"),
        ("connector", "read"),
    ]
