from __future__ import annotations

import base64
import re
from dataclasses import replace
from datetime import UTC, date, datetime, timedelta, timezone

import pytest

from pos_lambda.serving import paging
from pos_lambda.serving.errors import PageGone, QueryError
from pos_lambda.serving.model import DayVersion, Pointer, Segment
from pos_lambda.serving.requests import (
    PageToken,
    TimeRange,
    check_limit,
    check_page_current,
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


KEY = bytes(range(32))
DAY = date(2026, 3, 2)


T0, T10 = datetime(2026, 3, 2, tzinfo=UTC), datetime(2026, 3, 2, 10, tzinfo=UTC)
BATCH = Segment("batch", DAY, T0, T10, "g7@12")
SPEED = Segment("speed", DAY, T10, T0 + timedelta(days=1))


def test_page_tokens_round_trip_and_garbage_is_refused() -> None:
    token = PageToken((BATCH, SPEED), 0, b"\x00\x01state", 101, DAY)
    assert decode_page(encode_page(token, KEY), KEY, 101, DAY) == token
    speed = PageToken((SPEED,), 0, None, 101, DAY)
    assert decode_page(encode_page(speed, KEY), KEY, 101, DAY) == speed
    local = PageToken((BATCH, SPEED), 1, b"s", 102, DAY, "Asia/Kathmandu")
    assert decode_page(encode_page(local, KEY), KEY, 102, DAY, local=True) == local
    for garbage in ("abc", "", encode_page(token, KEY)[:-3] + "!!!", "é.é", "a.b.c"):
        with pytest.raises(QueryError, match="pass next_page of the previous answer"):
            decode_page(garbage, KEY, 101, DAY)


def test_a_token_is_signed_payload_dot_mac() -> None:
    issued = datetime(2026, 3, 2, 10, 5, tzinfo=UTC)
    token = PageToken((SPEED,), 0, None, 101, DAY, issued_at=issued)
    payload, mac = encode_page(token, KEY).split(".")
    assert base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)) == (
        b'{"g":[["speed","2026-03-02","2026-03-02T10:00:00+00:00","2026-03-03T00:00:00+00:00",'
        b'null]],"i":0,"s":null,"o":101,"d":"2026-03-02","z":null,"t":1772445900}'
    )
    assert decode_page(encode_page(token, KEY), KEY, 101, DAY).issued_at == issued
    assert len(base64.urlsafe_b64decode(mac + "==")) == 16


def _unsigned(raw: bytes) -> str:
    """What a client could forge: the old token format, base64 of JSON, no MAC."""
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


@pytest.mark.parametrize(
    "forged",
    [
        _unsigned(b"[" * 1100),  # made the old decoder recurse (RecursionError, a 500)
        # well-formed, with a paging state Cassandra rejects (ProtocolException, a 500)
        _unsigned(b'{"p":"speed","s":"deadbeef","t":"2026-03-02T00:00:00+00:00","v":null}'),
        _unsigned(b"[" * 1100) + "." + "A" * 22,  # shaped like a signed one
        "A" * 5000 + ".AAAA",  # too long to be one of ours
    ],
)
def test_forged_tokens_are_refused_before_parsing(forged: str) -> None:
    with pytest.raises(QueryError, match=r"^page is not a token this API returned"):
        decode_page(forged, KEY, 101, DAY)


def test_a_token_of_another_key_or_store_day_is_refused() -> None:
    token = PageToken((SPEED,), 0, b"state", 101, DAY)
    with pytest.raises(QueryError, match=r"^page is not a token this API returned"):
        decode_page(encode_page(token, KEY), bytes(32), 101, DAY)
    mac = encode_page(token, KEY).split(".")[1]
    tampered = _unsigned(
        b'{"g":[["speed","2026-03-02","2026-03-02T10:00:00+00:00","2026-03-03T00:00:00+00:00",'
        b'null]],"i":0,"s":"00","o":101,"d":"2026-03-02","z":null}'
    )
    with pytest.raises(QueryError, match=r"^page is not a token this API returned"):
        decode_page(f"{tampered}.{mac}", KEY, 101, DAY)
    with pytest.raises(
        QueryError, match="issued for store 101 on UTC day 2026-03-02, not store 102 on UTC day"
    ):
        decode_page(encode_page(token, KEY), KEY, 102, DAY)
    with pytest.raises(QueryError, match="not store 101 on UTC day 2026-03-03"):
        decode_page(encode_page(token, KEY), KEY, 101, date(2026, 3, 3))
    # A UTC day's token does not page a local day, nor the other way round.
    with pytest.raises(QueryError, match="not store 101 on local day 2026-03-02"):
        decode_page(encode_page(token, KEY), KEY, 101, DAY, local=True)


def test_a_signed_token_pointing_past_its_segments_is_refused() -> None:
    past = PageToken((SPEED,), 1, None, 101, DAY)
    with pytest.raises(QueryError, match=r"^page is not a token this API returned"):
        decode_page(encode_page(past, KEY), KEY, 101, DAY)
    naive = PageToken((Segment("speed", DAY, T10.replace(tzinfo=None), T10),), 0, None, 101, DAY)
    with pytest.raises(QueryError, match=r"^page is not a token this API returned"):
        decode_page(encode_page(naive, KEY), KEY, 101, DAY)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("0001-01-01T00:00:00+01:00",
         "start '0001-01-01T00:00:00+01:00' is outside the data's years"),
        ("9999-12-31T23:00:00-05:00", "is outside the data's years"),
        ("1999-12-31T23:59:59Z", "start 1999-12-31T23:59:59+00:00 is outside the data's years"),
        ("2100-01-01T00:00:01Z", "is outside the data's years"),
        ("0001-01-01",
         "start 0001-01-01 is outside the data's years: a day is 2000-01-01..2099-12-31"),
    ],
)  # fmt: skip
def test_instants_outside_the_contract_years_are_refused(text: str, message: str) -> None:
    with pytest.raises(QueryError, match=re.escape(message)):
        parse_instant(text, "start")


def test_the_contract_years_bound_instants_and_days() -> None:
    assert parse_instant("2000-01-01T01:00:00+01:00", "start") == datetime(2000, 1, 1, tzinfo=UTC)
    assert parse_instant("2100-01-01T00:00:00Z", "end") == datetime(2100, 1, 1, tzinfo=UTC)
    assert parse_day("2099-12-31") == date(2099, 12, 31)
    assert parse_day("2000-01-01") == date(2000, 1, 1)
    for day in ("9999-12-31", "0001-01-01", "1999-12-31", "2100-01-01"):
        with pytest.raises(QueryError, match=f"day {day} is outside the data's years"):
            parse_day(day)


def test_a_range_of_python_datetimes_outside_the_years_is_refused() -> None:
    # The library's own door (not only the parsers): Serving.windows takes datetimes.
    far = datetime(9999, 12, 31, 23, tzinfo=timezone(timedelta(hours=-5)))
    with pytest.raises(QueryError, match="end 9999-12-31T23:00:00-05:00 is outside"):
        TimeRange.checked(datetime(2026, 3, 2, tzinfo=UTC), far, 31)
    with pytest.raises(QueryError, match="start 1970-01-01T00:00:00\\+00:00 is outside"):
        TimeRange.checked(datetime(1970, 1, 1, tzinfo=UTC), datetime(1970, 1, 2, tzinfo=UTC), 31)


def test_a_signed_token_without_an_issue_time_is_gone() -> None:
    # What an earlier release signed: no "t". Start again, not "not ours".
    raw = (b'{"g":[["speed","2026-03-02","2026-03-02T10:00:00+00:00","2026-03-03T00:00:00+00:00",'
           b'null]],"i":0,"s":null,"o":101,"d":"2026-03-02","z":null}')  # fmt: skip
    with pytest.raises(PageGone, match=r"^page has expired, start the listing again \(ask "
                       r"without page\): it was issued by an earlier release$"):  # fmt: skip
        decode_page(paging.sign(raw, KEY), KEY, 101, DAY)


ISSUED = datetime(2026, 3, 2, 10, 5, tzinfo=UTC)
GEN_A = Segment("batch", DAY, T10 - timedelta(hours=10), T10, "gen-a@12")


def _served(ref_of_day: DayVersion | None) -> Pointer:
    return Pointer(T10, {DAY: ref_of_day} if ref_of_day else {})


def test_a_token_within_its_age_and_version_is_current() -> None:
    token = PageToken((GEN_A, SPEED), 0, b"s", 101, DAY, issued_at=ISSUED)
    # The same generation, folded further since (delta_version 12 -> 15): still readable.
    same = _served(DayVersion(DAY, "v9", T10, "gen-a", 15))
    check_page_current(token, same, ISSUED + timedelta(seconds=3600), 3600)


def test_a_token_past_its_max_age_is_gone() -> None:
    token = PageToken((SPEED,), 0, None, 101, DAY, issued_at=ISSUED)
    with pytest.raises(PageGone, match=r"^page has expired, start the listing again \(ask "
                       r"without page\): it was issued 3601 s ago, and a page token is good "
                       r"for 3600 s \(POS_SERVE_PAGE_TOKEN_MAX_AGE_SECONDS\)$"):  # fmt: skip
        check_page_current(token, _served(None), ISSUED + timedelta(seconds=3601), 3600)


def test_a_token_whose_batch_generation_a_rebuild_replaced_is_gone() -> None:
    token = PageToken((GEN_A, SPEED), 0, b"s", 101, DAY, issued_at=ISSUED)
    rebuilt = _served(DayVersion(DAY, "v10", T10, "gen-b", 20))
    with pytest.raises(PageGone, match=r"the batch version it reads for 2026-03-02 \(gen-a\) "
                       r"is no longer served \(now gen-b: a rebuild replaced it\)$"):  # fmt: skip
        check_page_current(token, rebuilt, ISSUED, 3600)
    with pytest.raises(PageGone, match=r"\(gen-a\) is no longer served \(now none"):
        check_page_current(token, _served(None), ISSUED, 3600)
    # Past the batch segment (reading the speed one): the rebuild does not matter.
    check_page_current(replace(token, index=1), rebuilt, ISSUED, 3600)


@pytest.mark.parametrize("text", ["20260302", "2026-W10-1", "2026-061", "２026-03-02", "2026-3-2"])
def test_a_day_is_yyyy_mm_dd_in_ascii_digits_only(text: str) -> None:
    with pytest.raises(QueryError, match=r"is not a date: write it as YYYY-MM-DD$"):
        parse_day(text)
