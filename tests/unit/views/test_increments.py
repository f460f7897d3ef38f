"""Adding new receipts to stored speed aggregates exactly once (local Spark, literal rows).

The expected rows are literal sums worked out by hand from the receipts below.
"""

from __future__ import annotations

from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any

from pyspark.sql import DataFrame
from pyspark.testing import assertDataFrameEqual

from pos_lambda.views.increments import SPEED_AGGREGATE_COLUMNS, added

RECEIPTS = (
    "operation_id int, day date, happened_at timestamp, item_quantity bigint, "
    "revenue decimal(19,2), late boolean, kafka_partition int, kafka_offset bigint"
)
# As the connector reads agg_15m_speed: CQL decimal is decimal(38,18) in Spark.
STORED = (
    "operation_id int, day date, window_start timestamp, receipt_count int, "
    "item_quantity bigint, revenue decimal(38,18), late_count int, "
    "applied_offsets map<int,bigint>"
)
DAY = date(2026, 3, 8)
W1 = datetime(2026, 3, 8, 9, 0)  # 09:00-09:15 UTC
W2 = datetime(2026, 3, 8, 9, 15)


def _at(minute: int, second: int = 0) -> datetime:
    return datetime(2026, 3, 8, 9, minute, second, tzinfo=UTC)


def _receipts(spark: Any, *rows: tuple[Any, ...]) -> DataFrame:
    return spark.createDataFrame(list(rows), RECEIPTS)


def _stored(spark: Any, *rows: tuple[Any, ...]) -> DataFrame:
    return spark.createDataFrame(list(rows), STORED)


def _step(stored: DataFrame, receipts: DataFrame) -> DataFrame:
    """What the speed layer writes for one micro-batch."""
    return added(stored, receipts)


def test_new_receipts_add_to_the_stored_window_and_start_a_new_one(local_spark: Any) -> None:
    stored = _stored(local_spark, (7, DAY, W1, 2, 5, Decimal("10.50"), 1, {0: 40, 1: 8}))
    batch = _receipts(
        local_spark,
        (7, DAY, _at(14, 59), 3, Decimal("0.10"), False, 0, 41),
        (7, DAY, _at(3), 1, Decimal("0.20"), True, 2, 5),  # a partition W1 had not seen
        (7, DAY, _at(15), 4, Decimal("99.99"), False, 1, 9),  # 09:15: the next window
    )
    written = _step(stored, batch)
    assert tuple(written.columns) == SPEED_AGGREGATE_COLUMNS
    assertDataFrameEqual(
        written,
        local_spark.createDataFrame(
            [
                (7, DAY, W1, 4, 9, Decimal("10.80"), 2, {0: 41, 1: 8, 2: 5}),
                (7, DAY, W2, 1, 4, Decimal("99.99"), 0, {1: 9}),
            ],
            "operation_id int, day date, window_start timestamp, receipt_count int, "
            "item_quantity bigint, revenue decimal(38,2), late_count int, "
            "applied_offsets map<int,bigint>",
        ),
    )


def test_a_replayed_batch_adds_nothing_twice(local_spark: Any) -> None:
    batch = _receipts(
        local_spark,
        (7, DAY, _at(1), 3, Decimal("1.00"), False, 0, 41),
        (7, DAY, _at(2), 2, Decimal("2.00"), False, 1, 9),
        (7, DAY, _at(16), 1, Decimal("5.00"), False, 0, 42),
    )
    # The failed attempt wrote W1 (counting offsets 0:41 and 1:9), then died before W2.
    after_crash = _stored(local_spark, (7, DAY, W1, 5, 10, Decimal("13.00"), 0, {0: 41, 1: 9}))
    written = _step(after_crash, batch).collect()
    assert [(r.window_start, r.receipt_count, r.revenue) for r in written] == [
        (W2, 1, Decimal("5.00"))
    ]


def test_a_row_from_before_offsets_were_recorded_counts_none_of_them(local_spark: Any) -> None:
    stored = _stored(local_spark, (7, DAY, W1, 2, 2, Decimal("3.00"), 0, None))
    batch = _receipts(local_spark, (7, DAY, _at(5), 1, Decimal("1.00"), False, 3, 0))
    [row] = _step(stored, batch).collect()
    assert (row.receipt_count, row.revenue, row.applied_offsets) == (3, Decimal("4.00"), {3: 0})


def test_a_window_counts_each_partitions_highest_offset(local_spark: Any) -> None:
    batch = _receipts(
        local_spark,
        (7, DAY, _at(1), 1, Decimal("1.00"), False, 0, 12),
        (7, DAY, _at(2), 1, Decimal("1.00"), False, 0, 17),
        (7, DAY, _at(3), 1, Decimal("1.00"), False, 1, 4),
        (7, DAY, _at(4), 1, Decimal("1.00"), False, 0, 15),
        (7, DAY, _at(5), 1, Decimal("1.00"), False, 1, 3),
    )
    [row] = _step(_stored(local_spark), batch).collect()
    assert (row.receipt_count, row.revenue, row.applied_offsets) == (
        5,
        Decimal("5.00"),
        {0: 17, 1: 4},
    )
