"""Data quality: compare the committed batch view with the speed view, per store-window.

    pos-batch quality --start 2026-03-02T00:00:00Z --end 2026-03-03T00:00:00Z

For the days a run recomputed, reads the committed batch aggregates (following the
pointer) and the speed aggregates, and upserts into `batch_fixes` what the batch
changed per store-window: receipts and revenue it added or removed, duplicates and
conflicts it absorbed, receipts only it saw (beyond the speed layer's bound). The
DAG runs it after each batch run; users query it with CQL.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from adapters import cassandra
from batch_layer.interval import Interval
from batch_layer.store import BatchStore
from infra.settings import Settings
from schemas import cql
from views.batch import FIX_COLUMNS, fixes, in_range


@dataclass(frozen=True)
class QualityResult:
    windows: int
    windows_fixed: int
    missing_days: list[str]


def check(spark: SparkSession, settings: Settings, interval: Interval) -> QualityResult:
    ks = settings.cassandra_keyspace
    with BatchStore(settings) as store:
        pointers = store.pointers()
    committed = {d: pointers[d].version for d in interval.days if d in pointers}
    missing = [d.isoformat() for d in interval.days if d not in pointers]
    if not committed:
        return QualityResult(0, 0, missing)
    # Which (day, version) pairs are served: only those rows count as the batch view.
    served = spark.createDataFrame(list(committed.items()), "day date, version string")
    lo, hi = interval.recompute_start, interval.end
    batch = (
        cassandra.read_table(spark, ks, cql.AGG_BATCH_TABLE)
        .join(served, ["day", "version"], "left_semi")
        .where(in_range("window_start", lo, hi))
    )
    speed = (
        cassandra.read_table(spark, ks, cql.AGG_SPEED_TABLE)
        .where(F.col("day").isin(list(committed)))
        .where(in_range("window_start", lo, hi))
    )
    result = (
        fixes(batch, speed)
        .join(served, ["day"], "inner")
        .withColumn("checked_at", F.lit(datetime.now(UTC)))
        .persist()
    )
    try:
        cassandra.upsert(result, ks, cql.BATCH_FIXES_TABLE, (*FIX_COLUMNS, "version", "checked_at"))
        row = result.agg(
            F.count(F.lit(1)).alias("n"),
            F.count(
                F.when((F.col("receipts_fixed") != 0) | (F.col("revenue_fixed") != 0), 1)
            ).alias("fixed"),
        ).first()
        assert row is not None
        return QualityResult(int(row["n"]), int(row["fixed"]), missing)
    finally:
        result.unpersist()
