"""The shared view definitions against literal rows (window edges, returns, decimals, zones)."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

from pyspark.sql.types import (
    BooleanType,
    DecimalType,
    IntegerType,
    LongType,
    StructField,
    StructType,
    TimestampType,
)

from pos_lambda.views.aggregation import aggregate_15m

RECEIPTS = StructType(
    [
        StructField("operation_id", LongType()),
        StructField("vendor_fiscal_module", LongType()),
        StructField("transaction_id", LongType()),
        StructField("happened_at", TimestampType()),
        StructField("item_quantity", LongType()),
        StructField("revenue", DecimalType(18, 2)),
        StructField("late", BooleanType()),
        StructField("kafka_timestamp", TimestampType()),
        StructField("kafka_partition", IntegerType()),
        StructField("kafka_offset", LongType()),
    ]
)

CET = timezone(timedelta(hours=1))
EET = timezone(timedelta(hours=2))


def _receipt(
    store: int,
    tid: int,
    at: datetime,
    qty: int,
    revenue: str,
    late: bool = False,
    ts: datetime | None = None,
    partition: int = 0,
    offset: int = 0,
) -> tuple[Any, ...]:
    return (store, 7, tid, at, qty, Decimal(revenue), late, ts or at, partition, offset)


def _utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)  # type: ignore[misc]


def test_aggregate_15m_window_edges_returns_and_decimals(local_spark: Any) -> None:
    rows = [
        _receipt(1, 1, _utc(2026, 3, 1, 10, 0, 0), 2, "3.80"),
        _receipt(1, 2, _utc(2026, 3, 1, 10, 14, 59), -1, "-1.90"),  # a return, same window
        _receipt(1, 3, _utc(2026, 3, 1, 10, 15, 0), 1, "0.10", late=True),  # next window
        _receipt(1, 4, _utc(2026, 3, 1, 10, 29, 59), 3, "0.20"),
        _receipt(2, 1, datetime(2026, 3, 1, 23, 50, tzinfo=EET), 1, "9.99"),  # 21:50 UTC
        _receipt(2, 2, datetime(2026, 3, 1, 0, 5, tzinfo=CET), 1, "1.00"),  # 23:05 UTC, Feb 28
    ]
    df = local_spark.createDataFrame(rows, RECEIPTS)
    got = sorted(tuple(r) for r in aggregate_15m(df).collect())
    naive = lambda *a: datetime(*a)
    assert got == [
        (1, date(2026, 3, 1), naive(2026, 3, 1, 10, 0), 2, 1, Decimal("1.90"), 0),
        (1, date(2026, 3, 1), naive(2026, 3, 1, 10, 15), 2, 4, Decimal("0.30"), 1),
        (2, date(2026, 2, 28), naive(2026, 2, 28, 23, 0), 1, 1, Decimal("1.00"), 0),
        (2, date(2026, 3, 1), naive(2026, 3, 1, 21, 45), 1, 1, Decimal("9.99"), 0),
    ]
