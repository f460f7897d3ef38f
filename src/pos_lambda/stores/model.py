"""A store as data: operation_id, name, IANA time zone, opening hours per weekday (pure).

Rules (docs/serving.md, "Stores and local days"):
- the zone is an IANA key that `zoneinfo` knows (`Europe/Bratislava`, `Asia/Kathmandu`);
- hours are given per weekday as `HH:MM-HH:MM` in the store's local time, or `closed`;
  the close is after the open on the same local day, `24:00` closes at midnight;
- overnight hours (`22:00-02:00`) are refused: a store's business day is its local
  calendar day, so hours past midnight belong to the next weekday
  (`fri=18:00-24:00`, `sat=00:00-02:00`). This keeps "which day does a receipt belong
  to" one rule (its local date), the rule every local-day total relies on.

Every refusal is a `StoreError` whose message says what to fix, in one line.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, date, datetime, time, timedelta
from functools import cached_property
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

WEEKDAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")  # date.weekday() order
CLOSED = "closed"
MAX_NAME_LENGTH = 200
OPERATION_ID_MAX = 2**31 - 1  # a CQL int, as in the contract
_CLOCK = re.compile(r"^([01][0-9]|2[0-4]):([0-5][0-9])$")
_DAY_NAMES = {"daily": WEEKDAYS, "weekdays": WEEKDAYS[:5], "weekend": WEEKDAYS[5:]}


class StoreError(ValueError):
    """A store definition refused; the message says what to change."""


@dataclass(frozen=True, order=True)
class Hours:
    """Open [opens, closes) in minutes after local midnight (closes up to 24:00 = 1440)."""

    opens: int
    closes: int

    def __str__(self) -> str:
        return f"{_clock(self.opens)}-{_clock(self.closes)}"

    def contains(self, minute: int) -> bool:
        return self.opens <= minute < self.closes


def _clock(minutes: int) -> str:
    return f"{minutes // 60:02d}:{minutes % 60:02d}"


def _minutes(text: str, where: str) -> int:
    m = _CLOCK.match(text)
    if m is None or (m.group(1) == "24" and m.group(2) != "00"):
        raise StoreError(f"{where}: {text!r} is not a time of day: write HH:MM, 00:00..24:00")
    return int(m.group(1)) * 60 + int(m.group(2))


def parse_hours(text: str, where: str = "hours") -> Hours | None:
    """`HH:MM-HH:MM` -> Hours, `closed` -> None."""
    spec = text.strip().lower()
    if spec == CLOSED:
        return None
    opens_text, sep, closes_text = spec.partition("-")
    if not sep:
        raise StoreError(f"{where}: {text!r} is not HH:MM-HH:MM or {CLOSED!r}")
    opens, closes = _minutes(opens_text, where), _minutes(closes_text, where)
    if opens == 24 * 60:
        raise StoreError(f"{where}: a store cannot open at 24:00; open at 00:00 the next day")
    if closes <= opens:
        raise StoreError(
            f"{where}: {text!r} closes before it opens: overnight hours are not supported, "
            "split them at midnight (fri=18:00-24:00 and sat=00:00-02:00)"
        )
    return Hours(opens, closes)


def parse_weekdays(text: str) -> tuple[str, ...]:
    """`mon`, `mon-fri`, `sat,sun`, `daily`, `weekdays` or `weekend` -> weekday names."""
    out: list[str] = []
    for part in text.strip().lower().split(","):
        if part in _DAY_NAMES:
            out += _DAY_NAMES[part]
            continue
        first, sep, last = part.partition("-")
        if first not in WEEKDAYS or (sep and last not in WEEKDAYS):
            raise StoreError(
                f"{text!r} is not a weekday: write mon..sun, a range (mon-fri), a list "
                "(sat,sun), daily, weekdays or weekend"
            )
        i, j = WEEKDAYS.index(first), WEEKDAYS.index(last if sep else first)
        if j < i:
            raise StoreError(f"{text!r}: a weekday range runs forward, mon-fri, not fri-mon")
        out += WEEKDAYS[i : j + 1]
    return tuple(dict.fromkeys(out))


def parse_week(specs: Iterable[str]) -> dict[str, Hours | None]:
    """`DAYS=HH:MM-HH:MM` or `DAYS=closed` specs, later ones override earlier ones."""
    week: dict[str, Hours | None] = {}
    for spec in specs:
        days_text, sep, hours_text = spec.partition("=")
        if not sep:
            raise StoreError(
                f"hours {spec!r}: write DAYS=HH:MM-HH:MM or DAYS=closed, e.g. mon-fri=07:00-21:00"
            )
        hours = parse_hours(hours_text, f"hours {spec!r}")
        for day in parse_weekdays(days_text):
            week[day] = hours
    return week


def check_zone(key: str) -> ZoneInfo:
    """The IANA zone named `key`; refuses anything zoneinfo does not know."""
    try:
        return ZoneInfo(key)
    except (ZoneInfoNotFoundError, ValueError):
        raise StoreError(
            f"time zone {key!r} is unknown: use an IANA name such as Europe/Bratislava, "
            "Asia/Kathmandu or UTC"
        ) from None


def check_operation_id(operation_id: int) -> int:
    if not 0 <= operation_id <= OPERATION_ID_MAX:
        raise StoreError(f"store {operation_id} is out of range: 0..{OPERATION_ID_MAX}")
    return operation_id


def check_name(name: str) -> str:
    if not name.strip() or len(name) > MAX_NAME_LENGTH:
        raise StoreError(f"name must be 1..{MAX_NAME_LENGTH} characters, not {name!r}")
    return name


@dataclass(frozen=True)
class Store:
    """A validated store. `hours[i]` is weekday i's (Monday = 0); None = closed."""

    operation_id: int
    name: str
    time_zone: str
    hours: tuple[Hours | None, ...]

    def __post_init__(self) -> None:
        check_operation_id(self.operation_id)
        check_name(self.name)
        check_zone(self.time_zone)
        if len(self.hours) != len(WEEKDAYS):
            raise StoreError(f"hours must name all 7 weekdays, got {len(self.hours)}")

    @classmethod
    def create(
        cls, operation_id: int, name: str, time_zone: str, week: Mapping[str, Hours | None]
    ) -> Store:
        """A store open as `week` says; weekdays it does not name are closed."""
        return cls(operation_id, name, time_zone, tuple(week.get(d) for d in WEEKDAYS))

    def with_changes(
        self,
        name: str | None = None,
        time_zone: str | None = None,
        week: Mapping[str, Hours | None] | None = None,
    ) -> Store:
        """A copy with the given fields changed; `week` changes only the days it names."""
        hours = self.hours
        if week:
            hours = tuple(week.get(d, h) for d, h in zip(WEEKDAYS, hours, strict=True))
        return replace(
            self,
            name=self.name if name is None else name,
            time_zone=self.time_zone if time_zone is None else time_zone,
            hours=hours,
        )

    @cached_property
    def zone(self) -> ZoneInfo:
        return ZoneInfo(self.time_zone)

    def local_day(self, at: datetime) -> date:
        """The store's business day of an instant: its local calendar date."""
        return at.astimezone(self.zone).date()

    def is_open(self, at: datetime) -> bool:
        """Whether the store is open at the instant `at` (by its local wall clock)."""
        local = at.astimezone(self.zone)
        hours = self.hours[local.weekday()]
        return hours is not None and hours.contains(local.hour * 60 + local.minute)

    def opening_hours(self) -> dict[str, str]:
        """The week as text, every weekday named (the table's and the CLI's form)."""
        return {d: str(h) if h else CLOSED for d, h in zip(WEEKDAYS, self.hours, strict=True)}

    def next_opening(self, at: datetime) -> datetime | None:
        """The first instant at or after `at` at which the store is open; None when it is
        closed every day. Each candidate is a local opening time turned into an instant by
        the zone, so a DST change (a skipped or repeated hour) is the zone's business."""
        if self.is_open(at):
            return at
        local_today = at.astimezone(self.zone).date()
        for n in range(8):  # a week and a day: every weekday's opening is seen
            day = local_today + timedelta(days=n)
            hours = self.hours[day.weekday()]
            if hours is None:
                continue
            wall = datetime.combine(day, time(hours.opens // 60, hours.opens % 60))
            opening = wall.replace(tzinfo=self.zone).astimezone(UTC)
            if opening >= at and self.is_open(opening):
                return opening
        return None


def store_from_row(
    operation_id: int, name: str, time_zone: str, opening_hours: Mapping[str, str]
) -> Store:
    """A stored row back into a Store (validated again: a hand-edited row is refused)."""
    week = {d: parse_hours(opening_hours.get(d, CLOSED), f"hours of {d}") for d in WEEKDAYS}
    return Store.create(operation_id, name, time_zone, week)
