"""The batch job: master dataset (Delta) -> exact batch views in Cassandra.

    pos-batch run --start 2026-03-02T00:00:00Z --end 2026-03-03T00:00:00Z

Three ways to run, one set of views:

- **fold** (every scheduled run, `src/pos_lambda/batch_layer/fold.py`): the records archived since
  the last commit, looked up in the batch layer's natural-key index, folded into their
  days. Its cost follows those records, not the history.
- **build** (the first run, and `--take-over`; `pos-batch rebuild` does the same in
  chunks of natural keys: src/pos_lambda/batch_layer/rebuild.py): every record of the table at one
  version judged again (`pos_lambda.views.records.check`, the speed layer's
  validator), every natural key resolved over all its copies (`pos_lambda.views.winners.resolve`:
  a copy from another day can win or conflict), every day's views written as a new
  *generation* (receipts, aggregates and index rows), then served by one commit. This
  is Lambda's recompute from all data, kept for when the validator or the winner rule
  changes; later folds continue from the table version it read.
- **pinned** (`--delta-version` without `--take-over`): the interval's days at that
  table version written under their own version key, for inspection and comparison;
  nothing is served.

Every mode writes the rows first and commits with ONE conditional write of the pointer
(`batch_views`: days -> versions, the horizon, how far the views count the master
dataset). A run killed before the commit leaves rows nothing points to: readers keep
the previous versions. What keeps `final` right whoever calls it:
- an interval that has not ended is refused (`Interval.ensure_ended`);
- a day's pointer moves only to a version that covers it as far and was read from the
  same or a newer table version (`store.advancing`);
- the commit is conditional on what the run read at its start: a run that raced
  another and lost gets `CommitConflict` and commits nothing;
- a pinned run is served only when asked (`take_over`: the operator's deliberate
  rollback, rebuilt as a generation so that later folds continue from it).
Bookkeeping (status, counts, table version) goes to `batch_runs`. Every decision above
(the mode, the refusals, the versions, which days move, the horizon) is the pure plan's
(src/pos_lambda/batch_layer/plan.py); this module reads, writes and commits what it says.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from pos_lambda.adapters import cassandra, master_dataset
from pos_lambda.batch_layer import fold as folding
from pos_lambda.batch_layer import plan
from pos_lambda.batch_layer.interval import Interval
from pos_lambda.batch_layer.plan import Mode
from pos_lambda.batch_layer.plan import TableReplaced as TableReplaced  # job's API
from pos_lambda.batch_layer.pointer import (
    BatchPointer,
    BatchStore,
    CommitConflict,
    NothingToDo,
    PointerState,
)
from pos_lambda.failpoints import Failpoints
from pos_lambda.schemas import contract, cql
from pos_lambda.settings import Settings
from pos_lambda.views import records
from pos_lambda.views.batch import BATCH_AGGREGATE_COLUMNS, batch_aggregates, in_range
from pos_lambda.views.winners import conflicts_of, resolve

log = logging.getLogger("pos.batch")

RECEIPT_COLUMNS = folding.RECEIPT_COLUMNS
AGGREGATE_COLUMNS = ("version", *BATCH_AGGREGATE_COLUMNS)
LATE_THRESHOLD_US = int(contract.LATE_THRESHOLD.total_seconds() * 1_000_000)


@dataclass(frozen=True)
class RunResult:
    run_id: uuid.UUID
    mode: Mode  # a str: prints as "fold", "build" or "pinned"
    version: str
    delta_version: int
    horizon: datetime
    input_rows: int
    invalid_rows: int
    receipts: int
    duplicates_removed: int
    conflicts: int
    beyond_speed_bound: int
    aggregate_rows: int
    # Days whose pointer this run moved (none for a pinned rerun not asked to take over).
    days_committed: int
    # Rows written into the views (receipts_batch, agg_15m_batch, conflicts), and into
    # the natural-key index (receipt_keys_batch).
    view_rows_written: int
    index_rows_written: int


def _now() -> datetime:
    return datetime.now(UTC)


def run(
    spark: SparkSession,
    settings: Settings,
    interval: Interval,
    delta_version: int | None = None,
    take_over: bool = False,
    new_table: bool = False,
) -> RunResult:
    """One batch run over `interval`; `delta_version` pins the input (default: newest).
    `new_table`: the master dataset is another Delta table than the one the views count
    (a restore, a move), taken over on purpose: a build from it serves every day.

    Raises IntervalError (before anything is written) for an interval that has not
    ended, NothingToDo before the master dataset exists, TableReplaced when the master
    dataset is another table and `new_table` is not given, CommitConflict when another
    run committed while this one computed."""
    plan.check_request(interval, delta_version, take_over, _now())
    if not master_dataset.exists(spark, settings):
        raise NothingToDo(
            f"no master dataset yet: {settings.master_dataset_dir} is not a Delta table; "
            "the speed layer's archiver (`pos-speed run`) creates it with its first "
            "micro-batch"
        )
    run_id = uuid.uuid1()
    with BatchStore(settings) as store:
        store.record_run(
            run_id,
            {
                "status": "running",
                "interval_start": interval.start,
                "interval_end": interval.end,
                "lookback_hours": interval.lookback.total_seconds() / 3600,
                "recompute_start": interval.recompute_start,
                "started_at": _now(),
            },
        )
        try:
            # Read first: the commit is conditional on the pointer staying as read here.
            read = store.state()
            result = _dispatch(
                spark, settings, interval, delta_version, take_over, run_id, store, read, new_table
            )
        except CommitConflict as exc:
            store.record_run(
                run_id, {"status": "conflict", "finished_at": _now(), "error": str(exc)[:2000]}
            )
            raise
        except BaseException as exc:
            store.record_run(
                run_id,
                {"status": "failed", "finished_at": _now(), "error": repr(exc)[:2000]},
            )
            raise
    return result


def _dispatch(
    spark: SparkSession,
    settings: Settings,
    interval: Interval,
    delta_version: int | None,
    take_over: bool,
    run_id: uuid.UUID,
    store: BatchStore,
    read: PointerState,
    new_table: bool = False,
) -> RunResult:
    table_id = master_dataset.table_id(spark, settings)
    plan.check_table(read, table_id, new_table, str(settings.master_dataset_dir))
    # Asked only of an unpinned run (a pinned one never folds): DESCRIBE DETAIL is a job.
    change_feed = delta_version is None and master_dataset.change_feed_enabled(spark, settings)
    mode, reason = plan.choose_mode(read, table_id, delta_version, take_over, change_feed)
    if mode is Mode.FOLD:
        return _fold(spark, settings, interval, run_id, store, read, table_id)
    if mode is Mode.BUILD:
        if reason is not None:
            log.info("building a new generation of the views from every record: %s", reason)
        if not (change_feed or master_dataset.change_feed_enabled(spark, settings)):
            # From now on, folds read only what the archiver adds (the feed starts here).
            master_dataset.enable_change_feed(spark, settings)
    return _recompute(
        spark, settings, interval, delta_version, mode, run_id, store, read, new_table
    )


def _fold(
    spark: SparkSession,
    settings: Settings,
    interval: Interval,
    run_id: uuid.UUID,
    store: BatchStore,
    read: PointerState,
    table_id: str,
) -> RunResult:
    assert read.folded is not None
    upto = master_dataset.latest_version(spark, settings)
    log.info(
        "run %s: folding table versions (%d, %d] into generation %s",
        run_id,
        read.folded.version,
        upto,
        read.folded.generation,
    )
    target = plan.fold_target(read, upto, table_id)
    store.record_run(run_id, {"version": target.version})
    done = folding.fold(
        spark, settings, store, interval, read, upto, _crash_point(settings, "after_receipts")
    )
    decided = plan.fold_commit(read, interval, target, done.days)
    _pause_before_commit(settings)
    _commit(store, run_id, read, decided)
    result = RunResult(
        run_id=run_id,
        mode=Mode.FOLD,
        version=done.version,
        delta_version=upto,
        horizon=decided.horizon,
        input_rows=done.input_rows,
        invalid_rows=done.invalid_rows,
        receipts=done.receipts,
        duplicates_removed=done.duplicates_removed,
        conflicts=done.conflicts,
        beyond_speed_bound=done.beyond_speed_bound,
        aggregate_rows=done.aggregate_rows,
        days_committed=len(done.days),
        view_rows_written=done.receipts + done.aggregate_rows + done.conflicts,
        index_rows_written=done.receipts,
    )
    _record_done(store, result, "committed")
    return result


def _commit(
    store: BatchPointer, run_id: uuid.UUID, read: PointerState, decided: plan.Commit
) -> None:
    store.commit(
        run_id, decided.table_version, decided.days, decided.horizon, _now(), read, decided.folded
    )


def _record_done(store: BatchPointer, result: RunResult, status: str) -> None:
    store.record_run(
        result.run_id,
        {
            "status": status,
            "version": result.version,
            "delta_version": result.delta_version,
            "horizon": result.horizon,
            "input_rows": result.input_rows,
            "invalid_rows": result.invalid_rows,
            "receipts": result.receipts,
            "duplicates_removed": result.duplicates_removed,
            "conflicts": result.conflicts,
            "beyond_speed_bound": result.beyond_speed_bound,
            "aggregate_rows": result.aggregate_rows,
            "finished_at": _now(),
        },
    )


def _crash_point(settings: Settings, point: str) -> Callable[[], None] | None:
    """Testing only (POS_BATCH_CRASH_POINT): the failpoint `batch.<point>`, if armed."""
    failpoints = Failpoints.from_settings(settings.faults)
    name = f"batch.{point}"
    return (lambda: failpoints.hit(name)) if failpoints.is_armed(name) else None


def _pause_before_commit(settings: Settings) -> None:
    """Testing only (POS_BATCH_PAUSE_BEFORE_COMMIT): await the file, to stage a race."""
    Failpoints.from_settings(settings.faults).hit("batch.before_commit")


def _written(spark: SparkSession, settings: Settings, table: str, keys: DataFrame) -> int:
    """Rows of `table` in the version partitions `keys` (direct join, no full scan)."""
    return cassandra.lookup(
        spark, settings.cassandra.keyspace, table, keys, ("operation_id",)
    ).count()


@dataclass(frozen=True)
class _Resolved:
    """A recompute's frames: every record judged (`checked`), the winners of the target's
    days with their version, their duplicates, aggregates, and the resolution (its ranked
    copies give a build's index)."""

    checked: DataFrame
    winners: DataFrame
    duplicates: DataFrame
    aggregates: DataFrame
    ranked: DataFrame

    def unpersist(self) -> None:
        for df in (self.checked, self.winners, self.duplicates, self.aggregates):
            df.unpersist()


@dataclass(frozen=True)
class _Counts:
    """What a recompute's run records: input and invalid records, receipts and beyond-bound
    receipts per day, aggregate rows per day, duplicates removed and conflicts."""

    input_rows: int
    invalid_rows: int
    per_day: dict[date, tuple[int, int]]  # day -> (receipts, beyond the speed bound)
    aggs_per_day: dict[date, int]
    duplicates: int
    conflicts: int

    @property
    def receipts(self) -> int:
        return sum(n for n, _ in self.per_day.values())

    @property
    def aggregate_rows(self) -> int:
        return sum(self.aggs_per_day.values())


def _recompute(
    spark: SparkSession,
    settings: Settings,
    interval: Interval,
    delta_version: int | None,
    mode: Mode,
    run_id: uuid.UUID,
    store: BatchStore,
    read: PointerState,
    new_table: bool = False,
) -> RunResult:
    """Every record at one table version, every key resolved over all its copies: a new
    generation of every day (`build`), or the interval's days under their own version
    (`pinned`, served with take_over: then a generation too). A build from a new table
    moves every day (the served table versions are another table's)."""
    snap = master_dataset.snapshot(spark, settings, delta_version)
    target = plan.recompute_target(
        mode, interval, snap.version, snap.table_id, delta_version, new_table, run_id
    )
    version = target.version
    log.info("run %s (%s): %s at table version %d", run_id, mode, version, snap.version)
    # Known before any row is written, so `pos-batch gc` spares a version being written.
    store.record_run(run_id, {"version": version, "delta_version": snap.version})
    frames = _resolve(settings, snap.rows, target, snap.version)
    try:
        counts = _count(frames, interval if target.since is not None else None)
        index_rows = _write(spark, settings, frames, counts, mode, version, snap.version)
        decided = plan.recompute_commit(
            target,
            read,
            interval,
            {d: n for d, (n, _) in counts.per_day.items()},
            counts.aggs_per_day,
        )
        _log_left(target, decided, snap.version)
        if decided.days:
            _pause_before_commit(settings)
            _commit(store, run_id, read, decided)
        result = RunResult(
            run_id=run_id,
            mode=mode,
            version=version,
            delta_version=snap.version,
            horizon=decided.horizon,
            input_rows=counts.input_rows,
            invalid_rows=counts.invalid_rows,
            receipts=counts.receipts,
            duplicates_removed=counts.duplicates,
            conflicts=counts.conflicts,
            beyond_speed_bound=sum(b for _, b in counts.per_day.values()),
            aggregate_rows=counts.aggregate_rows,
            days_committed=len(decided.days),
            view_rows_written=counts.receipts + counts.aggregate_rows + counts.conflicts,
            index_rows_written=index_rows,
        )
        _record_done(store, result, "committed" if decided.days else "written")
        return result
    finally:
        frames.unpersist()


def _resolve(
    settings: Settings, rows: DataFrame, target: plan.RecomputeTarget, table_version: int
) -> _Resolved:
    """Every record judged again (the master dataset keeps them unjudged), every valid
    copy resolved with all its copies, wherever their days, then cut to the target's
    days (a build's: all)."""
    checked = (
        records.check(records.from_archive(rows), native_first=True)
        .drop("raw_value", "detail")
        .persist()
    )
    # Every valid copy, wherever its day: a key's winner depends on all its copies.
    copies = records.receipt_rows(
        checked,
        LATE_THRESHOLD_US,
        int(settings.speed.max_lateness_hours * 3600 * 1_000_000),
    )
    resolution = resolve(copies)
    winners, duplicates = resolution.winners, resolution.duplicates
    lo, hi = target.since, target.until
    if lo is not None and hi is not None:
        winners = winners.where(in_range("happened_at", lo, hi))
        duplicates = duplicates.where(in_range("winner_happened_at", lo, hi))
    winners = (
        winners.withColumn("version", F.lit(target.version))
        .withColumn(folding.MASTER_VERSION, F.lit(table_version).cast("long"))
        .persist()
    )
    duplicates = duplicates.persist()
    aggregates = batch_aggregates(winners, duplicates).withColumn("version", F.lit(target.version))
    return _Resolved(checked, winners, duplicates, aggregates.persist(), resolution.ranked)


def _count(frames: _Resolved, interval: Interval | None) -> _Counts:
    """The run's counts. `interval`: the days whose invalid records count (an invalid
    record's day is the day it reached Kafka); None: every day's (a build)."""
    invalid = ~records.is_valid()
    if interval is not None:
        arrived = F.to_date("kafka_timestamp").between(interval.days[0], interval.days[-1])
        invalid = invalid & arrived
    stats = frames.checked.agg(
        F.count(F.lit(1)).alias("input"), F.count(F.when(invalid, 1)).alias("invalid")
    ).first()
    assert stats is not None
    dup = frames.duplicates.agg(
        F.count(F.lit(1)).alias("n"), F.count(F.when(F.col("conflict"), 1)).alias("c")
    ).first()
    assert dup is not None
    per_day = {
        r["day"]: (int(r["receipts"]), int(r["beyond"]))
        for r in frames.winners.groupBy("day")
        .agg(
            F.count(F.lit(1)).alias("receipts"),
            F.count(F.when(F.col("beyond_bound"), 1)).alias("beyond"),
        )
        .collect()
    }
    aggs_per_day = {
        r["day"]: int(r["n"])
        for r in frames.aggregates.groupBy("day").count().withColumnRenamed("count", "n").collect()
    }
    return _Counts(
        int(stats["input"]), int(stats["invalid"]), per_day, aggs_per_day, int(dup["n"]),
        int(dup["c"]),
    )  # fmt: skip


def _write(
    spark: SparkSession,
    settings: Settings,
    frames: _Resolved,
    counts: _Counts,
    mode: Mode,
    version: str,
    table_version: int,
) -> int:
    """The version's rows: receipts, aggregates, gaps, conflicts, and a build's index
    rows (returned: how many), then read back, so that the pointer moves only after the
    version's rows are all there."""
    ks = settings.cassandra.keyspace
    cassandra.upsert(frames.winners, ks, cql.RECEIPTS_BATCH_TABLE, RECEIPT_COLUMNS)
    crash = _crash_point(settings, "after_receipts")
    if crash is not None:
        crash()
    cassandra.upsert(frames.aggregates, ks, cql.AGG_BATCH_TABLE, AGGREGATE_COLUMNS)
    folding.upsert_gaps(frames.winners, ks, version, settings.speed.gap_max_jump)
    if counts.conflicts:
        folding.upsert_conflicts(conflicts_of(frames.duplicates), ks, version, table_version)
    index_rows = 0
    if mode is Mode.BUILD:
        # Every key's winner, for the folds that continue from this generation.
        index = frames.ranked.where(F.col("_copy_rank") == 1).select(
            F.lit(version).alias(folding.GENERATION),
            *(F.col(c) for c in folding.INDEX_TABLE_COLUMNS[1:-1]),
            folding.key_bucket().alias(folding.KEY_BUCKET),
        )
        cassandra.upsert(index, ks, cql.RECEIPT_KEYS_BATCH_TABLE, folding.INDEX_TABLE_COLUMNS)
        index_rows = counts.receipts
    keys = ("operation_id", "day", "version")
    got = (
        _written(spark, settings, cql.RECEIPTS_BATCH_TABLE, frames.winners.select(*keys)),
        _written(spark, settings, cql.AGG_BATCH_TABLE, frames.aggregates.select(*keys)),
    )
    if got != (counts.receipts, counts.aggregate_rows):
        raise RuntimeError(
            f"version {version}: wrote {counts.receipts} receipts and {counts.aggregate_rows} "
            f"aggregate rows but read back {got[0]} and {got[1]}; not committing"
        )
    return index_rows


def _log_left(target: plan.RecomputeTarget, decided: plan.Commit, table_version: int) -> None:
    """Why days the run computed stay on the versions served (or why all move)."""
    if target.mode is Mode.PINNED:
        log.info(
            "pinned to table version %d: the version is written for inspection and "
            "comparison; the pointer stays (`--take-over` serves it)",
            table_version,
        )
    elif target.take_over:
        log.warning(
            "--take-over: serving a generation read at table version %d for %d day(s), "
            "whatever the pointer names now",
            table_version,
            len(decided.days),
        )
    elif decided.left:
        log.info(
            "left %d day(s) on the versions already served: they cover them further, or "
            "were read from a newer table version (%s)",
            len(decided.left),
            ", ".join(str(d.day) for d in decided.left),
        )
