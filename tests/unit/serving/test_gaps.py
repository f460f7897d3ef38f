"""The gaps answer (pos_lambda.serving.gaps) through the production statements over tables
in memory: final from the batch's rows, provisional from the speed view's receipts with
the lateness bound, and a final day committed before the view existed."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pytest

from pos_lambda.schemas import cql
from pos_lambda.schemas.aggregate import Aggregate
from pos_lambda.serving.gaps import DeviceGaps, GapsAnswer, MissingRange
from pos_lambda.serving.model import AggregateRow, DayVersion, Pointer
from pos_lambda.serving.service import Serving
from pos_lambda.settings import Settings
from pos_lambda.stores.registry import InMemoryStores
from tests.support.memory_views import MemoryKeyspace, memory_views

DAY = date(2026, 3, 2)
END = datetime(2026, 3, 3, tzinfo=UTC)


def at(h: int, m: int = 0) -> datetime:
    return datetime(2026, 3, 2, h, m, tzinfo=UTC)


def serving(ks: MemoryKeyspace, now: datetime) -> Serving:
    settings = Settings()
    assert settings.speed.max_lateness_hours == 48  # the bound the statuses below use
    return Serving(settings, clock=lambda: now, stores=InMemoryStores(), views=memory_views(ks))


def speed_receipt(ks: MemoryKeyspace, device: int, number: int, happened_at: datetime) -> None:
    ks.insert(
        cql.RAW_TABLE,
        operation_id=104,
        day=DAY,
        happened_at=happened_at,
        vendor_fiscal_module=device,
        transaction_id=number,
        revenue=Decimal("1.90"),
    )


def known_store(ks: MemoryKeyspace, batch_version: str | None = None) -> None:
    row = AggregateRow(104, at(8), Aggregate(4, 4, Decimal("4.00"), 0), batch_version)
    ks.aggregates(speed=[row], batch=[row] if batch_version else [])


@pytest.fixture
def ks() -> MemoryKeyspace:
    ks = MemoryKeyspace()
    # Till 2: 3311-3312 not received; 3314 happened at 08:04. Till 3: complete.
    for i, n in enumerate((3309, 3310, 3313, 3314)):
        speed_receipt(ks, 2, n, at(8, i + 1))
    speed_receipt(ks, 3, 77, at(9))
    return ks


def test_before_the_lateness_bound_a_gap_may_still_arrive(ks: MemoryKeyspace) -> None:
    known_store(ks)
    answer = serving(ks, at(20)).gaps(104, DAY)
    assert answer == GapsAnswer(
        104,
        DAY,
        "provisional",
        (
            DeviceGaps(
                2,
                3309,
                3314,
                4,
                (MissingRange(3311, 3312, "may still arrive"),),
                revenue=Decimal("7.60"),
            ),
            DeviceGaps(3, 77, 77, 1, (), revenue=Decimal("1.90")),
        ),
    )
    assert answer.line() == "store 104 2026-03-02 (provisional): 2 missing (3311-3312 on till 2)"


def test_after_the_lateness_bound_past_the_next_receipt_it_is_missing(ks: MemoryKeyspace) -> None:
    # 3313, the receipt after the gap, happened at 08:03: 48 h later the gap is missing.
    just_before = serving(ks, at(8, 3) + timedelta(hours=48) - timedelta(seconds=1))
    known_store(ks)
    assert just_before.gaps(104, DAY).devices[0].missing[0].status == "may still arrive"
    after = serving(ks, at(8, 3) + timedelta(hours=48))
    assert after.gaps(104, DAY).devices[0].missing[0].status == "missing"


def test_a_final_day_answers_from_the_batch_rows(ks: MemoryKeyspace) -> None:
    known_store(ks, "v7")
    ks.pointer(Pointer(END, {DAY: DayVersion(DAY, "v7", END)}))
    ks.insert(
        cql.GAPS_BATCH_TABLE,
        operation_id=104,
        day=DAY,
        version="v7",
        vendor_fiscal_module=2,
        first_number=3309,
        last_number=3320,
        receipt_count=9,
        missing_count=3,
        missing=["3311-3312", "3318"],
        restarts=[],
        revenue=Decimal("17.10"),
    )
    answer = serving(ks, at(20)).gaps(104, DAY)
    assert answer == GapsAnswer(
        104,
        DAY,
        "final",
        (
            DeviceGaps(
                2,
                3309,
                3320,
                9,
                (MissingRange(3311, 3312, "missing"), MissingRange(3318, 3318, "missing")),
                revenue=Decimal("17.10"),
            ),
        ),
    )
    assert answer.line() == (
        "store 104 2026-03-02 (final): 3 missing (3311-3312 on till 2, 3318 on till 2)"
    )


def test_a_final_day_without_the_view_is_not_yet_backfilled(ks: MemoryKeyspace) -> None:
    known_store(ks, "v1")  # committed by a release before the gaps view
    ks.pointer(Pointer(END, {DAY: DayVersion(DAY, "v1", END)}))
    answer = serving(ks, at(20)).gaps(104, DAY)
    assert answer.basis == "not yet backfilled"
    assert [(d.device, d.missing_count) for d in answer.devices] == [(2, 2), (3, 0)]


def test_a_day_covered_in_part_is_provisional(ks: MemoryKeyspace) -> None:
    known_store(ks, "v7")
    ks.pointer(Pointer(END, {DAY: DayVersion(DAY, "v7", at(12))}))
    assert serving(ks, at(20)).gaps(104, DAY).basis == "provisional"


def test_a_final_day_without_receipts_is_complete() -> None:
    ks = MemoryKeyspace()
    known_store(ks)  # known from another day's speed row only
    other = date(2026, 3, 1)
    ks.pointer(Pointer(END, {other: DayVersion(other, "v7", END)}))
    answer = serving(ks, at(20)).gaps(104, other)
    assert answer == GapsAnswer(104, other, "final")
    assert answer.line() == "store 104 2026-03-01 (final): no receipts"


def test_the_http_route_and_the_cli_give_the_same_answer(
    ks: MemoryKeyspace, capsys: pytest.CaptureFixture[str]
) -> None:
    from fastapi.testclient import TestClient

    from pos_lambda.serving import cli
    from pos_lambda.serving.http import create_app

    known_store(ks)
    lib = serving(ks, at(20))
    with TestClient(create_app(lib.settings, lib)) as http:
        r = http.get("/stores/104/days/2026-03-02/gaps")
        unknown = http.get("/stores/999/days/2026-03-02/gaps")
    assert r.status_code == 200
    assert r.json()["basis"] == "provisional"
    assert r.json()["devices"][0] == {
        "device": 2,
        "first": 3309,
        "last": 3314,
        "receipts": 4,
        "missing": [{"first": 3311, "last": 3312, "status": "may still arrive"}],
        "restarts": [],
        "revenue": "7.60",
    }
    assert unknown.status_code == 404
    args = cli._parser().parse_args(["gaps", "--store", "104", "--day", "2026-03-02"])
    _, render = cli._query(args, lib)
    assert render().splitlines()[0] == (
        "store 104 2026-03-02 (provisional): 2 missing (3311-3312 on till 2)"
    )
    assert "3311-3312 (may still arrive)" in render()
