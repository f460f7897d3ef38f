"""Kafka adapter for Spark jobs: the input stream every streaming job reads.

Topic admin (create, require) lives in `pos_lambda.adapters.kafka_admin`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pos_lambda.settings import Settings

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


def read_transactions(spark: SparkSession, settings: Settings) -> DataFrame:
    """A streaming DataFrame of raw Kafka records (key, value, topic, partition, ...)."""
    return (
        spark.readStream.format("kafka")
        # Bootstrap servers and, if configured, the SASL login and TLS trust.
        .options(**settings.spark_kafka_options)
        .option("subscribe", settings.topics.transactions)
        # Aborted transactional writes (e.g. from a replaying upstream) never count.
        .option("kafka.isolation.level", "read_committed")
        .option("startingOffsets", settings.speed.starting_offsets)
        # A task reads its partition up to the micro-batch's end offset, which is where
        # the log ends: the consumer's fetch beyond it waits fetch.max.wait.ms (500 ms
        # by Kafka's default) for data that is not there, and a task's last poll waits
        # for that fetch. 6,070 records in 4 partitions on 2 cores read in 0.26-0.34 s
        # with 10 ms against 1.26-1.33 s with 500 (one session, alternated).
        .option("kafka.fetch.max.wait.ms", settings.speed.kafka_fetch_max_wait_ms)
        # A broker away. The driver looks up each micro-batch's end offsets with an admin
        # client (Spark's KafkaOffsetReaderAdmin): kafka-clients 3.4 pins a partition's
        # ListOffsets to the leader it looked up first, and once that broker is dead and
        # fenced the call waits unassigned until the broker returns or the call's deadline
        # (default.api.timeout.ms, 60 s) passes ("Timed out waiting for a node assignment");
        # Spark then tries again (fetchOffset.*) with a new admin client, which finds the new
        # leader. The same deadline bounds the executors' consumers, which ask the leader for
        # the partition's offset range after every poll: it must outlast a leader's move, or
        # the task, and with it the query, fails (docs/cluster.md). A frozen broker's open
        # connections answer nothing until request.timeout.ms (30 s by default).
        .option("kafka.default.api.timeout.ms", settings.speed.kafka_api_timeout_ms)
        .option("kafka.request.timeout.ms", settings.speed.kafka_request_timeout_ms)
        .option("fetchOffset.numRetries", settings.speed.offset_fetch_retries)
        .option("fetchOffset.retryIntervalMs", settings.speed.offset_fetch_retry_interval_ms)
        .option("maxOffsetsPerTrigger", settings.speed.max_offsets_per_trigger)
        # A topic deleted or compacted under us is an operator error, but it must not
        # crash the stream: log and continue from what is there.
        .option("failOnDataLoss", "false")
        .load()
    )
