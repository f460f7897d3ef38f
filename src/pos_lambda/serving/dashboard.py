"""The dashboard page: a store's day as 96 bars coloured by source, the horizon marked,
totals and the pipeline-health panel. Server-rendered (Jinja2) with inline SVG: no
JavaScript, no build step, nothing fetched from the internet.

`chart` is the pure geometry (unit-tested); `page` gathers the data through the library.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING

from jinja2 import Environment, FileSystemLoader, select_autoescape

from pos_lambda.serving.errors import UnknownStore
from pos_lambda.serving.model import Totals, Window

if TYPE_CHECKING:
    from pos_lambda.serving.service import Serving

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


def chart(windows: list[Window], horizon: datetime | None) -> Chart:
    """Geometry of one day's 96 windows: bar height by revenue, colour by source."""
    top = max((w.revenue for w in windows), default=Decimal(0)) or Decimal(1)
    bars = []
    for i, w in enumerate(windows):
        h = float(w.revenue / top) * (HEIGHT - 10) if w.revenue > 0 else 0.0
        bars.append(
            Bar(
                x=round(i * SLOT + 1, 2),
                y=round(HEIGHT - h, 2),
                width=round(SLOT - 2, 2),
                height=round(h, 2),
                colour=COLOURS[w.source],
                source=w.source,
                label=f"{w.window_start:%H:%M}-{w.window_end:%H:%M} UTC: {w.receipt_count} "
                f"receipts, revenue {w.revenue} ({w.source}"
                + (f", version {w.version})" if w.version else ", not final yet)"),
            )
        )
    batch = sum(1 for w in windows if w.source == "batch")
    if horizon is None or batch == 0:
        seam_x, seam_label = None, "no committed batch for this day yet: all windows from speed"
    elif batch == len(windows):
        seam_x, seam_label = None, f"whole day final (batch horizon {horizon:%Y-%m-%d %H:%M} UTC)"
    else:
        seam_x = round(batch * SLOT, 2)
        seam_label = f"batch horizon {windows[batch].window_start:%Y-%m-%d %H:%M} UTC"
    ticks = [(round(h * 4 * SLOT, 2), f"{h:02d}:00") for h in range(0, 25, 3)]
    return Chart(bars, seam_x, seam_label, top, ticks)


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "n/a"
    return str(timedelta(seconds=round(seconds)))


def page(serving: Serving, store: int | None, day: date | None) -> str:
    """The page for (store, day); defaults: the day of the batch horizon, its top store."""
    health = serving.health()
    if day is None:
        ref = health.horizon or datetime.now(UTC)
        day = (ref - timedelta(microseconds=1)).date()
    top = serving.top_stores(day, 10)
    if store is None and top.stores:
        store = top.stores[0].operation_id
    windows: list[Window] = []
    totals, missing = Totals(), None
    if store is not None:
        try:
            start = datetime.combine(day, datetime.min.time(), tzinfo=UTC)
            answer = serving.windows(store, start, start + timedelta(days=1))
            windows, totals = answer.windows, answer.totals
        except UnknownStore as exc:
            missing = str(exc)
    return _ENV.get_template("dashboard.html").render(
        store=store,
        day=day,
        previous_day=day - timedelta(days=1),
        next_day=day + timedelta(days=1),
        chart=chart(windows, health.horizon) if windows else None,
        totals=totals,
        top=top.stores,
        health=health,
        missing=missing,
        age=_age,
        colours=COLOURS,
        width=WIDTH,
        height=HEIGHT,
    )


def error_page(status: int, reason: str) -> str:
    return _ENV.get_template("error.html").render(status=status, reason=reason)
