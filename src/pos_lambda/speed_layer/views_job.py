"""Speed views: Kafka -> validate -> dead letters, receipts, conflicts, 15-minute aggregates.

Each micro-batch, in `foreachBatch` (the shell; the logic is in `src/pos_lambda/views/`):
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

Run it with `pos-speed run` (see src/pos_lambda/speed_layer/cli.py).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import cache
from typing import Any, Protocol

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.query import StreamingQuery

from pos_lambda.adapters import cassandra, cassandra_client, kafka
from pos_lambda.adapters.cassandra import Target
from pos_lambda.adapters.driver_lookup import DriverLookup
from pos_lambda.adapters.driver_writes import DriverWriter
from pos_lambda.failpoints import NONE as NO_FAILPOINTS
from pos_lambda.failpoints import Failpoints
from pos_lambda.schemas import contract, cql
from pos_lambda.settings import Settings
from pos_lambda.speed_layer import QUERY_OF_JOB, SUPERVISOR_PID_ENV
from pos_lambda.speed_layer.listening import ProgressListener
from pos_lambda.speed_layer.progress import BatchCounts, ProgressRecorder
from pos_lambda.speed_layer.triggers import start_in_pool
from pos_lambda.views import records
from pos_lambda.views.increments import SPEED_AGGREGATE_COLUMNS, added
from pos_lambda.views.winners import (
    CONFLICT_COLUMNS,
    INDEX_COLUMNS,
    Resolution,
    decide_batch,
    winners_to_complete,
    with_winner_content,
)

QUERY_NAME = QUERY_OF_JOB["views"]
# The raw table holds every receipt row column but these two.
RAW_COLUMNS = tuple(
    c for c in records.RECEIPT_ROW_COLUMNS if c not in ("content_hash", "beyond_bound")
)
KEY_BUCKET = "key_bucket"
# receipt_keys' columns: what the winner rule reads of a stored winner, not its content
# (line items, totals). Writing and reading back the content cost a 50k-receipt
# micro-batch ~3.8 s of connector work against ~1.8 s without it (scratch, warm).
KEY_COLUMNS = (*INDEX_COLUMNS, KEY_BUCKET)
# The primary keys the views read stored rows by: receipt_keys' (one receipt) and
# agg_15m_speed's partition key (a store-day's windows).
RECEIPT_KEY = ("operation_id", "vendor_fiscal_module", KEY_BUCKET, "transaction_id")
STORE_DAY = ("operation_id", "day")


def key_bucket(transaction_id: Column | None = None) -> Column:
    """The receipt_keys partition of a receipt number (see src/pos_lambda/schemas/cql.py)."""
    number = F.col("transaction_id") if transaction_id is None else transaction_id
    return F.floor(number / cql.KEY_BUCKET_SIZE).cast("long")


# Built once per driver, not per micro-batch (see src/pos_lambda/views/records.py).
@cache
def _stats() -> tuple[Column, ...]:
    """Invalid and valid records, and (estimated) distinct receipt_keys partitions."""
    bucket = F.struct(
        F.col("receipt.operation_id"),
        F.col("receipt.vendor_fiscal_module"),
        key_bucket(F.col("receipt.transaction_id")),
    )
    return (
        F.count(F.when(~records.is_valid(), 1)).alias("invalid"),
        F.count(F.when(records.is_valid(), 1)).alias("valid"),
        F.approx_count_distinct(F.when(records.is_valid(), bucket)).alias("buckets"),
    )


@cache
def _read_keys() -> tuple[Column, ...]:
    """Of every checked record: whether it is valid, and a valid one's RECEIPT_KEY and day."""

    def field(name: str) -> Column:
        return F.col(f"receipt.{name}").alias(name)

    return (
        records.is_valid().alias("valid"),
        field("operation_id"),
        field("vendor_fiscal_module"),
        key_bucket(F.col("receipt.transaction_id")).alias(KEY_BUCKET),
        field("transaction_id"),
        records.receipt_day().alias("day"),
    )


@dataclass(frozen=True)
class BatchKeys:
    """A micro-batch's records as its first Spark job collected them (`_read_keys`): the
    counts, and the keys of the stored rows its receipts need, each once."""

    valid_rows: int
    invalid_rows: int
    receipts: tuple[tuple[Any, ...], ...]  # RECEIPT_KEY values
    store_days: tuple[tuple[Any, ...], ...]  # STORE_DAY values
    buckets: int  # receipt_keys partitions: (operation_id, vendor_fiscal_module, key_bucket)


def batch_keys(rows: Sequence[Sequence[Any]]) -> BatchKeys:
    """Collected `_read_keys` rows (valid, operation_id, vendor_fiscal_module, key_bucket,
    transaction_id, day) as BatchKeys."""
    valid = [tuple(r[1:]) for r in rows if r[0]]
    receipts = sorted({r[:4] for r in valid})
    return BatchKeys(
        valid_rows=len(valid),
        invalid_rows=len(rows) - len(valid),
        receipts=tuple(receipts),
        store_days=tuple(sorted({(r[0], r[4]) for r in valid})),
        buckets=len({r[:3] for r in receipts}),
    )


@cache
def _incoming_bucket() -> Column:
    return key_bucket()


@cache
def _in_view() -> Column:
    return ~F.col("beyond_bound")


log = logging.getLogger("pos.speed")


class Write(Protocol):
    """Upserts of a DataFrame's rows into tables (`Target`s, in order): the connector's
    or the driver's."""

    def __call__(self, df: DataFrame, *targets: Target) -> None: ...


# The failpoint reached once each table is written (pos_lambda.failpoints).
FAILPOINT_AFTER = {
    cql.AGG_SPEED_TABLE: "speed.after_aggregates",
    cql.RAW_TABLE: "speed.after_raw_rows",
    cql.RECEIPT_KEYS_TABLE: "speed.after_receipt_keys",
}


@dataclass(frozen=True)
class ViewsBatch:
    """The shell around one micro-batch: where to read and write."""

    spark: SparkSession
    keyspace: str
    late_threshold_us: int
    max_lateness_us: int
    # Receipts per key bucket (on average) from which the receipt_keys lookup reads
    # whole partitions: Settings.speed.bucket_reads_from.
    bucket_reads_from: float
    # Testing only (POS_SPEED_CRASH_POINT): kill -9 the speed layer between two of a
    # micro-batch's writes, to prove the replay converges.
    failpoints: Failpoints = NO_FAILPOINTS
    # The driver's reads of stored rows, for micro-batches of fewer valid records than
    # `driver_reads_below` whose keys were collected (Settings.speed.driver_reads_below).
    lookup: DriverLookup | None = None
    driver_reads_below: int = 0
    # The driver's writes, for micro-batches of fewer Kafka records than
    # `driver_writes_below` (Settings.speed.driver_writes_below).
    writer: DriverWriter | None = None
    driver_writes_below: int = 0

    def _lookup(self, table: str, keys: DataFrame, columns: tuple[str, ...]) -> DataFrame:
        return cassandra.lookup(self.spark, self.keyspace, table, keys, columns)

    def _connector_write(
        self, df: DataFrame, targets: Sequence[Target], written: Callable[[str], None]
    ) -> None:
        cassandra.upsert_each(df, self.keyspace, targets, written)

    def _small(self, counts: BatchCounts) -> bool:
        """A micro-batch of these counts is small enough for the driver to write it."""
        records_in = counts.valid_rows + counts.invalid_rows
        return self.writer is not None and records_in < self.driver_writes_below

    def _writes(self, counts: BatchCounts) -> Write:
        """How a micro-batch of these counts writes: from the driver when it is small."""
        upsert_each = self._connector_write
        if self.writer is not None and self._small(counts):
            upsert_each = self.writer.upsert_each

        def write(df: DataFrame, *targets: Target) -> None:
            upsert_each(df, targets, self._written)

        return write

    def _written(self, table: str) -> None:
        if table in FAILPOINT_AFTER:
            self.failpoints.hit(FAILPOINT_AFTER[table])

    def process(
        self, batch: DataFrame, native_first: bool = False, collect_keys: bool = False
    ) -> BatchCounts:
        """One micro-batch. native_first: how to validate (records.check); collect_keys:
        the micro-batch is expected small, so its first Spark job collects the keys of
        the stored rows it needs, for the driver to read them."""
        checked = records.check(batch, native_first).persist()
        try:
            return self._process_checked(checked, collect_keys)
        finally:
            checked.unpersist()

    def _process_checked(self, checked: DataFrame, collect_keys: bool) -> BatchCounts:
        # Each Spark job costs a fixed overhead per micro-batch: the counts come from
        # one pass over the (persisted) checked batch, and so do the keys, if collected.
        keys: BatchKeys | None = None
        if collect_keys:
            keys = batch_keys(checked.select(*_read_keys()).collect())
            counts, buckets = BatchCounts(keys.valid_rows, keys.invalid_rows), keys.buckets
        else:
            stats = checked.agg(*_stats()).collect()[0]  # a global aggregate: one row
            counts = BatchCounts(int(stats["valid"]), int(stats["invalid"]))
            buckets = int(stats["buckets"])
        write = self._writes(counts)
        if counts.valid_rows:
            by_driver = keys is not None and keys.valid_rows < self.driver_reads_below
            counts = self._receipts(checked, counts, buckets, keys if by_driver else None, write)
        # Last: no reader waits for them as for the aggregates (nor do they gate a replay).
        if counts.invalid_rows:
            write(records.dead_letters(checked), Target(cql.DEAD_LETTERS_TABLE))
        return counts

    def _receipts(
        self,
        checked: DataFrame,
        checks: BatchCounts,
        buckets: int,
        keys: BatchKeys | None,
        write: Write,
    ) -> BatchCounts:
        """The valid records' writes; `checks`: the valid and invalid records' counts;
        `keys`: the stored rows' keys, to read them from the driver (else the connector)."""
        incoming = records.receipt_rows(
            checked, self.late_threshold_us, self.max_lateness_us
        ).withColumn(KEY_BUCKET, _incoming_bucket())
        stored = self._stored_keys(incoming, checks.valid_rows / max(buckets, 1), keys)
        # Materialised once: the writes below must not change what was decided.
        decision = decide_batch(incoming, stored).materialised()
        winners = decision.winners
        in_view = winners.where(_in_view())

        # The aggregates first: they are what dashboards and the serving layer read, so
        # the micro-batch's receipts show there before the other writes (~0.2 s sooner
        # in a 10-record micro-batch). The order is free: each write is an upsert of
        # values that depend only on the micro-batch and the previous ones, so a replay
        # after a crash between any two of them lands on the same rows.
        # Winners never move, so a window only ever gains receipts: each touched
        # window's stored row plus the aggregate of its new winners (those its
        # applied offsets do not count yet: a replay adds nothing twice). Reads a
        # store-day's <= 96 window rows, not its receipts: the cost stays flat as
        # the tables grow.
        windows = self._stored_windows(in_view, keys)
        if keys is not None and self._small(checks):
            # A small micro-batch's winners in one partition: with the stored windows (a
            # local relation, broadcast) the aggregation then needs no shuffle, one Spark
            # stage (and AQE plan) fewer. Only for the driver's few rows: the thousands the
            # driver reads for are left to the partitions they came in.
            in_view = in_view.coalesce(1)
        write(added(windows, in_view), Target(cql.AGG_SPEED_TABLE, SPEED_AGGREGATE_COLUMNS))
        # The raw rows of the winners in the views, then the keys of all: one collect of
        # the winners when the driver writes them.
        write(
            winners,
            Target(cql.RAW_TABLE, RAW_COLUMNS, _in_view()),
            Target(cql.RECEIPT_KEYS_TABLE, KEY_COLUMNS),
        )

        counts = self._counts(decision.tally_counts(checks.valid_rows), checks)
        if counts.conflicts:
            write(self._conflicts(decision), Target(cql.CONFLICTS_TABLE, CONFLICT_COLUMNS))
        return counts

    def _stored_keys(
        self, incoming: DataFrame, per_bucket: float, keys: BatchKeys | None
    ) -> DataFrame:
        """The stored receipt_keys rows of the incoming receipts' natural keys.

        Read by the driver when their keys were collected (a small micro-batch); else by
        the full primary key (the direct join reads one row per receipt, however full
        its key bucket has grown), unless the micro-batch brings many receipts per key
        bucket (a backlog): then one read per partition (<= KEY_BUCKET_SIZE rows) and
        the rows of other receipts dropped here. A 50k-receipt micro-batch spent a
        fifth of its time in 50k single-row reads.
        """
        if keys is not None and self.lookup is not None:
            return self.lookup.rows(cql.RECEIPT_KEYS_TABLE, RECEIPT_KEY, keys.receipts, KEY_COLUMNS)
        wanted = incoming.select(*RECEIPT_KEY)
        if per_bucket < self.bucket_reads_from:
            return self._lookup(cql.RECEIPT_KEYS_TABLE, wanted, KEY_COLUMNS)
        partitions = wanted.drop("transaction_id")
        rows = self._lookup(cql.RECEIPT_KEYS_TABLE, partitions, KEY_COLUMNS)
        return rows.join(wanted, wanted.columns, "left_semi")

    def _stored_windows(self, in_view: DataFrame, keys: BatchKeys | None) -> DataFrame:
        """The stored agg_15m_speed rows of the store-days the winners fall in: read by
        the driver when the keys were collected (those of every valid record: a superset,
        and `added` reads only the winners' windows of it), else through the connector."""
        if keys is not None and self.lookup is not None:
            return self.lookup.rows(
                cql.AGG_SPEED_TABLE, STORE_DAY, keys.store_days, SPEED_AGGREGATE_COLUMNS
            )
        store_days = in_view.select(*STORE_DAY)
        return self._lookup(cql.AGG_SPEED_TABLE, store_days, SPEED_AGGREGATE_COLUMNS)

    def _conflicts(self, decision: Resolution) -> DataFrame:
        """The conflicts, their stored winners' content read from the raw rows (by full
        primary key: one row each)."""
        conflicts = decision.conflicts
        winners = winners_to_complete(conflicts)
        raw = self._lookup(cql.RAW_TABLE, winners, RAW_COLUMNS)
        return with_winner_content(conflicts, raw)

    @staticmethod
    def _counts(row: dict[str, int], checks: BatchCounts) -> BatchCounts:
        return replace(
            checks,
            resends_absorbed=int(row["resends"]),
            conflicts=int(row["conflicts"]),
            late_receipts=int(row["late"]),
            beyond_lateness_bound=int(row["beyond"]),
        )


def start(
    spark: SparkSession,
    settings: Settings,
    recorder: ProgressRecorder,
    available_now: bool = False,
) -> StreamingQuery:
    """Start the named views query; returns the StreamingQuery."""
    cassandra.await_tables(
        spark,
        settings.cassandra.keyspace,
        [
            cql.RAW_TABLE,
            cql.RECEIPT_KEYS_TABLE,
            cql.CONFLICTS_TABLE,
            cql.AGG_SPEED_TABLE,
            cql.DEAD_LETTERS_TABLE,
        ],
    )
    # A CQL session of its own for the driver's reads and writes, closed with the query.
    driver_reads = settings.speed.driver_reads_below > 0
    driver_writes = settings.speed.driver_writes_below > 0
    session = None
    if driver_reads or driver_writes:
        session = cassandra_client.cluster(settings).connect()
    keyspace = settings.cassandra.keyspace
    lookup = DriverLookup(spark, session, keyspace) if driver_reads else None
    writer = None
    if driver_writes:
        writer = DriverWriter(session, keyspace, settings.cassandra.write_consistency)
    job = ViewsBatch(
        spark=spark,
        keyspace=keyspace,
        late_threshold_us=int(contract.LATE_THRESHOLD.total_seconds() * 1_000_000),
        max_lateness_us=int(settings.speed.max_lateness_hours * 3600 * 1_000_000),
        bucket_reads_from=settings.speed.bucket_reads_from,
        failpoints=Failpoints.from_settings(settings.faults, supervisor_pid=_supervisor()),
        lookup=lookup,
        driver_reads_below=settings.speed.driver_reads_below,
        writer=writer,
        driver_writes_below=settings.speed.driver_writes_below,
    )

    # The size of a micro-batch is known only once it has been read; backlogs come in
    # runs of micro-batches, so the previous one's size decides how to validate and
    # whether to collect the keys for the driver's reads. The first micro-batch of a run
    # counts as a full one: it takes what came since the last.
    previous_records = settings.speed.max_offsets_per_trigger

    def on_batch(batch: DataFrame, batch_id: int) -> None:
        nonlocal previous_records
        native_first = previous_records >= settings.speed.native_check_from
        collect_keys = previous_records < settings.speed.driver_reads_below
        counts = job.process(batch, native_first, collect_keys)
        previous_records = counts.valid_rows + counts.invalid_rows
        recorder.add_counts(QUERY_NAME, batch_id, counts)

    stream = (
        kafka.read_transactions(spark, settings)
        .writeStream.queryName(QUERY_NAME)
        .foreachBatch(on_batch)
        .option("checkpointLocation", str(settings.checkpoint_dir / "views"))
    )
    try:
        query = start_in_pool(
            spark, stream, QUERY_NAME, settings.speed.trigger_seconds, available_now
        )
    except BaseException:
        if session is not None:
            session.cluster.shutdown()
        raise
    if session is not None:
        _close_after(spark, query, session.cluster.shutdown)
    return query


def _close_after(spark: SparkSession, query: StreamingQuery, close: Callable[[], None]) -> None:
    """Call `close` once this run of `query` has terminated (stopped, drained or failed)."""
    spark.streams.addListener(RunCloser(query.runId, close))
    if not query.isActive:  # it ended before the listener was there to hear it
        close()


class RunCloser(ProgressListener):
    """Calls `close` when the query run `run_id` terminates.

    By run id, not query id: a query restarted from its checkpoint keeps its id, and
    Spark's listener bus delivers events asynchronously, so the previous run's
    termination can reach the listener of the next run, whose session it then closed
    mid-micro-batch ("Pool is shutdown" in the driver's writes).
    """

    def __init__(self, run_id: str, close: Callable[[], None]) -> None:
        self.run_id = run_id
        self.close = close

    def onQueryTerminated(self, event: Any) -> None:
        if str(event.runId) == self.run_id:  # a UUID here, its text there
            self.close()


def _supervisor() -> int | None:
    """The supervisor that restarts this driver (killed with it at a failpoint)."""
    pid = os.environ.get(SUPERVISOR_PID_ENV)
    return int(pid) if pid else None
