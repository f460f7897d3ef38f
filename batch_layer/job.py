"""The batch job: master dataset (pinned Delta version) -> exact batch views in Cassandra.

    pos-batch run --start 2026-03-02T00:00:00Z --end 2026-03-03T00:00:00Z [--lookback-hours 48]

Reads like a sentence: snapshot the master dataset at one table version (recorded),
judge every record with the contract's validator (`views.records.check`, the speed
layer's; the master dataset keeps records as received), turn every valid copy into a
receipt row (`views.records.receipt_rows`), resolve the
winner of every natural key over ALL copies, wherever their happened_at puts them
(`views.winners.resolve`: a copy from another day can win or conflict), keep the
winners of the recomputed days, aggregate them (`views.aggregation.aggregate_15m`, the
speed layer's function) and write:

1. the winners into `receipts_batch` and the aggregates into `agg_15m_batch`, under a
   version key (same interval + same table version -> same key and same rows);
2. the conflicts found into `conflicts` (the speed layer's table, same columns);
3. after checking the written row counts, ONE atomic write of the pointer
   (`batch_views`: every recomputed day -> this version, and the horizon).

A run killed before step 3 leaves an orphan version nothing points to: readers keep
the previous one. Bookkeeping (status, counts, table version) goes to `batch_runs`.

What keeps `final` right whoever calls it (`pos-batch`, the DAG, a notebook):
- an interval that has not ended is refused (`Interval.ensure_ended`);
- a day's pointer moves only to a version that covers it as far and was read from the
  same or a newer table version (`store.advancing`);
- the pointer's commit is conditional on what the run read at its start: a run that
  raced another and lost gets `CommitConflict` and commits nothing;
- a run pinned to a table version (`delta_version`) writes its version for inspection
  and commits it only when asked (`take_over`: the operator's deliberate rollback).
"""

from __future__ import annotations

import logging
import os
import signal
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from adapters import cassandra, master_dataset
from batch_layer.interval import Interval
from batch_layer.store import BatchStore, CommitConflict, DayCommit, PointerState, advancing
from infra.settings import Settings
from schemas import contract, cql
from views import records
from views.batch import BATCH_AGGREGATE_COLUMNS, batch_aggregates, in_range
from views.winners import CONFLICT_COLUMNS, conflicts_of, resolve

log = logging.getLogger("pos.batch")

RECEIPT_COLUMNS = ("version", *records.RECEIPT_ROW_COLUMNS)
AGGREGATE_COLUMNS = ("version", *BATCH_AGGREGATE_COLUMNS)
LATE_THRESHOLD_US = int(contract.LATE_THRESHOLD.total_seconds() * 1_000_000)


@dataclass(frozen=True)
class RunResult:
    run_id: uuid.UUID
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
    # Days whose pointer this run moved to its version (none for a pinned rerun that
    # was not asked to take over).
    days_committed: int


def _now() -> datetime:
    return datetime.now(UTC)


def _days_to_move(
    days: list[DayCommit],
    read: PointerState,
    table_version: int,
    pinned: int | None,
    take_over: bool,
) -> list[DayCommit]:
    """The days whose pointer this run moves to its version (logs the others)."""
    if pinned is not None and not take_over:
        log.info(
            "pinned to table version %d: the version is written for inspection and "
            "comparison; the pointer stays (`--take-over` serves it)",
            pinned,
        )
        return []
    if take_over:
        log.warning(
            "--take-over: serving this run's version (table version %d) for %d day(s), "
            "whatever the pointer names now",
            table_version,
            len(days),
        )
        return days
    moving = advancing(days, read.days, table_version)
    if len(moving) < len(days):
        log.info(
            "left %d day(s) on the versions already served: they cover them further, or "
            "were read from a newer table version (%s)",
            len(days) - len(moving),
            ", ".join(str(d.day) for d in days if d not in moving),
        )
    return moving


def _pause_before_commit(settings: Settings) -> None:
    """Testing only (POS_BATCH_PAUSE_BEFORE_COMMIT): await the file, to stage a race."""
    flag = settings.batch_pause_before_commit
    if flag is None:
        return
    from infra.process import wait_for

    log.warning("paused before commit until %s exists (testing)", flag)
    if not wait_for(flag.exists, timeout=600, interval=0.2):
        raise RuntimeError(f"{flag} did not appear within 600 s")


def _written(spark: SparkSession, settings: Settings, table: str, keys: DataFrame) -> int:
    """Rows of `table` in the version partitions `keys` (direct join, no full scan)."""
    return cassandra.lookup(
        spark, settings.cassandra_keyspace, table, keys, ("operation_id",)
    ).count()


def run(
    spark: SparkSession,
    settings: Settings,
    interval: Interval,
    delta_version: int | None = None,
    take_over: bool = False,
) -> RunResult:
    """One batch run over `interval`; `delta_version` pins the input (default: newest).

    Raises IntervalError (before anything is written) for an interval that has not
    ended, CommitConflict when another run committed while this one computed."""
    interval.ensure_ended(_now())
    if take_over and delta_version is None:
        raise ValueError("take_over is for a run pinned to a table version (delta_version)")
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
            result = _run(spark, settings, interval, delta_version, take_over, run_id, store, read)
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


def _run(
    spark: SparkSession,
    settings: Settings,
    interval: Interval,
    delta_version: int | None,
    take_over: bool,
    run_id: uuid.UUID,
    store: BatchStore,
    read: PointerState,
) -> RunResult:
    snap = master_dataset.snapshot(spark, settings, delta_version)
    version = interval.version_key(snap.table_id, snap.version)
    lo, hi = interval.recompute_start, interval.end
    first_day, last_day = interval.days[0], interval.days[-1]
    log.info("run %s: %s over [%s, %s) at table version %d", run_id, version, lo, hi, snap.version)
    # Known before any row is written, so `pos-batch gc` spares a version being written.
    store.record_run(run_id, {"version": version, "delta_version": snap.version})

    # Every record judged again (the master dataset keeps them unjudged), kept for the
    # counts below; the received bytes are not needed past the check.
    checked = (
        records.check(records.from_archive(snap.rows), native_first=True)
        .drop("raw_value", "detail")
        .persist()
    )
    # Every valid copy, wherever its day: a key's winner depends on all its copies.
    copies = records.receipt_rows(
        checked,
        LATE_THRESHOLD_US,
        int(settings.speed_max_lateness_hours * 3600 * 1_000_000),
    )
    resolution = resolve(copies)
    winners = (
        resolution.winners.where(in_range("happened_at", lo, hi))
        .withColumn("version", F.lit(version))
        .persist()
    )
    duplicates = resolution.duplicates.where(in_range("winner_happened_at", lo, hi)).persist()
    aggregates = batch_aggregates(winners, duplicates).withColumn("version", F.lit(version))
    aggregates = aggregates.persist()
    try:
        # An invalid record's day is the day it reached Kafka.
        arrived = F.to_date("kafka_timestamp").between(first_day, last_day)
        stats = checked.agg(
            F.count(F.lit(1)).alias("input"),
            F.count(F.when(~records.is_valid() & arrived, 1)).alias("invalid"),
        ).first()
        assert stats is not None
        dup = duplicates.agg(
            F.count(F.lit(1)).alias("n"), F.count(F.when(F.col("conflict"), 1)).alias("c")
        ).first()
        assert dup is not None
        per_day = {
            r["day"]: (int(r["receipts"]), int(r["beyond"]))
            for r in winners.groupBy("day")
            .agg(
                F.count(F.lit(1)).alias("receipts"),
                F.count(F.when(F.col("beyond_bound"), 1)).alias("beyond"),
            )
            .collect()
        }
        aggs_per_day = {
            r["day"]: int(r["n"])
            for r in aggregates.groupBy("day").count().withColumnRenamed("count", "n").collect()
        }
        receipts = sum(n for n, _ in per_day.values())
        aggregate_rows = sum(aggs_per_day.values())

        ks = settings.cassandra_keyspace
        cassandra.upsert(winners, ks, cql.RECEIPTS_BATCH_TABLE, RECEIPT_COLUMNS)
        if settings.batch_crash_point == "after_receipts":
            log.warning("crash point after_receipts reached: kill -9 of the batch job (testing)")
            os.kill(os.getpid(), signal.SIGKILL)
        cassandra.upsert(aggregates, ks, cql.AGG_BATCH_TABLE, AGGREGATE_COLUMNS)
        if int(dup["c"]):
            cassandra.upsert(conflicts_of(duplicates), ks, cql.CONFLICTS_TABLE, CONFLICT_COLUMNS)

        # The horizon moves only after the version's rows are all there.
        keys = ("operation_id", "day", "version")
        got = (
            _written(spark, settings, cql.RECEIPTS_BATCH_TABLE, winners.select(*keys)),
            _written(spark, settings, cql.AGG_BATCH_TABLE, aggregates.select(*keys)),
        )
        if got != (receipts, aggregate_rows):
            raise RuntimeError(
                f"version {version}: wrote {receipts} receipts and {aggregate_rows} aggregate "
                f"rows but read back {got[0]} and {got[1]}; not committing"
            )
        horizon = max(hi, read.horizon) if read.horizon else hi
        days = [
            DayCommit(
                day,
                interval.covered_until(day),
                per_day.get(day, (0, 0))[0],
                aggs_per_day.get(day, 0),
            )
            for day in interval.days
        ]
        moving = _days_to_move(days, read, snap.version, delta_version, take_over)
        if moving:
            _pause_before_commit(settings)
            store.commit(run_id, version, snap.version, moving, horizon, _now(), read)
        else:
            horizon = read.horizon or horizon
        result = RunResult(
            run_id=run_id,
            version=version,
            delta_version=snap.version,
            horizon=horizon,
            input_rows=int(stats["input"]),
            invalid_rows=int(stats["invalid"]),
            receipts=receipts,
            duplicates_removed=int(dup["n"]),
            conflicts=int(dup["c"]),
            beyond_speed_bound=sum(b for _, b in per_day.values()),
            aggregate_rows=aggregate_rows,
            days_committed=len(moving),
        )
        store.record_run(
            run_id,
            {
                "status": "committed" if moving else "written",
                "version": version,
                "delta_version": snap.version,
                "horizon": horizon,
                "input_rows": result.input_rows,
                "invalid_rows": result.invalid_rows,
                "receipts": receipts,
                "duplicates_removed": result.duplicates_removed,
                "conflicts": result.conflicts,
                "beyond_speed_bound": result.beyond_speed_bound,
                "aggregate_rows": aggregate_rows,
                "finished_at": _now(),
            },
        )
        return result
    finally:
        for df in (checked, winners, duplicates, aggregates):
            df.unpersist()
