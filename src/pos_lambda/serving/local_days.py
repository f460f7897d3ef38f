"""A store's totals per local business day, from the merged 15-minute windows (pure).

A local day is an exact set of UTC windows (pos_lambda.stores.local_day: 96, or 92 / 100
on a DST day), so its totals are exact sums of the windows the serving merge answered
(`merge.merge_windows`: batch up to the horizon, speed after it, each window once). No
window is split or apportioned; a day is final when the batch answered all its windows.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, tzinfo
from decimal import Decimal

from pos_lambda.serving import merge
from pos_lambda.serving.errors import BrokenStore, QueryError, Unavailable, UnregisteredStore
from pos_lambda.serving.model import Window
from pos_lambda.stores.local_day import UnalignedDay, local_day_bounds, utc_windows
from pos_lambda.stores.model import Store, StoreError
from pos_lambda.stores.registry import RegistryUnavailable, StoreRegistry


# After its window count, `Totals.of_day()`'s fields, as a UTC day's `DayTotal` has them
# (the docstring is the OpenAPI description: it stays as the HTTP API published it).
@dataclass(frozen=True)
class LocalDayTotal:
    """One local business day of a store: [start, end) in UTC and its window count."""

    operation_id: int
    day: date  # the store's local calendar day
    start: datetime  # UTC, the local midnight
    end: datetime  # UTC, the next local midnight
    windows: int  # 96; 92 or 100 on a DST day
    receipt_count: int
    item_quantity: int
    revenue: Decimal
    late_count: int
    batch_windows: int
    speed_windows: int
    final: bool


@dataclass(frozen=True)
class LocalDays:
    """A store's local days first..last, in its registered zone."""

    operation_id: int
    name: str
    time_zone: str
    horizon: datetime | None
    days: list[LocalDayTotal]


def registered_store(registry: StoreRegistry, operation_id: int) -> Store:
    """The store's registry entry; the serving errors when there is none, no registry or
    a row that breaks the registry's rules (`BrokenStore`: pos-alerts refuses to start on
    one, the serving layer refuses the local days of that store only)."""
    try:
        store = registry.get(operation_id)
    except RegistryUnavailable as exc:
        raise Unavailable(str(exc)) from None
    except StoreError as exc:
        reason = str(exc).removeprefix(f"store {operation_id}: ")
        raise BrokenStore(operation_id, reason) from None
    if store is None:
        raise UnregisteredStore(operation_id)
    return store


def utc_span(store: Store, first: date, last: date) -> tuple[datetime, datetime]:
    """[start, end) in UTC of the store's local days first..last."""
    try:
        return local_day_bounds(first, store.zone)[0], local_day_bounds(last, store.zone)[1]
    except UnalignedDay as exc:
        raise QueryError(str(exc)) from None


def by_local_day(
    store: Store, days: Sequence[date], windows: Iterable[Window]
) -> list[tuple[date, list[Window]]]:
    """Each local day with its merged windows in time order (96; 92 or 100 on a DST day),
    from windows covering all of them; a window outside them is left out."""
    by_start = {w.window_start: w for w in windows if w.operation_id == store.operation_id}
    out = []
    for day in days:
        starts = utc_windows(day, store.zone)
        missing = [s for s in starts if s not in by_start]
        if missing:  # a caller's bug, not the data's: the merge answers every window
            raise ValueError(f"windows of local day {day} missing: {missing[:3]}...")
        out.append((day, [by_start[s] for s in starts]))
    return out


# ASCII digits only: str.isdigit() and \d also take "²" or "٣", which int() then refuses
# or reads as another digit.
_UNTIL = re.compile(r"([0-9]{1,2}):([0-9]{2})")
# The OpenAPI document's: exactly what parse_until takes, 00:15..24:00 on the grid.
UNTIL_PATTERN = r"^((0?[1-9]|1[0-9]|2[0-3]):(00|15|30|45)|0?0:(15|30|45)|24:00)$"


def parse_until(text: str) -> time | None:
    """A local wall-clock time "HH:MM" on a 15-minute boundary, 00:15..24:00, to cut a
    local day at; "24:00" is the whole day (None). QueryError for anything else."""
    clock = _UNTIL.fullmatch(text)
    if clock is None:
        raise QueryError(f"until {text!r} is not a local time HH:MM (ASCII digits), e.g. 14:30")
    h, m = int(clock[1]), int(clock[2])
    if (h, m) == (24, 0):
        return None
    if not (0 <= h < 24 and m in (0, 15, 30, 45)) or (h, m) == (0, 0):
        raise QueryError(
            f"until {text!r}: a local time on a 15-minute boundary from 00:15 to 24:00 "
            "(the windows' grid), e.g. 14:30"
        )
    return time(h, m)


def until_instant(day: date, until: time, zone: tzinfo) -> datetime:
    """The UTC instant the store's wall clock first shows `until` on local day `day`
    (zoneinfo's fold=0: a time a spring-forward skips resolves with the offset before
    the change, so it lands that many minutes after the skip)."""
    return datetime.combine(day, until, tzinfo=zone).astimezone(UTC)


def local_day_totals(
    store: Store, days: Sequence[date], windows: Iterable[Window], until: time | None = None
) -> list[LocalDayTotal]:
    """Each local day's totals from merged windows covering all of them (each once);
    with `until`, only the windows that start before that local time on each day (a
    like-for-like cut of a day still in progress)."""
    out = []
    for day, whole in by_local_day(store, days, windows):
        rows = whole
        if until is not None:
            cut = until_instant(day, until, store.zone)
            rows = [w for w in whole if w.window_start < cut]
        out.append(
            LocalDayTotal(
                operation_id=store.operation_id,
                day=day,
                start=whole[0].window_start,
                # No window before `until` (e.g. the dashboard just after local midnight).
                end=rows[-1].window_end if rows else whole[0].window_start,
                windows=len(rows),
                **merge.totals(rows).of_day(),
            )
        )
    return out
