"""Every DAG file imports cleanly and schedules what we intend (DagBag, no services)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("airflow")

DAGS_DIR = Path(__file__).resolve().parents[3] / "dags"


@pytest.fixture(scope="module")
def dagbag() -> Any:
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(str(DAGS_DIR))


def test_no_import_errors(dagbag: Any) -> None:
    assert dagbag.import_errors == {}
    assert set(dagbag.dags) == {"pos_batch", "pos_master_maintenance", "pos_batch_rebuild"}


def test_batch_dag_is_hourly_over_data_intervals_and_never_overlaps(dagbag: Any) -> None:
    from airflow.timetables.interval import CronDataIntervalTimetable

    dag = dagbag.dags["pos_batch"]
    assert isinstance(dag.timetable, CronDataIntervalTimetable)
    assert dag.timetable.summary == "0 * * * *"
    assert dag.max_active_runs == 1
    assert not dag.catchup
    assert [t.task_id for t in dag.topological_sort()] == [
        "await_archive",
        "recompute",
        "quality",
    ]
    # The recompute waits for the archiver's committed offsets, not a fixed grace.
    sensor = dag.get_task("await_archive")
    assert sensor.op_kwargs == {
        "end": "{{ data_interval_end.isoformat() }}",
        "pos_env": "{{ params.pos_env }}",
    }
    assert sensor.mode == "reschedule"
    assert sensor.timeout == timedelta(minutes=30).total_seconds()
    # One Spark application per DAG run: the recompute runs the quality check too...
    recompute = dag.get_task("recompute")
    assert recompute.application_args == [
        "run",
        "--quality",
        "--start",
        "{{ data_interval_start.isoformat() }}",
        "--end",
        "{{ data_interval_end.isoformat() }}",
    ]
    assert recompute.pool == "pos_batch"
    assert recompute.retries == 2
    assert recompute.execution_timeout is not None
    assert recompute.execution_timeout <= timedelta(hours=1)
    assert recompute._conn_id == "spark_pos"  # the provider keeps it private
    # A bounded run: spark-submit's driver JVM compiles with C1 only (Settings.bounded).
    assert recompute.conf == {"spark.driver.extraJavaOptions": "{{ pos_bounded_java_options() }}"}
    rendered = dag.user_defined_macros["pos_bounded_java_options"]()
    assert "-XX:TieredStopAtLevel=1" in rendered.split()
    # C1 alone reserves 48 MB of code cache, which a long run filled (CI, 2026-11-28).
    assert "-XX:ReservedCodeCacheSize=240m" in rendered.split()
    assert "-XX:+UseParallelGC" in rendered.split()
    # ...and `quality` only reads what it recorded: a Python task, no spark-submit.
    from airflow.providers.standard.operators.python import PythonOperator

    quality = dag.get_task("quality")
    assert type(quality) is PythonOperator
    assert quality.python_callable.__name__ == "quality_recorded"
    assert quality.op_kwargs == {
        "start": "{{ data_interval_start.isoformat() }}",
        "end": "{{ data_interval_end.isoformat() }}",
        "since": "{{ dag_run.start_date.isoformat() }}",
        "pos_env": "{{ params.pos_env }}",
    }
    assert quality.execution_timeout is not None
    assert quality.execution_timeout <= timedelta(minutes=5)


def test_interval_comes_from_the_data_interval_never_logical_date() -> None:
    source = (DAGS_DIR / "pos_batch.py").read_text()
    assert "{{ data_interval_start.isoformat() }}" in source
    assert "{{ data_interval_end.isoformat() }}" in source
    assert "logical_date }}" not in source and "ds }}" not in source


def test_maintenance_dag_compacts_vacuums_then_drops_unreferenced_versions(dagbag: Any) -> None:
    dag = dagbag.dags["pos_master_maintenance"]
    assert [t.application_args for t in dag.topological_sort()] == [
        ["master", "optimize"],
        ["master", "vacuum"],
        ["gc"],
    ]
    assert all(t.pool == "pos_batch" for t in dag.tasks)


def test_rebuild_dag_is_manual_and_maps_one_task_per_chunk_before_its_commit(
    dagbag: Any,
) -> None:
    dag = dagbag.dags["pos_batch_rebuild"]
    from airflow.sdk.definitions.timetables.simple import NullTimetable

    assert isinstance(dag.timetable, NullTimetable)  # manual trigger only
    assert dag.params["chunks"] == 8
    assert [t.task_id for t in dag.topological_sort()] == ["plan", "chunk", "commit"]
    assert dag.get_task("chunk").pool == dag.get_task("commit").pool == "pos_batch"


def test_the_rebuild_plan_pins_one_table_version_for_every_step(tmp_path: Path) -> None:
    from pos_lambda.batch_layer.rebuild import plan
    from pos_lambda.settings import load_settings

    settings = load_settings(data_dir=tmp_path)
    log = settings.master_dataset_dir / "_delta_log"
    log.mkdir(parents=True)
    for version in (0, 1, 12):
        (log / f"{version:020d}.json").write_text("{}")
    (log / "00000000000000000010.checkpoint.parquet").write_text("")
    steps = plan(settings, 3)
    # One rebuild id for every step (they write one generation), a new one per plan (a
    # second rebuild at the same table version writes a generation of its own).
    rebuild_id = steps["commit"][6]
    assert len(rebuild_id) == 8 and rebuild_id.isalnum()
    pinned = ["rebuild", "--chunks", "3", "--delta-version", "12", "--rebuild-id", rebuild_id]
    assert steps == {
        "chunks": [[*pinned, "--chunk", "0"], [*pinned, "--chunk", "1"], [*pinned, "--chunk", "2"]],
        "commit": [*pinned, "--commit"],
    }
    assert plan(settings, 3)["commit"][6] != rebuild_id
