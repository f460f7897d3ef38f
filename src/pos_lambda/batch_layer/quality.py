"""Data quality: compare the committed batch view with the speed view, per store-window.

    pos-batch quality --start 2026-03-02T00:00:00Z --end 2026-03-03T00:00:00Z
    pos-batch run --quality --start ... --end ...   # the run, then this check, one JVM

For the days a run recomputed, reads the committed batch aggregates (following the
pointer) and the speed aggregates, and upserts into `batch_fixes` what the batch
changed per store-window: receipts and revenue it added or removed, duplicates and
conflicts it absorbed, receipts only it saw (beyond the speed layer's bound). The
DAG's recompute runs it in its own Spark session right after the commit
(`after_run`) and records the result on the run's `batch_runs` row, which the DAG's
light `quality` task reports (src/pos_lambda/batch_layer/quality_report.py); users
query `batch_fixes` with CQL.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import asdict, dataclass
from datetime import UTC, date, datetime
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from pos_lambda.adapters import cassandra, cassandra_client
from pos_lambda.adapters.driver_lookup import local_frame, spark_value
from pos_lambda.batch_layer.interval import Interval
from pos_lambda.batch_layer.pointer import BatchStore
from pos_lambda.schemas import cql
from pos_lambda.settings import Settings
from pos_lambda.views.batch import FIX_COLUMNS, fixes, in_range

log = logging.getLogger("pos.batch")


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


def run_fields(result: QualityResult | None, error: str | None, at: datetime) -> dict[str, Any]:
    """The `batch_runs` columns that record a check (its result, or why it failed)."""
    if result is None:
        return {"quality_checked_at": None, "quality_error": (error or "unknown")[:2000]}
    return {
        "quality_checked_at": at,
        "quality_windows": result.windows,
        "quality_windows_fixed": result.windows_fixed,
        "quality_missing_days": result.missing_days,
        "quality_error": None,
    }


def after_run(
    spark: SparkSession, settings: Settings, interval: Interval, run_id: uuid.UUID
) -> dict[str, Any]:
    """`pos-batch run --quality`: the check in the run's own session, right after its
    commit, recorded on the run's `batch_runs` row; what to print.

    A failed check never raises: the run's commit stands (the views are right whatever
    a comparison with the speed view says), so the run's exit code, and the DAG's
    `recompute` task, say only whether the views were committed; a retry of that task
    would fold again and start a JVM for a comparison. The failure is logged, printed
    and recorded as `quality_error`, and the DAG's `quality` task, which reads the row,
    fails on it (rerun: `pos-batch quality` over the interval)."""
    try:
        result: QualityResult | None = check(spark, settings, interval)
        error = None
    except Exception as exc:
        log.error("quality check after run %s failed (the run's commit stands): %r", run_id, exc)
        result, error = None, repr(exc)
    try:
        with BatchStore(settings) as store:
            store.record_run(run_id, run_fields(result, error, datetime.now(UTC)))
    except Exception as exc:  # the quality task then finds nothing recorded, and fails
        log.error("could not record the quality check on run %s: %r", run_id, exc)
        error = error or f"not recorded: {exc!r}"
    out: dict[str, Any] = asdict(result) if result is not None else {}
    return {**out, "error": error} if error is not None else out


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
    statement = cassandra_client.prepare_idempotent(
        store.session, f"SELECT {', '.join(columns)} FROM {table} WHERE {where}"
    )
    rows = []
    for day, version in days.items():
        bound = (day, version) if versioned else (day,)
        rows += [
            tuple(map(spark_value, r)) for r in store.session.execute(statement, bound, timeout=120)
        ]
    return local_frame(spark, rows, schema)
