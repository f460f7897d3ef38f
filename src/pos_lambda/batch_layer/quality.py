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
from datetime import UTC, date, datetime

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from pos_lambda.adapters import cassandra
from pos_lambda.adapters.driver_lookup import local_frame, spark_value
from pos_lambda.batch_layer.interval import Interval
from pos_lambda.batch_layer.store import BatchStore
from pos_lambda.schemas import cql
from pos_lambda.settings import Settings
from pos_lambda.views.batch import FIX_COLUMNS, fixes, in_range


@dataclass(frozen=True)
class QualityResult:
    windows: int
    windows_fixed: int
    missing_days: list[str]


def check(spark: SparkSession, settings: Settings, interval: Interval) -> QualityResult:
    ks = settings.cassandra.keyspace
    with BatchStore(settings) as store:
        pointers = store.pointers()
        committed = {d: pointers[d].version for d in interval.days if d in pointers}
        missing = [d.isoformat() for d in interval.days if d not in pointers]
        if not committed:
            return QualityResult(0, 0, missing)
        # A day's rows of every store through the `day` indexes (Cassandra 5 SAI): the
        # cost follows the interval's days, never the history (a scan of both tables
        # would grow with every day kept).
        batch = _day_rows(spark, store, ks, cql.AGG_BATCH_TABLE, _BATCH_COLUMNS, committed)
        speed = _day_rows(spark, store, ks, cql.AGG_SPEED_TABLE, _SPEED_COLUMNS, committed)
    served = spark.createDataFrame(list(committed.items()), "day date, version string")
    lo, hi = interval.recompute_start, interval.end
    result = (
        fixes(
            batch.where(in_range("window_start", lo, hi)),
            speed.where(in_range("window_start", lo, hi)),
        )
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


_BATCH_COLUMNS = (
    "operation_id",
    "day",
    "window_start",
    "receipt_count",
    "revenue",
    "duplicates",
    "conflicts",
    "beyond_speed_bound",
)
_SPEED_COLUMNS = ("operation_id", "day", "window_start", "receipt_count", "revenue")


def _day_rows(
    spark: SparkSession,
    store: BatchStore,
    keyspace: str,
    table: str,
    columns: tuple[str, ...],
    days: dict[date, str],
) -> DataFrame:
    """`columns` of every store's rows of `days` (of the committed version, for the
    versioned batch table), read by the driver through the `day` index."""
    schema = cassandra.read_table(spark, keyspace, table).select(*columns).schema
    versioned = table == cql.AGG_BATCH_TABLE
    where = "day = ? AND version = ?" if versioned else "day = ?"
    statement = store.session.prepare(f"SELECT {', '.join(columns)} FROM {table} WHERE {where}")
    rows = []
    for day, version in days.items():
        bound = (day, version) if versioned else (day,)
        rows += [
            tuple(map(spark_value, r)) for r in store.session.execute(statement, bound, timeout=120)
        ]
    return local_frame(spark, rows, schema)
