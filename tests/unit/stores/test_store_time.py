"""Store time by a store's own hours: +05:45, DST spring-forward and fall-back, Adelaide.

Expected values are literal (worked out by hand in the comments) or, in the property
test, counted minute by minute with `Store.is_open`, never by the interval arithmetic.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from hypothesis import given, settings
from hypothesis import strategies as st

from pos_lambda.stores.model import Store, parse_week
from pos_lambda.stores.store_time import offset_pieces, open_intervals, store_time


def _utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def _store(zone: str, *hours: str) -> Store:
    return Store.create(101, "test", zone, parse_week(hours))


KATHMANDU = _store("Asia/Kathmandu", "daily=07:00-21:00")
ADELAIDE = _store("Australia/Adelaide", "mon-fri=07:30-19:00", "sat=08:00-17:00")


def test_kathmandu_opens_at_01_15_utc() -> None:
    # 07:00-21:00 at +05:45 is 01:15Z-15:15Z.
    day = open_intervals(KATHMANDU, _utc(2026, 3, 2), _utc(2026, 3, 3))
    assert day == [(_utc(2026, 3, 2, 1, 15), _utc(2026, 3, 2, 15, 15))]
    # 20:45 local to 07:15 local the next morning: 15 + 15 minutes.
    start, end = _utc(2026, 3, 1, 15), _utc(2026, 3, 2, 1, 30)
    assert open_intervals(KATHMANDU, start, end) == [
        (_utc(2026, 3, 1, 15), _utc(2026, 3, 1, 15, 15)),
        (_utc(2026, 3, 2, 1, 15), _utc(2026, 3, 2, 1, 30)),
    ]
    assert store_time(KATHMANDU, start, end) == timedelta(minutes=30)


def test_new_york_spring_forward_day_is_23_hours() -> None:
    # Sunday 8 March 2026: 02:00 EST becomes 03:00 EDT; the local day is 05:00Z-04:00Z.
    day = (_utc(2026, 3, 8, 5), _utc(2026, 3, 9, 4))
    assert store_time(_store("America/New_York", "daily=00:00-24:00"), *day) == timedelta(hours=23)
    # 01:00-04:00 skips an hour: 01:00 EST (06:00Z) to 04:00 EDT (08:00Z).
    assert store_time(_store("America/New_York", "daily=01:00-04:00"), *day) == timedelta(hours=2)
    # Hours opening in the skipped hour open when it ends, 03:00 EDT (07:00Z): by the
    # wall clock the store is open from then on.
    assert open_intervals(_store("America/New_York", "daily=02:30-04:00"), *day) == [
        (_utc(2026, 3, 8, 7), _utc(2026, 3, 8, 8))
    ]


def test_new_york_fall_back_day_is_25_hours() -> None:
    # Sunday 1 November 2026: 02:00 EDT becomes 01:00 EST; the local day is 04:00Z-05:00Z.
    day = (_utc(2026, 11, 1, 4), _utc(2026, 11, 2, 5))
    assert store_time(_store("America/New_York", "daily=00:00-24:00"), *day) == timedelta(hours=25)
    # 00:00-03:00 covers the repeated hour: 00:00 EDT (04:00Z) to 03:00 EST (08:00Z).
    assert store_time(_store("America/New_York", "daily=00:00-03:00"), *day) == timedelta(hours=4)
    # 01:00-01:30 happens twice, once in EDT and once in EST.
    assert open_intervals(_store("America/New_York", "daily=01:00-01:30"), *day) == [
        (_utc(2026, 11, 1, 5), _utc(2026, 11, 1, 5, 30)),
        (_utc(2026, 11, 1, 6), _utc(2026, 11, 1, 6, 30)),
    ]


def test_a_silence_across_the_spring_forward_night() -> None:
    # Saturday 19:45 EST to Sunday 08:20 EDT, weekend hours 08:00-20:00: 15 + 20 minutes.
    soho = _store("America/New_York", "mon-fri=07:00-22:00", "weekend=08:00-20:00")
    start = datetime.fromisoformat("2026-03-07T19:45:00-05:00")
    end = datetime.fromisoformat("2026-03-08T08:20:00-04:00")
    assert store_time(soho, start, end) == timedelta(minutes=35)


def test_adelaide_weekend_across_the_end_of_dst() -> None:
    # Friday 3 April 2026 18:30 ACDT (+10:30, 08:00Z) to Monday 6 April 08:00 ACST
    # (+09:30, Sunday 22:30Z); DST ends on Sunday 5 April at 03:00 ACDT.
    # Friday 18:30-19:00, Saturday 08:00-17:00 (ACDT), Sunday closed, Monday 07:30-08:00.
    start, end = _utc(2026, 4, 3, 8), _utc(2026, 4, 5, 22, 30)
    assert open_intervals(ADELAIDE, start, end) == [
        (_utc(2026, 4, 3, 8), _utc(2026, 4, 3, 8, 30)),
        (_utc(2026, 4, 3, 21, 30), _utc(2026, 4, 4, 6, 30)),
        (_utc(2026, 4, 5, 22), _utc(2026, 4, 5, 22, 30)),
    ]
    assert store_time(ADELAIDE, start, end) == timedelta(minutes=30 + 540 + 30)


def test_adelaide_spring_forward_in_october() -> None:
    # Sunday 4 October 2026 02:00 ACST (+09:30, 16:30Z) becomes 03:00 ACDT (+10:30):
    # cut at the change, to the second.
    pieces = list(offset_pieces(ADELAIDE.zone, _utc(2026, 10, 3, 12), _utc(2026, 10, 3, 20)))
    assert [(a, b, off / timedelta(minutes=1)) for a, b, off in pieces] == [
        (_utc(2026, 10, 3, 12), _utc(2026, 10, 3, 16, 30), 570.0),
        (_utc(2026, 10, 3, 16, 30), _utc(2026, 10, 3, 20), 630.0),
    ]
    # Monday 5 October, 07:30-19:00 ACDT is 21:00Z (Sunday) to 08:30Z.
    assert open_intervals(ADELAIDE, _utc(2026, 10, 4, 12), _utc(2026, 10, 5, 12)) == [
        (_utc(2026, 10, 4, 21), _utc(2026, 10, 5, 8, 30))
    ]


def test_a_change_right_on_a_probe_or_at_the_end() -> None:
    # New York springs forward at 07:00Z on 8 March: a start a whole day before puts the
    # change exactly where the offsets are compared.
    zone = ZoneInfo("America/New_York")
    pieces = list(offset_pieces(zone, _utc(2026, 3, 7, 7), _utc(2026, 3, 9, 7)))
    assert [(a, b, off / timedelta(hours=1)) for a, b, off in pieces] == [
        (_utc(2026, 3, 7, 7), _utc(2026, 3, 8, 7), -5.0),
        (_utc(2026, 3, 8, 7), _utc(2026, 3, 9, 7), -4.0),
    ]
    pieces = list(offset_pieces(zone, _utc(2026, 3, 8, 1), _utc(2026, 3, 8, 7)))
    assert [(a, b, off / timedelta(hours=1)) for a, b, off in pieces] == [
        (_utc(2026, 3, 8, 1), _utc(2026, 3, 8, 7), -5.0),
    ]
    # Open 00:00-24:00 from Saturday 02:00 EST to Monday 03:00 EDT: 49 hours less the
    # skipped one.
    always = _store("America/New_York", "daily=00:00-24:00")
    assert store_time(always, _utc(2026, 3, 7, 7), _utc(2026, 3, 9, 7)) == timedelta(hours=48)


def test_nothing_in_an_empty_or_backward_interval_or_a_closed_store() -> None:
    at = _utc(2026, 3, 2, 10)
    assert store_time(KATHMANDU, at, at) == timedelta(0)
    assert store_time(KATHMANDU, at, at - timedelta(hours=1)) == timedelta(0)
    assert store_time(ADELAIDE, _utc(2026, 3, 7, 14), _utc(2026, 3, 8, 13)) == timedelta(0)  # Sun


def test_seconds_count_exactly() -> None:
    start, end = _utc(2026, 3, 2, 1, 14, 30), _utc(2026, 3, 2, 1, 15, 20, 500)
    assert store_time(KATHMANDU, start, end) == timedelta(seconds=20, microseconds=500)


ZONES = ("Asia/Kathmandu", "America/New_York", "Australia/Adelaide", "Europe/London",
         "Australia/Lord_Howe", "America/Santiago", "UTC")  # fmt: skip
CLOCK = st.integers(0, 24 * 4 - 1).map(lambda q: f"{q // 4:02d}:{q % 4 * 15:02d}")


@st.composite
def weeks(draw: st.DrawFn) -> list[str]:
    specs = []
    for day in ("mon", "tue", "wed", "thu", "fri", "sat", "sun"):
        a, b = sorted(draw(st.lists(CLOCK, min_size=2, max_size=2, unique=True)))
        closes = "24:00" if draw(st.booleans()) else b  # some days close at midnight
        specs.append(f"{day}={a}-{closes}" if draw(st.booleans()) else f"{day}=closed")
    return specs


# Any zone, any start in 2026 (whole minutes, so the count is exact) ...
ANYWHERE = st.tuples(
    st.sampled_from(ZONES),
    st.integers(0, 365 * 24 * 60).map(lambda m: _utc(2026, 1, 1) + timedelta(minutes=m)),
)
# ... or a zone in the day before one of its 2026 DST changes.
AROUND_A_CHANGE = st.sampled_from(
    [
        ("America/New_York", _utc(2026, 3, 7, 12)),  # spring forward, 8 March
        ("America/New_York", _utc(2026, 10, 31, 12)),  # fall back, 1 November
        ("Australia/Adelaide", _utc(2026, 4, 4, 6)),  # back, 5 April
        ("Australia/Adelaide", _utc(2026, 10, 3, 6)),  # forward, 4 October
        ("Australia/Lord_Howe", _utc(2026, 4, 4, 6)),  # back 30 minutes
        ("America/Santiago", _utc(2026, 9, 5, 12)),  # forward at midnight
        ("Europe/London", _utc(2026, 3, 28, 12)),
        ("Europe/London", _utc(2026, 10, 24, 12)),
    ]
)


@settings(max_examples=80, deadline=None)
@given(st.one_of(ANYWHERE, AROUND_A_CHANGE), weeks(), st.integers(24 * 60, 2 * 24 * 60))
def test_store_time_equals_the_open_minutes_counted_one_by_one(
    where: tuple[str, datetime], week: list[str], minutes: int
) -> None:
    zone, start = where
    store = _store(zone, *week)
    open_minutes = sum(1 for m in range(minutes) if store.is_open(start + timedelta(minutes=m)))
    end = start + timedelta(minutes=minutes)
    assert store_time(store, start, end) == timedelta(minutes=open_minutes)
