"""The real Airflow scheduler runs the `pos_batch` DAG for a real interval.

Its own Airflow instance (state dir and port of this test), started through the same
code as `make airflow`, with this test's keyspace and master dataset in its
environment; the run is triggered through the REST API with an explicit data
interval and awaited by polling the API. Real Spark (spark-submit) and Cassandra.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from pos_lambda.adapters.service import wait_for
from pos_lambda.producer.simulation import FaultConfig
from pos_lambda.schemas import cql as tables
from pos_lambda.settings import Settings
from pos_lambda_dev.demo import batch_dag
from pos_lambda_dev.demo.airflow_api import AirflowApi
from pos_lambda_dev.runtime import airflow_service
from tests.integration.speed_helpers import expected_aggregates, send
from tests.integration.test_batch_layer import _archive, _simulate, served_aggregates

pytestmark = pytest.mark.integration

DAG_ID = "pos_batch"
INTERVAL = ("2026-03-02T08:00:00+00:00", "2026-03-02T09:00:00+00:00")


@pytest.fixture
def airflow(
    isolated: tuple[Settings, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Settings, Any]]:
    settings, cql = isolated
    own = settings.with_overrides(**{"state_dir": tmp_path / "state", "airflow_port": 18080})
    # Airflow's processes (and so spark-submit) take POS_* from the environment; the
    # topic too: await_archive checks the archiver's offsets on it.
    env = own.environment()
    for name in (
        "POS_CASSANDRA_KEYSPACE",
        "POS_TOPIC_TRANSACTIONS",
        "POS_DATA_DIR",
        "POS_STATE_DIR",
        "POS_AIRFLOW_PORT",
    ):
        monkeypatch.setenv(name, env[name])
    # Stopped at the end, and never outliving this run: killed (-9 too) in the middle, it
    # leaves no Airflow holding the port for the next run (airflow_service.owned).
    with airflow_service.owned(settings, own):
        airflow_service.start(own)
        yield own, cql


def test_the_scheduler_runs_the_batch_dag_for_a_real_interval(
    spark: Any, airflow: tuple[Settings, Any], tmp_path: Path
) -> None:
    settings, cql = airflow
    ledger = tmp_path / "ledger"
    send(settings, _simulate(ledger, count=300, seed=3, faults=FaultConfig(resend_rate=0.05)))
    _archive(spark, settings)

    api = AirflowApi(settings)
    assert wait_for(lambda: api.dag_parsed(DAG_ID), timeout=120, interval=1.0), (
        "pos_batch never parsed"
    )
    start, stop = (datetime.fromisoformat(t) for t in INTERVAL)
    run = api.trigger(DAG_ID, "test-interval", start, stop, conf={})
    assert (run["data_interval_start"][:19], run["data_interval_end"][:19]) == (
        "2026-03-02T08:00:00",
        "2026-03-02T09:00:00",
    )
    api.set_paused(DAG_ID, False)

    def state() -> str:
        return api.run_state(DAG_ID, "test-interval")

    assert wait_for(lambda: state() in ("success", "failed"), timeout=900, interval=2.0)
    assert state() == "success", api.tasks(DAG_ID, "test-interval")

    # The DAG's interval reached the job: every window before 09:00 is final and exact.
    # (The scheduler, once unpaused, may also run today's latest hour first, which makes
    # every archived day final up to today: then later windows are served too, and they
    # must be exact as well.)
    end = datetime(2026, 3, 2, 9, 0)
    ledger_windows = expected_aggregates(ledger)
    want = {k: v for k, v in ledger_windows.items() if k[1] < end}
    assert want, "the simulation must put receipts in the interval"
    served = served_aggregates(cql)
    assert {k: v for k, v in served.items() if k[1] < end} == want
    assert {k: v for k, v in served.items() if k[1] >= end} == {
        k: v for k, v in ledger_windows.items() if k in served and k[1] >= end
    }
    # (Once unpaused, the scheduler may also start today's latest hour: not ours.)
    runs = cql.execute(f"SELECT * FROM {tables.BATCH_RUNS_TABLE}").all()
    assert [
        (r.status, r.interval_end)
        for r in runs
        if r.interval_start.year == 2026 and r.interval_start.month == 3
    ] == [("committed", end)]
    # The recompute ran the quality check in its own Spark application and recorded it
    # on its row, for the quality task (no Spark) to report: the speed layer never ran
    # here, so every window of the ledger's is one the batch fixed, and every day of the
    # interval and its look-back has a committed version.
    [ours] = [r for r in runs if r.interval_start.year == 2026 and r.interval_start.month == 3]
    assert (ours.quality_windows, ours.quality_windows_fixed) == (len(want), len(want))
    assert ours.quality_missing_days is None  # [] reads back as null
    assert ours.quality_checked_at is not None and ours.quality_error is None
    assert sorted(t for t, _, _ in api.tasks(DAG_ID, "test-interval")) == [
        "await_archive",
        "quality",
        "recompute",
    ]
    # And what the batch fixed per window, in batch_fixes:
    fixes = {
        (r.operation_id, r.window_start): (r.receipts_fixed, Decimal(r.revenue_fixed))
        for r in cql.execute(f"SELECT * FROM {tables.BATCH_FIXES_TABLE}")
    }
    assert fixes == {k: (v[0], v[2]) for k, v in want.items()}

    # Run the same interval again, as a second `make demo` on the same day does: Airflow
    # keeps one run per logical date, so the earlier run goes and the new one recomputes
    # the same views.
    said: list[str] = []
    again = batch_dag.run_dag(settings, {}, start, stop, "test-interval-again", said.append, 900)
    assert [r for r, _ in api.runs_at(DAG_ID, stop)] == ["test-interval-again"]
    assert any("deleted the earlier run test-interval (success)" in line for line in said), said
    assert all(st == "success" for _, st, _ in again.tasks), again.tasks
    assert {k: v for k, v in served_aggregates(cql).items() if k[1] < end} == want


def test_the_rebuild_dag_maps_its_chunks_and_serves_what_the_hourly_runs_served(
    spark: Any, airflow: tuple[Settings, Any], tmp_path: Path
) -> None:
    """Two folds (a build, then the rest of the stream), then the manual rebuild DAG in
    two chunks, through the real scheduler: every chunk task succeeds and the served
    aggregates stay those of the ledger."""
    from pos_lambda.batch_layer import job
    from tests.integration.test_batch_layer import ALL_DAYS

    settings, cql = airflow
    ledger = tmp_path / "ledger"
    messages = _simulate(ledger, count=400, seed=8, faults=FaultConfig(resend_rate=0.1))
    for part in (messages[:200], messages[200:]):
        send(settings, part)
        _archive(spark, settings)
        job.run(spark, settings, ALL_DAYS)
    want = expected_aggregates(ledger)
    assert served_aggregates(cql) == want

    api = AirflowApi(settings)
    dag_id = "pos_batch_rebuild"
    assert wait_for(lambda: api.dag_parsed(dag_id), timeout=120, interval=1.0)
    at = datetime(2026, 3, 14, tzinfo=UTC)
    api.trigger(dag_id, "test-rebuild", at, at, conf={"chunks": 2})
    api.set_paused(dag_id, False)
    assert wait_for(
        lambda: api.run_state(dag_id, "test-rebuild") in ("success", "failed"),
        timeout=900,
        interval=2.0,
    )
    tasks = api.tasks(dag_id, "test-rebuild")
    assert api.run_state(dag_id, "test-rebuild") == "success", tasks
    assert sorted(t for t, _, _ in tasks) == ["chunk", "chunk", "commit", "plan"]
    generations = {
        r.generation for r in cql.execute(f"SELECT generation FROM {tables.BATCH_POINTER_TABLE}")
    }
    assert len(generations) == 1 and next(iter(generations)).startswith("r")
    assert served_aggregates(cql) == want
