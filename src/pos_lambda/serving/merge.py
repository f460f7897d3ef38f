"""The serving merge: one exact answer per 15-minute window from batch + speed (pure).

Semantics (docs/serving.md): window w = [s, s + 15 min) of store S on UTC day D
is answered

- from the committed batch version of D iff the pointer has a row for D and
  s + 15 min <= that row's covered_until and <= the static horizon
  (`Pointer.covering`): source "batch", final;
- otherwise from the speed view: source "speed", not final.

Every window of the requested range gets exactly one row (zeros where the chosen
source holds nothing), so no window is counted from both views or missed at the seam;
a window that only one view holds still appears, from whichever view answers it. A
classic Lambda UNION ALL of the two views would count every window both views hold
twice; tests/unit/serving/test_merge.py shows the difference on literal rows.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from typing import Any, TypeVar

from pos_lambda.schemas.aggregate import NO_RECEIPTS
from pos_lambda.serving.model import AggregateRow, DayTotal, Pointer, Segment, Totals, Window
from pos_lambda.views.windows import WINDOW, window_start


def window_starts(start: datetime, end: datetime) -> Iterator[datetime]:
    """Starts of the windows that begin in [floor(start), end)."""
    at = window_start(start)
    while at < end:
        yield at
        at += WINDOW


def day_bounds(day: date) -> tuple[datetime, datetime]:
    first = datetime.combine(day, time(0), tzinfo=UTC)
    return first, first + timedelta(days=1)


def merge_windows(
    operation_id: int,
    start: datetime,
    end: datetime,
    pointer: Pointer,
    batch: Iterable[AggregateRow],
    speed: Iterable[AggregateRow],
) -> list[Window]:
    """The store's windows of [start, end), each from exactly one source.

    `batch` may hold rows of any version: only those of the version the pointer names
    for their day count (an orphan version of a killed run is never served).
    """
    by_batch = {(r.window_start, r.version): r for r in batch if r.operation_id == operation_id}
    by_speed = {r.window_start: r for r in speed if r.operation_id == operation_id}
    out = []
    for ws in window_starts(start, end):
        committed = pointer.covering(ws)
        if committed is not None:
            row = by_batch.get((ws, committed.version))
            out.append(_window(operation_id, ws, row, "batch", committed.version))
        else:
            out.append(_window(operation_id, ws, by_speed.get(ws), "speed", None))
    return out


def _window(
    operation_id: int, ws: datetime, row: AggregateRow | None, source: str, version: str | None
) -> Window:
    return Window(
        operation_id=operation_id,
        window_start=ws,
        window_end=ws + WINDOW,
        **(row.aggregate if row else NO_RECEIPTS)._asdict(),
        source="batch" if source == "batch" else "speed",
        final=source == "batch",
        version=version,
    )


def totals(windows: Iterable[Window]) -> Totals:
    rows = list(windows)
    return Totals(
        receipt_count=sum(w.receipt_count for w in rows),
        item_quantity=sum(w.item_quantity for w in rows),
        revenue=sum((w.revenue for w in rows), Decimal("0.00")),
        late_count=sum(w.late_count for w in rows),
        batch_windows=sum(1 for w in rows if w.source == "batch"),
        speed_windows=sum(1 for w in rows if w.source == "speed"),
    )


def daily_totals(windows: Iterable[Window]) -> list[DayTotal]:
    """Per (store, UTC day), in order; a day is final when batch answered all of it."""
    by_day: dict[tuple[int, date], list[Window]] = defaultdict(list)
    for w in windows:
        by_day[(w.operation_id, w.window_start.date())].append(w)
    return [
        DayTotal(operation_id=store, day=day, **totals(rows).of_day())
        for (store, day), rows in sorted(by_day.items())
    ]


def top_stores(
    day: date,
    pointer: Pointer,
    batch: Iterable[AggregateRow],
    speed: Iterable[AggregateRow],
    limit: int,
) -> list[DayTotal]:
    """The day's stores by merged revenue (then receipts, then store id), best first.

    A store counts if either view holds a row of it that day; each store's day is the
    same merge as `merge_windows`, so the ranking agrees with the per-store answers.
    """
    batch_rows, speed_rows = list(batch), list(speed)
    stores = {r.operation_id for r in batch_rows} | {r.operation_id for r in speed_rows}
    first, last = day_bounds(day)
    days = [
        daily_totals(merge_windows(s, first, last, pointer, batch_rows, speed_rows))[0]
        for s in stores
    ]
    ranked = sorted(days, key=lambda d: (-d.revenue, -d.receipt_count, d.operation_id))
    return [d for d in ranked if d.receipt_count][:limit]


def batch_split(pointer: Pointer, day: date) -> datetime:
    """Where a store-day's receipts switch from the batch version to the speed view.

    Receipts before the returned instant belong to windows the batch answers (covered
    windows form a prefix of the day, since covered_until and the horizon are window
    boundaries), the rest to the speed view; the day's start means all speed.
    """
    first, last = day_bounds(day)
    at = first
    while at < last and pointer.covering(at) is not None:
        at += WINDOW
    return at


Row = TypeVar("Row")


def served_conflicts(
    batch: Iterable[Row], speed: Iterable[Row], split: datetime, bound: int | None
) -> list[Row]:
    """A store-day's conflicts as the merged views serve them: those whose winner falls
    in the batch's covered prefix (before `split`, `batch_split`) from the served batch
    version, counted by its commit (`master_version` at most `bound`, the day's
    delta_version), the rest from the speed layer's. So a rebuild that resolves a key
    otherwise, or a fold not yet committed, never shows a conflict the views do not
    count, and no conflict is listed by both layers."""
    return [
        *(r for r in batch if _winner_at(r) < split and _counted(r, bound)),
        *(r for r in speed if _winner_at(r) >= split),
    ]


def _winner_at(row: Any) -> datetime:
    at: datetime = row.winner_happened_at
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)


def _counted(row: Any, bound: int | None) -> bool:
    master_version = getattr(row, "master_version", None)
    return bound is None or master_version is None or master_version <= bound


def receipt_segments(pointer: Pointer, start: datetime, end: datetime) -> list[Segment]:
    """The receipts of [start, end) as segments in time order, each read from one side.

    Per UTC day the range touches (a local day touches two, or three when it is 25 h):
    the part before the day's `batch_split` from the committed version, the rest from
    the speed view, so a receipt is listed by the side whose window answers it, as the
    aggregates are merged.
    """
    out: list[Segment] = []
    day = start.date()
    while datetime.combine(day, time(0), tzinfo=UTC) < end:
        first, last = day_bounds(day)
        lo, hi = max(start, first), min(end, last)
        split = min(max(batch_split(pointer, day), lo), hi)
        if lo < split:  # a covered prefix: the day has a committed version
            out.append(Segment("batch", day, lo, split, pointer.days[day].receipts_ref))
        if split < hi:
            out.append(Segment("speed", day, split, hi))
        day += timedelta(days=1)
    return out
