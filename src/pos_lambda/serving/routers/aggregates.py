"""The aggregates: a store's 15-minute windows, its UTC and local days, its hour of week,
a local day against the week before, and a day's top stores."""

from __future__ import annotations

from fastapi import APIRouter

from pos_lambda.serving.local_days import LocalDays, parse_until
from pos_lambda.serving.local_week import DayComparison, HourOfWeek
from pos_lambda.serving.model import DayTotal, TopStores, WindowsAnswer
from pos_lambda.serving.requests import parse_day, parse_instant
from pos_lambda.serving.routers.params import (
    DayPath,
    End,
    FirstDay,
    FirstLocalDay,
    LastDay,
    LastLocalDay,
    Limit,
    ServingDep,
    Start,
    StorePath,
    Until,
    WeekBeforeDayPath,
)
from pos_lambda.serving.routers.responses import JSON_ERRORS, LOCAL_ERRORS, errors

router = APIRouter(tags=["aggregates"])


@router.get("/stores/{store}/windows", responses=JSON_ERRORS)
def windows(lib: ServingDep, store: StorePath, start: Start, end: End) -> WindowsAnswer:
    """A store's 15-minute windows starting in [start, end), each exactly once."""
    return lib.windows(store, parse_instant(start, "start"), parse_instant(end, "end"))


@router.get("/stores/{store}/days", responses=JSON_ERRORS)
def days(lib: ServingDep, store: StorePath, first: FirstDay, last: LastDay) -> list[DayTotal]:
    """A store's daily totals; a day is final when the batch answered all its windows."""
    return lib.daily_totals(store, parse_day(first, "first"), parse_day(last, "last"))


@router.get("/stores/{store}/local-days", responses=LOCAL_ERRORS)
def local_days(
    lib: ServingDep, store: StorePath, first: FirstLocalDay, last: LastLocalDay
) -> LocalDays:
    """A store's totals per local business day, in the zone the store registry gives
    it: each day the exact sum of its UTC windows (96; 92 or 100 on a DST day)."""
    return lib.local_days(store, parse_day(first, "first"), parse_day(last, "last"))


@router.get("/stores/{store}/hour-of-week", responses=LOCAL_ERRORS)
def hour_of_week(
    lib: ServingDep, store: StorePath, first: FirstLocalDay, last: LastLocalDay
) -> HourOfWeek:
    """A store's local days first..last summed per local weekday and hour: 7 x 24 cells
    (Monday 00:00 first) of receipts, items and revenue, each the exact sum of the
    merged 15-minute windows that start in that local hour."""
    return lib.hour_of_week(store, parse_day(first, "first"), parse_day(last, "last"))


@router.get("/stores/{store}/local-days/{day}/week-before", responses=LOCAL_ERRORS)
def week_before(
    lib: ServingDep, store: StorePath, day: WeekBeforeDayPath, until: Until = None
) -> DayComparison:
    """A store's local day against the same weekday a week before: both days' totals
    and the change in percent (null when the week before sold nothing)."""
    cut = parse_until(until) if until is not None else None
    return lib.compare_week_before(store, parse_day(day), cut)


@router.get("/days/{day}/top-stores", responses=errors(422, 503))
def top(lib: ServingDep, day: DayPath, limit: Limit = 10) -> TopStores:
    """The day's stores by merged revenue, best first."""
    return lib.top_stores(parse_day(day), limit)
