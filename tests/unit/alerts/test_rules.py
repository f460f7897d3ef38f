"""The alert rules on literal records: thresholds, resends vs conflicts, silence in
store hours (event time), ids, and the same alerts on a replay."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime, time, timedelta
from decimal import Decimal
from typing import Any

import pytest

from pos_lambda.alerts.rules import (
    Alert,
    AlertConfig,
    PartitionState,
    Source,
    alert_id,
)
from pos_lambda.stores.model import Store, parse_week
from pos_lambda.stores.store_time import store_time

RULES = AlertConfig(
    high_value=Decimal("50.00"),
    large_return=Decimal("5.00"),
    silence=timedelta(minutes=30),
    store_opens=time(7, 0),
    store_closes=time(21, 0),
)
AT = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)
ESPRESSO = {"title": "Espresso", "price": "1.90", "amount": 2}


def msg(
    tid: int,
    at: datetime | str = AT,
    items: list[dict[str, Any]] | None = None,
    store: int = 101,
    device: int = 1001,
) -> bytes:
    return json.dumps(
        {
            "happened_at": at if isinstance(at, str) else at.isoformat(),
            "operation_id": store,
            "transaction_id": tid,
            "vendor_fiscal_module": device,
            "transactions": items or [ESPRESSO],
        }
    ).encode()


def feed(
    values: list[bytes | None], state: PartitionState | None = None, rules: AlertConfig = RULES
) -> list[Alert]:
    state = state if state is not None else PartitionState()
    out: list[Alert] = []
    for offset, value in enumerate(values):
        out += state.apply(rules, value, Source(0, offset, 1_000 + offset))
    return out


def summary(alerts: list[Alert]) -> list[tuple[str, int, dict[str, str]]]:
    return [(a.rule, a.transaction_id, a.detail) for a in alerts]


def test_high_value_above_the_threshold_only() -> None:
    alerts = feed(
        [
            msg(1, items=[{"title": "Salad bowl", "price": "25.00", "amount": 2}]),  # 50.00
            msg(2, items=[{"title": "Salad bowl", "price": "25.01", "amount": 2}]),  # 50.02
        ]
    )
    assert summary(alerts) == [("high_value", 2, {"revenue": "50.02", "threshold": "50.00"})]


def test_large_return_counts_only_the_returned_lines() -> None:
    alerts = feed(
        [
            # returns worth 4.80 + 1.00 = 5.80, sold 100.00: both rules fire
            msg(1, items=[{"title": "Tea", "price": "1.60", "amount": -3},
                          {"title": "Bagel", "price": "1.00", "amount": -1},
                          {"title": "Sandwich", "price": "50.00", "amount": 2}]),
            msg(2, items=[{"title": "Tea", "price": "2.50", "amount": -2}]),  # 5.00: not beyond
        ]
    )  # fmt: skip
    assert summary(alerts) == [
        ("high_value", 1, {"revenue": "94.20", "threshold": "50.00"}),
        ("large_return", 1, {"returned_value": "5.80", "threshold": "5.00"}),
    ]


def test_resends_are_silent_and_each_distinct_conflict_alerts_once() -> None:
    first = msg(7)
    same_content = msg(7, "2026-03-02T09:00:00+01:00", [{**ESPRESSO, "price": "1.9"}])
    other_items = msg(7, items=[{**ESPRESSO, "amount": 3}])
    other_time = msg(7, AT + timedelta(seconds=1))
    alerts = feed([first, first, same_content, other_items, other_items, other_time])
    assert [(a.rule, a.source.offset, a.detail["revenue"]) for a in alerts] == [
        ("conflict", 3, "5.70"),
        ("conflict", 5, "3.80"),
    ]
    assert alerts[0].detail["first_offset"] == "0"
    assert alerts[0].detail["first_content_hash"] == alerts[1].detail["first_content_hash"]
    assert len({a.alert_id for a in alerts}) == 2


def test_a_conflicting_copy_does_not_fire_the_value_rules() -> None:
    big = [{"title": "Sandwich", "price": "50.00", "amount": 2}]
    alerts = feed([msg(7), msg(7, items=big)])
    assert [a.rule for a in alerts] == ["conflict"]


def test_a_conflict_names_both_contents_by_their_canonical_hash() -> None:
    # The text pos_lambda.views.content defines (the speed layer's stored hash).
    def canonical(amount: int) -> str:
        text = (
            '{"col1":1772438400000000,"line_items":'
            f'[{{"title":"Espresso","price":1.90,"amount":{amount}}}]}}'
        )
        return hashlib.sha256(text.encode()).hexdigest()

    [alert] = feed([msg(42), msg(42, items=[{**ESPRESSO, "amount": 3}])])
    assert alert.detail["first_content_hash"] == canonical(2)
    assert alert.detail["content_hash"] == canonical(3)


def test_alert_ids_are_fixed_by_rule_key_and_content() -> None:
    assert alert_id("high_value", (101, 1001, 42)) == "a5416906-9c12-524e-8972-2037f9abdf7f"
    assert alert_id("conflict", (101, 1001, 42), "abc") == "5a97418f-94bd-5141-ab68-d3acced60405"


@pytest.mark.parametrize(
    ("start", "end", "minutes"),
    [
        ("2026-03-02T08:00", "2026-03-02T08:45", 45),  # all within
        ("2026-03-02T20:30", "2026-03-03T07:10", 40),  # 30 before closing, 10 after opening
        ("2026-03-02T21:00", "2026-03-03T07:00", 0),  # the night
        ("2026-03-01T06:00", "2026-03-03T06:00", 2 * 14 * 60),  # two whole store days
        ("2026-03-02T09:00", "2026-03-02T08:00", 0),  # backwards
    ],
)
def test_the_default_window_is_utc_every_day(start: str, end: str, minutes: int) -> None:
    t0, t1 = (datetime.fromisoformat(t).replace(tzinfo=UTC) for t in (start, end))
    assert store_time(RULES.default_store, t0, t1) == timedelta(minutes=minutes)


def test_device_silence_counts_store_hours_in_event_time() -> None:
    alerts = feed(
        [
            msg(1, AT),
            msg(2, AT + timedelta(minutes=30)),  # exactly 30: not more
            msg(3, AT + timedelta(minutes=61)),  # 31 minutes silent
            msg(4, AT + timedelta(minutes=50)),  # arrives late: neither alerts nor rewinds
            msg(5, AT + timedelta(minutes=62)),
            msg(1, AT, store=102, device=2001),  # another device has its own clock
            msg(6, datetime(2026, 3, 2, 20, 50, tzinfo=UTC)),
            msg(7, datetime(2026, 3, 3, 7, 15, tzinfo=UTC)),  # 10 + 15 store minutes: quiet
            msg(8, datetime(2026, 3, 3, 7, 46, tzinfo=UTC)),
        ]
    )
    assert summary(alerts) == [
        ("device_silent", 3, {"silent_since": "2026-03-02T08:30:00+00:00",
                              "store_minutes_silent": "31.0", "threshold_minutes": "30",
                              "store_hours": "default"}),
        ("device_silent", 6, {"silent_since": "2026-03-02T09:02:00+00:00",
                              "store_minutes_silent": "708.0", "threshold_minutes": "30",
                              "store_hours": "default"}),
        ("device_silent", 8, {"silent_since": "2026-03-03T07:15:00+00:00",
                              "store_minutes_silent": "31.0", "threshold_minutes": "30",
                              "store_hours": "default"}),
    ]  # fmt: skip


KATHMANDU = Store.create(102, "Thamel", "Asia/Kathmandu", parse_week(["daily=07:00-21:00"]))
NEW_YORK = Store.create(
    103, "SoHo", "America/New_York", parse_week(["mon-fri=07:00-22:00", "weekend=08:00-20:00"])
)
WITH_STORES = AlertConfig(
    Decimal("50.00"), Decimal("5.00"), timedelta(minutes=30), time(7), time(21),
    stores={102: KATHMANDU, 103: NEW_YORK},
)  # fmt: skip


def _around_closed_hours() -> list[bytes | None]:
    at = datetime.fromisoformat
    return [
        # Kathmandu (+05:45) closes at 21:00 local: 20:50 to 07:10 is 20 store minutes
        # (the default UTC 07:00-21:00 would count 15:05Z-21:00Z: 355 minutes) ...
        msg(1, at("2026-03-07T20:50:00+05:45"), store=102, device=2001),
        msg(2, at("2026-03-08T07:10:00+05:45"), store=102, device=2001),
        # ... then silent from 07:10 to 11:00 local, all of it open (230 minutes).
        msg(3, at("2026-03-08T11:00:00+05:45"), store=102, device=2001),
        # New York, Saturday 19:45 EST to Sunday 08:20 EDT (spring forward between):
        # 15 + 20 minutes; a clock stuck on EST would see 07:20, closed: 15.
        msg(1, at("2026-03-07T19:45:00-05:00"), store=103, device=3001),
        msg(2, at("2026-03-08T08:20:00-04:00"), store=103, device=3001),
        # Sunday 19:50 EDT to Monday 07:05 EDT: 10 + 5, quiet.
        msg(1, at("2026-03-08T19:50:00-04:00"), store=103, device=3002),
        msg(2, at("2026-03-09T07:05:00-04:00"), store=103, device=3002),
        # Store 999 is not registered: the default window, UTC 07:00-21:00.
        msg(1, at("2026-03-07T20:50:00+00:00"), store=999, device=9001),
        msg(2, at("2026-03-08T07:10:00+00:00"), store=999, device=9001),  # 20 minutes
        msg(3, at("2026-03-08T08:00:00+00:00"), store=999, device=9001),  # 50 minutes
    ]


def test_silence_counts_each_stores_own_hours_and_the_default_for_the_others() -> None:
    alerts = feed(_around_closed_hours(), rules=WITH_STORES)
    assert [(a.operation_id, a.transaction_id, a.detail) for a in alerts] == [
        (102, 3, {"silent_since": "2026-03-08T01:25:00+00:00", "store_minutes_silent": "230.0",
                  "threshold_minutes": "30", "store_hours": "Asia/Kathmandu"}),
        (103, 2, {"silent_since": "2026-03-08T00:45:00+00:00", "store_minutes_silent": "35.0",
                  "threshold_minutes": "30", "store_hours": "America/New_York"}),
        (999, 3, {"silent_since": "2026-03-08T07:10:00+00:00", "store_minutes_silent": "50.0",
                  "threshold_minutes": "30", "store_hours": "default"}),
    ]  # fmt: skip


def test_without_the_calendar_every_store_has_the_default_window() -> None:
    alerts = feed(_around_closed_hours())  # RULES: no stores
    assert [(a.operation_id, a.vendor_fiscal_module, a.transaction_id) for a in alerts] == [
        (102, 2001, 2), (103, 3001, 2), (103, 3002, 2), (999, 9001, 3),
    ]  # fmt: skip


def test_the_calendar_does_not_change_the_rule_state() -> None:
    """The state a rebuild restores (last receipt per device, copies per key) is the
    same whatever the calendar: an edited stores table never breaks a restore."""
    with_stores, without = PartitionState(), PartitionState()
    feed(_around_closed_hours(), with_stores, WITH_STORES)
    feed(_around_closed_hours(), without)
    assert with_stores == without


def test_stores_must_be_keyed_by_their_own_id() -> None:
    with pytest.raises(ValueError, match="keyed by their operation_id"):
        AlertConfig(Decimal(1), Decimal(1), timedelta(minutes=1), time(7), time(21),
              stores={101: KATHMANDU})  # fmt: skip


def test_bad_input_is_counted_never_alerted() -> None:
    state = PartitionState()
    assert feed([b"{not json", None, msg(1)], state) == []
    assert (state.records, state.invalid) == (3, 2)


def test_a_replay_gives_the_same_alert_bytes() -> None:
    values: list[bytes | None] = [
        msg(1, items=[{"title": "Sandwich", "price": "60.00", "amount": 1}]),
        msg(1, items=[ESPRESSO]),
        msg(2, AT + timedelta(hours=2)),
    ]
    first, again = feed(values), feed(values)
    assert [a.to_json() for a in first] == [a.to_json() for a in again]
    assert [a.rule for a in first] == ["high_value", "conflict", "device_silent"]
    assert [Alert.from_json(a.to_json()) for a in first] == first


def test_alert_record_format() -> None:
    [alert] = feed([msg(42, items=[{"title": "Sandwich", "price": "60.00", "amount": 1}])])
    assert json.loads(alert.to_json()) == {
        "alert_id": "a5416906-9c12-524e-8972-2037f9abdf7f",
        "rule": "high_value",
        "operation_id": 101,
        "vendor_fiscal_module": 1001,
        "transaction_id": 42,
        "happened_at": "2026-03-02T08:00:00+00:00",
        "detail": {"revenue": "60.00", "threshold": "50.00"},
        "source": {"partition": 0, "offset": 0, "timestamp_ms": 1000},
    }


def test_store_hours_must_open_before_they_close() -> None:
    with pytest.raises(ValueError, match="open before they close"):
        AlertConfig(Decimal(1), Decimal(1), timedelta(minutes=1), time(22), time(6))
