"""Local-day totals as exact sums of merged UTC windows: +05:45, DST days, the service."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from types import SimpleNamespace
from typing import Any

import pytest
from fastapi.testclient import TestClient

from pos_lambda.schemas.aggregate import Aggregate
from pos_lambda.serving.errors import BrokenStore, QueryError, UnregisteredStore
from pos_lambda.serving.http import create_app
from pos_lambda.serving.local_days import local_day_totals, parse_until, until_instant
from pos_lambda.serving.merge import merge_windows
from pos_lambda.serving.model import (
    AggregateRow,
    Conflict,
    DayVersion,
    Fix,
    Pointer,
    Receipt,
    receipts_partition,
)
from pos_lambda.serving.receipt_status import DeadLetter, KafkaCopy
from pos_lambda.serving.service import Serving
from pos_lambda.settings import Settings
from pos_lambda.stores import registry
from pos_lambda.stores.model import Store, parse_week
from pos_lambda.stores.registry import InMemoryStores, StoreRegistry
from tests.support.memory_views import MemoryKeyspace, memory_views

KATHMANDU = Store.create(102, "Thamel", "Asia/Kathmandu", parse_week(["daily=07:00-21:00"]))
NEW_YORK = Store.create(103, "SoHo", "America/New_York", parse_week(["daily=07:00-22:00"]))


def at(d: int, h: int, m: int = 0) -> datetime:
    return datetime(2026, 3, d, h, m, tzinfo=UTC)


def agg(store: int, ws: datetime, n: int, revenue: str, version: str | None = None) -> AggregateRow:
    return AggregateRow(store, ws, Aggregate(n, 2 * n, Decimal(revenue), 0), version)


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


def _keyspace(speed: Sequence[AggregateRow]) -> MemoryKeyspace:
    """The views in memory with these speed rows, no batch version committed."""
    keyspace = MemoryKeyspace()
    keyspace.aggregates(speed=speed)
    return keyspace


def _serving(
    speed: Sequence[AggregateRow], stores: StoreRegistry | None = None, **settings: Any
) -> tuple[Serving, MemoryKeyspace]:
    keyspace = _keyspace(speed)
    serving = Serving(
        Settings(**settings),
        stores=stores or InMemoryStores([KATHMANDU, NEW_YORK]),
        views=memory_views(keyspace),
    )
    return serving, keyspace


def test_the_service_answers_in_the_registered_zone() -> None:
    serving, keyspace = _serving(SPEED)
    answer = serving.local_days(102, date(2026, 3, 2), date(2026, 3, 2))
    assert (answer.name, answer.time_zone, len(answer.days)) == ("Thamel", "Asia/Kathmandu", 1)
    assert (answer.days[0].receipt_count, answer.days[0].revenue) == (16, Decimal("114.70"))
    # Two UTC partitions of the speed view.
    assert keyspace.reads_of("speed_day") == [(102, date(2026, 3, 1)), (102, date(2026, 3, 2))]


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


def _receipts_keyspace(receipts: Sequence[Receipt], pointer: Pointer) -> MemoryKeyspace:
    """Store 102's receipts in the speed view and in the batch partition the pointer's
    days name (each side serves its own part of a day: the listing reads both), paged
    by the fake's offsets."""
    keyspace = _keyspace([agg(102, at(1, 18, 15), 1, "1.00")])
    keyspace.pointer(pointer)
    keyspace.receipts(102, receipts)
    for v in pointer.days.values():
        version, served_upto = receipts_partition(v.receipts_ref)
        keyspace.batch_receipts(102, version, receipts, master_version=served_upto or 0)
    return keyspace


def test_a_local_days_receipts_page_across_two_utc_days_and_the_batch_seam() -> None:
    # Kathmandu's 2 March: [1 March 18:15, 2 March 18:15) UTC; the batch answers up to
    # 1 March 20:00 UTC. One receipt on either side of each bound.
    times = [at(1, 18, 14), at(1, 18, 15), at(1, 19, 59), at(1, 20), at(1, 23, 59),
             at(2, 0), at(2, 18, 14), at(2, 18, 15)]  # fmt: skip
    rows = [receipt(t, n) for n, t in enumerate(times)]
    keyspace = _receipts_keyspace(rows, POINTER)
    serving = Serving(
        Settings(), stores=InMemoryStores([KATHMANDU, NEW_YORK]), views=memory_views(keyspace)
    )
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
    # The batch's part from its version's partition, the rest from the speed view's.
    read = {name for name, _ in keyspace.log if name.startswith("receipts_")}
    assert read == {"receipts_batch", "receipts_speed"}
    with pytest.raises(QueryError, match="issued for store 102 on local day 2026-03-02, not "
                                         "store 102 on UTC day"):  # fmt: skip
        serving.receipts(102, date(2026, 3, 2), page=serving.local_receipts(
            102, date(2026, 3, 2), page_size=1).next_page)  # fmt: skip
    utc = serving.receipts(102, date(2026, 3, 1), page_size=100)
    assert [r.transaction_id for r in utc.receipts] == [0, 1, 2, 3, 4]
    assert (utc.time_zone, utc.next_page) == ("UTC", None)


def test_a_local_days_issues_are_those_of_its_utc_range() -> None:
    def conflict(winner: datetime, offset: int) -> Conflict:
        return Conflict(7, 1, ["revenue"], winner, winner, Decimal("2.00"), Decimal("1.00"),
                        0, offset, 0, 1)  # fmt: skip

    def fix(ws: datetime) -> Fix:
        return Fix(ws, "v1", 1, 2, 1, Decimal("1.00"), Decimal("2.00"), Decimal("1.00"), 1, 0,
                   0, None)  # fmt: skip

    serving, keyspace = _serving([agg(102, at(1, 18, 15), 1, "1.00")])
    # Copies at Kafka offsets 2, 3, 4 (one row each), by their winner's UTC day.
    winners = (at(1, 18), at(1, 18, 15), at(2, 18, 15))
    keyspace.conflicts(102, [conflict(t, 2 + n) for n, t in enumerate(winners)])
    keyspace.fixes(102, [fix(at(1, 18)), fix(at(2, 18))])
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
    "unknown: rewrite that row with pos-stores set 102 --repair --name ... --zone ... "
    "--hours ..., or ask by UTC day meanwhile"
)


def test_a_broken_stores_row_is_refused_with_what_to_fix() -> None:
    serving, _ = _serving(SPEED, BrokenRegistry([NEW_YORK]))
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
    serving, _ = _serving(SPEED, BrokenRegistry([NEW_YORK]))
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
    rows = [receipt(at(1, 19), 1), receipt(at(1, 19, 30), 2), receipt(at(1, 21), 3)]
    keyspace = _receipts_keyspace(rows, served)
    serving = Serving(
        Settings(),
        clock=lambda: now[0],
        stores=InMemoryStores([KATHMANDU]),
        views=memory_views(keyspace),
    )
    serving._page_key = bytes(32)
    first = serving.receipts(102, date(2026, 3, 1), page_size=1)
    assert first.next_page is not None
    with TestClient(create_app(serving.settings, serving)) as http:
        url = f"/stores/102/days/2026-03-01/receipts?page_size=1&page={first.next_page}"
        # A fold of the same generation commits (table version 12 -> 13): still good.
        keyspace.pointer(Pointer(at(1, 21), {date(2026, 3, 1): DayVersion(
            date(2026, 3, 1), "v2", at(1, 21), "gen-a", 13)}))  # fmt: skip
        assert http.get(url).status_code == 200
        # A rebuild switches the day to generation gen-b (gc deletes gen-a's rows later).
        keyspace.pointer(Pointer(at(1, 21), {date(2026, 3, 1): DayVersion(
            date(2026, 3, 1), "v3", at(1, 21), "gen-b", 14)}))  # fmt: skip
        gone = http.get(url)
        assert (gone.status_code, gone.json()) == (410, {"detail": (
            "page has expired, start the listing again (ask without page): the batch version "
            "it reads for 2026-03-01 (gen-a) is no longer served (now gen-b: a rebuild "
            "replaced it)")})  # fmt: skip
        # Served again (say, the rebuild rolled back), but an hour and a second later.
        keyspace.pointer(served)
        now[0] += timedelta(seconds=3601)
        late = http.get(url)
        assert (late.status_code, late.json()["detail"]) == (410, (
            "page has expired, start the listing again (ask without page): it was issued "
            "3601 s ago, and a page token is good for 3600 s "
            "(POS_SERVE_PAGE_TOKEN_MAX_AGE_SECONDS)"))  # fmt: skip


def test_health_scans_the_dead_letters_it_is_asked_for_within_the_setting() -> None:
    def scanned(serving: Serving, rows: int | None = None) -> tuple[int, bool]:
        found = serving.health(dead_letter_rows=rows).dead_letters
        return found.total, found.truncated

    five = [DeadLetter(1, 7, 40 + n, "pos.transactions", KafkaCopy(0, n, None), "invalid_json",
                       None) for n in range(5)]  # fmt: skip
    serving, keyspace = _serving([], serve_dead_letter_scan_limit=4)
    keyspace.dead_letters(five)
    assert scanned(serving) == (4, True)  # the setting's 4 of the 5
    assert scanned(serving, 2) == (2, True)
    assert scanned(serving, 1000) == (4, True)  # the setting caps what a caller asks
    everything, more = _serving([], serve_dead_letter_scan_limit=500)
    more.dead_letters(five)
    assert scanned(everything) == (5, False)
    with pytest.raises(QueryError, match="dead_letter_rows must be between 1 and"):
        serving.health(dead_letter_rows=0)
