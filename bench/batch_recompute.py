"""Batch layer and master dataset, measured in one run with side-by-side ratios.

    python bench/batch_recompute.py [--sizes 1000000,2000000] [--micro-batches 300]

1. Master dataset read time, before and after compaction: one day's partition written
   by `--micro-batches` small appends (one per simulated 1 s micro-batch, as the
   archiver's 1 s trigger does), read (full scan + count) before and after OPTIMIZE.
2. The batch job (`pos-batch run` over one day, lookback 0, writes to Cassandra
   included) over master datasets of each size, in events/s and the time ratio of the
   largest to the smallest; and, in the same run on the same Delta table, Spark's own
   read-and-aggregate (valid rows, grouped per store and 15-minute window, no dedup,
   no writes): the floor the job is compared to.

Master rows are generated in Spark (valid receipts of 20 stores over one day, 0.6 %
resends with later offsets), in the archiver's exact schema, so what is measured is
the batch job, not the simulator. Needs Cassandra (`make up`); uses its own keyspace
and a temporary data dir, dropped at the end.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from adapters import master_dataset
from batch_layer import job
from batch_layer.interval import Interval
from infra import schema_apply
from infra.settings import Settings, load_settings
from infra.spark import build_session
from views.aggregation import window_start

DAY = datetime(2026, 3, 2, tzinfo=UTC)
RESEND_RATE = 0.006


def master_rows(spark: SparkSession, n: int, offset0: int = 0) -> DataFrame:
    """n archiver-shaped master rows of 2 March: valid receipts plus resends.

    Every 1/RESEND_RATE-th row is a resend of the previous receipt (same content, a
    later offset), so the winner rule has work to do.
    """
    step_us = 86_400_000_000 // max(n, 1)
    day_us = int(DAY.timestamp() * 1_000_000)
    every = int(1 / RESEND_RATE)
    ids = spark.range(offset0, offset0 + n).withColumn(
        "tid", F.when(F.col("id") % every == 0, F.col("id") - 1).otherwise(F.col("id"))
    )
    happened = F.timestamp_micros(F.lit(day_us) + (F.col("tid") - offset0) * step_us)
    receipt = F.struct(
        happened.alias("happened_at"),
        (F.lit(101) + F.col("tid") % 20).cast("int").alias("operation_id"),
        F.col("tid").cast("long").alias("transaction_id"),
        F.lit(1).alias("vendor_fiscal_module"),
        F.array(
            F.struct(
                F.lit("Espresso").alias("title"),
                F.lit("1.90").cast("decimal(12,2)").alias("price"),
                F.lit(2).alias("amount"),
            )
        ).alias("line_items"),
        F.lit(2).cast("long").alias("item_quantity"),
        F.lit("3.80").cast("decimal(19,2)").alias("revenue"),
    )
    return ids.select(
        F.lit("pos.transactions").alias("kafka_topic"),
        F.lit(0).alias("kafka_partition"),
        F.col("id").alias("kafka_offset"),
        (happened + F.expr("INTERVAL 2 SECONDS")).alias("kafka_timestamp"),
        F.lit(None).cast("binary").alias("kafka_key"),
        F.lit(None).cast("binary").alias("raw_value"),
        F.current_timestamp().alias("ingested_at"),
        F.lit(True).alias("valid"),
        F.lit(None).cast("string").alias("reason"),
        F.lit(None).cast("string").alias("detail"),
        receipt.alias("receipt"),
        F.to_date(happened).alias("event_day"),
    )


def append(rows: DataFrame, settings: Settings) -> None:
    (
        rows.write.format("delta")
        .mode("append")
        .partitionBy("event_day")
        .save(str(settings.master_dataset_dir))
    )


def timed(fn: Any) -> tuple[float, Any]:
    t0 = time.perf_counter()
    value = fn()
    return time.perf_counter() - t0, value


def read_all(spark: SparkSession, settings: Settings) -> int:
    return int(master_dataset.snapshot(spark, settings).rows.count())


def floor(spark: SparkSession, settings: Settings) -> int:
    """Spark's own read-and-aggregate: no dedup, no writes."""
    rows = master_dataset.snapshot(spark, settings).rows.where("valid")
    return len(
        rows.groupBy("receipt.operation_id", window_start(F.col("receipt.happened_at")))
        .agg(F.count(F.lit(1)), F.sum("receipt.revenue"))
        .collect()
    )


def compaction(spark: SparkSession, base: Settings, micro_batches: int) -> None:
    s = base.model_copy(update={"data_dir": base.data_dir / "compaction"})
    per_batch = 50
    for b in range(micro_batches):
        append(master_rows(spark, per_batch, b * per_batch).coalesce(1), s)
    files_before = len(master_dataset.snapshot(spark, s).rows.inputFiles())
    read_all(spark, s)  # warm the JVM and the file listing cache equally for both reads
    before, n = timed(lambda: read_all(spark, s))
    master_dataset.optimize(spark, s)
    files_after = len(master_dataset.snapshot(spark, s).rows.inputFiles())
    after, n2 = timed(lambda: read_all(spark, s))
    assert n == n2 == micro_batches * per_batch
    print(
        f"master dataset, {micro_batches} micro-batches x {per_batch} records of one day: "
        f"{files_before} files read in {before:.2f} s; after OPTIMIZE {files_after} files "
        f"in {after:.2f} s: after/before = {after / before:.2f}"
    )


def batch(spark: SparkSession, base: Settings, sizes: list[int]) -> None:
    interval = Interval(DAY, DAY + timedelta(days=1))
    results = {}
    for n in sizes:
        # Its own keyspace too: the version key names a table version, and every size
        # starts a new table at version 0.
        s = base.model_copy(
            update={
                "data_dir": base.data_dir / f"batch-{n}",
                "cassandra_keyspace": f"{base.cassandra_keyspace}_{n}",
            }
        )
        schema_apply.apply_cql(s)
        append(master_rows(spark, n), s)
        floor(spark, s)  # warm-up (JIT, file listing) before either measurement
        floor_s, _ = timed(lambda s=s: floor(spark, s))
        job_s, result = timed(lambda s=s: job.run(spark, s, interval))
        results[n] = job_s
        print(
            f"batch job, {n:,} master records: {job_s:.1f} s = {n / job_s:,.0f} events/s "
            f"({result.receipts:,} receipts, {result.duplicates_removed:,} resends removed); "
            f"floor (read + aggregate, no dedup, no writes) {floor_s:.1f} s = "
            f"{n / floor_s:,.0f} events/s: job/floor time = {job_s / floor_s:.1f}"
        )
    if len(sizes) > 1:
        lo, hi = min(sizes), max(sizes)
        print(f"batch job time ratio {hi:,}/{lo:,} records = {results[hi] / results[lo]:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="1000000,2000000")
    parser.add_argument("--micro-batches", type=int, default=300)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="pos-bench-batch-"))
    settings = load_settings().model_copy(
        update={"data_dir": tmp, "cassandra_keyspace": f"bench_{uuid.uuid4().hex[:8]}"}
    )
    schema_apply.apply_cql(settings)
    spark = build_session(settings, "pos-bench-batch")
    sizes = [int(x) for x in args.sizes.split(",")]
    try:
        compaction(spark, settings, args.micro_batches)
        batch(spark, settings, sizes)
    finally:
        spark.stop()
        from cassandra.cluster import Cluster

        cluster = Cluster(settings.cassandra_contact_points, port=settings.cassandra_port)
        session = cluster.connect()
        for name in [
            settings.cassandra_keyspace,
            *(f"{settings.cassandra_keyspace}_{n}" for n in sizes),
        ]:
            session.execute(f"DROP KEYSPACE IF EXISTS {name}", timeout=60)
        cluster.shutdown()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
