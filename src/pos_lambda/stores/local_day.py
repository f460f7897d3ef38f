"""A store's local business day as UTC 15-minute windows (pure).

The views are keyed by UTC 15-minute windows (src/pos_lambda/views/windows.py). A local
day [local midnight, next local midnight) starts and ends on window boundaries in every
zone in use today, because every real UTC offset is a whole multiple of 15 minutes
(+05:45 Kathmandu, +08:45 Eucla, +13:45 Chatham included) and DST moves clocks by 30 or
60 minutes. So a local day is an exact set of windows, and its totals are exact sums
of the windows' aggregates, never an apportioned share:

- 96 windows on an ordinary day (any offset),
- 92 on a spring-forward day (one hour skipped), 100 on a fall-back day (one repeated),
- 94 or 98 where DST moves by 30 minutes (Australia/Lord_Howe).

A zone whose day would not align (a historical local mean time, e.g. Europe/Amsterdam
before 1937 at +00:19:32) raises `UnalignedDay`: there is no exact answer to give.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo

from pos_lambda.views.windows import WINDOW, is_window_start


class UnalignedDay(ValueError):
    """The local day does not start or end on a UTC 15-minute boundary."""


def local_day_bounds(day: date, zone: ZoneInfo) -> tuple[datetime, datetime]:
    """[start, end) in UTC of the local calendar day `day` in `zone`.

    Local midnight with fold=0 is the first occurrence of an ambiguous midnight and, where
    DST skips midnight (America/Santiago), the instant the day begins (the zone gives the
    skipped wall time the offset before the change, which lands on the transition).
    """
    start = datetime.combine(day, time(0), tzinfo=zone).astimezone(UTC)
    end = datetime.combine(day + timedelta(days=1), time(0), tzinfo=zone).astimezone(UTC)
    for name, at in (("start", start), ("end", end)):
        if not is_window_start(at):
            raise UnalignedDay(
                f"{day.isoformat()} in {zone.key}: its {name} {at.isoformat()} is not on a "
                "15-minute UTC boundary, so no exact local-day total exists"
            )
    return start, end


def utc_windows(day: date, zone: ZoneInfo) -> list[datetime]:
    """Starts (UTC) of the 15-minute windows that make up the local day, in order."""
    start, end = local_day_bounds(day, zone)
    return [start + n * WINDOW for n in range((end - start) // WINDOW)]
