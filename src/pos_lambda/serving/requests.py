"""Parsing and validating what users ask for (pure): one set of rules for every front door.

Errors are `QueryError`s whose message says what to fix; the HTTP app answers them
with 422, the CLI with exit code 2.
"""

from __future__ import annotations

import binascii
import json
import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any

from pos_lambda.schemas.contract import LIMITS
from pos_lambda.serving import paging
from pos_lambda.serving.errors import PageGone, QueryError
from pos_lambda.serving.model import Pointer, Segment, receipts_partition

STORE_MAX = 2**31 - 1  # operation_id is a CQL int (src/pos_lambda/schemas/contract.py)
DEVICE_MAX = 2**31 - 1  # vendor_fiscal_module: a CQL int
TRANSACTION_MAX = 2**63 - 1  # transaction_id: a CQL bigint
# The contract's years: no receipt happens outside [EARLIEST, LATEST], so no view holds
# a row there; the bounds also keep day + 1 and offsets clear of year 1 and 9999.
EARLIEST, LATEST = LIMITS.earliest, LIMITS.latest_exclusive
FIRST_DAY, LAST_DAY = EARLIEST.date(), (LATEST - timedelta(days=1)).date()


def check_day(day: date, name: str = "day") -> date:
    if not FIRST_DAY <= day <= LAST_DAY:
        raise QueryError(
            f"{name} {day.isoformat()} is outside the data's years: a day is "
            f"{FIRST_DAY.isoformat()}..{LAST_DAY.isoformat()}"
        )
    return day


def check_instant(at: datetime, name: str) -> datetime:
    if not EARLIEST <= at <= LATEST:
        raise QueryError(
            f"{name} {at.isoformat()} is outside the data's years: an instant is "
            f"{EARLIEST.isoformat()}..{LATEST.isoformat()}"
        )
    return at


_DAY = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")

# What parse_day and parse_instant accept, as the OpenAPI document declares it (beside
# the `date` and `date-time` formats, which rule out 30 February): clients generated from
# the document send nothing they refuse. Written for the years 2000..2099, FIRST_DAY and
# LAST_DAY; tests/unit/serving/test_http_document.py holds them to those and the parsers.
_MONTH = "(0[1-9]|1[0-2])"
_MDAY = "(0[1-9]|[12][0-9]|3[01])"
DAY_PATTERN = rf"^20[0-9]{{2}}-{_MONTH}-{_MDAY}$"
# A day whose week before is inside the years too: 2000-01-08 and later.
DAY_WITH_WEEK_BEFORE_PATTERN = (
    rf"^(20(0[1-9]|[1-9][0-9])-{_MONTH}-{_MDAY}|2000-(0[2-9]|1[0-2])-{_MDAY}"
    r"|2000-01-(0[89]|[12][0-9]|3[01]))$"
)
# An instant, RFC 3339 as fromisoformat reads it (`Z` in capitals, no leap second): on a
# day inside the years with any offset; on the first day only with one behind UTC, on the
# last only with one ahead of it, so that it stays inside in UTC. (An offset that moves a
# time on the days next to an edge across it, but not past it, is accepted, not declared.)
_TIME = r"[Tt]([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\.[0-9]+)?"
_OFFSET = "([01][0-9]|2[0-3]):[0-5][0-9]"
_INNER_DAY = (
    rf"(20(0[1-9]|[1-8][0-9]|9[0-8])-{_MONTH}-{_MDAY}"
    rf"|2000-(0[2-9]|1[0-2])-{_MDAY}|2000-01-(0[2-9]|[12][0-9]|3[01])"
    rf"|2099-(0[1-9]|1[01])-{_MDAY}|2099-12-(0[1-9]|[12][0-9]|30))"
)
INSTANT_PATTERN = (
    rf"^({_INNER_DAY}{_TIME}(Z|[+-]{_OFFSET})"
    rf"|2000-01-01{_TIME}(Z|[+-]00:00|-{_OFFSET})"
    rf"|2099-12-31{_TIME}(Z|[+-]00:00|\+{_OFFSET}))$"
)


def parse_day(text: str, name: str = "day") -> date:
    """A UTC day as YYYY-MM-DD, within the contract's years."""
    try:
        # Only that shape, ASCII digits: date.fromisoformat also takes 20260302 and
        # 2026-W10-1, which the OpenAPI document's `date` format does not.
        if not _DAY.fullmatch(text):
            raise ValueError(text)
        day = date.fromisoformat(text)
    except (TypeError, ValueError):
        raise QueryError(f"{name} {text!r} is not a date: write it as YYYY-MM-DD") from None
    return check_day(day, name)


def parse_instant(text: str, name: str) -> datetime:
    """An ISO-8601 instant with an offset (`Z` for UTC), or a date (its UTC midnight),
    within the contract's years."""
    if len(text) == 10:
        day = parse_day(text, name)
        return datetime.combine(day, datetime.min.time(), tzinfo=UTC)
    try:
        value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise QueryError(
            f"{name} {text!r} is not an ISO-8601 instant: write e.g. 2026-03-02T08:00:00Z "
            "or a date, 2026-03-02"
        ) from None
    if value.tzinfo is None:
        raise QueryError(f"{name} {text!r} has no UTC offset: write it as {text}Z")
    try:
        utc = value.astimezone(UTC)
    except OverflowError:  # year 1 or 9999 pushed past the calendar by its offset
        raise QueryError(
            f"{name} {text!r} is outside the data's years: an instant is "
            f"{EARLIEST.isoformat()}..{LATEST.isoformat()}"
        ) from None
    return check_instant(utc, name)


def check_store(store: int) -> int:
    if not 0 <= store <= STORE_MAX:
        raise QueryError(f"store {store} is out of range: an operation_id is 0..{STORE_MAX}")
    return store


def check_device(device: int) -> int:
    if not 0 <= device <= DEVICE_MAX:
        raise QueryError(
            f"device {device} is out of range: a vendor_fiscal_module is 0..{DEVICE_MAX}"
        )
    return device


def check_transaction(transaction: int) -> int:
    if not 0 <= transaction <= TRANSACTION_MAX:
        raise QueryError(
            f"transaction {transaction} is out of range: a transaction_id is 0..{TRANSACTION_MAX}"
        )
    return transaction


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
            try:
                check_instant(at.astimezone(UTC), name)
            except OverflowError:
                raise QueryError(f"{name} {at.isoformat()} is outside the data's years") from None
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


# A page token is opaque to users. It carries the listing's segments as the first page
# cut them (which table and time range each reads, and the batch version), the segment
# being read and Cassandra's paging state in it: a batch commit between two pages must
# not move the seam under a paging state. It is signed (pos_lambda.serving.paging) and
# names its store, day and kind of day: only what this API issued, for the query it was
# issued for, ever reaches Cassandra as a paging state.
PHASES = ("batch", "speed")
NOT_OURS = "page is not a token this API returned: pass next_page of the previous answer"
STALE = "page has expired, start the listing again (ask without page)"
# What a token lists: a store-day's receipts, or its issues (conflicts). A token of one
# is refused by the other: its paging state is of another statement.
LISTINGS = ("receipts", "issues")


@dataclass(frozen=True)
class PageToken:
    """Where the next page starts: the listing's segments (pinned at its first page, so
    that a batch commit between pages neither repeats nor skips a receipt), the one being
    read, and Cassandra's paging state in it. `zone` is None for a UTC day, else the
    store's zone of a local day."""

    segments: tuple[Segment, ...]
    index: int
    paging_state: bytes | None
    store: int
    day: date
    zone: str | None = None
    # When this token was issued (whole seconds, UTC): past POS_SERVE_PAGE_TOKEN_MAX_AGE_
    # SECONDS it is refused with 410, as is one whose batch version is no longer served.
    issued_at: datetime = datetime(2000, 1, 1, tzinfo=UTC)
    listing: str = "receipts"  # one of LISTINGS


def encode_page(token: PageToken, key: bytes) -> str:
    raw = json.dumps(
        {
            "g": [
                [g.source, g.day.isoformat(), g.start.isoformat(), g.end.isoformat(), g.ref]
                for g in token.segments
            ],
            "i": token.index,
            "s": token.paging_state.hex() if token.paging_state else None,
            "o": token.store,
            "d": token.day.isoformat(),
            "z": token.zone,
            "t": int(token.issued_at.timestamp()),
            # Receipts tokens as before this field: a release before it reads them.
            **({} if token.listing == "receipts" else {"l": token.listing}),
        },
        separators=(",", ":"),
    )
    return paging.sign(raw.encode(), key)


def _segment(raw: list[Any]) -> Segment:
    source, day, start, end, ref = raw
    segment = Segment(
        source,
        date.fromisoformat(day),
        datetime.fromisoformat(start),
        datetime.fromisoformat(end),
        None if ref is None else str(ref),
    )
    if source not in PHASES or segment.start.tzinfo is None or segment.end.tzinfo is None:
        raise ValueError("not a segment")
    return segment


def _scope(store: int, day: date, local: bool) -> str:
    return f"store {store} on {'local' if local else 'UTC'} day {day.isoformat()}"


def decode_page(
    text: str, key: bytes, store: int, day: date, local: bool = False, listing: str = "receipts"
) -> PageToken:
    """The token `text` if this API signed it for (store, day, UTC or local day) and
    `listing`; QueryError otherwise."""
    payload = paging.verify(text, key)
    if payload is None:
        raise QueryError(NOT_OURS)
    try:  # signed by us, so well-formed: checked all the same, it costs nothing
        raw = json.loads(payload)
        state, zone = raw["s"], raw["z"]
        token = PageToken(
            tuple(_segment(g) for g in raw["g"]),
            int(raw["i"]),
            bytes.fromhex(state) if state else None,
            int(raw["o"]),
            date.fromisoformat(raw["d"]),
            None if zone is None else str(zone),
            datetime.fromtimestamp(int(raw["t"]), UTC),
            # Tokens issued before issues were paged list receipts.
            str(raw.get("l", "receipts")),
        )
    except KeyError:  # signed, but by a release before tokens carried their issue time
        raise PageGone(STALE + ": it was issued by an earlier release") from None
    except (ValueError, TypeError, OverflowError, OSError, binascii.Error, UnicodeDecodeError):
        raise QueryError(NOT_OURS) from None
    if not 0 <= token.index < len(token.segments) or token.listing not in LISTINGS:
        raise QueryError(NOT_OURS)
    if token.listing != listing:
        raise QueryError(
            f"page was issued for a listing of {token.listing}, not of {listing}: pass "
            "next_page of the previous answer for this one"
        )
    issued = _scope(token.store, token.day, token.zone is not None)
    if issued != _scope(store, day, local):
        raise QueryError(
            f"page was issued for {issued}, not {_scope(store, day, local)}: pass "
            "next_page of the previous answer for this one"
        )
    return token


def check_page_current(
    token: PageToken, served: Pointer, now: datetime, max_age_seconds: int
) -> None:
    """`PageGone` when `token` is older than `max_age_seconds` or a batch segment it has
    still to read names a version the pointer `served` no longer serves for its day (a
    rebuild switched the day to another generation, and `gc` deletes the old one's rows:
    resuming would read a deleted partition and silently return fewer rows). A commit of
    the same generation (a fold moving `delta_version`) keeps the token good: its
    segments stay readable and the token keeps its own bound."""
    age = (now - token.issued_at).total_seconds()
    if age > max_age_seconds:
        raise PageGone(
            f"{STALE}: it was issued {age:.0f} s ago, and a page token is good for "
            f"{max_age_seconds} s (POS_SERVE_PAGE_TOKEN_MAX_AGE_SECONDS)"
        )
    for segment in token.segments[token.index :]:
        if segment.source != "batch" or segment.ref is None:
            continue
        read = receipts_partition(segment.ref)[0]
        current = served.days.get(segment.day)
        now_served = receipts_partition(current.receipts_ref)[0] if current else None
        if now_served != read:
            raise PageGone(
                f"{STALE}: the batch version it reads for {segment.day.isoformat()} "
                f"({read}) is no longer served (now {now_served or 'none'}: a rebuild "
                "replaced it)"
            )
