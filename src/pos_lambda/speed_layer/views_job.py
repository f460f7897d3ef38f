"""Speed views: Kafka -> validate -> dead letters, receipts, conflicts, 15-minute aggregates.

Each micro-batch, in `foreachBatch` (the shell, `pos_lambda.speed_layer.views_batch`; the
logic is in `src/pos_lambda/views/` and `pos_lambda.speed_layer.batch_plan`):
  1. check records with the contract's validator (`pos_lambda.views.records`; in a backlog,
     canonical valid records natively in Spark first);
  2. look up the natural keys of the valid copies in `receipt_keys` (read by the driver
     when the micro-batch is small, `pos_lambda.adapters.driver_lookup`; else the connector's direct
     join: one read per receipt) and decide with the shared winner rule (`views.winners`):
     new receipts win, a stored winner stays, other copies are resends or conflicts;
  3. add the winners to the stored aggregates of the windows they fall in
     (`pos_lambda.views.increments.added`: `aggregate_15m`, the batch layer's function, of the
     winners each window does not count yet) and upsert them into `agg_15m_speed`:
     first, as what readers wait for;
  4. upsert the winners' raw rows, their keys, then conflicts (both versions: a stored
     winner's content is read from its raw row, as the index keeps only what the rule
     reads), and last the invalid records into `dead_letters`, keyed by Kafka
     coordinates, with the reason.
A small micro-batch's rows are written by the driver (`pos_lambda.adapters.driver_writes`: the same
INSERTs, a partition's rows in one unlogged batch as the connector groups them, without
a connector job per table), a backlog's through the connector.
Every write is an upsert of values that depend only on the micro-batch and what the
previous micro-batches stored, and each aggregate row records the Kafka offsets it
counts, so a micro-batch replayed after a crash at any point (even between two of
these writes) lands on the same rows: effectively once, without Spark state.
Receipts that reach Kafka more than `speed_max_lateness_hours` after they happened
are recorded in `receipt_keys` (so their resends are known) but left out of the
speed views: the batch layer takes them.

Reads and writes go through a `ViewStore` (pos_lambda.adapters.view_store): the
connector's, and the driver's for small micro-batches. This module wires them: the
stores, the thresholds (Settings.speed) and the streaming query.

Run it with `pos-speed run` (see src/pos_lambda/speed_layer/cli.py).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming.query import StreamingQuery

from pos_lambda.adapters import cassandra, cassandra_client, kafka, schema_apply
from pos_lambda.adapters.driver_lookup import DriverLookup
from pos_lambda.adapters.driver_writes import DriverWriter
from pos_lambda.adapters.view_store import ConnectorStore, DriverStore
from pos_lambda.failpoints import NONE as NO_FAILPOINTS
from pos_lambda.failpoints import Failpoints
from pos_lambda.schemas import contract, cql
from pos_lambda.schemas.cql import SPEED_QUERY_OF_JOB
from pos_lambda.settings import Settings
from pos_lambda.speed_layer import SUPERVISOR_PID_ENV, warm_up
from pos_lambda.speed_layer.batch_plan import (
    Thresholds,
    logged_offsets,
    records_between,
    route,
)
from pos_lambda.speed_layer.listening import RunCloser
from pos_lambda.speed_layer.progress import ProgressRecorder
from pos_lambda.speed_layer.triggers import start_in_pool
from pos_lambda.speed_layer.views_batch import ViewsBatch

if TYPE_CHECKING:
    from cassandra.cluster import Session

QUERY_NAME = SPEED_QUERY_OF_JOB["views"]
log = logging.getLogger("pos.speed")


def start(
    spark: SparkSession,
    settings: Settings,
    recorder: ProgressRecorder,
    available_now: bool = False,
) -> StreamingQuery:
    """Start the named views query (after a warm-up, if settings.speed.warm_up); returns
    the StreamingQuery."""
    cassandra.await_tables(spark, settings.cassandra.keyspace, SPEED_TABLES)
    checkpoint = settings.checkpoint_dir / "views"
    limits = _thresholds(settings)
    # A CQL session of its own for the driver's reads and writes, closed with the query.
    opened = cassandra_client.open_session(settings, keyspace=False) if limits.uses_driver else None
    session = opened.session if opened is not None else None
    try:
        if warm_up.wanted(settings.speed.warm_up, available_now, checkpoint):
            _warm_up(spark, settings, limits, session)
        failpoints = Failpoints.from_settings(settings.faults, supervisor_pid=_supervisor())
        job = _views_batch(
            spark, settings, settings.cassandra.keyspace, limits, session, failpoints
        )
    except BaseException:
        if opened is not None:
            opened.close()
        raise

    # A micro-batch's size, before it is read: from the offsets the checkpoint logged
    # for it. Unknown (an unreadable log), the previous micro-batch's predicts it, and
    # a run's first counts as a full one, as it takes what came since the last run.
    previous_records = settings.speed.max_offsets_per_trigger

    def on_batch(batch: DataFrame, batch_id: int) -> None:
        nonlocal previous_records
        size = batch_size(checkpoint, batch_id)
        how = route(limits, previous_records if size is None else size)
        counts = job.process(batch, how.native_first, how.collect_keys)
        previous_records = counts.valid_rows + counts.invalid_rows
        recorder.add_counts(QUERY_NAME, batch_id, counts)

    stream = (
        kafka.read_transactions(spark, settings)
        .writeStream.queryName(QUERY_NAME)
        .foreachBatch(on_batch)
        .option("checkpointLocation", str(checkpoint))
    )
    try:
        query = start_in_pool(
            spark, stream, QUERY_NAME, settings.speed.trigger_seconds, available_now
        )
    except BaseException:
        if opened is not None:
            opened.close()
        raise
    if opened is not None:
        _close_after(spark, query, opened.close)
    return query


def run_warm_up(
    spark: SparkSession, settings: Settings, cut_short: Callable[[], bool] = lambda: False
) -> None:
    """The warm-up alone, with a CQL session of its own, closed afterwards: a standby's
    (cli.stand_by), which then waits holding no connection; no further pass once
    `cut_short()` says so."""
    limits = _thresholds(settings)
    if not limits.uses_driver:
        _warm_up(spark, settings, limits, None, cut_short)
        return
    with cassandra_client.open_session(settings, keyspace=False) as session:
        _warm_up(spark, settings, limits, session, cut_short)


def _thresholds(settings: Settings) -> Thresholds:
    return Thresholds(
        driver_reads_below=settings.speed.driver_reads_below,
        driver_writes_below=settings.speed.driver_writes_below,
        bucket_reads_from=settings.speed.bucket_reads_from,
        native_check_from=settings.speed.native_check_from,
    )


SPEED_TABLES = [
    cql.RAW_TABLE,
    cql.RECEIPT_KEYS_TABLE,
    cql.CONFLICTS_TABLE,
    cql.AGG_SPEED_TABLE,
    cql.DEAD_LETTERS_TABLE,
]


def _views_batch(
    spark: SparkSession,
    settings: Settings,
    keyspace: str,
    limits: Thresholds,
    session: Session | None,
    failpoints: Failpoints = NO_FAILPOINTS,
) -> ViewsBatch:
    """The micro-batch's shell over the tables of `keyspace` (the warm-up's with no
    failpoint: a test's crash point must fire in the pipeline's micro-batches only)."""
    driver = None
    if session is not None:
        driver = DriverStore(
            DriverLookup(spark, session, keyspace),
            DriverWriter(session, keyspace, settings.cassandra.write_consistency),
        )
    return ViewsBatch(
        store=ConnectorStore(spark, keyspace),
        late_threshold_us=int(contract.LATE_THRESHOLD.total_seconds() * 1_000_000),
        max_lateness_us=int(settings.speed.max_lateness_hours * 3600 * 1_000_000),
        limits=limits,
        driver=driver,
        failpoints=failpoints,
    )


def _warm_up(
    spark: SparkSession,
    settings: Settings,
    limits: Thresholds,
    session: Session | None,
    cut_short: Callable[[], bool] = lambda: False,
) -> None:
    """The micro-batch's work on synthetic records, into the scratch keyspace (see
    pos_lambda.speed_layer.warm_up), before the query starts."""
    keyspace = settings.speed.warm_up_keyspace
    if keyspace == settings.cassandra.keyspace:
        raise ValueError(
            f"POS_SPEED_WARM_UP_KEYSPACE is the pipeline's own keyspace ({keyspace}): the "
            "warm-up writes synthetic receipts; name a scratch keyspace"
        )
    created = not cassandra_client.has_tables(settings, keyspace, SPEED_TABLES)
    if created:
        log.info("creating the warm-up keyspace %s (once)", keyspace)
    # On every start, not only the first: tables an older release created here lack the
    # columns a newer one writes (receipt_keys' resend columns failed every start after
    # an upgrade), and apply_cql adds them where CREATE ... IF NOT EXISTS would not.
    schema_apply.apply_cql(settings, keyspace)
    if created:
        cassandra.await_tables(spark, keyspace, SPEED_TABLES)
    job = _views_batch(spark, settings, keyspace, limits, session)
    passes = warm_up.warm_views(
        spark, lambda b, native, keys: job.process(b, native, keys), cut_short
    )
    log.info(warm_up.report(QUERY_NAME, passes))


def batch_size(checkpoint: Path, batch_id: int) -> int | None:
    """Kafka records in micro-batch `batch_id` of the query checkpointed at `checkpoint`:
    from the previous batch's end offsets (the source's starting offsets for batch 0) to
    its own, both logged before the batch runs. None when a log cannot be read."""

    def logged(path: Path) -> dict[str, dict[str, int]] | None:
        try:
            return logged_offsets(path.read_text(errors="replace"))
        except OSError:
            return None

    before = checkpoint / ("offsets" if batch_id else "sources/0") / str(max(batch_id - 1, 0))
    start, end = logged(before), logged(checkpoint / "offsets" / str(batch_id))
    return None if start is None or end is None else records_between(start, end)


def _close_after(spark: SparkSession, query: StreamingQuery, close: Callable[[], None]) -> None:
    """Call `close` once this run of `query` has terminated (stopped, drained or failed)."""
    spark.streams.addListener(RunCloser(query.runId, close))
    if not query.isActive:  # it ended before the listener was there to hear it
        close()


def _supervisor() -> int | None:
    """The supervisor that restarts this driver (killed with it at a failpoint)."""
    pid = os.environ.get(SUPERVISOR_PID_ENV)
    return int(pid) if pid else None
