"""The hourly batch run: fold the records archived since the last commit into the views.

Reads like a sentence (docs/decisions/batch-incremental-key-index.md says why):

1. **New records only**: the master dataset's change data feed between the table
   version the last commit counted (`Folded.version`) and the newest one, each record
   with the table version that archived it (`master_dataset.added`);
2. judge them (`pos_lambda.views.records.check`, the speed layer's validator) and turn the valid
   ones into receipt rows;
3. look their natural keys up in the batch layer's own index (`receipt_keys_batch`, by
   full primary key: one read per new receipt, however long the history) and decide
   with the speed layer's rule (`pos_lambda.views.winners.decide_batch`): new keys win, a stored
   winner stays, a record seen before (its own coordinates: a run killed after its
   index writes) wins again, other copies are resends or conflicts;
4. write what changed:
   - each new winner's receipt row, once, into its day's partition of the current
     generation, with the table version that archived it (readers serve a row when
     that version is at most its day's committed `delta_version`: a killed or losing
     run's rows stay invisible until a commit that counts them);
   - the touched days' aggregates under a new version: the committed rows plus the
     fold's increments (`pos_lambda.views.batch.plus`, `increments`), read through the `day` index
     (a day's rows of every store, not the history);
   - the conflicts (both versions; a stored winner's content from its receipt row),
     then the new winners' index rows;
5. commit: the touched days and the interval's days (their coverage) point at their
   versions, the horizon and the folded table version advance, in one conditional
   batch (`BatchStore.commit`).

What a run costs follows the records archived since the last one, never the history:
no day is read whole, no copy is judged twice. Lookback does not apply: every new
record is folded into its own day, however late it comes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from pos_lambda.adapters import cassandra, cassandra_client, master_dataset
from pos_lambda.adapters.driver_lookup import DriverLookup, local_frame, spark_value
from pos_lambda.batch_layer.interval import Interval
from pos_lambda.batch_layer.plan import fold_days, fold_version
from pos_lambda.batch_layer.pointer import BatchStore, DayCommit, PointerState
from pos_lambda.schemas import contract, cql
from pos_lambda.settings import Settings
from pos_lambda.views import records
from pos_lambda.views.batch import (
    BATCH_AGGREGATE_COLUMNS,
    GAP_COLUMNS,
    device_gaps,
    increments,
    plus,
)
from pos_lambda.views.winners import (
    CONFLICT_COLUMNS,
    INDEX_COLUMNS,
    decide_batch,
    winners_to_complete,
    with_winner_content,
)

log = logging.getLogger("pos.batch")

GENERATION = "generation"
KEY_BUCKET = "key_bucket"
MASTER_VERSION = "master_version"
# receipt_keys_batch: what the rule reads of a stored winner, per generation.
INDEX_KEY = (GENERATION, "operation_id", "vendor_fiscal_module", KEY_BUCKET, "transaction_id")
INDEX_TABLE_COLUMNS = (GENERATION, *INDEX_COLUMNS, KEY_BUCKET)
RECEIPT_COLUMNS = ("version", *records.RECEIPT_ROW_COLUMNS, MASTER_VERSION)
AGGREGATE_COLUMNS = ("version", *BATCH_AGGREGATE_COLUMNS)
CONFLICT_BATCH_COLUMNS = ("version", *CONFLICT_COLUMNS, MASTER_VERSION)
GAP_BATCH_COLUMNS = ("version", *GAP_COLUMNS)
# What the gaps view reads of a receipt row.
GAP_INPUT_COLUMNS = (
    "operation_id",
    "day",
    "vendor_fiscal_module",
    "transaction_id",
    "happened_at",
    "revenue",
)


@dataclass(frozen=True)
class Folding:
    """What one fold found and wrote (the run's bookkeeping)."""

    version: str
    input_rows: int
    invalid_rows: int
    receipts: int
    duplicates_removed: int
    conflicts: int
    beyond_speed_bound: int
    aggregate_rows: int
    days: list[DayCommit]


def upsert_conflicts(
    conflicts: DataFrame, keyspace: str, version: str, master_version: int
) -> None:
    """Write conflicts (CONFLICT_COLUMNS) under a run's `version` (a generation, or a
    pinned run's key): readers see them with the commit that serves that version up to
    table version `master_version`, never before, and never another version's."""
    rows = conflicts.withColumns(
        {"version": F.lit(version), MASTER_VERSION: F.lit(master_version).cast("long")}
    )
    cassandra.upsert(rows, keyspace, cql.CONFLICTS_BATCH_TABLE, CONFLICT_BATCH_COLUMNS)


def upsert_gaps(receipts: DataFrame, keyspace: str, version: str, max_jump: int) -> None:
    """The gaps view of `receipts`' store-days (every receipt of each: a device's gaps
    depend on all its numbers of the day) under `version`, the version their day's
    aggregates are written under."""
    rows = device_gaps(receipts, max_jump).withColumn("version", F.lit(version))
    cassandra.upsert(rows, keyspace, cql.GAPS_BATCH_TABLE, GAP_BATCH_COLUMNS)


def key_bucket() -> Any:
    return F.floor(F.col("transaction_id") / cql.KEY_BUCKET_SIZE).cast("long")


def fold(
    spark: SparkSession,
    settings: Settings,
    store: BatchStore,
    interval: Interval,
    read: PointerState,
    upto: int,
    crash_after_receipts: Callable[[], None] | None = None,
) -> Folding:
    """Fold the records of table versions (read.folded.version, upto] into the views;
    returns what to commit (the caller commits)."""
    assert read.folded is not None
    folded = read.folded
    version = fold_version(folded, upto)
    generation = folded.generation
    keyspace = settings.cassandra.keyspace
    thresholds = (
        int(contract.LATE_THRESHOLD.total_seconds() * 1_000_000),
        int(settings.speed.max_lateness_hours * 3600 * 1_000_000),
    )
    if upto == folded.version:  # nothing archived since the last commit
        if crash_after_receipts is not None:  # no receipts to write: die before the commit
            crash_after_receipts()
        return Folding(version, 0, 0, 0, 0, 0, 0, 0, fold_days(read, interval, [], version, {}, {}))
    new = master_dataset.added(spark, settings, folded.version, upto)
    checked = records.check(records.from_archive(new), native_first=True).persist()
    try:
        return _fold_checked(
            spark,
            store,
            keyspace,
            thresholds,
            interval,
            read,
            new,
            checked,
            version,
            generation,
            upto,
            crash_after_receipts,
            settings.speed.gap_max_jump,
        )
    finally:
        checked.unpersist()


def _fold_checked(
    spark: SparkSession,
    store: BatchStore,
    keyspace: str,
    thresholds: tuple[int, int],
    interval: Interval,
    read: PointerState,
    new: DataFrame,
    checked: DataFrame,
    version: str,
    generation: str,
    upto: int,
    crash_after_receipts: Callable[[], None] | None,
    gap_max_jump: int,
) -> Folding:
    stats = checked.agg(
        F.count(F.lit(1)).alias("input"), F.count(F.when(~records.is_valid(), 1)).alias("invalid")
    ).first()
    assert stats is not None
    archived_by = new.select(*records.COORDINATES, F.col("_commit_version").alias(MASTER_VERSION))
    incoming = (
        records.receipt_rows(checked, *thresholds)
        .join(archived_by, list(records.COORDINATES), "left")
        .withColumn(KEY_BUCKET, key_bucket())
        .withColumn(GENERATION, F.lit(generation))
    )
    # Read by the driver, a partition's keys in one query: the connector's direct join
    # does not apply here (the generation, a constant, becomes a filter, and the join a
    # scan of the whole index: 48 s at 10M keys against 6 s at 1M, measured).
    lookup = DriverLookup(spark, store.session, keyspace)
    keys = [tuple(r) for r in incoming.select(*INDEX_KEY).distinct().collect()]
    stored = lookup.rows(cql.RECEIPT_KEYS_BATCH_TABLE, INDEX_KEY, keys, INDEX_TABLE_COLUMNS)
    decision = decide_batch(incoming, stored).materialised()
    winners = decision.winners.persist()
    duplicates = decision.duplicates.persist()
    added = increments(winners, duplicates).persist()
    try:
        tally = decision.tally_counts(int(stats["input"]) - int(stats["invalid"]))
        per_day = {
            r["day"]: int(r["n"])
            for r in winners.groupBy("day").agg(F.count(F.lit(1)).alias("n")).collect()
        }
        touched = sorted({r["day"] for r in added.select("day").distinct().collect()})
        committed = _committed_aggregates(spark, store, keyspace, read, touched)
        aggregates = plus(committed, added).withColumn("version", F.lit(version)).persist()
        try:
            aggregate_rows = aggregates.count()
            receipts = winners.withColumn("version", F.lit(generation))
            cassandra.upsert(receipts, keyspace, cql.RECEIPTS_BATCH_TABLE, RECEIPT_COLUMNS)
            if crash_after_receipts is not None:
                crash_after_receipts()
            cassandra.upsert(aggregates, keyspace, cql.AGG_BATCH_TABLE, AGGREGATE_COLUMNS)
            # The touched days' gaps, every store's (the day moves to `version` whole),
            # from the generation's receipt rows, the ones just written among them.
            store_days = [
                (r["operation_id"], r["day"], generation)
                for r in aggregates.select("operation_id", "day").distinct().collect()
            ]
            day_receipts = lookup.rows(
                cql.RECEIPTS_BATCH_TABLE,
                ("operation_id", "day", "version"),
                store_days,
                (*GAP_INPUT_COLUMNS, MASTER_VERSION),
            ).where(F.col(MASTER_VERSION) <= upto)
            upsert_gaps(day_receipts, keyspace, version, gap_max_jump)
            conflicts = 0
            if int(tally["conflicts"]):
                found = _with_winner_content(lookup, generation, decision.conflicts)
                upsert_conflicts(found, keyspace, generation, upto)
                conflicts = int(tally["conflicts"])
            # Last: until the index knows them, a rerun finds these receipts new again.
            cassandra.upsert(winners, keyspace, cql.RECEIPT_KEYS_BATCH_TABLE, INDEX_TABLE_COLUMNS)
            aggs_per_day = {
                r["day"]: int(r["count"]) for r in aggregates.groupBy("day").count().collect()
            }
        finally:
            aggregates.unpersist()
    finally:
        for df in (winners, duplicates, added):
            df.unpersist()
    new_receipts = sum(per_day.values())
    duplicates_removed = int(tally["resends"]) + int(tally["conflicts"])
    return Folding(
        version=version,
        input_rows=int(stats["input"]),
        invalid_rows=int(stats["invalid"]),
        receipts=new_receipts,
        duplicates_removed=duplicates_removed,
        conflicts=conflicts,
        beyond_speed_bound=int(tally["beyond"]),
        aggregate_rows=aggregate_rows,
        days=fold_days(read, interval, touched, version, per_day, aggs_per_day),
    )


def _committed_aggregates(
    spark: SparkSession,
    store: BatchStore,
    keyspace: str,
    read: PointerState,
    days: list[date],
) -> DataFrame:
    """The served aggregate rows of `days`, every store's, read through the `day` index
    (Cassandra 5 SAI): a day's rows, whatever the history."""
    table = cassandra.read_table(spark, keyspace, cql.AGG_BATCH_TABLE)
    schema = table.select(*BATCH_AGGREGATE_COLUMNS).schema
    statement = cassandra_client.prepare_idempotent(
        store.session,
        f"SELECT {', '.join(BATCH_AGGREGATE_COLUMNS)} FROM {cql.AGG_BATCH_TABLE} "
        "WHERE day = ? AND version = ?",
    )
    rows: list[tuple[Any, ...]] = []
    for day in days:
        served = read.days.get(day)
        if served is None or not served.version:
            continue
        for row in store.session.execute(statement, (day, served.version), timeout=120):
            rows.append(tuple(map(spark_value, row)))
    return local_frame(spark, rows, schema)


def _with_winner_content(lookup: DriverLookup, generation: str, conflicts: DataFrame) -> DataFrame:
    """Conflicts with a stored winner's content, read from its receipt row (by the driver:
    each winner's partition and instant, then its exact key)."""
    wanted = winners_to_complete(conflicts).withColumn("version", F.lit(generation))
    at = ("operation_id", "day", "version", "happened_at")
    # Spark hands instants back naive, in this process's zone: made explicit for the driver.
    keys = [
        tuple(v.astimezone(UTC) if isinstance(v, datetime) else v for v in r)
        for r in wanted.select(*at).distinct().collect()
    ]
    found = lookup.rows(cql.RECEIPTS_BATCH_TABLE, at, keys, records.RECEIPT_ROW_COLUMNS)
    return with_winner_content(conflicts, found)
