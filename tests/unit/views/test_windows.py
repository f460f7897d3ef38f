"""The 15-minute window: the Python bucket and Spark's column form, over the same edges.

Every instant is written as an ISO-8601 string with an offset; Python parses it with
`datetime.fromisoformat`, Spark with a cast, and both must land on the literal window.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from pyspark.sql import functions as F

from pos_lambda.views import windows
from pos_lambda.views.aggregation import window_start as window_start_column

# (instant as received, its window's start in UTC): written out, not computed.
EDGES = [
    ("2026-03-01T10:15:00Z", "2026-03-01T10:15:00"),  # exactly on a boundary
    ("2026-03-01T10:14:59.999999Z", "2026-03-01T10:00:00"),  # 1 us before it
    ("2026-03-01T10:15:00.000001Z", "2026-03-01T10:15:00"),  # 1 us after it
    ("2026-03-01T10:29:59Z", "2026-03-01T10:15:00"),
    ("2026-03-02T00:00:00Z", "2026-03-02T00:00:00"),  # midnight
    ("2026-03-01T23:59:59.999999Z", "2026-03-01T23:45:00"),  # 1 us before midnight
    ("2026-12-31T23:59:59.999999Z", "2026-12-31T23:45:00"),  # year end
    ("2027-01-01T00:00:00Z", "2027-01-01T00:00:00"),  # new year
    ("2024-02-29T12:07:30.5Z", "2024-02-29T12:00:00"),  # leap day
    ("2024-02-29T23:59:59.999999Z", "2024-02-29T23:45:00"),
    ("2024-03-01T05:29:59.999999+05:30", "2024-02-29T23:45:00"),  # the leap day, in India
    ("2026-01-01T00:10:00+01:00", "2025-12-31T23:00:00"),  # local new year, UTC old year
    ("2025-12-31T19:14:59-05:00", "2026-01-01T00:00:00"),  # local old year, UTC new year
    ("2026-03-01T10:00:00+05:45", "2026-03-01T04:15:00"),  # quarter-hour offset: a boundary
    ("2026-03-01T00:00:00-09:30", "2026-03-01T09:30:00"),
    ("2026-03-01T10:07:00+00:07", "2026-03-01T10:00:00"),  # an offset off the quarter hours
    ("1970-01-01T00:00:00Z", "1970-01-01T00:00:00"),  # the epoch
    ("1969-12-31T23:59:59.999999Z", "1969-12-31T23:45:00"),  # before it: floored, not
    ("1969-12-31T23:44:59.999999Z", "1969-12-31T23:30:00"),  # truncated toward 1970
    ("1969-12-31T23:45:00Z", "1969-12-31T23:45:00"),
    ("1900-03-01T12:00:00.000001+01:00", "1900-03-01T11:00:00"),
    ("2099-12-31T23:59:59.999999Z", "2099-12-31T23:45:00"),  # the contract's last instant
]


def _utc(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def test_python_window_start_on_the_edges() -> None:
    got = [windows.window_start(datetime.fromisoformat(at)) for at, _ in EDGES]
    assert got == [_utc(expected) for _, expected in EDGES]
    assert all(w.tzinfo is UTC for w in got)  # UTC whatever the input's offset


def test_spark_window_start_matches_python_on_the_edges(local_spark: Any) -> None:
    df = local_spark.createDataFrame(
        [(i, at) for i, (at, _) in enumerate(EDGES)], "i int, at string"
    )
    rows = df.select("i", window_start_column(F.col("at").cast("timestamp")).alias("w"))
    # collect() gives naive datetimes in the process's zone, pinned to UTC by the fixture.
    got = [r.w.replace(tzinfo=UTC) for r in sorted(rows.collect())]
    assert got == [_utc(expected) for _, expected in EDGES]
    assert got == [windows.window_start(datetime.fromisoformat(at)) for at, _ in EDGES]


def test_window_boundaries() -> None:
    assert timedelta(minutes=15) == windows.WINDOW
    assert windows.WINDOW_MICROS == 900_000_000
    assert windows.is_window_start(datetime(2026, 3, 1, 10, 45, tzinfo=UTC))
    assert windows.is_window_start(
        datetime(2026, 3, 1, 11, 45, tzinfo=timezone(timedelta(hours=1)))
    )
    assert not windows.is_window_start(datetime(2026, 3, 1, 10, 45, 0, 1, tzinfo=UTC))
    assert not windows.is_window_start(
        datetime(2026, 3, 1, 10, 45, tzinfo=timezone(timedelta(minutes=7)))
    )


def test_a_naive_datetime_has_no_window() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        windows.window_start(datetime(2026, 3, 1, 10, 0))
