"""The simulator with stores as data: zones, local opening hours across DST, local days."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, date, datetime, time
from decimal import Decimal
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from pos_lambda.producer import ledger
from pos_lambda.producer.simulation import SimulationConfig, SimulationResult, simulate
from pos_lambda.schemas.contract import Receipt, parse_message
from pos_lambda.stores.model import WEEKDAYS

# Saturday 7 March 2026, noon UTC, for about five days: New York springs forward on
# Sunday 8 March (02:00 EST -> 03:00 EDT).
START = datetime(2026, 3, 7, 12, tzinfo=UTC)


def _run(seed: int = 5, count: int = 3000) -> SimulationResult:
    return simulate(
        SimulationConfig(
            count=count, seed=seed, start=START, stores=3, mean_gap_s=60.0, store_hours=True
        )
    )


def test_stores_get_iana_zones_and_hours() -> None:
    result = _run(count=10)
    assert [(s.operation_id, s.time_zone) for s in result.stores] == [
        (101, "Europe/Bratislava"),
        (102, "Asia/Kathmandu"),
        (103, "America/New_York"),
    ]
    assert result.stores[1].opening_hours() == dict.fromkeys(WEEKDAYS, "07:00-21:00")
    assert result.summary["store_zones"] == {
        "101": "Europe/Bratislava", "102": "Asia/Kathmandu", "103": "America/New_York",
    }  # fmt: skip
    # The hours the silence alerts count, for the auditor (catalog.STORE_CATALOG's).
    assert result.summary["store_hours"]["103"] == {
        "time_zone": "America/New_York",
        "opening_hours": {**dict.fromkeys(WEEKDAYS[:5], "07:00-22:00"),
                          "sat": "08:00-20:00", "sun": "08:00-20:00"},
    }  # fmt: skip
    assert sorted(result.summary["store_hours"]) == ["101", "102", "103"]


def test_every_receipt_happens_while_its_store_is_open_by_its_local_clock() -> None:
    result = _run()
    stores = {s.operation_id: s for s in result.stores}
    for line in result.receipts:
        at = datetime.fromisoformat(line["happened_at"])
        store = stores[line["operation_id"]]
        assert store.is_open(at), (line, at.astimezone(store.zone))
    assert Counter(line["operation_id"] for line in result.receipts).keys() == {101, 102, 103}


def test_new_york_opening_moves_an_hour_earlier_in_utc_across_dst() -> None:
    # Weekdays 07:00-22:00 local: 12:00 UTC in EST (before 8 March), 11:00 UTC in EDT.
    result = _run()
    ny = [
        datetime.fromisoformat(line["happened_at"])
        for line in result.receipts
        if line["operation_id"] == 103
    ]

    def in_hour(day: date, hour: int) -> int:
        return sum(1 for at in ny if at.date() == day and at.hour == hour)

    assert in_hour(date(2026, 3, 9), 11) > 0  # Monday 07:xx EDT: open
    assert in_hour(date(2026, 3, 9), 10) == 0  # 06:xx EDT: closed
    # Saturday 7 March (EST) opens at 08:00 local = 13:00 UTC: nothing 12:00-13:00 UTC.
    assert in_hour(date(2026, 3, 7), 12) == 0
    assert in_hour(date(2026, 3, 7), 13) > 0


def test_kathmandu_prints_plus_05_45_and_the_ledger_keeps_local_days() -> None:
    result = _run()
    kathmandu = [
        r
        for m in result.messages
        if isinstance(r := parse_message(m.value), Receipt) and r.operation_id == 102
    ]
    assert kathmandu
    assert all(b'+05:45"' in m.value for m in result.messages if b'"operation_id":102,' in m.value)
    zones = {101: "Europe/Bratislava", 102: "Asia/Kathmandu", 103: "America/New_York"}
    for line in result.receipts:
        at = datetime.fromisoformat(line["happened_at"])
        local = at.astimezone(ZoneInfo(zones[line["operation_id"]]))
        assert line["local_day"] == local.date().isoformat()
    # 18:15 UTC is Kathmandu's midnight: a receipt after it belongs to the next day.
    late_evening = [
        line
        for line in result.receipts
        if line["operation_id"] == 102
        and datetime.fromisoformat(line["happened_at"]).time() >= time(18, 15)
    ]
    assert all(
        line["local_day"] > datetime.fromisoformat(line["happened_at"]).date().isoformat()
        for line in late_evening
    )


def test_expected_local_days_sum_the_ledger_per_store_and_local_day(tmp_path: Path) -> None:
    result = _run(count=400)
    ledger.write(tmp_path, result.receipts, result.faults, result.summary)
    want = ledger.expected_local_days(tmp_path)
    assert sum(a.receipt_count for a in want.values()) == 400
    by_hand: dict[tuple[int, date], Decimal] = {}
    for line in result.receipts:
        key = (line["operation_id"], date.fromisoformat(line["local_day"]))
        by_hand[key] = by_hand.get(key, Decimal("0.00")) + Decimal(line["revenue"])
    assert {k: a.revenue for k, a in want.items()} == by_hand


def test_same_seed_same_stream_with_store_hours() -> None:
    a, b = _run(seed=9, count=300), _run(seed=9, count=300)
    assert a.messages == b.messages and a.receipts == b.receipts


def test_a_ledger_without_store_hours_has_no_local_days(tmp_path: Path) -> None:
    plain = simulate(SimulationConfig(count=20, seed=1, start=START))
    assert plain.stores == [] and "local_day" not in plain.receipts[0]
    ledger.write(tmp_path, plain.receipts, plain.faults, plain.summary)
    with pytest.raises(ValueError, match="--store-hours"):
        ledger.expected_local_days(tmp_path)


def test_cli_store_hours_dry_run_writes_local_days_and_seeds_nothing(tmp_path: Path) -> None:
    from pos_lambda.producer import cli

    code = cli.main(
        ["simulate", "--count", "200", "--seed", "3", "--stores", "3", "--store-hours",
         "--mean-gap", "60", "--start", START.isoformat(), "--dry-run",
         "--ledger", str(tmp_path)]
    )  # fmt: skip
    assert code == 0
    lines = ledger.load_receipts(tmp_path).values()
    assert len(lines) == 200 and all("local_day" in line for line in lines)
    # --mean-gap 60 spreads 200 receipts over hours (at the default 2 s: minutes).
    span = max(datetime.fromisoformat(line["happened_at"]) for line in lines) - START
    assert span.total_seconds() > 3 * 3600


def test_seeding_keeps_an_operators_edit_and_returns_what_the_table_holds(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from pos_lambda.producer.cli import seed_stores
    from pos_lambda.producer.simulation import store_hours_record
    from pos_lambda.stores.model import parse_week
    from pos_lambda.stores.registry import InMemoryStores

    simulated = _run(count=10).stores
    edited = simulated[1].with_changes(week=parse_week(["sun=closed"]))  # Kathmandu, by hand
    registry = InMemoryStores([edited])
    registered = seed_stores(registry, simulated)
    assert registered == [simulated[0], edited, simulated[2]]
    assert registry.all() == registered
    assert "store 102 is registered in Asia/Kathmandu with its own hours" in capsys.readouterr().err
    # What the ledger then records for the auditor: the table's Sunday, closed.
    assert store_hours_record(registered)["102"]["opening_hours"]["sun"] == "closed"
