"""One views micro-batch: read stored rows, decide, write (the shell; see views_job.py).

The decisions are pure and live elsewhere: the paths and keys in
`pos_lambda.speed_layer.batch_plan`, the winners in `pos_lambda.views.winners`, the
aggregates in `pos_lambda.views.increments`. The reads and writes go through a
`ViewStore` (pos_lambda.adapters.view_store): the connector's, and the driver's for
small micro-batches; an in-memory one in unit tests (tests/unit/speed_layer).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cache
from typing import Protocol

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from pos_lambda.adapters.cassandra import Target
from pos_lambda.adapters.view_store import ViewStore
from pos_lambda.failpoints import NONE as NO_FAILPOINTS
from pos_lambda.failpoints import Failpoints
from pos_lambda.schemas import cql
from pos_lambda.speed_layer.batch_plan import (
    KEY_BUCKET,
    KEY_COLUMNS,
    RAW_COLUMNS,
    RECEIPT_KEY,
    STORE_DAY,
    BatchKeys,
    Counted,
    Reads,
    Route,
    Thresholds,
    batch_keys,
    key_bucket,
    read_keys,
    route,
    stats,
)
from pos_lambda.speed_layer.progress import BatchCounts
from pos_lambda.views import records
from pos_lambda.views.increments import SPEED_AGGREGATE_COLUMNS, added
from pos_lambda.views.winners import (
    CONFLICT_COLUMNS,
    RESEND_COLUMNS,
    Resolution,
    decide_batch,
    last_resends,
    winners_to_complete,
    with_winner_content,
)


# Built once per driver, not per micro-batch (see src/pos_lambda/views/records.py).
@cache
def _incoming_bucket() -> Column:
    return key_bucket()


@cache
def _in_view() -> Column:
    return ~F.col("beyond_bound")


class Write(Protocol):
    """Upserts of a DataFrame's rows into tables (`Target`s, in order), by one store."""

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

    # The connector's store: every read and write unless the route says the driver's,
    # and always the conflicts' winner content (by full primary key).
    store: ViewStore
    late_threshold_us: int
    max_lateness_us: int
    limits: Thresholds
    # The driver's store, for micro-batches small enough (limits); required when the
    # limits let any micro-batch use it.
    driver: ViewStore | None = None
    # Testing only (POS_SPEED_CRASH_POINT): kill -9 the speed layer between two of a
    # micro-batch's writes, to prove the replay converges.
    failpoints: Failpoints = NO_FAILPOINTS

    def __post_init__(self) -> None:
        if self.driver is None and self.limits.uses_driver:
            raise ValueError(
                "driver reads or writes (driver_reads_below, driver_writes_below > 0) "
                "need a driver store"
            )

    def _by(self, driver: bool) -> ViewStore:
        """The driver's store if `driver` (the route chose it), else the connector's."""
        if driver and self.driver is not None:
            return self.driver
        return self.store

    def _writes(self, paths: Route) -> Write:
        """How a micro-batch on this route writes."""
        store = self._by(paths.driver_writes)

        def write(df: DataFrame, *targets: Target) -> None:
            store.upsert_each(df, targets, self._written)

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
            return self._process_checked(checked, Route(native_first, collect_keys))
        finally:
            checked.unpersist()

    def _process_checked(self, checked: DataFrame, taken: Route) -> BatchCounts:
        # Each Spark job costs a fixed overhead per micro-batch: the counts come from
        # one pass over the (persisted) checked batch, and so do the keys, if collected.
        keys: BatchKeys | None = None
        if taken.collect_keys:
            keys = batch_keys(checked.select(*read_keys()).collect())
            counts, buckets = BatchCounts(keys.valid_rows, keys.invalid_rows), keys.buckets
        else:
            found = checked.agg(*stats()).collect()[0]  # a global aggregate: one row
            counts = BatchCounts(int(found["valid"]), int(found["invalid"]))
            buckets = int(found["buckets"])
        paths = route(self.limits, taken, Counted(counts, buckets))
        write = self._writes(paths)
        if counts.valid_rows:
            driver_keys = keys if paths.reads is Reads.DRIVER else None
            counts = self._receipts(checked, counts, paths, driver_keys, write)
        # Last: no reader waits for them as for the aggregates (nor do they gate a replay).
        if counts.invalid_rows:
            write(records.dead_letters(checked), Target(cql.DEAD_LETTERS_TABLE))
        return counts

    def _receipts(
        self,
        checked: DataFrame,
        checks: BatchCounts,
        paths: Route,
        keys: BatchKeys | None,
        write: Write,
    ) -> BatchCounts:
        """The valid records' writes; `checks`: the valid and invalid records' counts;
        `keys`: the stored rows' keys, when the driver reads them (else the connector)."""
        incoming = records.receipt_rows(
            checked, self.late_threshold_us, self.max_lateness_us
        ).withColumn(KEY_BUCKET, _incoming_bucket())
        stored = self._stored_keys(incoming, paths, keys)
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
        if paths.one_partition:
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
        if counts.resends_absorbed:
            # Each resent receipt's last resend, on its receipt_keys row (receipt status
            # tells "received more than once" by it). Not through `write`: its failpoint
            # names the winners' receipt_keys write, reached once per micro-batch.
            resends = last_resends(decision.duplicates).withColumn(KEY_BUCKET, _incoming_bucket())
            self._by(paths.driver_writes).upsert_each(
                resends, (Target(cql.RECEIPT_KEYS_TABLE, (*RECEIPT_KEY, *RESEND_COLUMNS)),)
            )
        return counts

    def _stored_keys(self, incoming: DataFrame, paths: Route, keys: BatchKeys | None) -> DataFrame:
        """The stored receipt_keys rows of the incoming receipts' natural keys.

        Read by the driver when their keys were collected (a small micro-batch); else by
        the full primary key (the direct join reads one row per receipt, however full
        its key bucket has grown), unless the micro-batch brings many receipts per key
        bucket (a backlog): then one read per partition (<= KEY_BUCKET_SIZE rows) and
        the rows of other receipts dropped here. A 50k-receipt micro-batch spent a
        fifth of its time in 50k single-row reads.
        """
        if keys is not None:
            return self._by(driver=True).rows(
                cql.RECEIPT_KEYS_TABLE, RECEIPT_KEY, keys.receipts, KEY_COLUMNS
            )
        wanted = incoming.select(*RECEIPT_KEY)
        if paths.reads is Reads.BY_RECEIPT:
            return self.store.lookup(cql.RECEIPT_KEYS_TABLE, wanted, KEY_COLUMNS)
        partitions = wanted.drop("transaction_id")
        rows = self.store.lookup(cql.RECEIPT_KEYS_TABLE, partitions, KEY_COLUMNS)
        return rows.join(wanted, wanted.columns, "left_semi")

    def _stored_windows(self, in_view: DataFrame, keys: BatchKeys | None) -> DataFrame:
        """The stored agg_15m_speed rows of the store-days the winners fall in: read by
        the driver when the keys were collected (those of every valid record: a superset,
        and `added` reads only the winners' windows of it), else through the connector."""
        if keys is not None:
            return self._by(driver=True).rows(
                cql.AGG_SPEED_TABLE, STORE_DAY, keys.store_days, SPEED_AGGREGATE_COLUMNS
            )
        store_days = in_view.select(*STORE_DAY)
        return self.store.lookup(cql.AGG_SPEED_TABLE, store_days, SPEED_AGGREGATE_COLUMNS)

    def _conflicts(self, decision: Resolution) -> DataFrame:
        """The conflicts, their stored winners' content read from the raw rows (by full
        primary key: one row each)."""
        conflicts = decision.conflicts
        winners = winners_to_complete(conflicts)
        raw = self.store.lookup(cql.RAW_TABLE, winners, RAW_COLUMNS)
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
