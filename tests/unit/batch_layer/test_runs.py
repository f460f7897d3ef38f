"""The batch run's row: one dataclass, equal to the `batch_runs` table's columns."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone
from types import SimpleNamespace

import pytest

from pos_lambda.batch_layer import runs
from pos_lambda.schemas import cql


def _table_columns(table: str) -> list[str]:
    [ddl] = [s for s in cql.table_ddl("ks") if f"CREATE TABLE IF NOT EXISTS ks.{table} (" in s]
    body = ddl.split("(", 1)[1]
    return [m for m in re.findall(r"^  (\w+) \w", body, re.M) if m != "PRIMARY"]


def test_the_dataclass_is_the_tables_row() -> None:
    assert _table_columns(cql.BATCH_RUNS_TABLE) == ["view_name", "run_id", *runs.COLUMNS]


def test_a_write_of_a_column_the_table_lacks_is_refused() -> None:
    runs.check_columns(["status", "receipts", "error"])
    with pytest.raises(ValueError, match="not columns of a batch run: recipts"):
        runs.check_columns(["status", "recipts"])


def test_from_a_driver_row_timestamps_in_utc_and_nulls_kept() -> None:
    naive = datetime(2026, 3, 2, 9, 0)
    row = SimpleNamespace(
        **{
            **dict.fromkeys(runs.COLUMNS),
            "run_id": "7c6f3b9e-1a2b-11f1-8000-000000000001",
            "status": "committed",
            "interval_start": naive,
            "finished_at": datetime(2026, 3, 2, 11, 30, tzinfo=timezone(timedelta(hours=1))),
            "receipts": 12,
            "quality_missing_days": ("2026-03-01",),
        }
    )
    run = runs.BatchRun.from_row(row)
    assert run == runs.BatchRun(
        run_id="7c6f3b9e-1a2b-11f1-8000-000000000001",
        status="committed",
        interval_start=datetime(2026, 3, 2, 9, 0, tzinfo=UTC),
        finished_at=datetime(2026, 3, 2, 10, 30, tzinfo=UTC),
        receipts=12,
        quality_missing_days=["2026-03-01"],
    )
    assert runs.BatchRun.from_row(SimpleNamespace(run_id="x", status=None)).status == "unknown"
