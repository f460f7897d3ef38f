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

One plan, each input read once: the receipts joined with their windows' stored rows
(a Cassandra lookup), those not counted yet aggregated with the stored values carried
along, and added. Pure DataFrame -> DataFrame, unit-tested in tests/unit/views.
"""

from __future__ import annotations

from functools import cache

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from pos_lambda.views.aggregation import (
    AGGREGATE_COLUMNS,
    MEASURE_TYPES,
    aggregate_15m,
    receipt_window,
)

APPLIED_OFFSETS = "applied_offsets"  # map<int, bigint>: Kafka partition -> highest offset counted
WINDOW_KEY = ("operation_id", "day", "window_start")
SPEED_AGGREGATE_COLUMNS = (*AGGREGATE_COLUMNS, APPLIED_OFFSETS)
_STORED = "stored_"  # prefix of a stored row's columns, carried along the receipts
_NEW_OFFSETS = "_new_offsets"


@cache
def _offsets_counted() -> Column:
    """Aggregate: for each Kafka partition among a window's receipts, the highest offset.

    Higher-order functions over the group's (partition, offset) pairs: one pass with
    the sums, where a second aggregation per partition would cost a shuffle.
    """
    pairs = F.collect_list(F.struct("kafka_partition", "kafka_offset"))
    partitions = F.array_distinct(F.transform(pairs, lambda p: p["kafka_partition"]))

    def highest(partition: Column) -> Column:
        mine = F.filter(pairs, lambda p: p["kafka_partition"] == partition)
        return F.array_max(F.transform(mine, lambda p: p["kafka_offset"]))

    return F.map_from_arrays(partitions, F.transform(partitions, highest))


def _highest(stored: Column, added: Column) -> Column:
    """Per partition, the higher of two offset marks (a missing mark counts as none)."""
    both = F.map_zip_with(stored, added, lambda _, a, b: F.greatest(a, b))
    return F.when(stored.isNull(), added).otherwise(both)


def added(stored: DataFrame, receipts: DataFrame) -> DataFrame:
    """The rows to write: each window's stored row plus `aggregate_15m` of the receipts
    it does not count yet (a window without a stored row starts from zero).

    receipts: receipt rows (operation_id, day, happened_at, item_quantity, revenue,
    late, kafka_partition, kafka_offset). stored: speed aggregate rows of (at least)
    their windows. Windows that gain nothing are not returned: nothing to write.
    """
    new = receipts.withColumn("window_start", receipt_window())
    new = new.join(stored.select(*_kept()), list(WINDOW_KEY), "left").where(_not_counted())
    increment = aggregate_15m(new, **_carried())
    return increment.select(*_sums())


# Built once per driver, not per micro-batch (see src/pos_lambda/views/records.py).
@cache
def _kept() -> tuple[Column, ...]:
    """A stored row's columns, prefixed, to carry along its window's receipts."""
    carried = (*MEASURE_TYPES, APPLIED_OFFSETS)
    return (*map(F.col, WINDOW_KEY), *(F.col(c).alias(_STORED + c) for c in carried))


@cache
def _not_counted() -> Column:
    """A receipt its window's stored row does not count yet (above its partition's mark)."""
    mark = F.col(_STORED + APPLIED_OFFSETS)[F.col("kafka_partition")]
    return mark.isNull() | (F.col("kafka_offset") > mark)


@cache
def _carried() -> dict[str, Column]:
    """Aggregates beside aggregate_15m's: the stored values, and the offsets counted."""
    return {
        **{_STORED + c: F.first(_STORED + c) for c in (*MEASURE_TYPES, APPLIED_OFFSETS)},
        _NEW_OFFSETS: _offsets_counted(),
    }


@cache
def _sums() -> tuple[Column, ...]:
    """The stored row plus the increment (a window without a stored row starts from zero)."""
    return (
        *map(F.col, WINDOW_KEY),
        *(
            (F.coalesce(F.col(_STORED + m).cast(t), F.lit(0)) + F.col(m)).cast(t).alias(m)
            for m, t in MEASURE_TYPES.items()
        ),
        _highest(F.col(_STORED + APPLIED_OFFSETS), F.col(_NEW_OFFSETS)).alias(APPLIED_OFFSETS),
    )
