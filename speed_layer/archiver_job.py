"""Archiver: every Kafka record, as received, into the immutable master dataset.

Append-only Parquet through Spark's file sink, whose metadata log (`_spark_metadata`)
commits each micro-batch's files atomically: a batch replayed after a crash
rewrites nothing the readers can see twice. Readers must go through Spark (which
honours that log), e.g. `spark.read.parquet(master_dir)`. Partitioned by
`event_day` for the batch layer. Run it with `pos-speed run`.
"""

from __future__ import annotations

from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.query import StreamingQuery

from adapters import kafka
from infra.settings import Settings
from speed_layer.triggers import with_trigger
from views import records

QUERY_NAME = "pos-speed-archiver"


def start(spark: SparkSession, settings: Settings, available_now: bool = False) -> StreamingQuery:
    checked = records.check(kafka.read_transactions(spark, settings))
    # Ingest time is the one wall-clock value we keep; it is taken here in the shell
    # (per micro-batch), never inside a transform.
    rows = records.archive_rows(checked, F.current_timestamp())
    writer = (
        rows.writeStream.queryName(QUERY_NAME)
        .format("parquet")
        .option("path", str(settings.master_dataset_dir))
        .option("checkpointLocation", str(settings.checkpoint_dir / "archiver"))
        .partitionBy("event_day")
        .outputMode("append")
    )
    return with_trigger(writer, settings, available_now).start()
