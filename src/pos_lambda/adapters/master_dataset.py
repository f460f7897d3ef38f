"""The master dataset: an append-only Delta Lake table of every Kafka record as received.

The archiver (`pos_lambda.speed_layer.archiver_job`) appends to it through Delta's exactly-once
streaming sink; the batch layer reads it here at a pinned table version, so a rerun of
the same interval reads the same input. Maintenance (run by the daily DAG, or by hand):

    pos-batch master optimize            # compact small files (rewrites files, not records)
    pos-batch master vacuum --retain-hours 168
    pos-batch master history
    pos-batch master migrate --from .state/data/master-parquet   # old Parquet master

All functions take a SparkSession built by `adapters.spark_session.build_session` (Delta's SQL
extension and catalog are configured there); only Delta's jars are needed, not the
`delta-spark` pip package.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from pos_lambda.settings import Settings

PARTITION_COLUMN = "event_day"
# Delta skips an append whose (txnAppId, txnVersion) it has already committed: the
# migration can be rerun (after a crash or by mistake) without copying records twice.
MIGRATION_APP_ID = "pos-master-parquet-migration"


@dataclass(frozen=True)
class Snapshot:
    """The master dataset as of one Delta table version.

    `table_id` is Delta's id of the table (a UUID, fixed at creation): a table deleted
    and created again starts over at version 0, so a version number alone does not
    name an input.
    """

    table_id: str
    version: int
    rows: DataFrame


def _path(settings: Settings) -> str:
    return str(settings.master_dataset_dir)


def _table(settings: Settings) -> str:
    return f"delta.`{_path(settings)}`"


def latest_version(spark: SparkSession, settings: Settings) -> int:
    """The newest committed table version."""
    row = spark.sql(f"DESCRIBE HISTORY {_table(settings)} LIMIT 1").select("version").first()
    if row is None:  # pragma: no cover - a Delta table always has version 0
        raise RuntimeError(f"master dataset {_path(settings)} has no history")
    return int(row["version"])


def newest_version_on_disk(settings: Settings) -> int:
    """The newest table version, from the names of the table's commit files (the Delta
    protocol names each commit `<version>.json`, zero-padded, in `_delta_log`): for a
    scheduler's task that starts no Spark session."""
    log = settings.master_dataset_dir / "_delta_log"
    versions = [int(p.stem) for p in log.glob("*.json") if p.stem.isdigit()]
    if not versions:
        raise FileNotFoundError(f"no Delta table at {settings.master_dataset_dir}")
    return max(versions)


def missing(settings: Settings) -> str | None:
    """Why there is no master dataset to read yet, in one line (None: there is one).

    From the Delta log's file names alone (`newest_version_on_disk`), so a command can
    say so before it pays for a JVM and a Spark session. A table exists once its log
    holds a commit: before its first micro-batch commits, the archiver may already have
    written data files, or an empty `_delta_log`, that Delta's readers refuse."""
    try:
        newest_version_on_disk(settings)
    except FileNotFoundError:
        return (
            f"no master dataset yet: {settings.master_dataset_dir} holds no Delta commit; "
            "the speed layer's archiver (`pos-speed run`) creates it with its first "
            "micro-batch"
        )
    return None


def table_id(spark: SparkSession, settings: Settings) -> str:
    row = spark.sql(f"DESCRIBE DETAIL {_table(settings)}").select("id").first()
    if row is None:  # pragma: no cover - DESCRIBE DETAIL always returns one row
        raise RuntimeError(f"master dataset {_path(settings)} has no table id")
    return str(row["id"])


def exists(spark: SparkSession, settings: Settings) -> bool:
    jvm: Any = spark.sparkContext._jvm
    return bool(jvm.io.delta.tables.DeltaTable.isDeltaTable(spark._jsparkSession, _path(settings)))


def snapshot(spark: SparkSession, settings: Settings, version: int | None = None) -> Snapshot:
    """The table at `version` (default: the newest), pinned: later appends do not show."""
    pinned = latest_version(spark, settings) if version is None else version
    rows = spark.read.format("delta").option("versionAsOf", pinned).load(_path(settings))
    return Snapshot(table_id(spark, settings), pinned, rows)


def added(spark: SparkSession, settings: Settings, after: int, upto: int) -> DataFrame:
    """The records appended in table versions (after, upto], each with the version that
    added it (`_commit_version`), through Delta's change data feed: the files of those
    versions only, whatever the history before them.

    Raises (Delta's own error, naming the versions) when the feed is not recorded for
    all of them: a table created before the feed was enabled (`enable_change_feed`), or
    versions whose files VACUUM has removed.
    """
    return (
        spark.read.format("delta")
        .option("readChangeFeed", "true")
        .option("startingVersion", after + 1)
        .option("endingVersion", upto)
        .load(_path(settings))
        .where("_change_type = 'insert'")  # an append-only table: nothing else is there
        .drop("_change_type", "_commit_timestamp")
    )


def change_feed_enabled(spark: SparkSession, settings: Settings) -> bool:
    row = spark.sql(f"DESCRIBE DETAIL {_table(settings)}").select("properties").first()
    props: dict[str, str] = {} if row is None else dict(row["properties"] or {})
    return props.get("delta.enableChangeDataFeed", "false").lower() == "true"


def enable_change_feed(spark: SparkSession, settings: Settings) -> int:
    """Record the change data feed from the next table version on (a table the archiver
    created before it was on by default); returns the version that enabled it."""
    spark.sql(
        f"ALTER TABLE {_table(settings)} SET TBLPROPERTIES (delta.enableChangeDataFeed = true)"
    ).collect()
    return latest_version(spark, settings)


def optimize(spark: SparkSession, settings: Settings) -> list[dict[str, Any]]:
    """Compact small files (bin-packing). Records and versions stay readable as before."""
    return [r.asDict(recursive=True) for r in spark.sql(f"OPTIMIZE {_table(settings)}").collect()]


def vacuum(spark: SparkSession, settings: Settings, retain_hours: float) -> int:
    """Delete files no version within `retain_hours` needs; returns how many remain listed.

    Time travel (and a batch rerun pinned to an old version) works only within the
    retention, so keep it longer than the longest backfill you intend to reproduce.
    """
    spark.sql(f"VACUUM {_table(settings)} RETAIN {retain_hours} HOURS").collect()
    return len(spark.read.format("delta").load(_path(settings)).inputFiles())


def history(spark: SparkSession, settings: Settings, limit: int = 20) -> list[dict[str, Any]]:
    return [
        {k: r[k] for k in ("version", "timestamp", "operation", "operationMetrics")}
        for r in spark.sql(f"DESCRIBE HISTORY {_table(settings)} LIMIT {limit}").collect()
    ]


def migrate_parquet(spark: SparkSession, settings: Settings, source: str) -> int:
    """Append an old Parquet master dataset (Spark's file sink) into the Delta table.

    Read through Spark, which honours the file sink's `_spark_metadata` log: files of
    failed micro-batches are skipped, exactly as the old readers saw it. Returns the
    number of records in the source.
    """
    rows = spark.read.parquet(source)
    (
        rows.write.format("delta")
        .mode("append")
        .partitionBy(PARTITION_COLUMN)
        # The old layout's stored verdicts (valid, reason, detail, receipt) may join a
        # table the archiver started without them; readers ignore them.
        .option("mergeSchema", "true")
        .option("txnAppId", f"{MIGRATION_APP_ID}:{source}")
        .option("txnVersion", 1)
        .save(_path(settings))
    )
    return int(rows.count())
