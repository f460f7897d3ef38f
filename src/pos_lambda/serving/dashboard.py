"""The dashboard page: a store's day as its 15-minute bars coloured by source, the
horizon marked, totals, whether every receipt of the UTC day arrived (the gaps view),
the same weekday a week before, the hour-of-week heatmap and the pipeline-health panel.
Server-rendered (Jinja2) with inline SVG: no JavaScript, no build
step, nothing fetched from the internet.

The day is the store's local day by default (`view=local`: 96 bars, 92 or 100 on a DST
day, times on its wall clock), or the UTC day (`view=utc`); a store the registry lacks
is shown by UTC day with a note saying how to register it.

`chart` and `heatmap` are the pure geometry (unit-tested); `page` gathers the data
through the library.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta, tzinfo
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from jinja2 import Environment, FileSystemLoader, select_autoescape

from pos_lambda.serving.errors import BrokenStore, QueryError, UnknownStore, UnregisteredStore
from pos_lambda.serving.gaps import GapsAnswer
from pos_lambda.serving.local_week import DayComparison, HourOfWeek
from pos_lambda.serving.model import Totals, Window
from pos_lambda.serving.requests import FIRST_DAY
from pos_lambda.stores.local_day import UnalignedDay, local_day_bounds
from pos_lambda.stores.model import Store

if TYPE_CHECKING:
    from pos_lambda.serving.service import Serving

View = Literal["local", "utc"]
WIDTH, HEIGHT = 960, 240  # plot area of the SVG, in px
SLOT = WIDTH / 96  # one 15-minute window
COLOURS = {"batch": "#2563a8", "speed": "#e07a10"}

_ENV = Environment(
    loader=FileSystemLoader(Path(__file__).with_name("templates")),
    autoescape=select_autoescape(["html"]),
)


@dataclass(frozen=True)
class Bar:
    x: float
    y: float
    width: float
    height: float
    colour: str
    source: str
    label: str  # the bar's tooltip


@dataclass(frozen=True)
class Chart:
    bars: list[Bar]
    seam_x: float | None  # where the batch's windows end in this day; None: all one side
    seam_label: str
    max_revenue: Decimal
    ticks: list[tuple[float, str]]


def chart(windows: list[Window], horizon: datetime | None, zone: tzinfo = UTC) -> Chart:
    """Geometry of one day's windows (96; 92 or 100 on a local DST day): bar height by
    revenue, colour by source, times on the wall clock of `zone`."""
    top = max((w.revenue for w in windows), default=Decimal(0)) or Decimal(1)
    slot = WIDTH / len(windows)
    bars = []
    for i, w in enumerate(windows):
        h = float(w.revenue / top) * (HEIGHT - 10) if w.revenue > 0 else 0.0
        start, end = w.window_start.astimezone(zone), w.window_end.astimezone(zone)
        bars.append(
            Bar(
                x=round(i * slot + 1, 2),
                y=round(HEIGHT - h, 2),
                width=round(slot - 2, 2),
                height=round(h, 2),
                colour=COLOURS[w.source],
                source=w.source,
                label=f"{start:%H:%M}-{end:%H:%M} {start:%Z}: {w.receipt_count} "
                f"receipts, revenue {w.revenue} ({w.source}"
                + (f", version {w.version})" if w.version else ", not final yet)"),
            )
        )
    batch = sum(1 for w in windows if w.source == "batch")
    if horizon is None or batch == 0:
        seam_x, seam_label = None, "no committed batch for this day yet: all windows from speed"
    elif batch == len(windows):
        seam_x, seam_label = None, f"whole day final (batch horizon {_when(horizon, zone)})"
    else:
        seam_x = round(batch * slot, 2)
        seam_label = f"batch horizon {_when(windows[batch].window_start, zone)}"
    # A tick every 3 wall-clock hours: a DST day's skipped hour has no window to tick.
    ticks = [
        (round(i * slot, 2), f"{local.hour:02d}:00")
        for i, local in enumerate(w.window_start.astimezone(zone) for w in windows)
        if local.minute == 0 and local.hour % 3 == 0
    ]
    ticks.append((round(len(windows) * slot, 2), "24:00"))
    return Chart(bars, seam_x, seam_label, top, ticks)


def _when(at: datetime, zone: tzinfo) -> str:
    return f"{at.astimezone(zone):%Y-%m-%d %H:%M %Z}"


CELL_W, CELL_H = 36, 26  # one hour of the week in the heatmap, in px
HEAT_LOW, HEAT_HIGH = (238, 244, 251), (31, 78, 140)  # the least revenue .. the most
HEAT_FLOOR = 0.15  # the quietest hour with sales stays visibly apart from an empty one
EMPTY = "#f3f4f6"  # no revenue (closed, or nothing sold): grey, not the palest blue


@dataclass(frozen=True)
class Cell:
    x: int
    y: int
    fill: str
    text: str  # the revenue, in whole units; empty when there is none
    dark: bool  # white text on it
    label: str  # the tooltip


@dataclass(frozen=True)
class Heatmap:
    cells: list[Cell]
    rows: list[tuple[int, str, str]]  # (y, weekday, its total: revenue · receipts)
    max_revenue: Decimal
    width: int
    height: int


def _shade(share: float) -> str:
    r, g, b = (round(lo + (hi - lo) * share) for lo, hi in zip(HEAT_LOW, HEAT_HIGH, strict=True))
    return f"#{r:02x}{g:02x}{b:02x}"


def heatmap(week: HourOfWeek) -> Heatmap:
    """Geometry of the 7 x 24 hour-of-week cells: shade by revenue (the range's largest
    hour the darkest), tooltip with receipts, items, revenue and days counted."""
    top = max((c.revenue for c in week.cells), default=Decimal(0)) or Decimal(1)
    cells, rows = [], []
    for c in week.cells:
        share = float(c.revenue / top) if c.revenue > 0 else 0.0
        fill = _shade(HEAT_FLOOR + (1 - HEAT_FLOOR) * share) if c.revenue > 0 else EMPTY
        days = week.days_per_weekday[c.weekday]
        cells.append(
            Cell(
                x=c.hour * CELL_W,
                y=c.weekday * CELL_H,
                fill=fill,
                text=f"{c.revenue:.0f}" if c.revenue > 0 else "",
                dark=share > 0.5,
                label=f"{c.weekday_name} {c.hour:02d}:00-{c.hour + 1:02d}:00 "
                f"({week.time_zone}), {days} day{'s' if days != 1 else ''}: "
                f"{c.receipt_count} receipts, {c.item_quantity} items, revenue {c.revenue}",
            )
        )
    for weekday in range(7):
        day_cells = week.cells[weekday * 24 : (weekday + 1) * 24]
        revenue = sum((c.revenue for c in day_cells), Decimal("0.00"))
        receipts = sum(c.receipt_count for c in day_cells)
        rows.append((weekday * CELL_H, day_cells[0].weekday_name, f"{revenue} · {receipts}"))
    return Heatmap(cells, rows, top, 24 * CELL_W, 7 * CELL_H)


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "n/a"
    return str(timedelta(seconds=round(seconds)))


# Dead letters a page load reads to count them by reason ("1000+" past it): a page
# opened every few seconds must not scan POS_SERVE_DEAD_LETTER_SCAN_LIMIT (100k) rows
# each time; /health and the metrics scrape count further.
DASHBOARD_DEAD_LETTER_ROWS = 1000
HEATMAP_DAYS = 28  # four of each weekday (fewer if POS_SERVE_MAX_RANGE_DAYS is lower)


@dataclass(frozen=True)
class Shown:
    """What the page shows of one store: the day's windows, in which zone, and why."""

    view: View
    zone: tzinfo
    zone_name: str
    windows: list[Window]
    totals: Totals
    note: str | None = None  # why a local view fell back to UTC


def _registered(serving: Serving, store: int) -> tuple[Store | None, str | None]:
    """(the store's registry entry or None, why a local view cannot be shown: the
    registry's row of it is broken). A broken row degrades the page to UTC days with
    the reason, the way an unregistered store does: the rest of the page still helps."""
    try:
        return serving.store_entry(store), None
    except UnregisteredStore:
        return None, None
    except BrokenStore as exc:
        return None, str(exc)


def in_progress_until(day: date, zone: tzinfo, now: datetime) -> time | None:
    """Where to cut a like-for-like comparison of `day`: the start of the current
    15-minute window on the store's wall clock when `day` is its today (a day in
    progress against the same hours a week before), else None (whole days)."""
    local = now.astimezone(zone)
    if local.date() != day:
        return None
    return time(local.hour, local.minute - local.minute % 15)


def _default_day(horizon: datetime | None, zone: tzinfo) -> date:
    """The day (in `zone`) of the last instant before the horizon, or of now."""
    ref = horizon or datetime.now(UTC)
    return (ref - timedelta(microseconds=1)).astimezone(zone).date()


def _day_of(
    serving: Serving,
    store: int,
    day: date,
    registered: Store | None,
    view: View,
    broken: str | None = None,
) -> Shown:
    if view == "local" and registered is not None:
        try:
            start, end = local_day_bounds(day, registered.zone)
        except UnalignedDay as exc:
            raise QueryError(str(exc)) from None
        answer = serving.windows(store, start, end)
        return Shown("local", registered.zone, registered.time_zone, answer.windows, answer.totals)
    start = datetime.combine(day, datetime.min.time(), tzinfo=UTC)
    answer = serving.windows(store, start, start + timedelta(days=1))
    note = None
    if view == "local" and broken is not None:
        note = f"{broken}: showing UTC days"
    elif view == "local":
        note = (
            f"store {store} is not in the store registry, so it has no local day: showing "
            f"UTC days (add it with pos-stores add {store} --name ... --zone ... --hours ...)"
        )
    return Shown("utc", UTC, "UTC", answer.windows, answer.totals, note)


def page(serving: Serving, store: int | None, day: date | None, view: View = "local") -> str:
    """The page for (store, day) by local or UTC day; defaults: the day of the batch
    horizon (in the store's zone for a local view), the top store of that UTC day."""
    health = serving.health(dead_letter_rows=DASHBOARD_DEAD_LETTER_ROWS)
    top = serving.top_stores(day or _default_day(health.horizon, UTC), 10)
    if store is None and top.stores:
        store = top.stores[0].operation_id
    registered, broken = _registered(serving, store) if store is not None else (None, None)
    zone = registered.zone if registered is not None and view == "local" else UTC
    day = day or _default_day(health.horizon, zone)
    shown, missing = None, None
    gaps: GapsAnswer | None = None
    week: HourOfWeek | None = None
    comparison: DayComparison | None = None
    if store is not None:
        try:
            shown = _day_of(serving, store, day, registered, view, broken)
            gaps = serving.gaps(store, day)  # the gaps view is by UTC day
            if registered is not None:
                days = min(HEATMAP_DAYS, serving.settings.serve.max_range_days)
                first = max(day - timedelta(days=days - 1), FIRST_DAY)
                week = serving.hour_of_week(store, first, day)
            if shown.view == "local" and day - timedelta(days=7) >= FIRST_DAY:
                until = in_progress_until(day, shown.zone, health.checked_at)
                comparison = serving.compare_week_before(store, day, until)
        except UnknownStore as exc:
            missing = str(exc)
    return _ENV.get_template("dashboard.html").render(
        store=store,
        day=day,
        view=shown.view if shown else view,
        asked_view=view,
        shown=shown,
        registered=registered,
        previous_day=day - timedelta(days=1),
        next_day=day + timedelta(days=1),
        chart=chart(shown.windows, health.horizon, shown.zone) if shown else None,
        totals=shown.totals if shown else Totals(),
        comparison=comparison,
        gaps=gaps,
        week=week,
        heat=heatmap(week) if week else None,
        top=top.stores,
        top_day=top.day,
        health=health,
        missing=missing,
        age=_age,
        colours=COLOURS,
        width=WIDTH,
        height=HEIGHT,
        cell_w=CELL_W,
        cell_h=CELL_H,
        percent=_percent,
    )


def _percent(change: Decimal | None) -> str:
    return "n/a" if change is None else f"{change:+}%"


def error_page(status: int, reason: str) -> str:
    return _ENV.get_template("error.html").render(status=status, reason=reason)
