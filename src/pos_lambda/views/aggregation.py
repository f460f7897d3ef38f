"""The view definitions shared by the speed and the batch layer — one copy only.

Lambda architectures classically drift because the speed and the batch layer each
implement "the same" aggregation. Here both call these pure DataFrame transforms:

- `window_start`: the 15-minute UTC window of an instant (the column form of
  `pos_lambda.views.windows.window_start`; tests/unit/views/test_windows.py holds them equal).
- `aggregate_15m`: absolute 15-minute aggregates per store from deduplicated
  receipts: receipt count, item quantity, revenue (decimal), late-receipt count.

Windows are aligned to UTC epoch quarters (hh:00, :15, :30, :45 UTC). `day` is the
UTC date of the window start. Timestamps are instants; the session time zone is
pinned to UTC by pos_lambda.adapters.spark_session, which `to_date` relies on.
"""

from __future__ import annotations

from functools import cache

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import DecimalType

from pos_lambda.schemas.aggregate import Aggregate
from pos_lambda.views.windows import WINDOW_MICROS

# Spark's widest decimal: a window's sum of receipt revenues (each up to
# contract.MAX_RECEIPT_REVENUE, 17 integer digits) overflows only past ~10^19 receipts;
# a narrower type would turn an overflow into a null (or an error) for the window.
REVENUE_TYPE = DecimalType(38, 2)

# A window's key, then its measures: the fields of the one aggregate type.
AGGREGATE_COLUMNS = ("operation_id", "day", "window_start", *Aggregate._fields)
# Each measure's Spark type in AGGREGATE_COLUMNS; a sum of two keeps it.
MEASURE_TYPES = {
    "receipt_count": "int",
    "item_quantity": "bigint",
    "revenue": REVENUE_TYPE.simpleString(),
    "late_count": "int",
}


def window_start(ts: Column) -> Column:
    """Start of the 15-minute UTC window containing `ts`.

    In whole microseconds, with pmod (never negative): unix_timestamp would truncate the
    fraction toward zero and put 1969-12-31T23:44:59.999999Z in the 23:45 window.
    """
    micros = F.unix_micros(ts)
    return F.timestamp_micros(micros - F.pmod(micros, F.lit(WINDOW_MICROS)))


def aggregate_15m(receipts: DataFrame, **more: Column) -> DataFrame:
    """Absolute 15-minute aggregates per store.

    Input: one row per receipt (already deduplicated) with operation_id,
    happened_at, item_quantity, revenue and late. Output: AGGREGATE_COLUMNS, then
    `more`: other aggregates over the same groups, by name (the speed layer adds
    the Kafka offsets a window counts in the same pass).
    """
    windowed = receipts.withColumn("window_start", receipt_window())
    return (
        windowed.groupBy(*_groups())
        .agg(*_measures(), *(column.alias(name) for name, column in more.items()))
        .withColumn("day", _day())
        .select(*_output(tuple(more)))
    )


# Built once per driver, not per micro-batch (see src/pos_lambda/views/records.py).
@cache
def receipt_window() -> Column:
    """`window_start` of a receipt row (its `happened_at`)."""
    return window_start(F.col("happened_at"))


@cache
def _measures() -> tuple[Column, ...]:
    return (
        F.count(F.lit(1)).cast("int").alias("receipt_count"),
        F.sum("item_quantity").cast("long").alias("item_quantity"),
        F.sum("revenue").cast(REVENUE_TYPE).alias("revenue"),
        F.sum(F.when(F.col("late"), 1).otherwise(0)).cast("int").alias("late_count"),
    )


@cache
def _groups() -> tuple[Column, ...]:
    return F.col("operation_id"), F.col("window_start")


@cache
def _output(more: tuple[str, ...]) -> tuple[Column, ...]:
    return tuple(F.col(c) for c in (*AGGREGATE_COLUMNS, *more))


@cache
def _day() -> Column:
    return F.to_date("window_start")
