"""Store time: how much of a UTC interval a store is open, by its own local hours (pure).

The rule is the store's wall clock (`Store.is_open`, the one the simulator's traffic
follows too): an instant is in store hours when its local time, in the store's IANA
zone, falls within that local weekday's hours. Everything a DST change does follows
from it:

- spring forward (a 23-hour day): the skipped wall hour is never open, and hours that
  open inside it open at the transition (America/New_York 02:30 -> 03:00 EDT);
- fall back (a 25-hour day): the repeated wall hour is open twice if the hours cover it
  (a store open 00:00-03:00 on that day is open 4 hours of UTC time).

How it is computed: [start, end) is cut where the zone's UTC offset changes; within a
piece the offset is constant, so local time is UTC shifted by it, and the piece's store
time is the sum over its local days of the overlap with that day's hours. Exact to the
microsecond; the cost is a few look-ups per day of the interval (~10 µs a day here;
a DST change adds a bisection; the silence rule asks only for gaps over its threshold).

Used by the silence alert (alerts/rules.py). The auditor checks those alerts with its
own minute-by-minute computation (audit/expectations.py), never with this one.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from pos_lambda.stores.model import Hours, Store

# Offsets are compared a day apart: a change between two probes is found by bisection,
# and no zone changes twice within a day (since 1970 the closest two changes of any
# tzdata zone are 6.9 days apart: America/Cambridge_Bay, 2000), so none is missed. The
# receipts' contract admits years 2000-2099 only.
_PROBE = timedelta(days=1)


def _offset(zone: ZoneInfo, at: datetime) -> timedelta:
    offset = at.astimezone(zone).utcoffset()
    assert offset is not None  # a ZoneInfo always has one
    return offset


def _first_change(zone: ZoneInfo, low: datetime, high: datetime) -> datetime:
    """The first instant in (low, high] whose offset differs from low's (high's does).

    A bisection over whole seconds: tzdata's transitions fall on whole seconds, so the
    offset at a floored `low` (a ceiled `high`) is the offset at `low` (at `high`).
    """
    before = _offset(zone, low)
    lo, hi = math.floor(low.timestamp()), math.ceil(high.timestamp())
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if _offset(zone, datetime.fromtimestamp(mid, UTC)) == before:
            lo = mid
        else:
            hi = mid
    return datetime.fromtimestamp(hi, UTC)


def offset_pieces(
    zone: ZoneInfo, start: datetime, end: datetime
) -> Iterator[tuple[datetime, datetime, timedelta]]:
    """[start, end) cut into pieces of constant UTC offset: (from, to, offset), in order."""
    at, offset = start, _offset(zone, start)
    while at < end:
        probe = min(at + _PROBE, end)
        if _offset(zone, probe) == offset:  # no change in (at, probe]: one offset
            yield at, probe, offset
            at = probe
            continue
        change = _first_change(zone, at, probe)  # at most `probe` itself
        yield at, change, offset
        at, offset = change, _offset(zone, change)


def open_intervals(store: Store, start: datetime, end: datetime) -> list[tuple[datetime, datetime]]:
    """The parts of [start, end) (aware datetimes) in which `store` is open, in UTC,
    in order; touching parts are merged (a 24-hour store's days make one interval)."""
    out: list[tuple[datetime, datetime]] = []
    start, end = start.astimezone(UTC), end.astimezone(UTC)
    for piece_from, piece_to, offset in offset_pieces(store.zone, start, end):
        # Naive local wall clock of this piece: UTC shifted by the piece's one offset.
        wall_from = piece_from.replace(tzinfo=None) + offset
        wall_to = piece_to.replace(tzinfo=None) + offset
        day = wall_from.date()
        while (midnight := datetime.combine(day, datetime.min.time())) < wall_to:
            hours: Hours | None = store.hours[day.weekday()]
            if hours is not None:
                opens = max(wall_from, midnight + timedelta(minutes=hours.opens))
                closes = min(wall_to, midnight + timedelta(minutes=hours.closes))
                if opens < closes:
                    utc = (_utc(opens - offset), _utc(closes - offset))
                    if out and out[-1][1] == utc[0]:
                        out[-1] = (out[-1][0], utc[1])
                    else:
                        out.append(utc)
            day += timedelta(days=1)
    return out


def _utc(naive: datetime) -> datetime:
    return naive.replace(tzinfo=UTC)


def store_time(store: Store, start: datetime, end: datetime) -> timedelta:
    """How long `store` is open within [start, end) (zero when end <= start)."""
    return sum((b - a for a, b in open_intervals(store, start, end)), timedelta(0))
