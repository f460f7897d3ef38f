"""Parsing and validating what users ask for (pure): one set of rules for every front door.

Errors are `QueryError`s whose message says what to fix; the HTTP app answers them
with 422, the CLI with exit code 2.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

from serving.errors import QueryError

STORE_MAX = 2**31 - 1  # operation_id is a CQL int (schemas/contract.py)


def parse_day(text: str, name: str = "day") -> date:
    """A UTC day as YYYY-MM-DD."""
    try:
        return date.fromisoformat(text)
    except (TypeError, ValueError):
        raise QueryError(f"{name} {text!r} is not a date: write it as YYYY-MM-DD") from None


def parse_instant(text: str, name: str) -> datetime:
    """An ISO-8601 instant with an offset (`Z` for UTC), or a date (its UTC midnight)."""
    if len(text) == 10:
        return datetime.combine(parse_day(text, name), datetime.min.time(), tzinfo=UTC)
    try:
        value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise QueryError(
            f"{name} {text!r} is not an ISO-8601 instant: write e.g. 2026-03-02T08:00:00Z "
            "or a date, 2026-03-02"
        ) from None
    if value.tzinfo is None:
        raise QueryError(f"{name} {text!r} has no UTC offset: write it as {text}Z")
    return value.astimezone(UTC)


def check_store(store: int) -> int:
    if not 0 <= store <= STORE_MAX:
        raise QueryError(f"store {store} is out of range: an operation_id is 0..{STORE_MAX}")
    return store


@dataclass(frozen=True)
class TimeRange:
    """[start, end) of event time, at most `max_days` long."""

    start: datetime
    end: datetime

    @classmethod
    def checked(cls, start: datetime, end: datetime, max_days: int) -> TimeRange:
        for name, at in (("start", start), ("end", end)):
            if at.tzinfo is None:
                raise QueryError(f"{name} {at.isoformat()} has no UTC offset")
        if end <= start:
            raise QueryError(
                f"empty or inverted range: start {start.isoformat()} must be before "
                f"end {end.isoformat()}"
            )
        if end - start > timedelta(days=max_days):
            raise QueryError(
                f"range too large: {(end - start) / timedelta(days=1):g} days from start to "
                f"end; ask for at most "
                f"{max_days} days (POS_SERVE_MAX_RANGE_DAYS) per request"
            )
        return cls(start.astimezone(UTC), end.astimezone(UTC))

    @property
    def days(self) -> list[date]:
        first = self.start.date()
        last = (self.end - timedelta(microseconds=1)).date()
        return [first + timedelta(days=n) for n in range((last - first).days + 1)]


def day_range(first: date, last: date, max_days: int) -> TimeRange:
    """The days first..last, both included."""
    if last < first:
        raise QueryError(
            f"inverted range: first day {first.isoformat()} is after last {last.isoformat()}"
        )
    start = datetime.combine(first, datetime.min.time(), tzinfo=UTC)
    return TimeRange.checked(start, start + timedelta(days=(last - first).days + 1), max_days)


def check_limit(value: int, name: str, maximum: int) -> int:
    if not 1 <= value <= maximum:
        raise QueryError(f"{name} must be between 1 and {maximum}, not {value}")
    return value


# A page token is opaque to users. It carries which table the next rows come from,
# Cassandra's paging state in it, and the split instant and batch version of the first
# page: a batch commit between two pages must not move the seam under a paging state.
PHASES = ("batch", "speed")


@dataclass(frozen=True)
class PageToken:
    phase: str
    paging_state: bytes | None
    split: datetime
    version: str | None


def encode_page(token: PageToken) -> str:
    raw = json.dumps(
        {
            "p": token.phase,
            "s": token.paging_state.hex() if token.paging_state else None,
            "t": token.split.isoformat(),
            "v": token.version,
        }
    )
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_page(text: str) -> PageToken:
    try:
        raw = json.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
        phase, state, version = raw["p"], raw["s"], raw["v"]
        split = datetime.fromisoformat(raw["t"])
        if phase not in PHASES or split.tzinfo is None:
            raise ValueError(phase)
        if not (version is None or isinstance(version, str)):
            raise ValueError(version)
        return PageToken(phase, bytes.fromhex(state) if state else None, split, version)
    except (ValueError, KeyError, TypeError, binascii.Error, UnicodeDecodeError):
        raise QueryError(
            "page is not a token this API returned: pass next_page of the previous answer"
        ) from None
