"""The archiver commits what the master dataset holds to its Kafka consumer group, and
the batch DAG's await_archive check waits on that: real Kafka, real Spark, real Delta."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from pos_lambda.adapters.archive_offsets import archived_until
from pos_lambda.adapters.service import wait_for
from pos_lambda.batch_layer.await_archive import (
    NothingArchived,
    archived_before,
    ready_to_recompute,
)
from pos_lambda.settings import Settings
from tests.integration.speed_helpers import (
    device_key,
    master_rows,
    ms,
    pos_speed_to_end,
    produce_raw,
    receipt_json,
)
from tests.integration.test_batch_layer import _archive

pytestmark = pytest.mark.integration

EARLY = datetime(2026, 3, 2, 8, 10, tzinfo=UTC)  # the records' Kafka timestamps
LATE = datetime(2026, 3, 2, 10, 10, tzinfo=UTC)
HOUR_END = datetime(2026, 3, 2, 9, tzinfo=UTC)  # between them


def _send(settings: Settings, at: datetime, tids: range) -> None:
    produce_raw(
        settings,
        [receipt_json(1, tid % 5, tid, at) for tid in tids],
        timestamps=[ms(at)] * len(tids),
        keys=[device_key(1, tid % 5) for tid in tids],
    )


def test_await_archive_passes_once_the_archiver_has_committed_the_records_before_the_end(
    spark: Any, isolated: tuple[Settings, Any]
) -> None:
    settings, _ = isolated
    _send(settings, EARLY, range(30))  # 30 records sent before the hour's end
    _send(settings, LATE, range(30, 50))  # 20 after it

    # Nothing archived yet: the hour waits for its 30 records, the day for all 50;
    # an instant before every record waits for nothing.
    assert sum(archived_until(settings, HOUR_END).behind.values()) == 30
    assert sum(archived_until(settings, LATE + timedelta(hours=1)).behind.values()) == 50
    assert archived_until(settings, EARLY - timedelta(hours=1)).done
    pos_env = {"POS_TOPIC_TRANSACTIONS": settings.topics.transactions}
    assert archived_before(HOUR_END.isoformat(), pos_env) is False

    _archive(spark, settings)
    assert len(master_rows(spark, settings)) == 50
    # Committed by a listener once Spark reports the micro-batch: await it.
    assert wait_for(
        lambda: archived_until(settings, LATE + timedelta(hours=1)).done, timeout=60, interval=0.5
    ), archived_until(settings, LATE + timedelta(hours=1)).describe()
    assert archived_before(HOUR_END.isoformat(), pos_env) is True
    committed = archived_until(settings, LATE + timedelta(hours=1)).committed
    assert sum(o or 0 for o in committed.values()) == 50  # the log's end: nothing more


def test_pos_speed_to_the_end_leaves_its_last_offsets_committed_when_it_exits(
    isolated: tuple[Settings, Any],
) -> None:
    # `pos-speed run --available-now` (as `make demo` runs it) exits right after its
    # last micro-batch: the offsets are committed by then, not left to a listener.
    settings, _ = isolated
    _send(settings, EARLY, range(12))
    pos_speed_to_end(settings)
    lag = archived_until(settings, LATE)  # no waiting: the process has exited
    assert lag.done, lag.describe()
    assert sum(o or 0 for o in lag.committed.values()) == 12


def test_an_hour_nothing_reached_the_archiver_for_is_skipped_one_with_records_waits(
    spark: Any, isolated: tuple[Settings, Any]
) -> None:
    # Before the archiver's first commit there is no master dataset. An hour whose
    # records are all archived (none: the topic is empty) is skipped by the DAG, not run
    # into `pos-batch run`'s exit 4; an hour with records waits for the archiver.
    settings, _ = isolated
    pos_env = {
        "POS_TOPIC_TRANSACTIONS": settings.topics.transactions,
        "POS_DATA_DIR": str(settings.data_dir),
    }
    with pytest.raises(NothingArchived) as skipped:
        ready_to_recompute(HOUR_END.isoformat(), pos_env)
    assert str(skipped.value) == (
        f"nothing to recompute before {HOUR_END.isoformat()}: no master dataset yet: "
        f"{settings.data_dir / 'master'} holds no Delta commit; the speed layer's "
        "archiver (`pos-speed run`) creates it with its first micro-batch"
    )
    # The DAG's sensor turns it into a skip: recompute and quality skipped, run success.
    from airflow.sdk.exceptions import AirflowSkipException

    with pytest.raises(AirflowSkipException, match="no master dataset yet"):
        _dag_module().archived_before(HOUR_END.isoformat(), pos_env)
    _send(settings, EARLY, range(3))
    assert ready_to_recompute(HOUR_END.isoformat(), pos_env) is False  # wait, not skip
    assert _dag_module().archived_before(HOUR_END.isoformat(), pos_env) is False
    _archive(spark, settings)
    assert wait_for(lambda: archived_until(settings, HOUR_END).done, timeout=60, interval=0.5), (
        archived_until(settings, HOUR_END).describe()
    )
    assert ready_to_recompute(HOUR_END.isoformat(), pos_env) is True


def _dag_module() -> Any:
    """dags/pos_batch.py, imported as the scheduler's DAG processor would."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "dags" / "pos_batch.py"
    spec = importlib.util.spec_from_file_location("pos_batch_dag_under_test", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
