"""The driver's reads of stored rows (pos_lambda.adapters.driver_lookup) against real Cassandra and
Spark: every value as the connector would read it, as a local relation (no Spark job)."""

from __future__ import annotations

from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any

import pytest

from pos_lambda.adapters.driver_lookup import DriverLookup
from pos_lambda.settings import Settings
from pos_lambda.speed_layer.views_job import RECEIPT_KEY, STORE_DAY
from pos_lambda.views.increments import SPEED_AGGREGATE_COLUMNS

BIG = 2**62 + 7  # a bigint that a float64 would round (to 2**62 + 8)


@pytest.fixture
def lookup(spark: Any, cql: Any, settings: Settings) -> DriverLookup:
    return DriverLookup(spark, cql, settings.cassandra.keyspace)


def _plan(df: Any) -> str:
    return str(df._jdf.queryExecution().analyzed().getClass().getSimpleName())


def _collected(df: Any) -> list[tuple[Any, ...]]:
    """Rows, instants in UTC (PySpark returns them naive, in this process's local zone)."""

    def utc(v: Any) -> Any:
        return v.astimezone(UTC) if isinstance(v, datetime) else v

    return sorted(tuple(map(utc, r)) for r in df.collect())


def test_stored_windows_read_exactly_as_a_local_relation(
    spark: Any, cql: Any, lookup: DriverLookup
) -> None:
    insert = cql.prepare(
        "INSERT INTO agg_15m_speed (operation_id, day, window_start, receipt_count,"
        " item_quantity, revenue, late_count, applied_offsets) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
    )
    day = date(2026, 3, 29)
    cql.execute(
        insert,
        (9101, day, datetime(2026, 3, 29, 1, 45), 3, BIG, Decimal("19999999999980000.01"), 1,
         {0: BIG, 3: 5}),
    )  # fmt: skip
    # A null beside BIG in a bigint column: pandas alone would make the column float64.
    cql.execute(insert, (9101, day, datetime(2026, 3, 29, 2, 0), 1, None, Decimal("0.10"), 0, None))
    cql.execute(insert, (9102, day, datetime(2026, 3, 29, 2, 0), 1, 1, Decimal("1.00"), 0, {1: 1}))

    df = lookup.rows(
        "agg_15m_speed", STORE_DAY, [(9101, day), (9999, day)], SPEED_AGGREGATE_COLUMNS
    )

    assert _plan(df) == "LocalRelation"
    assert df.columns == list(SPEED_AGGREGATE_COLUMNS)
    assert _collected(df) == [
        (9101, day, datetime(2026, 3, 29, 1, 45, tzinfo=UTC), 3, BIG,
         Decimal("19999999999980000.01"), 1, {0: BIG, 3: 5}),
        (9101, day, datetime(2026, 3, 29, 2, 0, tzinfo=UTC), 1, None, Decimal("0.10"), 0, None),
    ]  # fmt: skip


def test_receipt_keys_read_exactly_and_no_keys_give_an_empty_frame(
    spark: Any, cql: Any, lookup: DriverLookup
) -> None:
    cql.execute(
        "INSERT INTO receipt_keys (operation_id, key_bucket, vendor_fiscal_module, transaction_id,"
        " day, happened_at, content_hash, kafka_partition, kafka_offset, kafka_timestamp, late,"
        " beyond_bound) VALUES (9201, 7, 3, %s, '2026-10-25', '2026-10-25 01:30:00.123+0000',"
        " 'abc', 2, %s, '2026-10-25 01:30:01.000+0000', true, false)",
        (BIG, BIG),
    )
    columns = ("operation_id", "transaction_id", "happened_at", "kafka_offset", "late")

    df = lookup.rows("receipt_keys", RECEIPT_KEY, [(9201, 3, 7, BIG), (9201, 3, 7, 1)], columns)

    assert _plan(df) == "LocalRelation"
    assert _collected(df) == [
        (9201, BIG, datetime(2026, 10, 25, 1, 30, 0, 123000, tzinfo=UTC), BIG, True)
    ]
    empty = lookup.rows("receipt_keys", RECEIPT_KEY, [], columns)
    assert empty.columns == list(columns)
    assert empty.collect() == []


def test_receipt_keys_of_many_receipts_read_by_partition(
    spark: Any, cql: Any, lookup: DriverLookup
) -> None:
    # Two devices' partitions, one with more stored receipts than one IN list takes
    # (MAX_IN): every asked-for stored row comes back once, nothing else.
    insert = cql.prepare(
        "INSERT INTO receipt_keys (operation_id, vendor_fiscal_module, key_bucket,"
        " transaction_id, kafka_offset) VALUES (9301, ?, 0, ?, ?)"
    )
    for number in range(700):
        cql.execute(insert, (1, number, 10_000 + number))
    for number in range(5):
        cql.execute(insert, (2, number, 20_000 + number))
    asked = [(9301, 1, 0, n) for n in range(700)] + [(9301, 2, 0, n) for n in (1, 3, 9)]
    asked += [(9301, 1, 0, 5), (9301, 3, 0, 1)]  # a key twice; a partition with nothing

    df = lookup.rows(
        "receipt_keys",
        RECEIPT_KEY,
        asked,
        ("vendor_fiscal_module", "transaction_id", "kafka_offset"),
    )

    want = [(1, n, 10_000 + n) for n in range(700)] + [(2, 1, 20_001), (2, 3, 20_003)]
    assert sorted(map(tuple, df.collect())) == want


def test_keys_that_are_not_a_partition_key_or_one_column_more_are_refused(
    lookup: DriverLookup,
) -> None:
    with pytest.raises(ValueError, match=r"receipt_keys is read by its partition key"):
        lookup.rows("receipt_keys", ("operation_id", "transaction_id"), [(1, 2)], ("day",))
