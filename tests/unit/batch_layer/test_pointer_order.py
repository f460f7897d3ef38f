"""A day's pointer only moves forward: backfill runs commit in any order."""

from __future__ import annotations

from datetime import UTC, date, datetime

from batch_layer.store import DayCommit, advancing

D1, D2 = date(2026, 3, 1), date(2026, 3, 2)


def _commit(day: date, until: datetime) -> DayCommit:
    return DayCommit(day, until, receipt_count=1, aggregate_rows=1)


def test_an_earlier_interval_committing_last_leaves_the_further_covered_day_alone() -> None:
    # The run over [02:00, 03:00) commits after the run over [03:00, 04:00) did.
    days = [
        _commit(D1, datetime(2026, 3, 2, tzinfo=UTC)),
        _commit(D2, datetime(2026, 3, 2, 3, tzinfo=UTC)),
    ]
    served = {D1: datetime(2026, 3, 2), D2: datetime(2026, 3, 2, 4)}  # naive UTC, as read
    assert advancing(days, served) == [days[0]]  # D1: whole day either way, newer input wins


def test_days_never_served_or_covered_as_far_or_further_move() -> None:
    days = [
        _commit(D1, datetime(2026, 3, 2, tzinfo=UTC)),
        _commit(D2, datetime(2026, 3, 2, 5, tzinfo=UTC)),
    ]
    assert advancing(days, {}) == days
    assert advancing(days, {D2: datetime(2026, 3, 2, 5, tzinfo=UTC)}) == days
    assert advancing(days, {D2: datetime(2026, 3, 2, 4, 45)}) == days
