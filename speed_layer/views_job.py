"""Speed views: Kafka -> validate -> dead letters, raw receipts, 15-minute aggregates.

Design (b) of the issue, chosen for freshness and bounded state (see README, Speed
layer): each micro-batch, in `foreachBatch`,
  1. validates records with the contract's validator; invalid ones are upserted
     into `dead_letters` keyed by Kafka coordinates, with the reason;
  2. reads the raw rows already stored for the store-days the batch touches and
     keeps, per natural key, the earliest Kafka arrival (`views.first_arrivals`):
     a resend of a stored receipt is absorbed, never written again;
  3. upserts the new first arrivals into `receipts_by_store_day`;
  4. recomputes the absolute aggregates of just the touched windows from all their
     receipts (`views.aggregate_15m`, the batch layer's own function) and
     upserts them into `agg_15m_speed`.
A replayed micro-batch (after a crash) repeats the same reads and upserts and
lands on the same rows: effectively once without Spark state. Receipts that
arrive more than `speed_max_lateness_hours` after they happened are counted and
left to the batch layer.

Run it with `pos-speed run` (see speed_layer/cli.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.query import StreamingQuery

from infra.settings import Settings
from schemas import contract, cql
from speed_layer import cassandra_io, transforms
from speed_layer.progress import BatchCounts, ProgressRecorder
from views.aggregation import aggregate_15m, first_arrivals

QUERY_NAME = "pos-speed-views"


@dataclass(frozen=True)
class ViewsBatch:
    """The shell around one micro-batch: where to read and write."""

    spark: SparkSession
    keyspace: str
    late_threshold_s: int
    max_lateness_s: int

    def stored_receipts(self, store_days: DataFrame) -> DataFrame:
        """Raw rows already in Cassandra for these (operation_id, day) partitions.

        Joined on the full partition key with the connector's direct join: a read
        per touched partition, so a micro-batch's cost does not grow with the table.
        """
        raw = cassandra_io.read_table(
            self.spark, self.keyspace, cql.RAW_TABLE, by_partition_key=True
        )
        return raw.join(store_days, ["operation_id", "day"], "inner").select(
            *transforms.RAW_RECEIPT_COLUMNS
        )

    def process(self, batch: DataFrame) -> BatchCounts:
        checked = transforms.check(batch).persist()
        try:
            return self._process_checked(checked)
        finally:
            checked.unpersist()

    def _process_checked(self, checked: DataFrame) -> BatchCounts:
        # Every Spark job costs a fixed overhead per micro-batch; the counts come from
        # one pass over the (persisted) validated batch.
        receipts = transforms.receipt_rows(checked, self.late_threshold_s, self.max_lateness_s)
        stats = checked.agg(
            F.count(F.when(~transforms.is_valid(), 1)).alias("invalid"),
            F.count(F.when(transforms.is_valid(), 1)).alias("valid"),
            F.count(F.when(transforms.beyond_bound(self.max_lateness_s), 1)).alias("beyond"),
        ).collect()[0]  # a global aggregate has exactly one row
        invalid_rows, valid_rows, beyond = (int(stats[c]) for c in ("invalid", "valid", "beyond"))
        if invalid_rows:
            cassandra_io.upsert(transforms.dead_letters(checked), self.keyspace,
                                cql.DEAD_LETTERS_TABLE)  # fmt: skip
        if valid_rows == beyond:
            return BatchCounts(valid_rows, invalid_rows, 0, 0, beyond)

        incoming = receipts.where(~F.col("beyond_bound")).drop("beyond_bound")
        store_days = incoming.select("operation_id", "day").distinct()
        # Everything known for the touched store-days, one row per natural key:
        # materialised before we write, so the writes below cannot feed back into it.
        known = first_arrivals(
            self.stored_receipts(store_days).unionByName(incoming)
        ).localCheckpoint()
        # Rows of this batch that won their natural key: first arrivals to write.
        # (In a replayed batch they are already stored; rewriting them is a no-op.)
        winners = known.join(
            incoming.select("kafka_partition", "kafka_offset"),
            ["kafka_partition", "kafka_offset"],
            "left_semi",
        ).persist()
        won = winners.agg(
            F.count(F.lit(1)).alias("rows"), F.count(F.when(F.col("late"), 1)).alias("late")
        ).collect()[0]
        new_rows, late = int(won["rows"]), int(won["late"])
        if new_rows:
            cassandra_io.upsert(winners, self.keyspace, cql.RAW_TABLE)
        winners.unpersist()

        windows = transforms.touched_windows(incoming)
        aggregates = aggregate_15m(known).join(
            windows, ["operation_id", "day", "window_start"], "left_semi"
        )
        cassandra_io.upsert(aggregates, self.keyspace, cql.AGG_SPEED_TABLE)
        return BatchCounts(
            valid_rows=valid_rows,
            invalid_rows=invalid_rows,
            resends_absorbed=valid_rows - beyond - new_rows,
            late_receipts=late,
            beyond_lateness_bound=beyond,
        )


def start(
    spark: SparkSession,
    settings: Settings,
    recorder: ProgressRecorder,
    available_now: bool = False,
    topic: str | None = None,
) -> StreamingQuery:
    """Start the named views query; returns the StreamingQuery."""
    from speed_layer.source import read_transactions

    job = ViewsBatch(
        spark=spark,
        keyspace=settings.cassandra_keyspace,
        late_threshold_s=int(contract.LATE_THRESHOLD.total_seconds()),
        max_lateness_s=int(settings.speed_max_lateness_hours * 3600),
    )

    cassandra_io.await_tables(
        spark,
        settings.cassandra_keyspace,
        [cql.RAW_TABLE, cql.AGG_SPEED_TABLE, cql.DEAD_LETTERS_TABLE],
    )

    def on_batch(batch: DataFrame, batch_id: int) -> None:
        recorder.add_counts(QUERY_NAME, batch_id, job.process(batch))

    writer = (
        read_transactions(spark, settings, topic)
        .writeStream.queryName(QUERY_NAME)
        .foreachBatch(on_batch)
        .option("checkpointLocation", str(settings.checkpoint_dir / "views"))
    )
    writer = (
        writer.trigger(availableNow=True)
        if available_now
        else writer.trigger(processingTime=f"{settings.speed_trigger_seconds} seconds")
    )
    return writer.start()
