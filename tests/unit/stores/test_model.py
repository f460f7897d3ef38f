"""Store validation: zones, hours per weekday, closed days, no overnight hours."""

from __future__ import annotations

from datetime import UTC, date, datetime

import pytest

from pos_lambda.stores.model import (
    Hours,
    Store,
    StoreError,
    check_zone,
    parse_hours,
    parse_week,
    parse_weekdays,
    store_from_row,
)
from pos_lambda.stores.registry import InMemoryStores


def _kathmandu() -> Store:
    return Store.create(
        101, "Thamel", "Asia/Kathmandu", parse_week(["mon-fri=07:00-21:00", "sat=08:00-24:00"])
    )


def test_hours_parse_to_minutes_and_back() -> None:
    assert parse_hours("07:00-21:30") == Hours(420, 1290)
    assert parse_hours("00:00-24:00") == Hours(0, 1440)
    assert parse_hours(" Closed ") is None
    assert str(Hours(420, 1290)) == "07:00-21:30"


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("22:00-02:00", "overnight hours are not supported"),
        ("09:00-09:00", "closes before it opens"),
        ("24:00-24:00", "cannot open at 24:00"),
        ("7:00-21:00", "not a time of day"),
        ("07:00-24:30", "not a time of day"),
        ("07:60-21:00", "not a time of day"),
        ("07:00", "not HH:MM-HH:MM"),
        ("open", "not HH:MM-HH:MM"),
    ],
)
def test_bad_hours_are_refused_saying_why(text: str, says: str) -> None:
    with pytest.raises(StoreError, match=says):
        parse_hours(text)


def test_weekdays_accept_names_ranges_lists_and_groups() -> None:
    assert parse_weekdays("mon-wed") == ("mon", "tue", "wed")
    assert parse_weekdays("sat,sun,sat") == ("sat", "sun")
    assert parse_weekdays("weekend") == ("sat", "sun")
    assert len(parse_weekdays("daily")) == 7
    for bad in ("fri-mon", "monday", ""):
        with pytest.raises(StoreError):
            parse_weekdays(bad)


def test_week_later_specs_override_and_unnamed_days_are_closed() -> None:
    store = Store.create(
        7, "x", "UTC", parse_week(["daily=08:00-20:00", "sun=closed", "sat=09:00-13:00"])
    )
    assert store.opening_hours() == {
        "mon": "08:00-20:00", "tue": "08:00-20:00", "wed": "08:00-20:00",
        "thu": "08:00-20:00", "fri": "08:00-20:00", "sat": "09:00-13:00", "sun": "closed",
    }  # fmt: skip
    with pytest.raises(StoreError, match="DAYS=HH:MM-HH:MM"):
        parse_week(["08:00-20:00"])


def test_unknown_zones_are_refused() -> None:
    assert check_zone("Asia/Kathmandu").key == "Asia/Kathmandu"
    for bad in ("Mars/Olympus", "", "../etc/passwd", "+05:45"):
        with pytest.raises(StoreError, match=r"time zone .* is unknown"):
            check_zone(bad)
    with pytest.raises(StoreError, match="unknown"):
        Store.create(1, "x", "Europe/Bratislav", {})


def test_store_fields_are_checked() -> None:
    with pytest.raises(StoreError, match="out of range"):
        Store.create(-1, "x", "UTC", {})
    with pytest.raises(StoreError, match="name"):
        Store.create(1, " ", "UTC", {})


def test_opening_follows_the_local_wall_clock() -> None:
    store = _kathmandu()  # UTC+05:45
    # Monday 2 March 2026, 07:00 in Kathmandu is 01:15 UTC.
    assert not store.is_open(datetime(2026, 3, 2, 1, 14, tzinfo=UTC))
    assert store.is_open(datetime(2026, 3, 2, 1, 15, tzinfo=UTC))
    assert store.is_open(datetime(2026, 3, 2, 15, 14, tzinfo=UTC))  # 20:59 local
    assert not store.is_open(datetime(2026, 3, 2, 15, 15, tzinfo=UTC))  # 21:00 local
    # 18:15 UTC is local midnight: the next business day.
    assert store.local_day(datetime(2026, 3, 2, 18, 14, tzinfo=UTC)) == date(2026, 3, 2)
    assert store.local_day(datetime(2026, 3, 2, 18, 15, tzinfo=UTC)) == date(2026, 3, 3)


def test_next_opening_skips_closed_days_and_follows_dst() -> None:
    store = _kathmandu()
    # Sunday 8 March 2026, 00:00 local (Saturday ran to 24:00): closed Sunday, opens
    # Monday 07:00 = 01:15 UTC.
    assert store.next_opening(datetime(2026, 3, 7, 18, 15, tzinfo=UTC)) == datetime(
        2026, 3, 9, 1, 15, tzinfo=UTC
    )
    new_york = Store.create(102, "Soho", "America/New_York", parse_week(["daily=09:00-17:00"]))
    # Before the spring-forward (8 March 2026) 09:00 EST is 14:00 UTC; after it, 13:00 UTC.
    assert new_york.next_opening(datetime(2026, 3, 7, 23, tzinfo=UTC)) == datetime(
        2026, 3, 8, 13, tzinfo=UTC
    )
    assert new_york.next_opening(datetime(2026, 3, 6, 23, tzinfo=UTC)) == datetime(
        2026, 3, 7, 14, tzinfo=UTC
    )
    assert Store.create(3, "x", "UTC", {}).next_opening(datetime(2026, 3, 7, tzinfo=UTC)) is None


def test_stored_rows_are_validated_on_the_way_back() -> None:
    store = _kathmandu()
    assert store_from_row(101, "Thamel", "Asia/Kathmandu", store.opening_hours()) == store
    with pytest.raises(StoreError, match="overnight"):
        store_from_row(101, "Thamel", "Asia/Kathmandu", {"mon": "22:00-02:00"})


def test_with_changes_changes_only_the_named_days() -> None:
    store = _kathmandu().with_changes(week=parse_week(["sun=10:00-14:00"]), name="Thamel 2")
    assert store.name == "Thamel 2"
    assert store.opening_hours()["sun"] == "10:00-14:00"
    assert store.opening_hours()["mon"] == "07:00-21:00"


def test_the_in_memory_fake_keeps_stores_by_id_in_order() -> None:
    registry = InMemoryStores()
    registry.put(Store.create(102, "b", "UTC", {}))
    registry.put(_kathmandu())
    assert [s.operation_id for s in registry.all()] == [101, 102]
    assert registry.get(101) == _kathmandu()
    assert registry.get(999) is None
