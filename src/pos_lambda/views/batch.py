"""Pure transforms the batch layer adds around the shared core (no session, no I/O).

- `in_range`: rows whose instant column falls in [lo, hi).
- `absorbed_per_window`: per winner's store-window, the copies the winner rule removed
  (duplicates) and how many of them were conflicts.
- `batch_aggregates`: `aggregate_15m` plus what the batch absorbed per window.
- `increments`, `plus`: what a fold of new records adds per window (its new winners,
  and the duplicates of winners old or new), and the committed rows plus it.
- `fixes`: batch vs speed aggregates per store-window, i.e. what the batch fixed.
- `device_gaps`: per store, day and device, the gaps in its receipt numbers
  (`pos_lambda.views.gaps`, the logic the serving layer applies to the speed view too).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from pos_lambda.views.aggregation import (
    AGGREGATE_COLUMNS,
    MEASURE_TYPES,
    REVENUE_TYPE,
    aggregate_15m,
    window_start,
)
from pos_lambda.views.gaps import device_day, range_text

FIX_COLUMNS = (
    "operation_id",
    "day",
    "window_start",
    "batch_receipts",
    "speed_receipts",
    "batch_revenue",
    "speed_revenue",
    "revenue_fixed",
    "receipts_fixed",
    "duplicates",
    "conflicts",
    "beyond_speed_bound",
)


def in_range(column: str, lo: datetime, hi: datetime) -> Column:
    return (F.col(column) >= F.lit(lo)) & (F.col(column) < F.lit(hi))


def absorbed_per_window(duplicates: DataFrame) -> DataFrame:
    """(operation_id, window_start, duplicates, conflicts) by the winner's window."""
    return (
        duplicates.withColumn("window_start", window_start(F.col("winner_happened_at")))
        .groupBy("operation_id", "window_start")
        .agg(
            F.count(F.lit(1)).cast("int").alias("duplicates"),
            F.count(F.when(F.col("conflict"), 1)).cast("int").alias("conflicts"),
        )
    )


def fixes(batch: DataFrame, speed: DataFrame) -> DataFrame:
    """Per store-window of either view: both views' numbers and what the batch fixed.

    batch: agg_15m_batch rows (AGGREGATE_COLUMNS + duplicates, conflicts,
    beyond_speed_bound); speed: agg_15m_speed rows. A window only one view has counts
    as zero in the other. revenue_fixed / receipts_fixed = batch - speed.
    """
    key = ["operation_id", "day", "window_start"]
    b = batch.select(
        *key,
        F.col("receipt_count").alias("batch_receipts"),
        F.col("revenue").alias("batch_revenue"),
        "duplicates",
        "conflicts",
        "beyond_speed_bound",
    )
    s = speed.select(
        *key,
        F.col("receipt_count").alias("speed_receipts"),
        F.col("revenue").alias("speed_revenue"),
    )
    zero = F.lit(0).cast("decimal(38,2)")
    joined = b.join(s, key, "full_outer")
    return joined.select(
        *key,
        F.coalesce("batch_receipts", F.lit(0)).alias("batch_receipts"),
        F.coalesce("speed_receipts", F.lit(0)).alias("speed_receipts"),
        F.coalesce(F.col("batch_revenue").cast("decimal(38,2)"), zero).alias("batch_revenue"),
        F.coalesce(F.col("speed_revenue").cast("decimal(38,2)"), zero).alias("speed_revenue"),
        (
            F.coalesce(F.col("batch_revenue").cast("decimal(38,2)"), zero)
            - F.coalesce(F.col("speed_revenue").cast("decimal(38,2)"), zero)
        )
        .cast("decimal(38,2)")
        .alias("revenue_fixed"),
        (F.coalesce("batch_receipts", F.lit(0)) - F.coalesce("speed_receipts", F.lit(0))).alias(
            "receipts_fixed"
        ),
        F.coalesce("duplicates", F.lit(0)).alias("duplicates"),
        F.coalesce("conflicts", F.lit(0)).alias("conflicts"),
        F.coalesce("beyond_speed_bound", F.lit(0)).alias("beyond_speed_bound"),
    )


BATCH_AGGREGATE_COLUMNS = (*AGGREGATE_COLUMNS, "duplicates", "conflicts", "beyond_speed_bound")


def batch_aggregates(winners: DataFrame, duplicates: DataFrame) -> DataFrame:
    """`aggregate_15m` of the winners (the speed layer's very function), plus per window
    what the batch absorbed: duplicates and conflicts removed, and receipts beyond the
    speed layer's lateness bound (receipts only the batch saw)."""
    key = ["operation_id", "window_start"]
    return (
        aggregate_15m(winners)
        .join(absorbed_per_window(duplicates), key, "left")
        .join(_beyond_per_window(winners), key, "left")
        .select(
            *AGGREGATE_COLUMNS,
            *(
                F.coalesce(c, F.lit(0)).cast("int").alias(c)
                for c in ("duplicates", "conflicts", "beyond_speed_bound")
            ),
        )
    )


def _beyond_per_window(winners: DataFrame) -> DataFrame:
    return (
        winners.where("beyond_bound")
        .withColumn("window_start", window_start(F.col("happened_at")))
        .groupBy("operation_id", "window_start")
        .agg(F.count(F.lit(1)).cast("int").alias("beyond_speed_bound"))
    )


# The measures of a batch aggregate row, with their types: a sum of two keeps the type.
BATCH_MEASURES = {
    **MEASURE_TYPES,
    "duplicates": "int",
    "conflicts": "int",
    "beyond_speed_bound": "int",
}
WINDOW_KEY = ("operation_id", "day", "window_start")


def increments(winners: DataFrame, duplicates: DataFrame) -> DataFrame:
    """BATCH_AGGREGATE_COLUMNS of what one fold adds per window: its new winners (as
    `batch_aggregates` counts them) and the duplicates it found, in their winners'
    windows, including windows that gain no receipt (a resend of a receipt an earlier
    fold counted adds one duplicate to that receipt's window)."""
    key = ["operation_id", "window_start"]
    received = aggregate_15m(winners).join(_beyond_per_window(winners), key, "left")
    absorbed = absorbed_per_window(duplicates).withColumn("day", F.to_date("window_start"))
    return (
        received.unionByName(absorbed, allowMissingColumns=True)
        .groupBy(*WINDOW_KEY)
        .agg(*_summed())
        .select(*BATCH_AGGREGATE_COLUMNS)
    )


def plus(committed: DataFrame, added: DataFrame) -> DataFrame:
    """Per window of either input, the committed row's measures plus the added ones (a
    window missing from one side counts zero there): BATCH_AGGREGATE_COLUMNS."""
    both = committed.select(*WINDOW_KEY, *BATCH_MEASURES).unionByName(
        added.select(*WINDOW_KEY, *BATCH_MEASURES)
    )
    return summed(both)


def summed(shares: DataFrame) -> DataFrame:
    """BATCH_AGGREGATE_COLUMNS: the measures of rows of the same window added up (shares
    of one window from disjoint sets of receipts, as a rebuild's chunks give)."""
    return shares.groupBy(*WINDOW_KEY).agg(*_summed()).select(*BATCH_AGGREGATE_COLUMNS)


def _summed() -> tuple[Column, ...]:
    return tuple(
        F.coalesce(F.sum(F.col(m).cast(t)), F.lit(0)).cast(t).alias(m)
        for m, t in BATCH_MEASURES.items()
    )


GAP_COLUMNS = (
    "operation_id",
    "day",
    "vendor_fiscal_module",
    "first_number",
    "last_number",
    "receipt_count",
    "missing_count",
    "missing",
    "restarts",
    "revenue",
)
_GAP_TYPE = T.StructType(
    [
        T.StructField("first_number", T.LongType()),
        T.StructField("last_number", T.LongType()),
        T.StructField("receipt_count", T.IntegerType()),
        T.StructField("missing_count", T.IntegerType()),
        T.StructField("missing", T.ArrayType(T.StringType())),
        T.StructField("restarts", T.ArrayType(T.LongType())),
    ]
)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _device_day_row(receipts: list[Any], max_jump: int) -> tuple[Any, ...]:
    got = device_day(
        ((_EPOCH + timedelta(microseconds=r["at_us"]), int(r["number"])) for r in receipts),
        max_jump,
    )
    return (
        got.first,
        got.last,
        got.count,
        got.missing_count,
        [range_text(m) for m in got.missing],
        list(got.restarts),
    )


def device_gaps(receipts: DataFrame, max_jump: int) -> DataFrame:
    """GAP_COLUMNS per (operation_id, day, vendor_fiscal_module) of `receipts` (receipt
    rows, one per natural key: the winners; revenue is their sum). A device's day is small
    (its receipts' numbers and instants), so it is gathered whole and handed to the
    shared logic, which the serving layer runs on the speed view's rows."""
    summary = F.udf(lambda rs: _device_day_row(rs, max_jump), _GAP_TYPE)
    device = ["operation_id", "day", "vendor_fiscal_module"]
    gathered = receipts.groupBy(*device).agg(
        F.collect_list(
            F.struct(
                F.unix_micros("happened_at").alias("at_us"),
                F.col("transaction_id").cast("long").alias("number"),
            )
        ).alias("receipts"),
        # What the till's day-close total is reconciled against (one row per receipt).
        F.sum("revenue").cast(REVENUE_TYPE).alias("revenue"),
    )
    return gathered.select(*device, summary("receipts").alias("g"), "revenue").select(
        *device, "g.*", "revenue"
    )
