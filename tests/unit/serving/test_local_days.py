"""Local-day totals as exact sums of merged UTC windows: +05:45, DST days, the service."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from types import SimpleNamespace
from typing import Any, ClassVar

import pytest
from fastapi.testclient import TestClient

from pos_lambda.serving.errors import BrokenStore, QueryError, UnregisteredStore
from pos_lambda.serving.http import create_app
from pos_lambda.serving.local_days import local_day_totals, parse_until, until_instant
from pos_lambda.serving.merge import merge_windows
from pos_lambda.serving.model import (
    Aggregate,
    Conflict,
    DayVersion,
    Fix,
    Pointer,
    Receipt,
    Segment,
)
from pos_lambda.serving.service import Serving
from pos_lambda.settings import Settings
from pos_lambda.stores import registry
from pos_lambda.stores.model import Store, parse_week
from pos_lambda.stores.registry import InMemoryStores

KATHMANDU = Store.create(102, "Thamel", "Asia/Kathmandu", parse_week(["daily=07:00-21:00"]))
NEW_YORK = Store.create(103, "SoHo", "America/New_York", parse_week(["daily=07:00-22:00"]))


def at(d: int, h: int, m: int = 0) -> datetime:
    return datetime(2026, 3, d, h, m, tzinfo=UTC)


def agg(store: int, ws: datetime, n: int, revenue: str, version: str | None = None) -> Aggregate:
    return Aggregate(store, ws, n, 2 * n, Decimal(revenue), 0, version)


# Kathmandu's 2 March is [1 March 18:15 UTC, 2 March 18:15 UTC). The batch committed
# 1 March up to 20:00 UTC; the speed view answers after it.
POINTER = Pointer(at(1, 20), {date(2026, 3, 1): DayVersion(date(2026, 3, 1), "v1", at(1, 20))})
BATCH = [
    agg(102, at(1, 18, 0), 50, "500.00", "v1"),  # 23:45 local on 1 March: the day before
    agg(102, at(1, 18, 15), 1, "1.90", "v1"),  # local midnight: the first window
    agg(102, at(1, 19, 45), 2, "3.80", "v1"),
]
SPEED = [
    agg(102, at(1, 18, 15), 9, "99.00"),  # the batch answers this window: not counted
    agg(102, at(2, 6, 0), 4, "10.00"),
    agg(102, at(2, 18, 0), 3, "5.70"),  # 23:45 local: the last window
    agg(102, at(2, 18, 15), 70, "700.00"),  # local midnight of 3 March: the next day
]


def test_kathmandu_day_is_the_sum_of_its_96_windows_from_18_15_utc() -> None:
    rows = merge_windows(102, at(1, 18, 15), at(2, 18, 15), POINTER, BATCH, SPEED)
    [day] = local_day_totals(KATHMANDU, [date(2026, 3, 2)], rows)
    assert (day.day, day.start, day.end, day.windows) == (
        date(2026, 3, 2), at(1, 18, 15), at(2, 18, 15), 96
    )  # fmt: skip
    assert (day.receipt_count, day.item_quantity, day.revenue) == (10, 20, Decimal("21.40"))
    # 18:15..19:45 UTC from batch (7 windows), the other 89 from speed.
    assert (day.batch_windows, day.speed_windows, day.final) == (7, 89, False)


def test_new_york_days_around_spring_forward_have_96_92_96_windows() -> None:
    speed = [
        agg(103, at(7, 4, 45), 1, "1.00"),  # 23:45 EST on 6 March: not asked for
        agg(103, at(7, 5, 0), 2, "2.00"),  # 00:00 EST on 7 March
        agg(103, at(8, 4, 45), 3, "3.00"),  # 23:45 EST on 7 March
        agg(103, at(8, 5, 0), 4, "4.00"),  # 00:00 EST on 8 March
        agg(103, at(9, 3, 45), 5, "5.00"),  # 23:45 EDT on 8 March
        agg(103, at(9, 4, 0), 6, "6.00"),  # 00:00 EDT on 9 March
        agg(103, at(10, 4, 0), 7, "7.00"),  # 00:00 EDT on 10 March: not asked for
    ]
    rows = merge_windows(103, at(7, 5), at(10, 4), Pointer(None), [], speed)
    days = local_day_totals(NEW_YORK, [date(2026, 3, d) for d in (7, 8, 9)], rows)
    assert [(d.day.day, d.windows, d.receipt_count, d.revenue) for d in days] == [
        (7, 96, 5, Decimal("5.00")),
        (8, 92, 9, Decimal("9.00")),
        (9, 96, 6, Decimal("6.00")),
    ]


def test_a_missing_window_is_a_bug_not_a_zero() -> None:
    rows = merge_windows(102, at(1, 18, 30), at(2, 18, 15), POINTER, BATCH, SPEED)
    with pytest.raises(ValueError, match="missing"):
        local_day_totals(KATHMANDU, [date(2026, 3, 2)], rows)


class FakeViews:
    """The reads `Serving.local_days` makes, over literal rows (unit tests only)."""

    def __init__(self, speed: Sequence[Aggregate]) -> None:
        self.speed = list(speed)
        self.asked: list[list[date]] = []

    def store_known(self, store: int) -> bool:
        return any(r.operation_id == store for r in self.speed)

    def pointer(self, first: date, last: date) -> Pointer:
        return Pointer(None)

    def store_days(self, store: int, days: list[date], pointer: Pointer) -> tuple[Any, Any]:
        self.asked.append(days)
        return [], [r for r in self.speed if r.window_start.date() in days]

    def close(self) -> None:
        pass


def _serving(speed: Sequence[Aggregate]) -> tuple[Serving, FakeViews]:
    serving = Serving(Settings(), stores=InMemoryStores([KATHMANDU, NEW_YORK]))
    views = FakeViews(speed)
    serving.views = views  # type: ignore[assignment]
    return serving, views


def test_the_service_answers_in_the_registered_zone() -> None:
    serving, views = _serving(SPEED)
    answer = serving.local_days(102, date(2026, 3, 2), date(2026, 3, 2))
    assert (answer.name, answer.time_zone, len(answer.days)) == ("Thamel", "Asia/Kathmandu", 1)
    assert (answer.days[0].receipt_count, answer.days[0].revenue) == (16, Decimal("114.70"))
    assert views.asked == [[date(2026, 3, 1), date(2026, 3, 2)]]  # two UTC partitions


def test_the_service_refuses_unregistered_stores_and_long_ranges() -> None:
    serving, _ = _serving([*SPEED, agg(555, at(2, 1), 1, "1.00"), agg(103, at(2, 1), 1, "1.00")])
    with pytest.raises(UnregisteredStore, match="pos-stores add 555"):
        serving.local_days(555, date(2026, 3, 2), date(2026, 3, 2))
    # 31 local days (the default limit), one with a fall-back hour: allowed.
    long = serving.local_days(103, date(2026, 10, 15), date(2026, 11, 14))
    assert [d.windows for d in long.days].count(100) == 1 and len(long.days) == 31
    with pytest.raises(QueryError, match="range too large"):
        serving.local_days(103, date(2026, 10, 15), date(2026, 11, 15))


def receipt(ts: datetime, txn: int) -> Receipt:
    return Receipt(ts, 7, txn, 1, Decimal("1.00"), False, [], 0, txn, "speed", False)


class FakeReceiptViews(FakeViews):
    """Receipts by UTC day partition, paged by an offset carried as the paging state."""

    def __init__(self, receipts: Sequence[Receipt], pointer: Pointer) -> None:
        super().__init__([agg(102, at(1, 18, 15), 1, "1.00")])
        self.rows, self._pointer = sorted(receipts, key=lambda r: r.happened_at), pointer
        self.reads: list[tuple[str, date]] = []

    def pointer(self, first: date, last: date) -> Pointer:
        return self._pointer

    def receipts(
        self, store: int, segment: Segment, fetch_size: int, paging_state: bytes | None
    ) -> tuple[list[Receipt], bytes | None]:
        self.reads.append((segment.source, segment.day))
        rows = [
            replace(r, source=segment.source)
            for r in self.rows
            if r.happened_at.date() == segment.day and segment.start <= r.happened_at < segment.end
        ]
        first = int(paging_state or b"0")
        end = first + fetch_size
        return rows[first:end], (str(end).encode() if end < len(rows) else None)


def test_a_local_days_receipts_page_across_two_utc_days_and_the_batch_seam() -> None:
    # Kathmandu's 2 March: [1 March 18:15, 2 March 18:15) UTC; the batch answers up to
    # 1 March 20:00 UTC. One receipt on either side of each bound.
    times = [at(1, 18, 14), at(1, 18, 15), at(1, 19, 59), at(1, 20), at(1, 23, 59),
             at(2, 0), at(2, 18, 14), at(2, 18, 15)]  # fmt: skip
    rows = [receipt(t, n) for n, t in enumerate(times)]
    serving = Serving(Settings(), stores=InMemoryStores([KATHMANDU, NEW_YORK]))
    views = FakeReceiptViews(rows, POINTER)
    serving.views = views  # type: ignore[assignment]
    serving._page_key = bytes(32)
    seen: list[Receipt] = []
    page = serving.local_receipts(102, date(2026, 3, 2), page_size=2)
    pages = 1
    while True:
        assert (page.time_zone, page.start, page.end) == (
            "Asia/Kathmandu",
            at(1, 18, 15),
            at(2, 18, 15),
        )
        seen += page.receipts
        if page.next_page is None:
            break
        page = serving.local_receipts(102, date(2026, 3, 2), page_size=2, page=page.next_page)
        pages += 1
    assert [r.transaction_id for r in seen] == [1, 2, 3, 4, 5, 6]  # each once, in time order
    assert [r.source for r in seen] == ["batch", "batch", "speed", "speed", "speed", "speed"]
    assert pages == 3
    with pytest.raises(QueryError, match="issued for store 102 on local day 2026-03-02, not "
                                         "store 102 on UTC day"):  # fmt: skip
        serving.receipts(102, date(2026, 3, 2), page=serving.local_receipts(
            102, date(2026, 3, 2), page_size=1).next_page)  # fmt: skip
    utc = serving.receipts(102, date(2026, 3, 1), page_size=100)
    assert [r.transaction_id for r in utc.receipts] == [0, 1, 2, 3, 4]
    assert (utc.time_zone, utc.next_page) == ("UTC", None)


def test_a_local_days_issues_are_those_of_its_utc_range() -> None:
    def conflict(winner: datetime) -> Conflict:
        return Conflict(7, 1, ["revenue"], winner, winner, Decimal("2.00"), Decimal("1.00"),
                        0, 2, 0, 1)  # fmt: skip

    def fix(ws: datetime) -> Fix:
        return Fix(ws, "v1", 1, 2, 1, Decimal("1.00"), Decimal("2.00"), Decimal("1.00"), 1, 0,
                   0, None)  # fmt: skip

    class IssueViews(FakeViews):
        def conflicts(self, store: int, day: date) -> list[Conflict]:
            return [conflict(t) for t in (at(1, 18), at(1, 18, 15), at(2, 18, 15))
                    if t.date() == day]  # fmt: skip

        def fixes(self, store: int, day: date) -> list[Fix]:
            return [fix(t) for t in (at(1, 18), at(2, 18)) if t.date() == day]

    serving = Serving(Settings(), stores=InMemoryStores([KATHMANDU, NEW_YORK]))
    serving.views = IssueViews([agg(102, at(1, 18, 15), 1, "1.00")])  # type: ignore[assignment]
    local = serving.local_store_day(102, date(2026, 3, 2))
    assert [c.winner_happened_at for c in local.conflicts] == [at(1, 18, 15)]
    assert [f.window_start for f in local.fixes] == [at(2, 18)]
    assert (local.time_zone, local.start, local.end) == (
        "Asia/Kathmandu",
        at(1, 18, 15),
        at(2, 18, 15),
    )
    utc = serving.store_day(102, date(2026, 3, 1))
    assert ([c.winner_happened_at for c in utc.conflicts], utc.time_zone) == (
        [at(1, 18), at(1, 18, 15)], "UTC"
    )  # fmt: skip


def test_until_is_a_local_time_on_the_window_grid() -> None:
    assert parse_until("14:30") == time(14, 30)
    assert parse_until("00:15") == time(0, 15)
    assert parse_until("24:00") is None  # the whole day
    for bad in ("14:20", "00:00", "24:15", "25:00", "2pm", "14:3", "-1:00", ""):
        with pytest.raises(QueryError, match="until"):
            parse_until(bad)


@pytest.mark.parametrize("text", ["\u00b2:00", "1\u00b2:00", "14:\u00b30", "\u0661\u0664:30",
                                  "\uff11\uff14:30", "14:30\n", " 14:30"])  # fmt: skip
def test_until_takes_ascii_digits_only(text: str) -> None:
    # "²".isdigit() is True and int("²") raises; int("١٤") is 14: both refused alike.
    with pytest.raises(QueryError, match=r"is not a local time HH:MM \(ASCII digits\)"):
        parse_until(text)


def test_http_answers_422_for_a_superscript_until() -> None:
    serving, _ = _serving(SPEED)
    with TestClient(create_app(serving.settings, serving)) as http:
        r = http.get("/stores/102/local-days/2026-03-09/week-before", params={"until": "\u00b2:00"})
    assert (r.status_code, r.json()) == (
        422,
        {"detail": "until '\u00b2:00' is not a local time HH:MM (ASCII digits), e.g. 14:30"},
    )


def test_a_day_cut_at_until_counts_the_windows_that_start_before_it() -> None:
    # Kathmandu 2 March, until 12:00 local = 06:15 UTC: the 06:00 UTC window (4 receipts,
    # 11:45 local) counts, the 18:00 UTC one (23:45 local) does not.
    rows = merge_windows(102, at(1, 18, 15), at(2, 18, 15), POINTER, BATCH, SPEED)
    [day] = local_day_totals(KATHMANDU, [date(2026, 3, 2)], rows, time(12, 0))
    assert (day.start, day.end, day.windows) == (at(1, 18, 15), at(2, 6, 15), 48)
    assert (day.receipt_count, day.revenue) == (7, Decimal("15.70"))
    # New York's spring-forward day: 03:00 EDT is 07:00 UTC, 8 windows after midnight
    # EST (the skipped hour has none); 02:30, skipped, resolves as EST: also 07:30 UTC.
    assert until_instant(date(2026, 3, 8), time(3, 0), NEW_YORK.zone) == at(8, 7)
    assert until_instant(date(2026, 3, 8), time(2, 30), NEW_YORK.zone) == at(8, 7, 30)
    ny = merge_windows(103, at(8, 5), at(9, 4), Pointer(None), [], [])
    [spring] = local_day_totals(NEW_YORK, [date(2026, 3, 8)], ny, time(3, 0))
    assert spring.windows == 8


class BrokenRegistry(InMemoryStores):
    """Store 102's row edited by hand into an unknown zone: read back through the
    Cassandra adapter's own row check (`registry._store`), as `CassandraStores.get` does."""

    def get(self, operation_id: int) -> Store | None:
        if operation_id != 102:
            return super().get(operation_id)
        row = SimpleNamespace(operation_id=102, name="Thamel", time_zone="Mars/Olympus_Mons",
                              opening_hours={"mon": "07:00-21:00"})  # fmt: skip
        return registry._store(row)


BROKEN = (
    "the stores table's row of store 102 is broken (time zone 'Mars/Olympus_Mons' is unknown: "
    "use an IANA name such as Europe/Bratislava, Asia/Kathmandu or UTC), so its local day is "
    "unknown: fix that row (in cqlsh: UPDATE stores SET time_zone = 'Europe/Bratislava', "
    "opening_hours = {'mon': '07:00-21:00', ...} WHERE operation_id = 102), or ask by UTC "
    "day meanwhile"
)


def test_a_broken_stores_row_is_refused_with_what_to_fix() -> None:
    serving = Serving(Settings(), stores=BrokenRegistry([NEW_YORK]))
    serving.views = FakeViews(SPEED)  # type: ignore[assignment]
    with pytest.raises(BrokenStore) as refused:
        serving.local_days(102, date(2026, 3, 2), date(2026, 3, 2))
    assert str(refused.value) == BROKEN
    # The broken store by UTC day is answered all the same: 4 + 3 + 70 speed receipts.
    assert serving.daily_totals(102, date(2026, 3, 2), date(2026, 3, 2))[0].receipt_count == 77


@pytest.mark.parametrize(
    "path",
    [
        "/stores/102/local-days?first=2026-03-02&last=2026-03-02",
        "/stores/102/hour-of-week?first=2026-03-02&last=2026-03-02",
        "/stores/102/local-days/2026-03-09/week-before",
        "/stores/102/local-days/2026-03-02/receipts",
        "/stores/102/local-days/2026-03-02/issues",
    ],
)
def test_http_answers_409_for_a_broken_stores_row(path: str) -> None:
    serving = Serving(Settings(), stores=BrokenRegistry([NEW_YORK]))
    serving.views = FakeViews(SPEED)  # type: ignore[assignment]
    with TestClient(create_app(serving.settings, serving)) as http:
        r = http.get(path)
    assert (r.status_code, r.json()) == (409, {"detail": BROKEN})


def test_a_listing_resumed_after_a_rebuild_or_too_late_answers_410() -> None:
    # Store 102's UTC day 1 March: the batch (generation gen-a, as of table version 12)
    # answers up to 20:00, the speed view after it. Two receipts before, one after: the
    # first page's token is in the middle of the batch segment.
    served = Pointer(at(1, 20), {date(2026, 3, 1): DayVersion(date(2026, 3, 1), "v1",
                                                              at(1, 20), "gen-a", 12)})  # fmt: skip
    now = [datetime(2026, 3, 5, 9, tzinfo=UTC)]
    serving = Serving(Settings(), clock=lambda: now[0], stores=InMemoryStores([KATHMANDU]))
    rows = [receipt(at(1, 19), 1), receipt(at(1, 19, 30), 2), receipt(at(1, 21), 3)]
    views = FakeReceiptViews(rows, served)
    serving.views = views  # type: ignore[assignment]
    serving._page_key = bytes(32)
    first = serving.receipts(102, date(2026, 3, 1), page_size=1)
    assert first.next_page is not None
    with TestClient(create_app(serving.settings, serving)) as http:
        url = f"/stores/102/days/2026-03-01/receipts?page_size=1&page={first.next_page}"
        # A fold of the same generation commits (table version 12 -> 13): still good.
        views._pointer = Pointer(at(1, 21), {date(2026, 3, 1): DayVersion(
            date(2026, 3, 1), "v2", at(1, 21), "gen-a", 13)})  # fmt: skip
        assert http.get(url).status_code == 200
        # A rebuild switches the day to generation gen-b (gc deletes gen-a's rows later).
        views._pointer = Pointer(at(1, 21), {date(2026, 3, 1): DayVersion(
            date(2026, 3, 1), "v3", at(1, 21), "gen-b", 14)})  # fmt: skip
        gone = http.get(url)
        assert (gone.status_code, gone.json()) == (410, {"detail": (
            "page has expired, start the listing again (ask without page): the batch version "
            "it reads for 2026-03-01 (gen-a) is no longer served (now gen-b: a rebuild "
            "replaced it)")})  # fmt: skip
        # Served again (say, the rebuild rolled back), but an hour and a second later.
        views._pointer = served
        now[0] += timedelta(seconds=3601)
        late = http.get(url)
        assert (late.status_code, late.json()["detail"]) == (410, (
            "page has expired, start the listing again (ask without page): it was issued "
            "3601 s ago, and a page token is good for 3600 s "
            "(POS_SERVE_PAGE_TOKEN_MAX_AGE_SECONDS)"))  # fmt: skip


def test_health_scans_the_dead_letters_it_is_asked_for_within_the_setting() -> None:
    class HealthViews(FakeViews):
        scans: ClassVar[list[int]] = []  # a class of this test's own

        def dead_letter_reasons(self, limit: int) -> tuple[list[str], bool]:
            self.scans.append(limit)
            return ["invalid_json"] * min(limit, 3), limit < 3

        def batch_runs(self, limit: int) -> list[Any]:
            return []

        def speed_progress(self, now: datetime) -> list[Any]:
            return []

    serving = Serving(Settings(serve_dead_letter_scan_limit=500))
    views = HealthViews([])
    serving.views = views  # type: ignore[assignment]
    assert serving.health().dead_letters.total == 3
    assert serving.health(dead_letter_rows=2).dead_letters.truncated is True
    serving.health(dead_letter_rows=1000)  # the setting caps what a caller asks
    assert views.scans == [500, 2, 500]
    with pytest.raises(QueryError, match="dead_letter_rows must be between 1 and"):
        serving.health(dead_letter_rows=0)
