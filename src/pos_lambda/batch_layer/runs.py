"""A batch run's bookkeeping row (`batch_runs`): one shape for its writer and its readers.

The job writes a run's row in steps: its interval when it starts, its version, its
counts, and its status at the end (or its error); `BatchStore.record_run` takes only
this row's columns. Serving's health and the demo read whole rows back as `BatchRun`.
Every column but the status is optional: a run killed midway leaves the rest null.
tests/unit/batch_layer/test_runs.py holds the fields equal to the table's columns.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, fields
from datetime import UTC, datetime
from typing import Any


@dataclass(frozen=True)
class BatchRun:
    run_id: str
    status: str  # running, written, committed, conflict, failed ("unknown" if unset)
    interval_start: datetime | None = None
    interval_end: datetime | None = None
    lookback_hours: float | None = None
    recompute_start: datetime | None = None  # midnight of the first day recomputed
    version: str | None = None
    delta_version: int | None = None  # the master dataset's table version read
    horizon: datetime | None = None
    input_rows: int | None = None
    invalid_rows: int | None = None
    receipts: int | None = None
    duplicates_removed: int | None = None
    conflicts: int | None = None
    beyond_speed_bound: int | None = None
    aggregate_rows: int | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    error: str | None = None
    # The data-quality check (`pos-batch run --quality`) after the commit: when it ran,
    # its store-windows compared and changed, the days it found no commit for, or why
    # it failed (the commit stands either way).
    quality_checked_at: datetime | None = None
    quality_windows: int | None = None
    quality_windows_fixed: int | None = None
    quality_missing_days: list[str] | None = None
    quality_error: str | None = None

    @classmethod
    def from_row(cls, row: Any) -> BatchRun:
        """From a cassandra-driver row of `batch_runs` (its timestamps naive UTC)."""
        values: dict[str, Any] = {}
        for name in COLUMNS:
            value = getattr(row, name, None)
            if isinstance(value, datetime):
                value = _utc(value)
            elif isinstance(value, list | tuple):  # a CQL list; Cassandra stores [] as null
                value = [str(v) for v in value]
            values[name] = value
        values.pop("status")
        return cls(
            **values,
            run_id=str(row.run_id),
            status=row.status or "unknown",
        )


# The columns a run's steps write (the key, view_name + run_id, is the store's).
COLUMNS = tuple(f.name for f in fields(BatchRun) if f.name != "run_id")


def check_columns(names: Iterable[str]) -> None:
    """Refuse a write of a column `batch_runs` rows do not have (a typo would otherwise
    reach Cassandra as an error in the middle of a run's bookkeeping)."""
    unknown = sorted(set(names) - set(COLUMNS))
    if unknown:
        raise ValueError(f"not columns of a batch run: {', '.join(unknown)}")


def _utc(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
