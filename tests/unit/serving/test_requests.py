from __future__ import annotations

from datetime import UTC, date, datetime

import pytest

from serving.errors import QueryError
from serving.requests import (
    PageToken,
    TimeRange,
    check_limit,
    check_store,
    day_range,
    decode_page,
    encode_page,
    parse_day,
    parse_instant,
)


def test_instants_with_offsets_and_dates() -> None:
    assert parse_instant("2026-03-02T10:00:00+02:00", "start") == datetime(
        2026, 3, 2, 8, tzinfo=UTC
    )
    assert parse_instant("2026-03-02T08:00Z", "start") == datetime(2026, 3, 2, 8, tzinfo=UTC)
    assert parse_instant("2026-03-02", "end") == datetime(2026, 3, 2, tzinfo=UTC)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("2026-02-30", "start '2026-02-30' is not a date: write it as YYYY-MM-DD"),
        ("yesterday", "start 'yesterday' is not an ISO-8601 instant"),
        ("2026-03-02T08:00:00", "has no UTC offset: write it as 2026-03-02T08:00:00Z"),
    ],
)
def test_bad_instants_say_what_to_write(text: str, message: str) -> None:
    with pytest.raises(QueryError, match=message):
        parse_instant(text, "start")


def test_bad_day() -> None:
    assert parse_day("2026-03-02") == date(2026, 3, 2)
    with pytest.raises(QueryError, match=r"day '02\.03\.2026' is not a date"):
        parse_day("02.03.2026")


def test_ranges_inverted_empty_and_too_large_are_refused() -> None:
    a, b = datetime(2026, 3, 2, tzinfo=UTC), datetime(2026, 3, 3, tzinfo=UTC)
    assert TimeRange.checked(a, b, 31).days == [date(2026, 3, 2)]
    with pytest.raises(QueryError, match="inverted range: start 2026-03-03T00:00:00"):
        TimeRange.checked(b, a, 31)
    with pytest.raises(QueryError, match="empty or inverted"):
        TimeRange.checked(a, a, 31)
    with pytest.raises(QueryError, match=r"range too large: .* at most 1 days"):
        TimeRange.checked(a, datetime(2026, 3, 3, 0, 15, tzinfo=UTC), 1)
    with pytest.raises(QueryError, match="first day 2026-03-03 is after last 2026-03-02"):
        day_range(date(2026, 3, 3), date(2026, 3, 2), 31)
    assert day_range(date(2026, 3, 1), date(2026, 3, 2), 31).days == [
        date(2026, 3, 1),
        date(2026, 3, 2),
    ]


def test_limits_and_stores() -> None:
    assert check_limit(5, "limit", 10) == 5
    with pytest.raises(QueryError, match="limit must be between 1 and 10, not 0"):
        check_limit(0, "limit", 10)
    with pytest.raises(QueryError, match="out of range"):
        check_store(-1)


def test_page_tokens_round_trip_and_garbage_is_refused() -> None:
    token = PageToken("batch", b"\x00\x01state", datetime(2026, 3, 2, 10, tzinfo=UTC), "v2")
    assert decode_page(encode_page(token)) == token
    speed = PageToken("speed", None, datetime(2026, 3, 2, tzinfo=UTC), None)
    assert decode_page(encode_page(speed)) == speed
    for garbage in ("abc", "", encode_page(token)[:-3] + "!!!"):
        with pytest.raises(QueryError, match="pass next_page of the previous answer"):
            decode_page(garbage)
