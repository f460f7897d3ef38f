"""How the streaming jobs start: in their scheduler pool, every N seconds or everything now."""

from __future__ import annotations

from pyspark.sql import SparkSession
from pyspark.sql.streaming.query import StreamingQuery
from pyspark.sql.streaming.readwriter import DataStreamWriter

POOL_PROPERTY = "spark.scheduler.pool"


def with_trigger(writer: DataStreamWriter, seconds: float, available_now: bool) -> DataStreamWriter:
    """`availableNow` (drain what Kafka holds now, then stop) or every `seconds`."""
    if available_now:
        return writer.trigger(availableNow=True)
    return writer.trigger(processingTime=f"{seconds} seconds")


def start_in_pool(
    spark: SparkSession, writer: DataStreamWriter, pool: str, seconds: float, available_now: bool
) -> StreamingQuery:
    """Start the query with its jobs in the fair-scheduler pool `pool`.

    A query's thread inherits the local properties of the thread that starts it, so
    every job of its micro-batches (foreachBatch's included) runs in `pool`; the pools
    are defined in adapters/spark-scheduler-pools.xml (why: see there).
    """
    context = spark.sparkContext
    context.setLocalProperty(POOL_PROPERTY, pool)
    try:
        return with_trigger(writer, seconds, available_now).start()
    finally:
        context.setLocalProperty(POOL_PROPERTY, None)  # type: ignore[arg-type]
