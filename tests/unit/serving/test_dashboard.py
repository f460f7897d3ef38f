"""The dashboard's geometry and page, from literal rows (a fake library: no Cassandra)."""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

from pos_lambda.batch_layer.runs import BatchRun
from pos_lambda.serving import dashboard
from pos_lambda.serving.merge import merge_windows, totals
from pos_lambda.serving.model import (
    Aggregate,
    DayTotal,
    DayVersion,
    DeadLetters,
    Health,
    Pointer,
    SpeedQuery,
    TopStores,
    WindowsAnswer,
)

D = date(2026, 3, 2)
MIDNIGHT = datetime(2026, 3, 2, tzinfo=UTC)
HORIZON = MIDNIGHT + timedelta(hours=14)
POINTER = Pointer(HORIZON, {D: DayVersion(D, "v7", HORIZON)})
BATCH = [Aggregate(101, MIDNIGHT + timedelta(hours=9), 4, 8, Decimal("20.00"), 0, "v7")]
SPEED = [
    Aggregate(101, MIDNIGHT + timedelta(hours=9), 9, 9, Decimal("99.00"), 0),  # not served
    Aggregate(101, MIDNIGHT + timedelta(hours=15), 2, 2, Decimal("10.00"), 1),
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

    def health(self) -> Health:
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


def test_page_defaults_to_the_horizon_day_and_its_top_store() -> None:
    fake: Any = FakeServing()
    html = dashboard.page(fake, None, None)
    assert "Store 101 · 2026-03-02 (UTC)" in html
    assert len(re.findall(r'<rect [^>]*height="[^"]*" fill="#', html)) == 2 * 96
    assert 'stroke-dasharray="6 4"' in html and "batch horizon 2026-03-02 14:00 UTC" in html
    # The hooks docs/capture_dashboard.py checks in the browser: bars by source, the seam.
    sources = re.findall(r'<rect class="bar" data-source="(\w+)"', html)
    assert sources == ["batch"] * 56 + ["speed"] * 40
    assert len(re.findall(r'<line class="horizon" x1="560.0"', html)) == 1
    assert "<td>30.00</td>" in html and "3: invalid_json 2 · missing_field 1</td>" in html
    assert "pos-speed-views" in html and "committed" in html
    # Nothing to run or fetch: no scripts, no external stylesheets, fonts or images.
    assert "<script" not in html and not re.search(r'(src|href)="https?:', html)
