"""The issues listing (`/stores/{s}/days/{d}/issues`), paged as the receipts are, over the
views in memory (tests/support/memory_views.py: the real statements on tables built from
the DDL); and the dead-letter count's scan, no larger than its bound.

Store 1, UTC day 2 March 2026. The batch (generation gen-a, as of master table version
5) answers up to 10:00, the speed layer after it. Conflicts by their winner's time:
batch rows at 09:00, 09:10, 09:20 (and one at 09:30 archived by table version 6, which
no commit counts yet); speed rows at 09:05 (before the seam: the batch answers there),
11:00 and 12:00. Served, in listing order: 09:00, 09:10, 09:20, 11:00, 12:00.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from fastapi.testclient import TestClient

from pos_lambda.schemas import cql
from pos_lambda.schemas.aggregate import Aggregate
from pos_lambda.serving import Serving, cli
from pos_lambda.serving.errors import PageGone, QueryError
from pos_lambda.serving.http import create_app
from pos_lambda.serving.model import AggregateRow, Conflict, DayVersion, Fix, Pointer, Segment
from pos_lambda.serving.receipt_status import DeadLetter, KafkaCopy
from pos_lambda.serving.requests import PageToken, encode_page
from pos_lambda.serving.views import Views
from pos_lambda.settings import Settings
from tests.support.memory_views import MemoryKeyspace, memory_views

DAY = date(2026, 3, 2)


def at(hour: int, minute: int = 0) -> datetime:
    return datetime(2026, 3, 2, hour, minute, tzinfo=UTC)


SERVED = Pointer(at(10), {DAY: DayVersion(DAY, "v1", at(10), "gen-a", 5)})


def conflict(winner_at: datetime, tid: int) -> Conflict:
    return Conflict(
        vendor_fiscal_module=7,
        transaction_id=tid,
        differs=["line_items"],
        happened_at=winner_at,
        winner_happened_at=winner_at,
        revenue=Decimal("3.00"),
        winner_revenue=Decimal("3.80"),
        kafka_partition=0,
        kafka_offset=100 + tid,
        winner_kafka_partition=0,
        winner_kafka_offset=tid,
    )


def batch_conflict(keyspace: MemoryKeyspace, c: Conflict, master_version: int) -> None:
    """A row of conflicts_batch in generation gen-a, archived by `master_version`."""
    keyspace.insert(
        cql.CONFLICTS_BATCH_TABLE,
        operation_id=1,
        winner_day=c.winner_happened_at.date(),
        version="gen-a",
        master_version=master_version,
        vendor_fiscal_module=c.vendor_fiscal_module,
        transaction_id=c.transaction_id,
        kafka_partition=c.kafka_partition,
        kafka_offset=c.kafka_offset,
        differs=c.differs,
        happened_at=c.happened_at,
        winner_happened_at=c.winner_happened_at,
        revenue=c.revenue,
        winner_revenue=c.winner_revenue,
        winner_kafka_partition=c.winner_kafka_partition,
        winner_kafka_offset=c.winner_kafka_offset,
    )


FIX = Fix(at(9), "v1", 3, 2, 1, Decimal("9.00"), Decimal("6.00"), Decimal("3.00"), 0, 1, 0, None)


def keyspace_of_the_day() -> MemoryKeyspace:
    keyspace = MemoryKeyspace()
    keyspace.aggregates(speed=[AggregateRow(1, at(9), Aggregate(1, 1, Decimal(1), 0))])
    keyspace.pointer(SERVED)
    for tid, minute in ((1, 0), (2, 10), (3, 20)):
        batch_conflict(keyspace, conflict(at(9, minute), tid), master_version=5)
    batch_conflict(keyspace, conflict(at(9, 30), 4), master_version=6)  # not committed yet
    keyspace.conflicts(1, [conflict(at(9, 5), 5), conflict(at(11), 6), conflict(at(12), 7)])
    keyspace.fixes(1, [FIX])
    return keyspace


def serving_over(keyspace: MemoryKeyspace, settings: Settings | None = None) -> Serving:
    serving = Serving(settings or Settings(), views=memory_views(keyspace))
    serving._page_key = bytes(32)  # no key file: the test's tokens stay in memory
    return serving


def tids(conflicts: Sequence[Conflict]) -> list[int]:
    return [c.transaction_id for c in conflicts]


def test_the_issues_come_a_page_at_a_time_each_from_the_side_that_serves_it() -> None:
    serving = serving_over(keyspace_of_the_day())
    first = serving.store_day(1, DAY, page_size=2)
    assert (tids(first.conflicts), first.fixes) == ([1, 2], [FIX])
    assert first.next_page is not None
    second = serving.store_day(1, DAY, page_size=2, page=first.next_page)
    assert (tids(second.conflicts), second.fixes) == ([3, 6], [])  # fixes: first page only
    third = serving.store_day(1, DAY, page_size=2, page=second.next_page)
    assert (tids(third.conflicts), third.next_page) == ([7], None)
    # Unpaged, the same conflicts: what `merge.served_conflicts` serves.
    whole = serving.store_day(1, DAY, page_size=1000)
    assert (tids(whole.conflicts), whole.next_page) == ([1, 2, 3, 6, 7], None)
    assert tids(serving.views.conflicts(1, DAY)) == [1, 2, 3, 6, 7]


def test_a_page_reads_no_more_rows_than_its_size() -> None:
    keyspace = keyspace_of_the_day()
    serving = serving_over(keyspace)
    serving.store_day(1, DAY, page_size=2)
    # One Cassandra page of at most 2 rows, from the batch's segment, counted by its commit.
    assert keyspace.reads_of("issues_conflicts_generation") == [(1, DAY, "gen-a", at(0), at(10), 5)]
    assert keyspace.reads_of("issues_conflicts") == []


def test_the_default_page_size_is_the_setting() -> None:
    settings = Settings().with_overrides(serve_page_size=4)
    page = serving_over(keyspace_of_the_day(), settings).store_day(1, DAY)
    assert (tids(page.conflicts), page.next_page is not None) == ([1, 2, 3, 6], True)


def test_a_token_resumes_its_own_listing_only() -> None:
    serving = serving_over(keyspace_of_the_day())
    page = serving.store_day(1, DAY, page_size=3)
    rest = serving.store_day(1, DAY, page_size=3, page=page.next_page)
    assert (tids(page.conflicts), tids(rest.conflicts), rest.next_page) == ([1, 2, 3], [6, 7], None)
    with pytest.raises(QueryError, match="page was issued for store 1 on UTC day 2026-03-02"):
        serving.local_store_day(1, DAY, page_size=3, page=page.next_page)


def test_a_receipts_token_is_no_issues_token_and_the_other_way_round() -> None:
    serving = serving_over(keyspace_of_the_day())
    issues = serving.store_day(1, DAY, page_size=1).next_page
    assert issues is not None
    with pytest.raises(QueryError, match="page was issued for a listing of issues, not of "):
        serving.receipts(1, DAY, page_size=1, page=issues)
    receipts_token = _receipts_token(serving)
    with pytest.raises(QueryError, match="page was issued for a listing of receipts, not of "):
        serving.store_day(1, DAY, page_size=1, page=receipts_token)


def _receipts_token(serving: Serving) -> str:
    token = PageToken((Segment("speed", DAY, at(10), at(24 - 1)),), 0, None, 1, DAY)
    return encode_page(token, serving.page_key())


def test_a_stale_issues_token_answers_410() -> None:
    keyspace = keyspace_of_the_day()
    now = [datetime(2026, 3, 5, 9, tzinfo=UTC)]
    serving = Serving(Settings(), clock=lambda: now[0], views=memory_views(keyspace))
    serving._page_key = bytes(32)
    first = serving.store_day(1, DAY, page_size=1)
    url = f"/stores/1/days/2026-03-02/issues?page_size=1&page={first.next_page}"
    with TestClient(create_app(serving.settings, serving)) as http:
        ok = http.get(url)
        assert (ok.status_code, [c["transaction_id"] for c in ok.json()["conflicts"]]) == (200, [2])
        assert ok.json()["fixes"] == [] and ok.json()["next_page"] is not None
        # A rebuild switches the day to generation gen-b.
        keyspace.pointer(Pointer(at(10), {DAY: DayVersion(DAY, "v2", at(10), "gen-b", 7)}))
        gone = http.get(url)
        assert (gone.status_code, gone.json()["detail"]) == (410, (
            "page has expired, start the listing again (ask without page): the batch version "
            "it reads for 2026-03-02 (gen-a) is no longer served (now gen-b: a rebuild "
            "replaced it)"))  # fmt: skip
        keyspace.pointer(SERVED)
        now[0] += timedelta(seconds=3601)
        assert http.get(url).status_code == 410
        assert http.get(url + "x").status_code == 422  # not a token we signed
    with pytest.raises(PageGone):
        serving.store_day(1, DAY, page_size=1, page=first.next_page)


def test_http_keeps_the_old_fields_adds_next_page_and_declares_410() -> None:
    serving = serving_over(keyspace_of_the_day())
    with TestClient(create_app(serving.settings, serving)) as http:
        body = http.get("/stores/1/days/2026-03-02/issues?page_size=2").json()
        doc = http.get("/openapi.json").json()
    assert set(body) == {
        "operation_id", "day", "conflicts", "fixes", "time_zone", "start", "end", "next_page",
    }  # fmt: skip
    assert [c["transaction_id"] for c in body["conflicts"]] == [1, 2]
    for path in ("/stores/{store}/days/{day}/issues", "/stores/{store}/local-days/{day}/issues"):
        operation = doc["paths"][path]["get"]
        assert {"page_size", "page"} <= {p["name"] for p in operation["parameters"]}
        assert "410" in operation["responses"]


def test_cli_pages_the_issues() -> None:
    serving = serving_over(keyspace_of_the_day())
    args = cli._parser().parse_args(
        ["issues", "--store", "1", "--day", "2026-03-02", "--page-size", "2"]
    )
    answer, render = cli._query(args, serving)
    assert answer.next_page is not None
    assert f"\nnext page: {answer.next_page}" in render()


class RecordingScans:
    """The `Statements` port over the views in memory, recording each scan's fetch size."""

    def __init__(self, keyspace: MemoryKeyspace) -> None:
        self.keyspace = keyspace
        self.fetch_sizes: list[int] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.keyspace, name)

    def scan(self, name: str, params: tuple[Any, ...], fetch_size: int) -> Iterator[Any]:
        self.fetch_sizes.append(fetch_size)
        return self.keyspace.scan(name, params, fetch_size)


def test_the_dead_letter_count_reads_pages_no_larger_than_it_needs() -> None:
    keyspace = MemoryKeyspace()
    keyspace.dead_letters(
        [
            DeadLetter(None, None, None, "pos.transactions", KafkaCopy(p, o, None), "bad", None)
            for p in (0, 1)
            for o in range(3)
        ]
    )
    scans = RecordingScans(keyspace)
    views = Views(Settings(), scans)  # type: ignore[arg-type]
    # Bound 4: partition 0's 3 rows in a page of 5 (4 and one more, to tell a cut scan),
    # then partition 1's in a page of 2 (what is still to count, and one more).
    assert views.dead_letter_reasons(4) == (["bad"] * 4, True)
    assert scans.fetch_sizes == [5, 2]
    scans.fetch_sizes.clear()
    # The dashboard's bound: never a 5000-row page for 1000 rows.
    assert views.dead_letter_reasons(1000) == (["bad"] * 6, False)
    assert scans.fetch_sizes == [1001, 998]
