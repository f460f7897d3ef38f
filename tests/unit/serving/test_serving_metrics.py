"""The serving process's /metrics families from a literal health and audit record."""

from __future__ import annotations

from datetime import UTC, datetime

from prometheus_client.openmetrics.exposition import generate_latest

from pos_lambda.adapters.metrics_http import registry_of
from pos_lambda.batch_layer.runs import BatchRun
from pos_lambda.serving.metrics import families
from pos_lambda.serving.model import DeadLetters, Health


class _Fixed:
    def __init__(self, metrics: list) -> None:  # type: ignore[type-arg]
        self.metrics = metrics

    def collect(self):  # type: ignore[no-untyped-def]
        return iter(self.metrics)


def _lines(metrics: list) -> list[str]:  # type: ignore[type-arg]
    text = generate_latest(registry_of(_Fixed(metrics))).decode()
    return [x for x in text.splitlines() if not x.startswith("#")]


HEALTH = Health(
    checked_at=datetime(2026, 3, 2, 10, 30, tzinfo=UTC),
    horizon=datetime(2026, 3, 2, 9, tzinfo=UTC),
    horizon_age_seconds=5400.0,
    batch_runs=[
        BatchRun(
            run_id="r2",
            status="committed",
            started_at=datetime(2026, 3, 2, 10, 1, tzinfo=UTC),
            finished_at=datetime(2026, 3, 2, 10, 1, 24, 500000, tzinfo=UTC),
        ),
        BatchRun(run_id="r1", status="failed"),
    ],
    speed=[],
    dead_letters=DeadLetters(13, {"invalid_json": 10, "wrong_type": 3}, False),
)
AUDIT = {
    "finished_at": "2026-03-02T10:20:00+00:00",
    "clean": False,
    "views": {"speed_raw": {"lost": 0, "duplicated": 2, "wrong": 0},
              "batch_raw": {"lost": 0, "duplicated": 0, "wrong": 0}},
}  # fmt: skip


def test_horizon_last_run_dead_letters_and_the_last_audit() -> None:
    lines = _lines(families(HEALTH, AUDIT))
    for expected in [
        "pos_serving_cassandra_up 1.0",
        "pos_batch_horizon_timestamp_seconds 1.772442e+09",
        "pos_batch_horizon_age_seconds 5400.0",
        'pos_batch_last_run_status{status="committed"} 1.0',
        'pos_batch_last_run_status{status="failed"} 0.0',
        "pos_batch_last_run_duration_seconds 24.5",
        'pos_dead_letters{reason="invalid_json"} 10.0',
        'pos_dead_letters{reason="wrong_type"} 3.0',
        "pos_dead_letters_scan_truncated 0.0",
        "pos_audit_last_clean 0.0",
        "pos_audit_last_timestamp_seconds 1.7724468e+09",
        'pos_audit_last_rows{kind="duplicated",view="speed_raw"} 2.0',
        'pos_audit_last_rows{kind="lost",view="batch_raw"} 0.0',
    ]:
        assert expected in lines, expected


def test_cassandra_away_and_no_audit_yet() -> None:
    assert _lines(families(None, None)) == ["pos_serving_cassandra_up 0.0"]
