"""The master dataset on Delta: the documented migration from the old Parquet layout."""

from __future__ import annotations

import shutil
from datetime import date
from pathlib import Path
from typing import Any

import pytest

from pos_lambda.adapters import master_dataset
from pos_lambda.settings import Settings

pytestmark = pytest.mark.integration


def test_migrating_a_parquet_master_honours_its_log_and_runs_once(
    spark: Any, settings: Settings, tmp_path: Path
) -> None:
    s = settings.with_overrides(**{"data_dir": tmp_path / "data"})
    source, old = tmp_path / "source", tmp_path / "master-parquet"
    rows = [(n, f"v{n}", date(2026, 3, 1 + n % 3)) for n in range(30)]
    spark.createDataFrame(
        rows, "kafka_offset long, raw_value string, event_day date"
    ).write.parquet(str(source))
    # The old archiver's layout: Spark's file sink, with its _spark_metadata log.
    q = (
        spark.readStream.schema("kafka_offset long, raw_value string, event_day date")
        .parquet(str(source))
        .writeStream.format("parquet")
        .option("path", str(old))
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .partitionBy("event_day")
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination()
    # A file of a failed micro-batch: on disk, not in the log. Readers must not see it.
    committed = next(old.glob("event_day=*/*.parquet"))
    shutil.copy(committed, committed.with_name("part-99999-failed-batch.parquet"))

    assert master_dataset.migrate_parquet(spark, s, str(old)) == 30
    assert master_dataset.migrate_parquet(spark, s, str(old)) == 30  # a rerun: skipped
    snap = master_dataset.snapshot(spark, s)
    assert sorted(r.kafka_offset for r in snap.rows.collect()) == list(range(30))
    assert snap.version == 0  # the second append was recognised and not committed
    assert master_dataset.optimize(spark, s)
    assert master_dataset.latest_version(spark, s) == 1
    assert snap.rows.count() == 30  # the pinned version still reads the same records


def test_the_records_added_between_two_table_versions_and_only_those(
    spark: Any, isolated: tuple[Settings, Any]
) -> None:
    """The real archiver appends three rounds, OPTIMIZE compacts between them: the
    change feed of (first, last] holds exactly the second and third rounds' records,
    each with the version that added it; compaction adds none."""
    from datetime import UTC, datetime

    from pos_lambda.speed_layer import archiver_job
    from tests.integration.speed_helpers import ms, produce_raw

    settings, _ = isolated
    at = datetime(2026, 3, 2, 9, tzinfo=UTC)
    versions = []
    for round_ in range(3):
        values = [f"round {round_} record {n}".encode() for n in range(5)]
        produce_raw(settings, values, [ms(at)] * 5)
        q = archiver_job.start(spark, settings, available_now=True)
        q.awaitTermination()
        versions.append(master_dataset.latest_version(spark, settings))
        master_dataset.optimize(spark, settings)
    assert master_dataset.change_feed_enabled(spark, settings)

    added = master_dataset.added(
        spark, settings, versions[0], master_dataset.latest_version(spark, settings)
    )
    got = sorted((bytes(r.raw_value).decode(), r._commit_version) for r in added.collect())
    assert got == sorted(
        [(f"round 1 record {n}", versions[1]) for n in range(5)]
        + [(f"round 2 record {n}", versions[2]) for n in range(5)]
    )


def test_a_table_created_without_the_change_feed_records_it_once_enabled(
    spark: Any, settings: Settings, tmp_path: Path
) -> None:
    s = settings.with_overrides(**{"data_dir": tmp_path / "data"})
    rows = "kafka_offset long, raw_value string, event_day date"
    old = spark.createDataFrame([(0, "old", date(2026, 3, 1))], rows)
    old.write.format("delta").option("delta.enableChangeDataFeed", "false").save(
        str(s.master_dataset_dir)
    )
    assert not master_dataset.change_feed_enabled(spark, s)
    with pytest.raises(Exception, match=r"(?i)change data"):
        master_dataset.added(spark, s, -1, 0).collect()
    enabled = master_dataset.enable_change_feed(spark, s)
    new = spark.createDataFrame([(1, "new", date(2026, 3, 1))], rows)
    new.write.format("delta").mode("append").save(str(s.master_dataset_dir))
    added = master_dataset.added(spark, s, enabled, enabled + 1).collect()
    assert [(r.raw_value, r._commit_version) for r in added] == [("new", enabled + 1)]
