"""The view definitions shared by the speed and the batch layer — one copy only.

Lambda architectures classically drift because the speed and the batch layer each
implement "the same" aggregation. Here both call these pure DataFrame transforms:

- `first_arrivals`: one row per natural key, the copy that reached Kafka first
  (ties broken by partition and offset, so the choice is deterministic).
- `aggregate_15m`: absolute 15-minute aggregates per store from deduplicated
  receipts: receipt count, item quantity, revenue (decimal), late-receipt count.

Windows are aligned to UTC epoch quarters (hh:00, :15, :30, :45 UTC). `day` is the
UTC date of the window start. Timestamps are instants; the session time zone is
pinned to UTC by infra.spark, which `to_date` relies on.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.types import DecimalType

from schemas.contract import NATURAL_KEY, WINDOW

WINDOW_SECONDS = int(WINDOW.total_seconds())
# Receipt revenue is decimal(18,2); a window's sum gets room for 10^6 receipts.
REVENUE_TYPE = DecimalType(24, 2)

AGGREGATE_COLUMNS = (
    "operation_id",
    "day",
    "window_start",
    "receipt_count",
    "item_quantity",
    "revenue",
    "late_count",
)


def window_start(ts: Column) -> Column:
    """Start of the 15-minute UTC window containing `ts`."""
    return F.timestamp_seconds(F.floor(F.unix_timestamp(ts) / WINDOW_SECONDS) * WINDOW_SECONDS)


def first_arrivals(receipts: DataFrame) -> DataFrame:
    """Keep one row per natural key: the earliest Kafka arrival."""
    order = Window.partitionBy(*NATURAL_KEY).orderBy(
        "kafka_timestamp", "kafka_partition", "kafka_offset"
    )
    return (
        receipts.withColumn("_arrival_rank", F.row_number().over(order))
        .where(F.col("_arrival_rank") == 1)
        .drop("_arrival_rank")
    )


def aggregate_15m(receipts: DataFrame) -> DataFrame:
    """Absolute 15-minute aggregates per store.

    Input: one row per receipt (already deduplicated) with operation_id,
    happened_at, item_quantity, revenue and late. Output: AGGREGATE_COLUMNS.
    """
    windowed = receipts.withColumn("window_start", window_start(F.col("happened_at")))
    return (
        windowed.groupBy("operation_id", "window_start")
        .agg(
            F.count(F.lit(1)).cast("int").alias("receipt_count"),
            F.sum("item_quantity").cast("long").alias("item_quantity"),
            F.sum("revenue").cast(REVENUE_TYPE).alias("revenue"),
            F.sum(F.when(F.col("late"), 1).otherwise(0)).cast("int").alias("late_count"),
        )
        .withColumn("day", F.to_date("window_start"))
        .select(*AGGREGATE_COLUMNS)
    )
