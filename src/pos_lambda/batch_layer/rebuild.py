"""The full recompute, in chunks: every record of the master dataset judged again, every
natural key resolved over all its copies, a new generation of every day's views.

    pos-batch rebuild [--chunks 8] [--delta-version V]   # all chunks, then the commit
    pos-batch rebuild --chunk 3 --chunks 8 --delta-version V   # one chunk (the DAG's tasks)
    pos-batch rebuild --commit --chunks 8 --delta-version V    # the switch (the DAG's last)

Lambda's "recompute from all data", for when the validator or the winner rule changes
(the hourly runs fold new records only: src/pos_lambda/batch_layer/fold.py). Run by hand or by the
manual DAG `pos_batch_rebuild`, one mapped task per chunk, so Airflow's grid shows the
progress and no step holds all history at once.

Chunks split the natural keys, not the days: a key's winner depends on all its copies,
which a day never holds for sure (a conflicting copy may state another day), while a
key bucket always does. A record's bucket is a hash of the natural key it states, read
natively from its bytes (`key_bucket`); a record that states none (malformed) falls in
the bucket of the null key, where the validator refuses it. After the validator, every
valid receipt's bucket is checked against its chunk (`misplaced`): a record whose key
Spark and the validator read differently would be resolved apart from its copies, so
the chunk fails instead.

Each chunk, pinned to one table version, writes its receipts and index rows into the
generation (nothing points to it yet), its conflicts, and its share of the aggregates
and counts into a scratch Delta table under the data dir (`_partials`, one partition
per chunk, replaced when a chunk runs again). The commit sums the shares per window,
writes the generation's aggregates, and points every day at it in one conditional
write, with the table version the folds continue from (`switch`; what it commits, and
whether it must first fold what the hourly runs committed after its snapshot, is the
pure plan's: src/pos_lambda/batch_layer/plan.py).
"""

from __future__ import annotations

import logging
import shutil
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from pos_lambda.adapters import cassandra, master_dataset
from pos_lambda.batch_layer import fold as folding
from pos_lambda.batch_layer import plan as commit_plan
from pos_lambda.batch_layer.interval import Interval
from pos_lambda.batch_layer.plan import RebuildError as RebuildError  # rebuild's API
from pos_lambda.batch_layer.plan import generation_of as generation_of
from pos_lambda.batch_layer.pointer import (
    BatchPointer,
    BatchStore,
    CommitConflict,
    DayCommit,
    Folded,
    PointerState,
)
from pos_lambda.schemas import contract, cql
from pos_lambda.settings import Settings
from pos_lambda.views import records
from pos_lambda.views.batch import BATCH_AGGREGATE_COLUMNS, batch_aggregates, summed
from pos_lambda.views.winners import conflicts_of, resolve

log = logging.getLogger("pos.batch")

CHUNK = "chunk"
SWITCH_RETRIES = 3  # catch-ups when an hourly fold commits during the switch
COUNTS = ("input", "invalid", "receipts", "duplicates", "conflicts", "beyond")


@dataclass(frozen=True)
class ChunkResult:
    chunk: int
    chunks: int
    generation: str
    delta_version: int
    counts: dict[str, int]


def new_rebuild_id() -> str:
    return uuid.uuid4().hex[:8]


def ensure_unserved(store: BatchPointer, generation: str) -> None:
    """Refuse to write into a generation that is served, or was ever committed
    (`plan.refuse_committed_generation` says why)."""
    commit_plan.refuse_committed_generation(store.state(), store.committed_versions(), generation)


def key_bucket(key: tuple[Column, Column, Column], chunks: int) -> Column:
    """The chunk of a natural key (operation_id, vendor_fiscal_module, transaction_id)."""
    return F.pmod(F.xxhash64(*key), F.lit(chunks)).cast("int")


def _stated_key() -> tuple[Column, Column, Column]:
    """The natural key a master row's bytes state, read natively (null where none)."""
    text = F.col("raw_value").cast("string")
    return tuple(  # type: ignore[return-value]
        F.get_json_object(text, f"$.{name}").cast("long") for name in contract.NATURAL_KEY
    )


def _validated_key() -> tuple[Column, Column, Column]:
    return tuple(F.col(name).cast("long") for name in contract.NATURAL_KEY)  # type: ignore[return-value]


def plan(settings: Settings, chunks: int) -> dict[str, list[Any]]:
    """The steps of a rebuild at the master dataset's newest table version, as
    `pos-batch` arguments: every chunk's, then the commit's (the DAG maps the first)."""
    if chunks < 1:
        raise RebuildError("chunks must be at least 1")
    version = str(master_dataset.newest_version_on_disk(settings))
    pinned = ["rebuild", "--chunks", str(chunks), "--delta-version", version]
    pinned += ["--rebuild-id", new_rebuild_id()]
    return {
        "chunks": [[*pinned, "--chunk", str(n)] for n in range(chunks)],
        "commit": [*pinned, "--commit"],
    }


def _partials_path(settings: Settings, generation: str) -> Path:
    return Path(settings.data_dir) / "rebuild" / generation / "_partials"


def run_chunk(
    spark: SparkSession,
    settings: Settings,
    delta_version: int,
    chunk: int,
    chunks: int,
    rebuild_id: str | None = None,
) -> ChunkResult:
    """Rebuild one chunk of the natural keys at `delta_version` (see the module doc)."""
    if not 0 <= chunk < chunks:
        raise RebuildError(f"--chunk {chunk} is not in 0..{chunks - 1}")
    snap = master_dataset.snapshot(spark, settings, delta_version)
    generation = generation_of(snap.version, snap.table_id, rebuild_id)
    run_id = uuid.uuid1()
    # Recorded first, so that `pos-batch gc` spares the generation while it is written.
    with BatchStore(settings) as store:
        ensure_unserved(store, generation)
        store.record_run(
            run_id,
            {
                "status": f"rebuild chunk {chunk + 1}/{chunks}",
                "version": generation,
                "delta_version": snap.version,
                "started_at": datetime.now(UTC),
            },
        )
    mine = snap.rows.where(key_bucket(_stated_key(), chunks) == chunk)
    checked = records.check(records.from_archive(mine), native_first=True).drop("detail").persist()
    try:
        copies = records.receipt_rows(
            checked,
            int(contract.LATE_THRESHOLD.total_seconds() * 1_000_000),
            int(settings.speed.max_lateness_hours * 3600 * 1_000_000),
        ).persist()
        misplaced = copies.where(key_bucket(_validated_key(), chunks) != chunk).count()
        if misplaced:
            raise RebuildError(
                f"chunk {chunk}: {misplaced} valid receipt(s) whose key the validator reads "
                "other than Spark's JSON path does: their copies could be resolved apart"
            )
        resolution = resolve(copies)
        winners = (
            resolution.winners.withColumn("version", F.lit(generation))
            .withColumn(folding.MASTER_VERSION, F.lit(snap.version).cast("long"))
            .persist()
        )
        duplicates = resolution.duplicates.persist()
        ks = settings.cassandra.keyspace
        cassandra.upsert(winners, ks, cql.RECEIPTS_BATCH_TABLE, folding.RECEIPT_COLUMNS)
        conflicts = duplicates.where("conflict").count()
        if conflicts:
            folding.upsert_conflicts(conflicts_of(duplicates), ks, generation, snap.version)
        index = winners.withColumns(
            {folding.GENERATION: F.lit(generation), folding.KEY_BUCKET: folding.key_bucket()}
        )
        cassandra.upsert(index, ks, cql.RECEIPT_KEYS_BATCH_TABLE, folding.INDEX_TABLE_COLUMNS)
        stats = checked.agg(
            F.count(F.lit(1)).alias("input"),
            F.count(F.when(~records.is_valid(), 1)).alias("invalid"),
        ).first()
        assert stats is not None
        counts = {
            "input": int(stats["input"]),
            "invalid": int(stats["invalid"]),
            "receipts": winners.count(),
            "duplicates": duplicates.count(),
            "conflicts": conflicts,
            "beyond": winners.where("beyond_bound").count(),
        }
        share = batch_aggregates(winners, duplicates).withColumn(CHUNK, F.lit(chunk))
        _save_share(spark, settings, generation, chunk, share, counts)
        winners.unpersist()
        duplicates.unpersist()
        copies.unpersist()
    finally:
        checked.unpersist()
    with BatchStore(settings) as store:
        # The generation's last progress: `pos-batch gc` counts its grace from here.
        store.record_run(run_id, {"finished_at": datetime.now(UTC)})
    log.info("rebuild %s: chunk %d of %d done: %s", generation, chunk + 1, chunks, counts)
    return ChunkResult(chunk, chunks, generation, snap.version, counts)


def _save_share(
    spark: SparkSession,
    settings: Settings,
    generation: str,
    chunk: int,
    share: DataFrame,
    counts: dict[str, int],
) -> None:
    """The chunk's aggregates and counts, replacing what an earlier try of it left. The
    counts ride along as one row without a window."""
    counted = spark.createDataFrame(
        [(chunk, *(counts[c] for c in COUNTS))],
        f"{CHUNK} int, " + ", ".join(f"{c} long" for c in COUNTS),
    )
    rows = share.unionByName(counted, allowMissingColumns=True)
    (
        rows.write.format("delta")
        .mode("overwrite")
        .option("replaceWhere", f"{CHUNK} = {chunk}")
        .partitionBy(CHUNK)
        .save(str(_partials_path(settings, generation)))
    )


def commit(
    spark: SparkSession,
    settings: Settings,
    delta_version: int,
    chunks: int,
    end: datetime | None = None,
    rebuild_id: str | None = None,
    new_table: bool = False,
) -> dict[str, Any]:
    """Sum the chunks' shares, write the generation's aggregates, catch up with what the
    hourly folds committed meanwhile, switch the pointer.

    `end`: how far the rebuilt days are final (default: the horizon the pointer has
    now, so a rebuild never makes final what the hourly runs had not); never in the
    future. `new_table`: the master dataset is another Delta table than the one the
    views count (a restore, a move), and this rebuild deliberately takes it over."""
    commit_plan.ensure_end_passed(end, datetime.now(UTC))
    run_id = uuid.uuid1()
    snap = master_dataset.snapshot(spark, settings, delta_version)
    generation = generation_of(snap.version, snap.table_id, rebuild_id)
    with BatchStore(settings) as store:
        ensure_unserved(store, generation)
        # First: `pos-batch gc` spares the generation from its last progress on.
        store.record_run(
            run_id,
            {
                "status": "running",
                "version": generation,
                "delta_version": snap.version,
                "started_at": datetime.now(UTC),
            },
        )
    path = _partials_path(settings, generation)
    if not (path / "_delta_log").exists():
        raise RebuildError(f"no chunk of rebuild {generation} has run ({path} is empty)")
    shares = spark.read.format("delta").load(str(path))
    done = {r[CHUNK] for r in shares.select(CHUNK).distinct().collect()}
    missing = sorted(set(range(chunks)) - done)
    if missing:
        raise RebuildError(f"rebuild {generation}: chunk(s) {missing} of {chunks} have not run")
    totals_row = (
        shares.where(F.col("window_start").isNull())
        .agg(*(F.sum(c).alias(c) for c in COUNTS))
        .first()
    )
    assert totals_row is not None
    totals = {c: int(totals_row[c] or 0) for c in COUNTS}
    windows = shares.where(F.col("window_start").isNotNull()).select(*BATCH_AGGREGATE_COLUMNS)
    aggregates = summed(windows).withColumn("version", F.lit(generation)).persist()
    try:
        ks = settings.cassandra.keyspace
        cassandra.upsert(aggregates, ks, cql.AGG_BATCH_TABLE, ("version", *BATCH_AGGREGATE_COLUMNS))
        per_day = {
            r["day"]: (int(r["receipts"]), int(r["rows"]))
            for r in aggregates.groupBy("day")
            .agg(F.sum("receipt_count").alias("receipts"), F.count(F.lit(1)).alias("rows"))
            .collect()
        }
        # The chunks' receipt rows must all be there (a `pos-batch gc` long after the
        # chunks ran, say): a generation with holes would serve fewer receipts as final.
        # They are also the gaps view's input: a device's numbers are spread over the
        # chunks (which split the keys by hash), so its gaps are computed here, whole.
        keys = aggregates.select("operation_id", "day", F.lit(generation).alias("version"))
        generation_receipts = cassandra.lookup(
            spark, ks, cql.RECEIPTS_BATCH_TABLE, keys.distinct(), folding.GAP_INPUT_COLUMNS
        ).persist()
        try:
            found = generation_receipts.count()
            if found == totals["receipts"]:
                folding.upsert_gaps(
                    generation_receipts, ks, generation, settings.speed.gap_max_jump
                )
        finally:
            generation_receipts.unpersist()
    finally:
        aggregates.unpersist()
    if found != totals["receipts"]:
        raise RebuildError(
            f"rebuild {generation}: the chunks wrote {totals['receipts']} receipts but "
            f"{found} are there (deleted by `pos-batch gc`?): run every chunk again, then "
            "the commit"
        )
    with BatchStore(settings) as store:
        committed = switch(
            store,
            run_id,
            Folded(generation, snap.version, snap.table_id),
            per_day,
            end,
            new_table,
            str(settings.master_dataset_dir),
            lambda window, view, upto: folding.fold(spark, settings, store, window, view, upto),
        )
        store.record_run(
            run_id,
            {
                "status": "committed",
                "horizon": committed.horizon,
                "input_rows": totals["input"],
                "invalid_rows": totals["invalid"],
                "receipts": totals["receipts"],
                "duplicates_removed": totals["duplicates"],
                "conflicts": totals["conflicts"],
                "beyond_speed_bound": totals["beyond"],
                "aggregate_rows": sum(r for _, r in per_day.values()),
                "finished_at": datetime.now(UTC),
            },
        )
    shutil.rmtree(path.parent, ignore_errors=True)
    return {
        "generation": generation,
        "delta_version": committed.delta_version,
        "rebuilt_at_delta_version": snap.version,
        "caught_up_receipts": committed.caught_up_receipts,
        "chunks": chunks,
        "days_committed": committed.days,
        **totals,
    }


@dataclass(frozen=True)
class Switched:
    horizon: datetime
    delta_version: int  # how far the served generation counts the table
    days: int
    caught_up_receipts: int


def switch(
    store: BatchPointer,
    run_id: uuid.UUID,
    rebuilt: Folded,
    per_day: dict[date, tuple[int, int]],
    end: datetime | None,
    new_table: bool,
    where: str,
    catch_up: Callable[[Interval, PointerState, int], folding.Folding],
    now: Callable[[], datetime] = lambda: datetime.now(UTC),
) -> Switched:
    """Point every day at the generation `rebuilt` (what it counts: the rebuild's
    snapshot) in one conditional write. The hourly folds may have committed table
    versions after the rebuild's while it ran: those records are folded into the
    generation first (`catch_up(window, view, upto)`: the same fold, on the generation's
    index), or the switch would take the served views back to an older table version
    (`plan.switch` decides). A fold that commits meanwhile makes the switch lose its
    compare-and-set: read again, catch up again, up to SWITCH_RETRIES times."""
    counted = rebuilt
    caught_up = 0
    # Days an earlier catch-up folded into the generation: on their fold's aggregates
    # version from then on (a later catch-up adds to those, not to the rebuild's own).
    folded_days: dict[date, DayCommit] = {}
    for attempt in range(SWITCH_RETRIES + 1):
        read = store.state()
        step = commit_plan.switch(read, counted, per_day, folded_days, end, now(), new_table, where)
        days = step.days
        if step.catch_up is not None:
            log.info(
                "rebuild %s: the hourly runs committed table versions (%d, %d] meanwhile: "
                "folding them into the generation before the switch",
                rebuilt.generation, counted.version, step.catch_up.upto,
            )  # fmt: skip
            done = catch_up(step.catch_up.window, step.catch_up.view, step.catch_up.upto)
            caught_up += done.receipts
            folded_days |= {d.day: d for d in done.days}
            days = commit_plan.merged(days, folded_days)
            counted = step.catch_up.counted
        try:
            store.commit(run_id, counted.version, days, step.horizon, now(), read, counted)
        except CommitConflict as exc:
            if attempt == SWITCH_RETRIES:
                raise
            log.warning("rebuild %s: %s; catching up again", rebuilt.generation, exc)
            continue
        return Switched(step.horizon, counted.version, len(days), caught_up)
    raise AssertionError("unreachable")
