"""Adding a micro-batch's new receipts to stored 15-minute aggregates, exactly once.

A window's aggregate is a sum, and in the speed view a window only ever gains
receipts (winners never move). So the speed layer need not re-read every receipt
of the touched store-days to recompute a window (a cost that grows with the table):
it adds `aggregate_15m` of the new winners, the batch layer's own aggregation, to
the stored row.

Adding is not idempotent by itself: a micro-batch replayed after a crash that came
after its aggregate write would add its receipts twice. So each stored row carries
`applied_offsets`: for every Kafka partition, the highest offset of a receipt the
row counts. Kafka hands the speed layer each partition in offset order, so a
receipt is already counted iff its offset is at or below its partition's mark in
its window's row. A replay (same offsets) finds its receipts counted and adds
nothing; a window its failed attempt did not reach yet gets them once. The marks
are Kafka's offsets, not Spark's batch ids, so they hold across checkpoint resets
too; a keyspace's speed views follow one topic (re-creating the topic restarts
its offsets: see docs/operations.md).

Pure DataFrame -> DataFrame functions, unit-tested in tests/unit/views.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from views.aggregation import AGGREGATE_COLUMNS, REVENUE_TYPE, aggregate_15m, window_start

APPLIED_OFFSETS = "applied_offsets"  # map<int, bigint>: Kafka partition -> highest offset counted
WINDOW_KEY = ("operation_id", "day", "window_start")
SPEED_AGGREGATE_COLUMNS = (*AGGREGATE_COLUMNS, APPLIED_OFFSETS)
_SUMS = {  # measure -> its type in AGGREGATE_COLUMNS (a sum of two keeps it)
    "receipt_count": "int",
    "item_quantity": "bigint",
    "revenue": REVENUE_TYPE.simpleString(),
    "late_count": "int",
}


def uncounted(receipts: DataFrame, stored: DataFrame) -> DataFrame:
    """The receipts their window's stored row does not count yet.

    receipts: receipt rows (operation_id, day, happened_at, kafka_partition,
    kafka_offset, ...). stored: speed aggregate rows of (at least) their windows.
    """
    marks = stored.select(*WINDOW_KEY, APPLIED_OFFSETS)
    keyed = receipts.withColumn("window_start", window_start(F.col("happened_at")))
    mark = F.col(APPLIED_OFFSETS)[F.col("kafka_partition")]
    return (
        keyed.join(marks, list(WINDOW_KEY), "left")
        .where(mark.isNull() | (F.col("kafka_offset") > mark))
        .drop("window_start", APPLIED_OFFSETS)
    )


def increments(receipts: DataFrame) -> DataFrame:
    """Per window: `aggregate_15m` of the receipts, with the offsets they bring.

    Output: SPEED_AGGREGATE_COLUMNS; `applied_offsets` holds each partition's
    highest offset among the window's receipts.
    """
    per_partition = (
        receipts.withColumn("window_start", window_start(F.col("happened_at")))
        .groupBy("operation_id", "window_start", "kafka_partition")
        .agg(F.max("kafka_offset").alias("kafka_offset"))
    )
    offsets = per_partition.groupBy("operation_id", "window_start").agg(
        F.map_from_entries(F.collect_list(F.struct("kafka_partition", "kafka_offset"))).alias(
            APPLIED_OFFSETS
        )
    )
    return (
        aggregate_15m(receipts)
        .join(offsets, ["operation_id", "window_start"])
        .select(*SPEED_AGGREGATE_COLUMNS)
    )


def _highest(stored: Column, added: Column) -> Column:
    """Per partition, the higher of two offset marks (a missing mark counts as none)."""
    both = F.map_zip_with(stored, added, lambda _, a, b: F.greatest(a, b))
    return F.when(stored.isNull(), added).otherwise(both)


def add(stored: DataFrame, increment: DataFrame) -> DataFrame:
    """The rows to write: each incremented window's stored row plus its increment.

    A window without a stored row starts from zero. Windows with no increment are
    not returned (there is nothing to write).
    """
    s, i = stored.alias("s"), increment.alias("i")
    joined = i.join(s, [F.col(f"i.{k}") == F.col(f"s.{k}") for k in WINDOW_KEY], "left")
    return joined.select(
        *(F.col(f"i.{k}").alias(k) for k in WINDOW_KEY),
        *(
            (F.coalesce(F.col(f"s.{m}").cast(t), F.lit(0)) + F.col(f"i.{m}")).cast(t).alias(m)
            for m, t in _SUMS.items()
        ),
        _highest(F.col(f"s.{APPLIED_OFFSETS}"), F.col(f"i.{APPLIED_OFFSETS}")).alias(
            APPLIED_OFFSETS
        ),
    )
