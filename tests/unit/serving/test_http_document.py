"""The HTTP API's OpenAPI document says what the API accepts: each declared pattern holds
exactly the values its parser takes (a client generated from the document sends nothing
the API refuses), and the routers' split kept every path and operation id."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta
from typing import Any

import jsonschema_rs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pos_lambda.serving import paging
from pos_lambda.serving.errors import QueryError
from pos_lambda.serving.http import create_app
from pos_lambda.serving.local_days import parse_until
from pos_lambda.serving.model import Segment
from pos_lambda.serving.requests import (
    PageToken,
    decode_page,
    encode_page,
    parse_day,
    parse_instant,
)
from pos_lambda.settings import Settings

FIRST, LAST = date(2000, 1, 1), date(2099, 12, 31)  # the contract's years
DOCUMENT: dict[str, Any] = create_app(Settings()).openapi()


def declared(path: str, name: str) -> Callable[[str], bool]:
    """Whether the document's schema of parameter `name` of `path` holds a value, as a
    JSON Schema validator reads it (formats checked, patterns in ECMA 262: the validator
    Schemathesis uses)."""
    [schema] = [
        p["schema"] for p in DOCUMENT["paths"][path]["get"]["parameters"] if p["name"] == name
    ]
    return jsonschema_rs.validator_for(schema, validate_formats=True).is_valid


def accepted(parse: Callable[[str], object], text: str) -> bool:
    try:
        parse(text)
    except QueryError:
        return False
    return True


def _days(first: date, last: date) -> list[date]:
    return [first + timedelta(days=n) for n in range((last - first).days + 1)]


DAYS = [
    ("/days/{day}/top-stores", "day"),
    ("/stores/{store}/days", "first"),
    ("/stores/{store}/local-days", "last"),
    ("/stores/{store}/local-days/{day}/receipts", "day"),
    ("/dashboard", "day"),
]


@pytest.mark.parametrize(("path", "name"), DAYS)
def test_a_day_is_declared_exactly_when_parse_day_takes_it(path: str, name: str) -> None:
    holds = declared(path, name)
    # Every real day from 1990 to 2110, and what is no day at all.
    for day in _days(date(1990, 1, 1), date(2110, 12, 31)):
        text = day.isoformat()
        assert holds(text) == accepted(parse_day, text) == (FIRST <= day <= LAST), text
    for text in ("20260302", "2026-W10-1", "2026-3-2", " 2026-03-02", "2026-03-02\n", "2026-02-30"):
        assert not holds(text) and not accepted(parse_day, text), text


def test_a_week_before_day_has_its_week_before_inside_the_years() -> None:
    holds = declared("/stores/{store}/local-days/{day}/week-before", "day")
    for day in _days(date(1999, 12, 1), date(2100, 1, 31)):
        assert holds(day.isoformat()) == (FIRST + timedelta(days=7) <= day <= LAST), day


def test_until_is_declared_exactly_when_parse_until_takes_it() -> None:
    holds = declared("/stores/{store}/local-days/{day}/week-before", "until")
    texts = [f"{h}:{m:02d}" for h in range(10) for m in range(100)]
    texts += [f"{h:02d}:{m:02d}" for h in range(100) for m in range(100)]
    for text in [*texts, "24:15", "2pm", "14:3", "", "\u00b2:00", "14:30\n"]:
        assert holds(text) == accepted(parse_until, text), text


def _rfc3339(at: datetime, offset_minutes: int, fraction: str, t: str) -> str:
    if offset_minutes == 0 and not fraction:
        zone = "Z"
    else:
        sign = "-" if offset_minutes < 0 else "+"
        zone = f"{sign}{abs(offset_minutes) // 60:02d}:{abs(offset_minutes) % 60:02d}"
    return f"{at:%Y-%m-%d}{t}{at:%H:%M:%S}{fraction}{zone}"


def _whole_seconds(first: datetime, last: datetime) -> st.SearchStrategy[datetime]:
    return st.datetimes(first, last).map(lambda t: t.replace(microsecond=0))


# Local date-times around the years' edges and anywhere between, any offset RFC 3339
# allows, with and without a fraction of a second.
EDGES = [datetime(2000, 1, 1), datetime(2100, 1, 1)]
LOCAL = st.one_of(
    [_whole_seconds(e - timedelta(days=2), e + timedelta(days=2)) for e in EDGES]
    + [_whole_seconds(datetime(1990, 1, 1), datetime(2110, 1, 1))]
)
START = declared("/stores/{store}/windows", "start")


@settings(max_examples=3000, deadline=None)
@given(
    LOCAL,
    st.integers(-(24 * 60 - 1), 24 * 60 - 1),
    st.sampled_from(["", ".5", ".123456"]),
    st.sampled_from("Tt"),
)
def test_a_declared_instant_is_always_accepted(
    local: datetime, offset: int, fraction: str, t: str
) -> None:
    text = _rfc3339(local, offset, fraction, t)
    took = accepted(lambda x: parse_instant(x, "start"), text)
    utc = local - timedelta(minutes=offset)
    assert took == (datetime(2000, 1, 1) <= utc <= datetime(2100, 1, 1)), text
    if START(text):
        assert took, text
    elif took:
        # Accepted but not declared: only next to an edge, with an offset that moves the
        # time across it but not past it (the pattern is conservative there).
        edge_days = (date(1999, 12, 31), date(2000, 1, 1), date(2099, 12, 31), date(2100, 1, 1))
        assert local.date() in edge_days, text


@pytest.mark.parametrize(
    ("text", "declared_and_accepted"),
    [
        ("2026-03-02T08:00:00Z", True),
        ("2026-03-02t08:00:00+01:00", True),
        ("2026-03-02", True),
        ("2099-12-31", True),
        ("2000-01-01T00:00:00Z", True),
        ("2026-03-02T08:00:00z", False),  # RFC 3339 allows a small z; fromisoformat does not
        ("2026-03-02T23:59:60Z", False),  # a leap second
        ("2026-03-02T08:00:00", False),  # no offset
        ("1999-12-31T23:59:59Z", False),
        ("2100-01-01", False),
        ("0001-01-01T00:00:00Z", False),
    ],
)
def test_instants_at_a_glance(text: str, declared_and_accepted: bool) -> None:
    assert START(text) == declared_and_accepted
    assert accepted(lambda x: parse_instant(x, "start"), text) == declared_and_accepted


def test_every_token_the_api_issues_has_the_declared_shape() -> None:
    holds = declared("/stores/{store}/local-days/{day}/issues", "page")
    key = b"k" * paging.KEY_BYTES
    at = datetime(2026, 3, 2, tzinfo=UTC)
    segments = (Segment("speed", date(2026, 3, 2), at, at + timedelta(days=1), None),)
    for state in (None, b"\x00" * 40, bytes(range(256))):
        token = PageToken(segments, 0, state, 101, date(2026, 3, 2), "Asia/Kathmandu", at)
        text = encode_page(token, key)
        assert holds(text) and len(text) <= paging.MAX_TOKEN_CHARS
        assert decode_page(text, key, 101, date(2026, 3, 2), local=True) == token
    assert holds("")  # `page=`: the first page
    for text in ("nope", "a.b", "a.b.c", f"{'a' * 10}.{'b' * 21}", f"a+b.{'c' * 22}"):
        assert not holds(text), text


def test_every_day_and_instant_in_the_document_declares_the_years() -> None:
    """A new route's date parameter without the pattern would take 0001-01-01."""

    def formats(schema: Any) -> list[dict[str, Any]]:
        if isinstance(schema, dict):
            found = [schema] if schema.get("format") in ("date", "date-time") else []
            return found + [f for v in schema.values() for f in formats(v)]
        if isinstance(schema, list):
            return [f for v in schema for f in formats(v)]
        return []

    params = [p for ops in DOCUMENT["paths"].values() for p in ops["get"]["parameters"]]
    dated = [(p["name"], f) for p in params for f in formats(p["schema"])]
    assert len(dated) == 18
    assert all("pattern" in f for _, f in dated), dated
    pages = [p["schema"] for p in params if p["name"] == "page"]
    assert len(pages) == 4
    assert all(s["pattern"] == paging.TOKEN_PATTERN for s in pages)


def test_the_routers_serve_the_same_paths_and_operation_ids() -> None:
    paths = DOCUMENT["paths"]
    operations = [(path, op["operationId"]) for path, ops in paths.items() for op in ops.values()]
    assert operations == [
        ("/stores/{store}/windows", "windows_stores__store__windows_get"),
        ("/stores/{store}/days", "days_stores__store__days_get"),
        ("/stores/{store}/local-days", "local_days_stores__store__local_days_get"),
        ("/stores/{store}/hour-of-week", "hour_of_week_stores__store__hour_of_week_get"),
        (
            "/stores/{store}/local-days/{day}/week-before",
            "week_before_stores__store__local_days__day__week_before_get",
        ),
        ("/days/{day}/top-stores", "top_days__day__top_stores_get"),
        ("/stores/{store}/days/{day}/receipts", "receipts_stores__store__days__day__receipts_get"),
        (
            "/stores/{store}/local-days/{day}/receipts",
            "local_receipts_stores__store__local_days__day__receipts_get",
        ),
        ("/stores/{store}/days/{day}/issues", "store_day_stores__store__days__day__issues_get"),
        ("/stores/{store}/days/{day}/gaps", "gaps_stores__store__days__day__gaps_get"),
        (
            "/stores/{store}/local-days/{day}/issues",
            "local_store_day_stores__store__local_days__day__issues_get",
        ),
        (
            "/stores/{store}/devices/{device}/receipts/{transaction}",
            "receipt_stores__store__devices__device__receipts__transaction__get",
        ),
        ("/health", "health_health_get"),
        ("/dashboard", "page_dashboard_get"),
    ]
    routes = [getattr(r, "path", None) for r in create_app(Settings()).routes]
    assert {"/metrics", "/"} <= set(routes)  # served, not in the document
