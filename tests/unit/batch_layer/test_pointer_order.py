"""A day's pointer only moves forward: in coverage and in the table version it was read
from. Backfill runs commit in any order; a pinned rerun never rolls a day back."""

from __future__ import annotations

from datetime import UTC, date, datetime

from pos_lambda.batch_layer.pointer import DayCommit, Served, advancing

D1, D2 = date(2026, 3, 1), date(2026, 3, 2)


def _commit(day: date, until: datetime) -> DayCommit:
    return DayCommit(day, until, receipt_count=1, aggregate_rows=1, version="v")


def test_an_earlier_interval_committing_last_leaves_the_further_covered_day_alone() -> None:
    # The run over [02:00, 03:00) commits after the run over [03:00, 04:00) did.
    days = [
        _commit(D1, datetime(2026, 3, 2, tzinfo=UTC)),
        _commit(D2, datetime(2026, 3, 2, 3, tzinfo=UTC)),
    ]
    served = {  # naive UTC, as the driver reads them
        D1: Served(datetime(2026, 3, 2), 7),
        D2: Served(datetime(2026, 3, 2, 4), 7),
    }
    assert advancing(days, served, 8) == [days[0]]  # D1: whole day either way, newer input


def test_days_never_served_or_covered_as_far_or_further_move() -> None:
    days = [
        _commit(D1, datetime(2026, 3, 2, tzinfo=UTC)),
        _commit(D2, datetime(2026, 3, 2, 5, tzinfo=UTC)),
    ]
    assert advancing(days, {}, 0) == days
    assert advancing(days, {D2: Served(datetime(2026, 3, 2, 5, tzinfo=UTC), 3)}, 3) == days
    assert advancing(days, {D2: Served(datetime(2026, 3, 2, 4, 45), 2)}, 3) == days


def test_a_version_read_from_an_older_table_version_never_replaces_a_newer_one() -> None:
    # `pos-batch run --delta-version 4` after a run at table version 9 served both days.
    days = [
        _commit(D1, datetime(2026, 3, 2, tzinfo=UTC)),
        _commit(D2, datetime(2026, 3, 3, tzinfo=UTC)),
    ]
    served = {D1: Served(datetime(2026, 3, 2, tzinfo=UTC), 9)}
    assert advancing(days, served, 4) == [days[1]]  # D2 was never served: it may move
    assert advancing(days, served, 9) == days
