"""The serving API's rules that its OpenAPI document states in words because no parameter
schema can encode them, for Schemathesis.

A rule that ties two parameters together, or a value to what the API issued, has no place
in a parameter's schema, so a request can satisfy every schema and still break one:

- a range: `start` before `end` (windows), `first` not after `last` (days, local days,
  hour of week), and at most POS_SERVE_MAX_RANGE_DAYS days long;
- a page token: only one this API signed for that listing (the document declares the
  tokens' shape; a string of that shape that the API did not sign is refused).

The API refuses such a request with 422 and a detail naming the rule, as the document
says. The `filter_failure` hook below drops Schemathesis's "schema-valid request
rejected" failure (positive_data_acceptance) for exactly those requests: the case must
break the rule (decided here from the request alone, not by the serving code) and the
answer must be a 422 whose detail names it. Every other refusal of a schema-valid request
stays a failure, and every other check stays as it is.

tests/integration/test_serving_schema.py imports it. From the command line, against a
running `pos-serve http` with the same POS_SERVE_MAX_RANGE_DAYS:

    SCHEMATHESIS_HOOKS=tests.integration.serving_schema_rules .venv/bin/st run \\
        http://127.0.0.1:8000/openapi.json --checks all --seed 7
"""

from __future__ import annotations

import re
from collections import Counter
from datetime import UTC, date, datetime, timedelta
from typing import Any

import schemathesis
from schemathesis.openapi.checks import RejectedPositiveData

from pos_lambda.settings import load_settings

MAX_RANGE_DAYS = load_settings().serve.max_range_days

# The details the API answers, as a user reads them (not imported from the serving code).
INVERTED = re.compile(r"(empty or )?inverted range")
TOO_LARGE = re.compile(r"range too large: .* ask for at most (\d+) days")
NOT_SIGNED = re.compile(r"page is not a token this API returned")

INSTANT_RANGES = {"GET /stores/{store}/windows": ("start", "end")}
DAY_RANGES = {
    "GET /stores/{store}/days": ("first", "last"),
    "GET /stores/{store}/local-days": ("first", "last"),
    "GET /stores/{store}/hour-of-week": ("first", "last"),
}
PAGED = {
    "GET /stores/{store}/days/{day}/receipts",
    "GET /stores/{store}/local-days/{day}/receipts",
    "GET /stores/{store}/days/{day}/issues",
    "GET /stores/{store}/local-days/{day}/issues",
}

# Schema-valid requests refused for a rule above, by rule: the test prints them.
DROPPED: Counter[str] = Counter()


def _day(text: Any) -> date | None:
    try:
        return date.fromisoformat(text) if isinstance(text, str) and len(text) == 10 else None
    except ValueError:
        return None


def _instant(text: Any) -> datetime | None:
    """RFC 3339 (a date-time with an offset) or a date, its UTC midnight."""
    day = _day(text)
    if day is not None:
        return datetime(day.year, day.month, day.day, tzinfo=UTC)
    if not isinstance(text, str):
        return None
    try:
        at = datetime.fromisoformat(text)
    except ValueError:
        return None
    return at if at.tzinfo is not None else None


def broken_rule(label: str, query: dict[str, Any] | None) -> tuple[str, re.Pattern[str]] | None:
    """The rule a request to operation `label` with `query` breaks, and the detail it must
    be refused with; None if it breaks none of them (or its values do not parse: then the
    parameters' own schemas decide)."""
    query = query or {}
    if label in PAGED and query.get("page"):
        return "page token not signed by this API", NOT_SIGNED
    span: timedelta | None = None
    if label in INSTANT_RANGES:
        a, b = (_instant(query.get(name)) for name in INSTANT_RANGES[label])
        if a is None or b is None:
            return None
        if b <= a:
            return "start not before end", INVERTED
        span = b - a
    elif label in DAY_RANGES:
        first, last = (_day(query.get(name)) for name in DAY_RANGES[label])
        if first is None or last is None:
            return None
        if last < first:
            return "first after last", INVERTED
        span = last - first + timedelta(days=1)
    if span is not None and span > timedelta(days=MAX_RANGE_DAYS):
        return f"range over {MAX_RANGE_DAYS} days", TOO_LARGE
    return None


def refused_as_documented(case: Any, status: int, body: str) -> str | None:
    """The rule, if `case` breaks one and the answer is its documented refusal."""
    rule = broken_rule(case.operation.label, case.query)
    if rule is None or status != 422 or not rule[1].search(body):
        return None
    return rule[0]


@schemathesis.hook
def filter_failure(context: Any, failure: Any, case: Any, response: Any) -> bool:
    """Keep every failure but a schema-valid request's documented refusal (see above)."""
    if not isinstance(failure, RejectedPositiveData):
        return True
    rule = refused_as_documented(case, response.status_code, response.text)
    if rule is None:
        return True
    DROPPED[rule] += 1
    return False
