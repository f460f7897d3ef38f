"""The real Airflow scheduler runs the `pos_batch` DAG for a real interval.

Its own Airflow instance (state dir and port of this test), started through the same
code as `make airflow`, with this test's keyspace and master dataset in its
environment; the run is triggered through the REST API with an explicit data
interval and awaited by polling the API. Real Spark (spark-submit) and Cassandra.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from demo import batch_dag
from demo.airflow_api import AirflowApi
from infra import airflow_service
from infra.process import wait_for
from infra.settings import Settings
from producer.simulation import FaultConfig
from schemas import cql as tables
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
    own = settings.model_copy(update={"state_dir": tmp_path / "state", "airflow_port": 18080})
    # Airflow's processes (and so spark-submit) take POS_* from the environment; the
    # topic too: await_archive checks the archiver's offsets on it.
    for name in (
        "cassandra_keyspace",
        "topic_transactions",
        "data_dir",
        "state_dir",
        "airflow_port",
    ):
        monkeypatch.setenv(f"POS_{name.upper()}", str(getattr(own, name)))
    airflow_service.start(own)
    try:
        yield own, cql
    finally:
        airflow_service.stop(own)


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

    # The DAG's interval reached the job: windows before 09:00, from two days back.
    end = datetime(2026, 3, 2, 9, 0)
    want = {k: v for k, v in expected_aggregates(ledger).items() if k[1] < end}
    assert want, "the simulation must put receipts in the interval"
    assert served_aggregates(cql) == want
    # (Once unpaused, the scheduler may also start today's latest hour: not ours.)
    runs = cql.execute(f"SELECT * FROM {tables.BATCH_RUNS_TABLE}").all()
    assert [
        (r.status, r.interval_end)
        for r in runs
        if r.interval_start.year == 2026 and r.interval_start.month == 3
    ] == [("committed", end)]
    # The quality task recorded what the batch fixed: the speed layer never ran here,
    # so every receipt of every window is the batch's.
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
    assert served_aggregates(cql) == want
