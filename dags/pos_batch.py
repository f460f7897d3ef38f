"""Airflow 3 DAGs of the batch layer: hourly recompute + data quality; daily upkeep.

Thin: schedule and tasks only. Nothing here does I/O at parse time; the Spark jars are
listed when a task renders its templates. Each Spark task is `spark-submit` of
`pos-batch` over the connection `spark_pos` (defined by `pos-infra airflow up` from
POS_SPARK_MASTER; Airflow 3 creates no default connections and SparkSubmitOperator
without one silently submits to master `yarn`).

- `pos_batch` (hourly, `CronDataIntervalTimetable`): `await_archive` (until the
  archiver's committed Kafka offsets show every record Kafka received before the
  hour's end in the master dataset: src/pos_lambda/batch_layer/await_archive.py; if
  there is still no master dataset then, nothing ever reached the archiver: it skips
  the run's other tasks and the run succeeds, empty), then
  `recompute`: `pos-batch run --quality` over [data_interval_start, data_interval_end)
  (never `logical_date`: it is null for manual and asset-triggered runs), which also
  runs the data-quality check in the same Spark application and records it on its
  `batch_runs` row; then `quality`, a plain Python task (no Spark, no JVM) that reports
  that record and fails if there is none or the check failed
  (src/pos_lambda/batch_layer/quality_report.py). One Spark application per DAG run: a
  second spark-submit cost a JVM and a session, 10 s of the 39 s a `make demo` run
  took, for 6 s of work. max_active_runs=1 and the one-slot pool `pos_batch` keep runs
  from overlapping.
- `pos_master_maintenance` (daily): OPTIMIZE then VACUUM of the master dataset, and
  `pos-batch gc`: delete batch-view versions nothing points to (same pool: never
  during a recompute).
- `pos_batch_rebuild` (manual only, no schedule): the full recompute from every record
  (src/pos_lambda/batch_layer/rebuild.py), for when the validator or the winner rule changes: `plan`
  pins the master dataset's newest table version, one mapped `chunk` task per chunk of
  natural keys (params.chunks; the grid shows the progress), then `commit` serves the
  new generation; every step names the plan's `--rebuild-id`. Same pool, taken per task:
  hourly runs may commit between two chunks; the commit folds what they added into the
  new generation before it switches, and their next fold continues from it.

Backfill: `airflow backfill create --dag-id pos_batch --from-date 2026-03-01
--to-date 2026-03-03` (run by the scheduler, one run per hour, in order). A run's
`conf` may carry {"pos_env": {"POS_CASSANDRA_KEYSPACE": ...}} to point it elsewhere.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.providers.standard.operators.python import PythonOperator
from airflow.providers.standard.sensors.python import PythonSensor
from airflow.sdk import DAG, Param
from airflow.timetables.interval import CronDataIntervalTimetable

PROJECT_ROOT = Path(__file__).resolve().parent.parent
BATCH_CLI = str(PROJECT_ROOT / "src" / "pos_lambda" / "batch_layer" / "cli.py")
SPARK_CONN_ID = "spark_pos"
POOL = "pos_batch"  # one slot, created by `pos-infra airflow up`
# A run fails (and the next hour's run recomputes the day) if the archiver has not
# caught up with the hour's end in this long: it is down, or far behind.
ARCHIVE_TIMEOUT = timedelta(minutes=30)
INTERVAL_ARGS = [
    "--start",
    "{{ data_interval_start.isoformat() }}",
    "--end",
    "{{ data_interval_end.isoformat() }}",
]


def archived_before(end: str, pos_env: dict[str, str]) -> bool:
    """await_archive's check (imported at run time, not parse time). An hour with no
    master dataset to read even once everything before its end is archived (nothing
    ever reached the archiver) skips the recompute and quality: the DAG run succeeds,
    empty, rather than failing on `pos-batch run`'s exit 4, "nothing to do yet"."""
    from airflow.sdk.exceptions import AirflowSkipException

    from pos_lambda.batch_layer.await_archive import NothingArchived, ready_to_recompute

    try:
        return ready_to_recompute(end, pos_env)
    except NothingArchived as exc:
        raise AirflowSkipException(str(exc)) from exc


def quality_recorded(
    start: str, end: str, since: str, pos_env: dict[str, str]
) -> dict[str, object]:
    """quality's callable: the check the recompute recorded (imported at run time)."""
    from pos_lambda.batch_layer.quality_report import report

    return report(start, end, since, pos_env)


REBUILD_COMMIT_ARGS = "{{ ti.xcom_pull(task_ids='plan')[0][:-2] + ['--commit'] }}"


def rebuild_plan(chunks: int, pos_env: dict[str, str]) -> list[list[str]]:
    """Every chunk's `pos-batch` arguments, at the master dataset's newest table version
    (run time): the mapped tasks' input."""
    from pos_lambda.batch_layer.await_archive import settings_with
    from pos_lambda.batch_layer.rebuild import plan

    return plan(settings_with(pos_env), int(chunks))["chunks"]


def spark_jars() -> str:
    """The project's Spark jars, comma-separated (called at render time, not parse time)."""
    from pos_lambda.adapters.spark_session import spark_jars as jars
    from pos_lambda.settings import load_settings

    return ",".join(str(j) for j in jars(load_settings()))


def bounded_java_options() -> str:
    """The driver JVM's options of a bounded batch run (the project's log configuration,
    collector and C1-only compilation: Settings.bounded), for spark-submit's JVM, which
    the job's own session options cannot reach (render time, not parse time)."""
    from pos_lambda.adapters.spark_session import spark_conf
    from pos_lambda.settings import load_settings

    return spark_conf(load_settings().bounded(), "pos-batch", ())["spark.driver.extraJavaOptions"]


def _submit_args(task_id: str, timeout: timedelta) -> dict[str, Any]:
    return {
        "task_id": task_id,
        "conn_id": SPARK_CONN_ID,
        "application": BATCH_CLI,
        "jars": "{{ pos_spark_jars() }}",
        "name": f"pos-batch-{task_id}",
        # A template, rendered to a dict (render_template_as_native_obj) at run time.
        "env_vars": "{{ params.pos_env }}",
        "pool": POOL,
        "execution_timeout": timeout,
    }


def _submit(
    task_id: str, args: Any, timeout: timedelta, conf: dict[str, str] | None = None
) -> SparkSubmitOperator:
    return SparkSubmitOperator(application_args=args, conf=conf, **_submit_args(task_id, timeout))


DEFAULTS = {
    "owner": "pos",
    "retries": 2,
    "retry_delay": timedelta(minutes=2),
    "retry_exponential_backoff": True,
}
COMMON = {
    "start_date": datetime(2026, 1, 1),
    "catchup": False,  # history is filled on purpose, by `airflow backfill create`
    "max_active_runs": 1,
    "default_args": DEFAULTS,
    "user_defined_macros": {
        "pos_spark_jars": spark_jars,
        "pos_bounded_java_options": bounded_java_options,
    },
    # env_vars must render to a dict, not its string form.
    "render_template_as_native_obj": True,
    "params": {
        "pos_env": Param({}, type="object", description="POS_* settings overriding the environment")
    },
    "tags": ["pos", "batch"],
}

with DAG(
    dag_id="pos_batch",
    description="Recompute exact batch views of each hour; compare them with the speed view",
    schedule=CronDataIntervalTimetable("0 * * * *", timezone="UTC"),
    dagrun_timeout=timedelta(hours=2),
    **COMMON,  # type: ignore[arg-type]
) as batch_dag:
    await_archive = PythonSensor(
        task_id="await_archive",
        python_callable=archived_before,
        op_kwargs={"end": "{{ data_interval_end.isoformat() }}", "pos_env": "{{ params.pos_env }}"},
        mode="reschedule",  # no worker slot held while waiting
        poke_interval=30,
        timeout=ARCHIVE_TIMEOUT.total_seconds(),
    )
    recompute = _submit(
        "recompute",
        ["run", "--quality", *INTERVAL_ARGS],
        timedelta(minutes=45),
        # A bounded run on a cold JVM: C1 only (Settings.bounded; 12.0 vs 16.2 s of run
        # over 5,000 receipts in one process).
        {"spark.driver.extraJavaOptions": "{{ pos_bounded_java_options() }}"},
    )
    quality = PythonOperator(
        task_id="quality",
        python_callable=quality_recorded,
        op_kwargs={
            "start": "{{ data_interval_start.isoformat() }}",
            "end": "{{ data_interval_end.isoformat() }}",
            # Only a check recorded during this DAG run counts, not an earlier run's of
            # the same interval.
            "since": "{{ dag_run.start_date.isoformat() }}",
            "pos_env": "{{ params.pos_env }}",
        },
        # One CQL read: no Spark slot needed, so no pool; a retry helps only if
        # Cassandra blinked (a missing record stays missing: rerun the recompute).
        retries=1,
        retry_delay=timedelta(seconds=30),
        execution_timeout=timedelta(minutes=5),
    )
    await_archive >> recompute >> quality

with DAG(
    dag_id="pos_master_maintenance",
    description="Compact (OPTIMIZE) and clean up (VACUUM) the master dataset; drop "
    "unreferenced batch-view versions",
    schedule=CronDataIntervalTimetable("30 3 * * *", timezone="UTC"),
    **COMMON,  # type: ignore[arg-type]
) as maintenance_dag:
    optimize = _submit("optimize", ["master", "optimize"], timedelta(hours=1))
    vacuum = _submit("vacuum", ["master", "vacuum"], timedelta(hours=1))
    gc = _submit("gc", ["gc"], timedelta(minutes=30))
    optimize >> vacuum >> gc

with DAG(
    dag_id="pos_batch_rebuild",
    description="Recompute every day from every record of the master dataset, in chunks "
    "of natural keys, then serve the new generation (manual: after a validator or "
    "winner-rule change)",
    schedule=None,
    **{  # type: ignore[arg-type]
        **COMMON,
        "params": {
            **COMMON["params"],  # type: ignore[dict-item]
            "chunks": Param(8, type="integer", minimum=1, description="chunks of natural keys"),
        },
    },
) as rebuild_dag:
    steps = PythonOperator(
        task_id="plan",
        python_callable=rebuild_plan,
        op_kwargs={"chunks": "{{ params.chunks }}", "pos_env": "{{ params.pos_env }}"},
    )
    chunk = SparkSubmitOperator.partial(**_submit_args("chunk", timedelta(hours=2))).expand(
        application_args=steps.output
    )
    # The commit's arguments: the plan's pinned ones (its first chunk's, less `--chunk
    # N`), rendered to a list (render_template_as_native_obj).
    commit = _submit("commit", REBUILD_COMMIT_ARGS, timedelta(hours=1))
    steps >> chunk >> commit
