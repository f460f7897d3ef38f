"""The hour-of-week heatmap and the week-before comparison over literal merged windows:
a UTC+05:45 store, New York across both DST changes, and the service's reads."""

from __future__ import annotations

from datetime import UTC, date, datetime
from decimal import Decimal

import pytest

from pos_lambda.schemas.aggregate import Aggregate
from pos_lambda.serving.errors import QueryError, UnregisteredStore
from pos_lambda.serving.local_days import local_day_totals
from pos_lambda.serving.local_week import change_percent, compare, hour_of_week
from pos_lambda.serving.merge import merge_windows
from pos_lambda.serving.model import AggregateRow, DayVersion, Pointer
from pos_lambda.stores.model import Store
from tests.unit.serving.test_local_days import KATHMANDU, NEW_YORK, _serving, agg


def utc(month: int, d: int, h: int, m: int = 0) -> datetime:
    return datetime(2026, month, d, h, m, tzinfo=UTC)


def cell(week: object, weekday: int, hour: int) -> tuple[int, int, Decimal]:
    c = week.cells[weekday * 24 + hour]  # type: ignore[attr-defined]
    assert (c.weekday, c.hour) == (weekday, hour)
    return c.windows, c.receipt_count, c.revenue


MON, SUN = 0, 6


def test_kathmandu_windows_land_in_their_local_hours() -> None:
    # Monday 2 March 2026 in Kathmandu (+05:45) is [1 March 18:15, 2 March 18:15) UTC.
    speed = [
        agg(102, utc(3, 1, 18, 0), 50, "500.00"),  # Sunday 23:45 local: not in the range
        agg(102, utc(3, 1, 18, 15), 1, "1.00"),  # Monday 00:00
        agg(102, utc(3, 2, 3, 15), 2, "2.00"),  # 09:00
        agg(102, utc(3, 2, 4, 0), 3, "3.00"),  # 09:45
        agg(102, utc(3, 2, 4, 15), 4, "4.00"),  # 10:00
        agg(102, utc(3, 2, 18, 0), 5, "5.00"),  # 23:45, the day's last window
        agg(102, utc(3, 2, 18, 15), 70, "70.00"),  # Tuesday 00:00: not in the range
    ]
    rows = merge_windows(102, utc(3, 1, 18, 15), utc(3, 2, 18, 15), Pointer(None), [], speed)
    week = hour_of_week(KATHMANDU, [date(2026, 3, 2)], rows, None)
    assert len(week.cells) == 7 * 24
    assert (cell(week, MON, 0), cell(week, MON, 9), cell(week, MON, 10)) == (
        (4, 1, Decimal("1.00")),
        (4, 5, Decimal("5.00")),
        (4, 4, Decimal("4.00")),
    )
    assert cell(week, MON, 23) == (4, 5, Decimal("5.00"))
    assert cell(week, SUN, 23) == (0, 0, Decimal("0.00"))  # the Sunday window is not asked
    assert week.days_per_weekday == [1, 0, 0, 0, 0, 0, 0]
    assert (week.totals.receipt_count, week.totals.revenue) == (15, Decimal("15.00"))
    assert sum(c.windows for c in week.cells) == 96


def test_new_york_spring_forward_skips_2_am_and_fall_back_doubles_1_am() -> None:
    speed = [
        agg(103, utc(3, 8, 6, 45), 1, "1.00"),  # Sunday 8 March 01:45 EST
        agg(103, utc(3, 8, 7, 0), 2, "2.00"),  # 03:00 EDT: the clock skipped 02:00
        agg(103, utc(11, 1, 5, 0), 3, "3.00"),  # Sunday 1 November 01:00 EDT
        agg(103, utc(11, 1, 6, 0), 4, "4.00"),  # 01:00 EST, the hour again
        agg(103, utc(11, 1, 7, 0), 5, "5.00"),  # 02:00 EST
    ]
    spring = merge_windows(103, utc(3, 8, 5), utc(3, 9, 4), Pointer(None), [], speed)
    week = hour_of_week(NEW_YORK, [date(2026, 3, 8)], spring, None)
    assert [cell(week, SUN, h) for h in (1, 2, 3)] == [
        (4, 1, Decimal("1.00")),
        (0, 0, Decimal("0.00")),
        (4, 2, Decimal("2.00")),
    ]
    assert sum(c.windows for c in week.cells) == 92
    fall = merge_windows(103, utc(11, 1, 4), utc(11, 2, 5), Pointer(None), [], speed)
    week = hour_of_week(NEW_YORK, [date(2026, 11, 1)], fall, None)
    assert [cell(week, SUN, h) for h in (0, 1, 2)] == [
        (4, 0, Decimal("0.00")),
        (8, 7, Decimal("7.00")),  # 01:00 EDT and 01:00 EST: one wall-clock hour
        (4, 5, Decimal("5.00")),
    ]
    assert sum(c.windows for c in week.cells) == 100


def test_the_heatmap_is_final_only_when_the_batch_answered_every_window() -> None:
    day = date(2026, 3, 1)
    pointer = Pointer(utc(3, 2, 0), {day: DayVersion(day, "v1", utc(3, 2, 0))})
    batch = [AggregateRow(101, utc(3, 1, 9), Aggregate(2, 2, Decimal("4.00"), 0), "v1")]
    speed = [agg(101, utc(3, 1, 9), 9, "90.00")]  # the batch answers this window
    utc_store = Store.create(101, "Greenwich", "UTC", {})
    rows = merge_windows(101, utc(3, 1, 0), utc(3, 2, 0), pointer, batch, speed)
    week = hour_of_week(utc_store, [day], rows, pointer.horizon)
    assert (week.final, week.totals.receipt_count, cell(week, SUN, 9)[1]) == (True, 2, 2)
    rows = merge_windows(101, utc(3, 1, 0), utc(3, 2, 0), Pointer(None), batch, speed)
    assert hour_of_week(utc_store, [day], rows, None).final is False


def test_change_percent_rounds_to_a_tenth_and_has_none_from_zero() -> None:
    assert change_percent(15, 10) == Decimal("50.0")
    assert change_percent(Decimal("2.00"), Decimal("3.00")) == Decimal("-33.3")
    assert change_percent(0, 4) == Decimal("-100.0")
    assert change_percent(5, 0) is None


def test_compare_refuses_a_day_that_is_not_the_week_before() -> None:
    rows = merge_windows(102, utc(3, 1, 18, 15), utc(3, 3, 18, 15), Pointer(None), [], [])
    monday, tuesday = local_day_totals(KATHMANDU, [date(2026, 3, 2), date(2026, 3, 3)], rows)
    with pytest.raises(ValueError, match="not the week before"):
        compare(KATHMANDU, tuesday, monday, None)


SPEED = [
    agg(102, utc(3, 1, 18, 15), 4, "40.00"),  # Monday 2 March 00:00 Kathmandu
    agg(102, utc(3, 2, 18, 0), 1, "2.50"),  # 23:45, the same day
    agg(102, utc(3, 8, 18, 15), 3, "30.00"),  # Monday 9 March 00:00
    agg(102, utc(3, 9, 12, 0), 3, "12.50"),  # 17:45 on 9 March
    agg(102, utc(3, 5, 6, 0), 99, "999.00"),  # Thursday: between the two, never read
]


def test_the_service_compares_two_local_days_reading_only_their_partitions() -> None:
    serving, keyspace = _serving(SPEED)
    answer = serving.compare_week_before(102, date(2026, 3, 9))
    assert (answer.day.day, answer.week_before.day) == (date(2026, 3, 9), date(2026, 3, 2))
    assert (answer.day.receipt_count, answer.day.revenue) == (6, Decimal("42.50"))
    assert (answer.week_before.receipt_count, answer.week_before.revenue) == (5, Decimal("42.50"))
    assert (answer.receipt_change_percent, answer.revenue_change_percent) == (
        Decimal("20.0"),
        Decimal("0.0"),
    )
    # The two UTC partitions of each local day; none of the days between.
    assert keyspace.reads_of("speed_day") == [
        (102, date(2026, 3, 1)),
        (102, date(2026, 3, 2)),
        (102, date(2026, 3, 8)),
        (102, date(2026, 3, 9)),
    ]


def test_the_service_heatmap_sums_the_local_days_and_refuses_what_local_days_refuses() -> None:
    serving, _ = _serving([*SPEED, agg(555, utc(3, 2, 1), 1, "1.00")])
    week = serving.hour_of_week(102, date(2026, 3, 2), date(2026, 3, 9))
    assert week.days_per_weekday == [2, 1, 1, 1, 1, 1, 1]
    assert cell(week, MON, 0) == (8, 7, Decimal("70.00"))  # two Mondays' midnight hours
    assert (cell(week, MON, 23)[1], cell(week, MON, 17)[1], cell(week, 3, 11)[1]) == (1, 3, 99)
    assert week.totals.receipt_count == 4 + 1 + 3 + 3 + 99
    with pytest.raises(UnregisteredStore, match="pos-stores add 555"):
        serving.hour_of_week(555, date(2026, 3, 2), date(2026, 3, 2))
    with pytest.raises(QueryError, match="inverted range"):
        serving.hour_of_week(102, date(2026, 3, 9), date(2026, 3, 2))
    with pytest.raises(QueryError, match="outside the data's years"):
        serving.compare_week_before(102, date(2000, 1, 3))
