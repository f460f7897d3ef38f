"""The dashboard's geometry and page, from literal rows (a fake library: no Cassandra)."""

from __future__ import annotations

import re
from dataclasses import replace
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from typing import Any

from pos_lambda.batch_layer.runs import BatchRun
from pos_lambda.schemas.aggregate import Aggregate
from pos_lambda.serving import dashboard
from pos_lambda.serving.errors import BrokenStore, UnregisteredStore
from pos_lambda.serving.gaps import DeviceGaps, GapsAnswer, MissingRange
from pos_lambda.serving.local_days import local_day_totals
from pos_lambda.serving.local_week import compare, hour_of_week
from pos_lambda.serving.merge import merge_windows, totals
from pos_lambda.serving.model import (
    AggregateRow,
    DayTotal,
    DayVersion,
    DeadLetters,
    Health,
    Pointer,
    SpeedQuery,
    TopStores,
    WindowsAnswer,
)
from pos_lambda.settings import Settings
from pos_lambda.stores.model import Store, parse_week

D = date(2026, 3, 2)
MIDNIGHT = datetime(2026, 3, 2, tzinfo=UTC)
HORIZON = MIDNIGHT + timedelta(hours=14)
POINTER = Pointer(HORIZON, {D: DayVersion(D, "v7", HORIZON)})
NINE, FIFTEEN = MIDNIGHT + timedelta(hours=9), MIDNIGHT + timedelta(hours=15)
BATCH = [AggregateRow(101, NINE, Aggregate(4, 8, Decimal("20.00"), 0), "v7")]
SPEED = [
    AggregateRow(101, NINE, Aggregate(9, 9, Decimal("99.00"), 0)),  # not served
    AggregateRow(101, FIFTEEN, Aggregate(2, 2, Decimal("10.00"), 1)),
]
WINDOWS = merge_windows(101, MIDNIGHT, MIDNIGHT + timedelta(days=1), POINTER, BATCH, SPEED)


def test_chart_has_96_bars_coloured_by_source_and_the_horizon_at_14h() -> None:
    c = dashboard.chart(WINDOWS, HORIZON)
    assert len(c.bars) == 96
    assert [b.source for b in c.bars] == ["batch"] * 56 + ["speed"] * 40
    assert {b.colour for b in c.bars[:56]} == {dashboard.COLOURS["batch"]}
    assert c.seam_x == 56 * dashboard.SLOT == 560.0
    assert c.seam_label == "batch horizon 2026-03-02 14:00 UTC"
    tallest = c.bars[36]  # 09:00, the day's largest revenue
    assert (tallest.height, tallest.y) == (dashboard.HEIGHT - 10, 10.0)
    assert c.bars[60].height == (dashboard.HEIGHT - 10) / 2  # 15:00, half the revenue
    assert c.bars[0].height == 0.0
    assert c.bars[36].label == "09:00-09:15 UTC: 4 receipts, revenue 20.00 (batch, version v7)"


def test_chart_labels_a_day_all_batch_or_all_speed() -> None:
    all_batch = [w for w in WINDOWS if w.source == "batch"]
    assert dashboard.chart(all_batch, HORIZON).seam_label.startswith("whole day final")
    all_speed = [w for w in WINDOWS if w.source == "speed"]
    assert dashboard.chart(all_speed, None).seam_x is None


class FakeServing:
    """Literal answers in place of the library (unit tests only)."""

    settings = Settings()

    def __init__(self) -> None:
        self.dead_letter_rows: list[int | None] = []

    def health(self, dead_letter_rows: int | None = None) -> Health:
        self.dead_letter_rows.append(dead_letter_rows)
        return Health(
            checked_at=HORIZON + timedelta(hours=2),
            horizon=HORIZON,
            horizon_age_seconds=7200.0,
            batch_runs=[
                BatchRun(
                    run_id="r1",
                    status="committed",
                    interval_start=MIDNIGHT,
                    interval_end=HORIZON,
                    version="v7",
                    horizon=HORIZON,
                    receipts=5,
                    duplicates_removed=1,
                    conflicts=0,
                    started_at=HORIZON,
                    finished_at=HORIZON,
                )
            ],
            speed=[SpeedQuery("pos-speed-views", 42, HORIZON, 3.0, 0, 10, 100.0)],
            dead_letters=DeadLetters(3, {"invalid_json": 2, "missing_field": 1}, False),
        )

    def top_stores(self, day: date, limit: int) -> TopStores:
        return TopStores(day, HORIZON, [DayTotal(101, day, 6, 10, Decimal("30.00"), 1, 56, 40,
                                                 False)])  # fmt: skip

    def windows(self, store: int, start: datetime, end: datetime) -> WindowsAnswer:
        assert (store, start, end) == (101, MIDNIGHT, MIDNIGHT + timedelta(days=1))
        return WindowsAnswer(101, start, end, HORIZON, totals(WINDOWS), WINDOWS)

    def store_entry(self, store: int) -> Store:
        raise UnregisteredStore(store)  # store 101 has no zone here: the page shows UTC

    def gaps(self, store: int, day: date) -> GapsAnswer:
        return GapsAnswer(
            store,
            day,
            "provisional",
            (
                DeviceGaps(2, 3309, 3320, 10, (MissingRange(3311, 3312, "missing"),)),
                DeviceGaps(3, 1, 40, 40, (), (1,)),
            ),
        )


def test_page_defaults_to_the_horizon_day_and_its_top_store() -> None:
    fake: Any = FakeServing()
    html = dashboard.page(fake, None, None)
    assert fake.dead_letter_rows == [1000]  # a page load counts 1,000 dead letters at most
    assert 'Store 101 · 2026-03-02 <span class="sub">(UTC)</span>' in html
    assert "store 101 is not in the store registry, so it has no local day: showing UTC" in html
    assert 'id="heatmap"' not in html and 'id="week-before"' not in html
    assert len(re.findall(r'<rect [^>]*height="[^"]*" fill="#', html)) == 2 * 96
    assert 'stroke-dasharray="6 4"' in html and "batch horizon 2026-03-02 14:00 UTC" in html
    # The hooks docs/capture_dashboard.py checks in the browser: bars by source, the seam.
    sources = re.findall(r'<rect class="bar" data-source="(\w+)"', html)
    assert sources == ["batch"] * 56 + ["speed"] * 40
    assert len(re.findall(r'<line class="horizon" x1="560.0"', html)) == 1
    assert "<td>30.00</td>" in html and "3: invalid_json 2 · missing_field 1</td>" in html
    assert "pos-speed-views" in html and "committed" in html
    # The gaps panel: the answer's line, and each till's missing ranges with their status.
    assert (
        '<p id="gaps-line" class="down">store 101 2026-03-02 (provisional): 2 missing '
        "(3311-3312 on till 2)</p>" in html
    )
    assert "<td>3311-3312 (missing)</td>" in html and "<td>none</td>" in html
    # Nothing to run or fetch: no scripts, no external stylesheets, fonts or images.
    assert "<script" not in html and not re.search(r'(src|href)="https?:', html)


class FakeBrokenServing(FakeServing):
    """Store 101's row in the stores table edited by hand into an unknown zone."""

    def store_entry(self, store: int) -> Store:
        raise BrokenStore(store, "time zone 'Mars/Olympus_Mons' is unknown")


def test_a_broken_stores_row_shows_utc_days_with_what_to_fix() -> None:
    fake: Any = FakeBrokenServing()
    html = dashboard.page(fake, 101, None)
    assert 'Store 101 · 2026-03-02 <span class="sub">(UTC)</span>' in html
    assert (
        "the stores table&#39;s row of store 101 is broken (time zone &#39;Mars/Olympus_Mons&#39; "
        "is unknown), so its local day is unknown: rewrite that row with pos-stores set 101 "
        "--repair --name ... --zone ... --hours ..., or ask by UTC day meanwhile: "
        "showing UTC days"
    ) in html
    assert len(re.findall(r'<rect class="bar"', html)) == 96
    assert 'id="heatmap"' not in html and 'id="week-before"' not in html


# New York springs forward on Sunday 8 March 2026: its local day is
# [8 March 05:00, 9 March 04:00) UTC, 92 windows; the batch horizon is 12:00 UTC.
NEW_YORK = Store.create(103, "SoHo", "America/New_York", parse_week(["daily=07:00-22:00"]))
NY_DAY = date(2026, 3, 8)
NY_START, NY_END = datetime(2026, 3, 8, 5, tzinfo=UTC), datetime(2026, 3, 9, 4, tzinfo=UTC)
NY_HORIZON = datetime(2026, 3, 8, 12, tzinfo=UTC)
NY_POINTER = Pointer(NY_HORIZON, {NY_DAY: DayVersion(NY_DAY, "v3", NY_HORIZON)})
NY_BATCH = [
    AggregateRow(
        103, datetime(2026, 3, 8, 11, tzinfo=UTC), Aggregate(6, 6, Decimal("60.00"), 0), "v3"
    )
]
NY_SPEED = [
    AggregateRow(103, datetime(2026, 3, 8, 15, tzinfo=UTC), Aggregate(3, 3, Decimal("30.00"), 0)),
    AggregateRow(103, datetime(2026, 3, 1, 16, tzinfo=UTC), Aggregate(6, 6, Decimal("40.00"), 0)),
]


def _ny_windows(start: datetime, end: datetime) -> WindowsAnswer:
    rows = merge_windows(103, start, end, NY_POINTER, NY_BATCH, NY_SPEED)
    return WindowsAnswer(103, start, end, NY_HORIZON, totals(rows), rows)


class FakeLocalServing(FakeServing):
    """Store 103 registered in New York (unit tests only)."""

    def top_stores(self, day: date, limit: int) -> TopStores:
        return TopStores(day, NY_HORIZON, [])

    def windows(self, store: int, start: datetime, end: datetime) -> WindowsAnswer:
        return _ny_windows(start, end)

    def store_entry(self, store: int) -> Store:
        assert store == 103
        return NEW_YORK

    def hour_of_week(self, store: int, first: date, last: date) -> object:
        assert (first, last) == (date(2026, 2, 9), NY_DAY)  # 28 local days
        rows = _ny_windows(datetime(2026, 2, 9, 5, tzinfo=UTC), NY_END).windows
        days = [first + timedelta(days=n) for n in range(28)]
        return hour_of_week(NEW_YORK, days, rows, NY_HORIZON)

    def compare_week_before(self, store: int, day: date, until: time | None = None) -> object:
        before = day - timedelta(days=7)
        rows = _ny_windows(datetime(2026, 3, 1, 5, tzinfo=UTC), NY_END).windows
        now, then = local_day_totals(NEW_YORK, [day, before], rows, until)
        return compare(NEW_YORK, now, then, NY_HORIZON, until)


def test_chart_of_a_spring_forward_day_has_92_bars_on_the_local_clock() -> None:
    rows = _ny_windows(NY_START, NY_END).windows
    c = dashboard.chart(rows, NY_HORIZON, NEW_YORK.zone)
    slot = dashboard.WIDTH / 92
    assert len(c.bars) == 92
    assert c.bars[0].label.startswith("00:00-00:15 EST: 0 receipts")
    # 01:45 EST is followed by 03:00 EDT (window 8): 02:00 never happened.
    assert c.bars[7].label.startswith("01:45-03:00 EST: 0 receipts")
    assert c.bars[8].label.startswith("03:00-03:15 EDT")
    assert [label for _, label in c.ticks] == [
        "00:00", "03:00", "06:00", "09:00", "12:00", "15:00", "18:00", "21:00", "24:00"
    ]  # fmt: skip
    assert c.ticks[1][0] == round(8 * slot, 2) and c.ticks[-1][0] == dashboard.WIDTH
    # 12:00 UTC is 08:00 EDT: windows 00:00..07:45 local (8 + 4 x 7 - 4 = 28) from batch.
    assert c.seam_x == round(28 * slot, 2)
    assert c.seam_label == "batch horizon 2026-03-08 08:00 EDT"
    assert c.bars[24].label == "07:00-07:15 EDT: 6 receipts, revenue 60.00 (batch, version v3)"


def test_heatmap_shades_by_revenue_with_weekday_rows_and_hour_columns() -> None:
    fake: Any = FakeLocalServing()
    h = dashboard.heatmap(fake.hour_of_week(103, date(2026, 2, 9), NY_DAY))
    assert len(h.cells) == 7 * 24 and h.max_revenue == Decimal("70.00")
    sunday_11 = h.cells[6 * 24 + 11]  # 11:00 EST on 1 March, EDT on 8 March: 40 + 30
    assert (sunday_11.x, sunday_11.y) == (11 * dashboard.CELL_W, 6 * dashboard.CELL_H)
    assert (sunday_11.fill, sunday_11.text, sunday_11.dark) == ("#1f4e8c", "70", True)
    assert sunday_11.label == (
        "sun 11:00-12:00 (America/New_York), 4 days: 9 receipts, 9 items, revenue 70.00"
    )
    sunday_07 = h.cells[6 * 24 + 7]  # 07:00 EDT on 8 March: 60.00
    assert (sunday_07.text, sunday_07.dark) == ("60", True)
    assert h.cells[0].fill == dashboard.EMPTY and h.cells[0].text == ""
    assert h.rows[6] == (6 * dashboard.CELL_H, "sun", "130.00 · 15")


def _week_before_text(html: str) -> str:
    """The week-before table's text, cells separated by single spaces."""
    table = html[
        html.index('<table id="week-before"') : html.index("</table>", html.index("week-before"))
    ]
    return " ".join(re.sub(r"<[^>]+>", " ", table).split())


def test_page_shows_the_local_day_by_default_with_the_utc_toggle() -> None:
    fake: Any = FakeLocalServing()
    html = dashboard.page(fake, 103, NY_DAY)
    assert (
        'Store 103 (SoHo) · 2026-03-08 <span class="sub">(local day, America/New_York: 92 windows'
        in html
    )
    assert len(re.findall(r'<rect class="bar"', html)) == 92
    assert 'href="/dashboard?store=103&day=2026-03-08&view=utc"' in html
    assert "<strong>local day (America/New_York)</strong>" in html
    assert "batch horizon 2026-03-08 08:00 EDT" in html
    # This Sunday (6 receipts at 07:00, 3 at 11:00 EDT) against 1 March (6 at 11:00 EST).
    assert _week_before_text(html) == (
        "local day Sun 2026-03-08 Sun 2026-03-01 change "
        "receipts 9 6 +50.0% revenue 90.00 40.00 +125.0% final not yet not yet"
    )
    assert len(re.findall(r'<rect class="cell"', html)) == 7 * 24
    assert '<a href="/stores/103/local-days/2026-03-08/receipts">receipts</a>' in html
    assert '<a href="/stores/103/local-days/2026-03-08/issues">' in html
    assert "<script" not in html


def test_page_by_utc_day_links_back_to_the_local_day() -> None:
    class UtcDay(FakeLocalServing):
        def windows(self, store: int, start: datetime, end: datetime) -> WindowsAnswer:
            assert (start, end) == (
                datetime(2026, 3, 8, tzinfo=UTC),
                datetime(2026, 3, 9, tzinfo=UTC),
            )
            return _ny_windows(start, end)

    fake: Any = UtcDay()
    html = dashboard.page(fake, 103, NY_DAY, "utc")
    assert 'Store 103 (SoHo) · 2026-03-08 <span class="sub">(UTC)</span>' in html
    assert len(re.findall(r'<rect class="bar"', html)) == 96
    assert 'id="view-local" href="/dashboard?store=103&day=2026-03-08&view=local"' in html
    assert 'id="week-before"' not in html and 'id="heatmap"' in html  # local hours still
    assert '<a href="/stores/103/days/2026-03-08/receipts">receipts</a>' in html


def test_the_heatmap_asks_no_more_days_than_a_request_may_span() -> None:
    class Short(FakeLocalServing):
        settings = Settings().with_overrides(serve_max_range_days=10)

        def hour_of_week(self, store: int, first: date, last: date) -> object:
            assert (first, last) == (date(2026, 2, 27), NY_DAY)  # 10 local days
            return super().hour_of_week(store, date(2026, 2, 9), last)

    fake: Any = Short()
    assert 'id="heatmap"' in dashboard.page(fake, 103, NY_DAY)


def test_a_day_in_progress_is_compared_up_to_the_same_local_time() -> None:
    class Live(FakeLocalServing):
        def health(self, dead_letter_rows: int | None = None) -> Health:  # 10:40 EDT
            return replace(super().health(), checked_at=datetime(2026, 3, 8, 14, 40, tzinfo=UTC))

    fake: Any = Live()
    html = dashboard.page(fake, 103, NY_DAY)
    assert "(both up to 10:30 local time: this day is in progress)" in html
    # Up to 10:30: this Sunday's 6 receipts at 07:00 EDT; 1 March's came at 11:00 EST.
    assert _week_before_text(html) == (
        "local day Sun 2026-03-08 Sun 2026-03-01 change "
        "receipts 6 0 n/a revenue 60.00 0.00 n/a final not yet not yet"
    )


def test_in_progress_until_is_the_current_windows_start_on_the_stores_clock() -> None:
    ny = NEW_YORK.zone
    assert dashboard.in_progress_until(NY_DAY, ny, datetime(2026, 3, 8, 14, 40, tzinfo=UTC)) == (
        time(10, 30)
    )
    # 9 March 03:50 UTC is still 8 March (23:50 EDT) in New York; 04:00 UTC is not.
    assert dashboard.in_progress_until(NY_DAY, ny, datetime(2026, 3, 9, 3, 50, tzinfo=UTC)) == (
        time(23, 45)
    )
    assert dashboard.in_progress_until(NY_DAY, ny, datetime(2026, 3, 9, 4, tzinfo=UTC)) is None
