"""A store's week in its own time: the hour-of-week heatmap and the same weekday last
week (pure).

Both are sums of the merged 15-minute windows (`merge.merge_windows`: batch up to the
horizon, speed after it, each window once) that make up the store's local days
(`local_days.by_local_day`), so they agree with `local_days` to the cent.

- **Hour of week** (the seed's "productivity by hours in week"): a window belongs to
  the local weekday and hour of its start. Every UTC offset is a multiple of 15 minutes,
  so a window never straddles a local hour. On a spring-forward day the skipped hour has
  no window; on a fall-back day the repeated hour has eight (both occurrences happened
  in that wall-clock hour, and a retailer staffs by the wall clock).
- **Same weekday last week**: a local day against the local day seven days before it
  (both whole local days; a DST day has its 92 or 100 windows), change in percent.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from decimal import Decimal

from pos_lambda.serving import merge
from pos_lambda.serving.local_days import LocalDayTotal, by_local_day
from pos_lambda.serving.model import Totals, Window
from pos_lambda.stores.model import WEEKDAYS, Store

HOURS = 24
PERCENT = Decimal("0.1")


@dataclass(frozen=True)
class HourCell:
    """One local (weekday, hour) of the range: its windows' sums."""

    weekday: int  # 0 = Monday, as date.weekday()
    weekday_name: str  # mon..sun, as the store's opening hours name them
    hour: int  # local wall-clock hour, 0..23
    windows: int  # 15-minute windows summed: 4 per day usually, 0 or 8 on a DST day
    receipt_count: int
    item_quantity: int
    revenue: Decimal


@dataclass(frozen=True)
class HourOfWeek:
    """A store's local days first..last, summed per local weekday and hour: 7 x 24 cells,
    Monday 00:00 first, cells without windows included (zeros)."""

    operation_id: int
    name: str
    time_zone: str
    first: date
    last: date
    horizon: datetime | None
    days_per_weekday: list[int]  # how many local days of each weekday the range holds
    totals: Totals
    final: bool  # every window of the range came from the batch
    cells: list[HourCell]


def hour_cells(store: Store, windows: Iterable[Window]) -> list[HourCell]:
    """7 x 24 cells (weekday-major) of merged windows, each by its local start."""
    acc: dict[tuple[int, int], list[Window]] = {
        (d, h): [] for d in range(len(WEEKDAYS)) for h in range(HOURS)
    }
    for w in windows:
        local = w.window_start.astimezone(store.zone)
        acc[(local.weekday(), local.hour)].append(w)
    out = []
    for (weekday, hour), rows in acc.items():
        t = merge.totals(rows)
        out.append(
            HourCell(
                weekday=weekday,
                weekday_name=WEEKDAYS[weekday],
                hour=hour,
                windows=len(rows),
                receipt_count=t.receipt_count,
                item_quantity=t.item_quantity,
                revenue=t.revenue,
            )
        )
    return out


def hour_of_week(
    store: Store, days: Sequence[date], windows: Sequence[Window], horizon: datetime | None
) -> HourOfWeek:
    """The heatmap of the local days `days` from merged windows covering all of them."""
    in_days = [w for _, rows in by_local_day(store, days, windows) for w in rows]
    t = merge.totals(in_days)
    cells = hour_cells(store, in_days)
    return HourOfWeek(
        operation_id=store.operation_id,
        name=store.name,
        time_zone=store.time_zone,
        first=days[0],
        last=days[-1],
        horizon=horizon,
        days_per_weekday=[sum(1 for d in days if d.weekday() == i) for i in range(7)],
        totals=t,
        final=t.speed_windows == 0,
        cells=cells,
    )


@dataclass(frozen=True)
class DayComparison:
    """A local day against the same weekday the week before; changes in percent of the
    earlier day (None when it had nothing to compare with), rounded to 0.1."""

    operation_id: int
    name: str
    time_zone: str
    horizon: datetime | None
    day: LocalDayTotal
    week_before: LocalDayTotal
    receipt_change_percent: Decimal | None
    revenue_change_percent: Decimal | None
    # Both days up to this local time ("HH:MM"), like for like; None: whole days.
    until: str | None = None


def week_before(day: date) -> date:
    return day - timedelta(days=7)


def change_percent(now: Decimal | int, before: Decimal | int) -> Decimal | None:
    """(now - before) / before in percent, to 0.1; None when before is zero (a store
    that sold nothing a week ago has no percentage to grow by)."""
    if before == 0:
        return None
    return (Decimal(now - before) * 100 / Decimal(before)).quantize(PERCENT)


def compare(
    store: Store,
    day: LocalDayTotal,
    earlier: LocalDayTotal,
    horizon: datetime | None,
    until: time | None = None,
) -> DayComparison:
    if earlier.day != week_before(day.day):  # a caller's bug: the answer would mislead
        raise ValueError(f"{earlier.day} is not the week before {day.day}")
    return DayComparison(
        operation_id=store.operation_id,
        name=store.name,
        time_zone=store.time_zone,
        horizon=horizon,
        day=day,
        week_before=earlier,
        receipt_change_percent=change_percent(day.receipt_count, earlier.receipt_count),
        revenue_change_percent=change_percent(day.revenue, earlier.revenue),
        until=until.strftime("%H:%M") if until is not None else None,
    )
