"""Archiver: every Kafka record, as received, into the immutable master dataset.

Unjudged (`pos_lambda.views.records.archive_rows`): no validation and no parsed receipt, so the
archiver runs no Python worker; each batch run judges the records again.

An append-only Delta Lake table (`pos_lambda.adapters.master_dataset`), partitioned by
`event_day` for the batch layer. Delta's streaming sink is exactly-once: each
micro-batch commits as one table version tagged with the query's id and batch id,
so a batch replayed after a crash is recognised and skipped, and every reader
(Spark, delta-rs, DuckDB) sees only committed versions, unlike the plain file sink,
whose `_spark_metadata` log protects Spark readers only. Compaction (OPTIMIZE)
rewrites files, never records. Read it with `master_dataset.snapshot(spark, settings)`.
Each micro-batch's end offsets are then committed to the Kafka consumer group
POS_SPEED_ARCHIVER_GROUP (`pos_lambda.adapters.archive_offsets`): the batch DAG waits on them.
Run it with `pos-speed run`.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.query import StreamingQuery

from pos_lambda.adapters import kafka
from pos_lambda.adapters.archive_offsets import OffsetsCommitter, end_offsets
from pos_lambda.schemas.cql import SPEED_QUERY_OF_JOB
from pos_lambda.settings import Settings
from pos_lambda.speed_layer import warm_up
from pos_lambda.speed_layer.listening import ProgressListener
from pos_lambda.speed_layer.triggers import start_in_pool
from pos_lambda.views import records

QUERY_NAME = SPEED_QUERY_OF_JOB["archiver"]
log = logging.getLogger("pos.speed")


def start(spark: SparkSession, settings: Settings, available_now: bool = False) -> StreamingQuery:
    checkpoint = settings.checkpoint_dir / "archiver"
    if warm_up.wanted(settings.speed.warm_up, available_now, checkpoint):
        run_warm_up(spark, settings)
    # No verdict here: the record as received (records.archive_rows), judged by the
    # views query for the speed views and again by every batch run.
    # Ingest time is the one wall-clock value we keep; it is taken here in the shell
    # (per micro-batch), never inside a transform.
    rows = records.archive_rows(kafka.read_transactions(spark, settings), F.current_timestamp())
    writer = (
        rows.writeStream.queryName(QUERY_NAME)
        .format("delta")
        .option("path", str(settings.master_dataset_dir))
        .option("checkpointLocation", str(checkpoint))
        .partitionBy("event_day")
        .outputMode("append")
    )
    committer = OffsetsCommitter(settings)
    # Its own, longer interval (POS_SPEED_ARCHIVE_TRIGGER_SECONDS): see src/pos_lambda/settings.py.
    query = start_in_pool(
        spark, writer, QUERY_NAME, settings.speed.archive_trigger_seconds, available_now
    )
    spark.streams.addListener(CommitArchived(query.runId, committer))
    return query


def run_warm_up(
    spark: SparkSession, settings: Settings, cut_short: Callable[[], bool] = lambda: False
) -> None:
    """The first Delta commit of a fresh driver, paid before the query starts
    (src/pos_lambda/speed_layer/warm_up.py), in a scratch table of this process; no
    further commit once `cut_short()` says so (a standby told to take over)."""
    scratch = settings.data_dir / "warm-up" / f"archiver-{os.getpid()}"
    log.info(warm_up.report(QUERY_NAME, warm_up.warm_archiver(spark, scratch, cut_short)))


def commit_last(settings: Settings, query: StreamingQuery) -> None:
    """Commit the end offsets of the query's last micro-batch, from the driver, once the
    query has ended: Spark delivers listener events asynchronously, so the last one of
    an `--available-now` run may still be queued when the driver stops."""
    progress = query.lastProgress
    if progress:
        committer = OffsetsCommitter(settings)
        try:
            _commit_ends(committer, [s.get("endOffset") for s in progress.get("sources", [])])
        finally:
            committer.close()


def _commit_ends(committer: OffsetsCommitter, ends: list[Any]) -> None:
    """Commit each Kafka source's endOffset (parsed, as in `lastProgress`)."""
    for end in ends:
        committer.commit(end_offsets(end, committer.topic))


class CommitArchived(ProgressListener):
    """Commits the end offsets of each micro-batch of the query run `run_id` to the
    archiver's consumer group. Spark reports a micro-batch's progress once its sink
    (Delta) has committed it, so a committed offset is always archived. A replayed
    micro-batch reports the same offsets: nothing moves back."""

    def __init__(self, run_id: str, committer: OffsetsCommitter) -> None:
        self.run_id = run_id
        self.committer = committer

    def on_progress(self, progress: dict[str, Any]) -> None:
        if progress["runId"] != self.run_id:  # the views query's, or a previous run's
            return
        _commit_ends(self.committer, [s.get("endOffset") for s in progress.get("sources", [])])

    def onQueryIdle(self, event: Any) -> None:
        # No micro-batch is coming: the only chance to send again a commit that failed.
        if str(event.runId) == self.run_id:
            self.committer.retry()

    def onQueryTerminated(self, event: Any) -> None:
        if str(event.runId) == self.run_id:
            self.committer.close()
