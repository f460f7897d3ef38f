"""The master dataset on Delta: the documented migration from the old Parquet layout."""

from __future__ import annotations

import shutil
from datetime import date
from pathlib import Path
from typing import Any

import pytest

from adapters import master_dataset
from infra.settings import Settings

pytestmark = pytest.mark.integration


def test_migrating_a_parquet_master_honours_its_log_and_runs_once(
    spark: Any, settings: Settings, tmp_path: Path
) -> None:
    s = settings.model_copy(update={"data_dir": tmp_path / "data"})
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
