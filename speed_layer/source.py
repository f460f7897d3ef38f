"""The Kafka source every streaming job reads: pos.transactions, read_committed."""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession

from infra.settings import Settings


def read_transactions(
    spark: SparkSession, settings: Settings, topic: str | None = None
) -> DataFrame:
    """A streaming DataFrame of raw Kafka records (key, value, topic, partition, ...)."""
    return (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", settings.bootstrap_servers)
        .option("subscribe", topic or settings.topic_transactions)
        # Aborted transactional writes (e.g. from a replaying upstream) never count.
        .option("kafka.isolation.level", "read_committed")
        .option("startingOffsets", settings.speed_starting_offsets)
        .option("maxOffsetsPerTrigger", settings.speed_max_offsets_per_trigger)
        # A topic deleted or compacted under us is an operator error, but it must not
        # crash the stream: log and continue from what is there.
        .option("failOnDataLoss", "false")
        .load()
    )
