"""What the ledger implies: literal ledgers, literal expectations."""

from __future__ import annotations

import hashlib
import json
import random
from collections import Counter
from datetime import UTC, datetime, time, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

from pos_lambda.audit import expectations as ex
from pos_lambda.producer import malformed
from pos_lambda.producer.simulation import FaultConfig, SimulationConfig, simulate
from pos_lambda.schemas.contract import Invalid, LineItem, Receipt, parse_message

T0 = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)


def line(op: int, vfm: int, tid: int, at: str, sent: str, revenue: str = "1.00",
         **extra: Any) -> dict[str, Any]:  # fmt: skip
    happened = datetime.fromisoformat(at)
    window = happened.replace(minute=happened.minute - happened.minute % 15, second=0)
    return {
        "operation_id": op, "vendor_fiscal_module": vfm, "transaction_id": tid,
        "happened_at": at, "window_start": window.isoformat(), "item_quantity": 1,
        "revenue": revenue, "line_count": 1, "first_sent_at": sent,
        "late": extra.pop("late", False), "copies": 1, **extra,
    }  # fmt: skip


def write(tmp: Path, receipts: list[dict[str, Any]], faults: list[dict[str, Any]]) -> Path:
    (tmp / "receipts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in receipts))
    (tmp / "faults.jsonl").write_text("".join(json.dumps(f) + "\n" for f in faults))
    (tmp / "summary.json").write_text('{"topic": "t"}')
    return tmp


def test_load_reads_receipts_faults_and_old_ledgers(tmp_path: Path) -> None:
    ledger = ex.load(
        write(
            tmp_path,
            [
                line(
                    1,
                    2,
                    3,
                    "2026-03-02T08:14:59+00:00",
                    "2026-03-02T08:15:00+00:00",
                    returned_value="2.50",
                ),
                line(
                    1, 2, 4, "2026-03-02T08:15:00+00:00", "2026-03-04T08:15:00.001+00:00", late=True
                ),  # no returned_value: an older ledger's line
            ],
            [
                {"kind": "resend", "operation_id": 1},
                {
                    "kind": "malformed",
                    "malformed_kind": "wrong_type",
                    "expected_reason": "wrong_type:operation_id",
                    "value_sha256": "ab",
                },
                {"kind": "malformed", "malformed_kind": "broken_json"},
                {
                    "kind": "conflict",
                    "operation_id": 1,
                    "vendor_fiscal_module": 2,
                    "transaction_id": 3,
                },
            ],
        )
    )
    a, b = ledger.receipts[(1, 2, 3)], ledger.receipts[(1, 2, 4)]
    assert (a.window_start, a.revenue, a.returned_value) == (T0, Decimal("1.00"), Decimal("2.50"))
    assert b.returned_value is None and b.late
    # 48 h and 1 ms late: beyond a 48 h bound; a second late is not
    assert b.beyond(timedelta(hours=48)) and not a.beyond(timedelta(hours=48))
    assert ledger.malformed == [
        ex.MalformedFact("wrong_type", "wrong_type:operation_id", "ab"),
        ex.MalformedFact("broken_json", None, None),
    ]
    assert [m.codes for m in ledger.malformed] == [
        frozenset({"wrong_type"}),
        frozenset({"invalid_json"}),
    ]
    assert ledger.conflicts == Counter({(1, 2, 3): 1})
    assert ledger.store_days == [(1, T0.date())]


def test_aggregates_count_each_receipt_once_per_store_window(tmp_path: Path) -> None:
    ledger = ex.load(
        write(
            tmp_path,
            [
                line(1, 2, 1, "2026-03-02T08:00:00+00:00", "2026-03-02T08:00:01+00:00", "3.80"),
                line(
                    1,
                    3,
                    1,
                    "2026-03-02T08:14:00+00:00",
                    "2026-03-02T08:40:00+00:00",
                    "-1.90",
                    late=True,
                ),
                line(1, 2, 2, "2026-03-02T08:15:00+00:00", "2026-03-02T08:15:00+00:00", "0.10"),
                line(2, 9, 1, "2026-03-02T08:01:00+00:00", "2026-03-02T08:01:00+00:00", "4.47"),
            ],
            [],
        )
    )
    assert ex.aggregates(ledger.receipts.values()) == {
        (1, T0): (2, 2, Decimal("1.90"), 1),
        (1, T0 + timedelta(minutes=15)): (1, 1, Decimal("0.10"), 0),
        (2, T0): (1, 1, Decimal("4.47"), 0),
    }


def test_store_time_counts_only_store_hours() -> None:
    at = lambda d, h, m=0, s=0: datetime(2026, 3, d, h, m, s, tzinfo=UTC)
    default = ex.AlertRules(Decimal(1), Decimal(1), timedelta(minutes=1), time(7), time(21))
    hours = default.week_of(101)  # not in the ledger: the default window, UTC
    assert ex.store_time(at(2, 6, 50), at(2, 7, 10), hours) == timedelta(minutes=10)
    assert ex.store_time(at(2, 20, 0), at(3, 8, 0), hours) == timedelta(hours=2)
    assert ex.store_time(at(2, 22, 0), at(3, 6, 0), hours) == timedelta(0)
    assert ex.store_time(at(2, 9, 0), at(4, 9, 0), hours) == timedelta(hours=28)
    assert ex.store_time(at(2, 6, 59, 30), at(2, 7, 0, 45), hours) == timedelta(seconds=45)


def test_store_time_by_the_stores_own_hours() -> None:
    kathmandu = ex.store_week("Asia/Kathmandu", dict.fromkeys(ex.WEEKDAY_NAMES, "07:00-21:00"))
    # 20:45 local (15:00Z) to 07:15 local the next day (01:30Z): 15 + 15 minutes.
    start, end = datetime(2026, 3, 1, 15, tzinfo=UTC), datetime(2026, 3, 2, 1, 30, tzinfo=UTC)
    assert ex.store_time(start, end, kathmandu) == timedelta(minutes=30)
    soho = ex.store_week(
        "America/New_York",
        {**dict.fromkeys(ex.WEEKDAY_NAMES[:5], "07:00-22:00"), "sat": "08:00-20:00",
         "sun": "08:00-20:00"},
    )  # fmt: skip
    # Saturday 19:45 EST to Sunday 08:20 EDT (spring forward between): 15 + 20 minutes.
    start = datetime.fromisoformat("2026-03-07T19:45:00-05:00")
    end = datetime.fromisoformat("2026-03-08T08:20:00-04:00")
    assert ex.store_time(start, end, soho) == timedelta(minutes=35)
    # The fall-back day repeats 01:00-02:00: open 00:00-03:00 is 4 hours of it.
    night = ex.store_week("America/New_York", {"sun": "00:00-03:00"})
    sunday = datetime(2026, 11, 1, 4, tzinfo=UTC), datetime(2026, 11, 2, 5, tzinfo=UTC)
    assert ex.store_time(*sunday, night) == timedelta(hours=4)
    assert night.week[:6] == (None,) * 6


def test_the_ledgers_store_hours_judge_silences(tmp_path: Path) -> None:
    """Kathmandu's 20:50 -> 07:10 is 20 store minutes by its hours (quiet), 355 by the
    default UTC window; store 7, not in the ledger's store hours, gets the default."""
    receipts = [
        line(102, 1, 1, "2026-03-07T15:05:00+00:00", "2026-03-07T15:05:00+00:00"),
        line(102, 1, 2, "2026-03-08T01:25:00+00:00", "2026-03-08T01:25:00+00:00"),
        line(102, 1, 3, "2026-03-08T05:15:00+00:00", "2026-03-08T05:15:00+00:00"),
        line(7, 2, 1, "2026-03-07T15:05:00+00:00", "2026-03-07T15:05:00+00:00"),
        line(7, 2, 2, "2026-03-08T01:25:00+00:00", "2026-03-08T01:25:00+00:00"),
    ]
    write(tmp_path, receipts, [])
    summary = {"topic": "t", "store_hours": {"102": {"time_zone": "Asia/Kathmandu",
               "opening_hours": dict.fromkeys(ex.WEEKDAY_NAMES, "07:00-21:00")}}}  # fmt: skip
    (tmp_path / "summary.json").write_text(json.dumps(summary))
    ledger = ex.load(tmp_path)
    rules = ex.AlertRules(Decimal("999"), Decimal("999"), timedelta(minutes=30), time(7),
                          time(21), ex.ledger_store_weeks(ledger.summary))  # fmt: skip
    assert set(rules.stores) == {102}
    got, _ = ex.expected_alerts(ledger, rules)
    assert got == Counter({("device_silent", 102, 1, 3): 1, ("device_silent", 7, 2, 2): 1})


def test_expected_alerts_from_ledger_values(tmp_path: Path) -> None:
    rules = ex.AlertRules(Decimal("50.00"), Decimal("4.00"), timedelta(minutes=30),
                          time(7), time(21))  # fmt: skip
    ledger = ex.load(
        write(
            tmp_path,
            [
                # device (1, 2), in Kafka's order: 08:00, 08:31 (31 min later: silent),
                # 09:20 (49 min after 08:31: silent), then 08:40, sent late at 09:30
                # (older than the newest seen: no alert)
                line(
                    1,
                    2,
                    1,
                    "2026-03-02T08:00:00+00:00",
                    "2026-03-02T08:00:00+00:00",
                    "50.01",
                    returned_value="0.00",
                ),
                line(
                    1,
                    2,
                    2,
                    "2026-03-02T08:31:00+00:00",
                    "2026-03-02T08:31:00+00:00",
                    "50.00",
                    returned_value="4.01",
                ),
                line(
                    1,
                    2,
                    3,
                    "2026-03-02T08:40:00+00:00",
                    "2026-03-02T09:30:00+00:00",
                    returned_value="4.00",
                    late=True,
                ),
                line(
                    1,
                    2,
                    4,
                    "2026-03-02T09:20:00+00:00",
                    "2026-03-02T09:20:00+00:00",
                    returned_value="0.00",
                ),
                # device (1, 3): 30 minutes exactly is not more than the silence
                line(
                    1,
                    3,
                    1,
                    "2026-03-02T08:00:00+00:00",
                    "2026-03-02T08:00:00+00:00",
                    returned_value="0.00",
                ),
                line(
                    1,
                    3,
                    2,
                    "2026-03-02T08:30:00+00:00",
                    "2026-03-02T08:30:00+00:00",
                    returned_value="0.00",
                ),
            ],
            [
                {
                    "kind": "conflict",
                    "operation_id": 1,
                    "vendor_fiscal_module": 3,
                    "transaction_id": 2,
                }
            ],
        )
    )
    got, returns_checked = ex.expected_alerts(ledger, rules)
    assert returns_checked
    assert got == Counter(
        {
            ("high_value", 1, 2, 1): 1,
            ("large_return", 1, 2, 2): 1,
            ("device_silent", 1, 2, 2): 1,
            ("device_silent", 1, 2, 4): 1,
            ("conflict", 1, 3, 2): 1,
        }
    )


def test_older_ledgers_cannot_check_large_returns(tmp_path: Path) -> None:
    rules = ex.AlertRules(Decimal("50.00"), Decimal("4.00"), timedelta(minutes=30),
                          time(7), time(21))  # fmt: skip
    ledger = ex.load(
        write(tmp_path, [line(1, 2, 1, "2026-03-02T08:00:00+00:00",
                              "2026-03-02T08:00:00+00:00", "60.00")], []),
    )  # fmt: skip
    assert ex.expected_alerts(ledger, rules) == (Counter({("high_value", 1, 2, 1): 1}), False)


def test_malformed_reason_table_matches_the_validator() -> None:
    """Every kind the simulator makes, through the contract's validator: its reason code
    is the one MALFORMED_REASONS names (the table is the auditor's, the reasons are not)."""
    like = Receipt(T0, 1, 2, 3, (LineItem("Tea", Decimal("1.90"), 2),))
    seen: dict[str, set[str]] = {}
    rng = random.Random(3)
    for _ in range(400):
        kind, value, _reason = malformed.make(rng, like)
        got = parse_message(value)
        assert isinstance(got, Invalid)
        seen.setdefault(kind, set()).add(ex.reason_code(got.reason))
    assert set(seen) == set(ex.MALFORMED_REASONS) == set(malformed.KINDS)
    for kind, codes in seen.items():
        assert codes <= ex.MALFORMED_REASONS[kind], kind


def test_simulated_ledger_records_fingerprints_and_returned_values() -> None:
    result = simulate(
        SimulationConfig(count=400, seed=5, start=T0, faults=FaultConfig(malformed_rate=0.1))
    )
    bad = [m.value for m in result.messages if m.kind.startswith("malformed:")]
    prints = [f["value_sha256"] for f in result.faults if f["kind"] == "malformed"]
    assert len(prints) == len(bad) > 10
    assert sorted(prints) == sorted(hashlib.sha256(v).hexdigest() for v in bad)
    by_key = {}
    for m in result.messages:
        parsed = parse_message(m.value)
        if isinstance(parsed, Receipt):
            by_key[parsed.natural_key] = parsed
    for r in result.receipts:
        parsed = by_key[(r["operation_id"], r["vendor_fiscal_module"], r["transaction_id"])]
        returned = sum((i.price * -i.amount for i in parsed.line_items if i.amount < 0), Decimal(0))
        assert Decimal(r["returned_value"]) == returned
    assert any(Decimal(r["returned_value"]) > 0 for r in result.receipts)


def test_device_days_are_the_ledgers_numbers_and_holes_per_utc_day(tmp_path: Path) -> None:
    at = "2026-03-02T08:0{}:00+00:00"
    receipts = [line(104, 2, n, at.format(i), at.format(i)) for i, n in enumerate((3309, 3310))]
    receipts += [line(104, 2, 3313, at.format(5), at.format(5))]
    receipts += [line(104, 2, 3316, at.format(6), at.format(6))]
    receipts += [line(104, 2, 3317, "2026-03-03T00:00:01+00:00", "2026-03-03T00:00:01+00:00")]
    receipts += [line(107, 2, 5, at.format(1), at.format(1))]
    ledger = ex.load(write(tmp_path, receipts, []))
    d2, d3 = datetime(2026, 3, 2).date(), datetime(2026, 3, 3).date()
    assert ex.device_days(ledger.receipts.values()) == {
        (104, d2, 2): (3309, 3316, 4, ("3311-3312", "3314-3315"), Decimal("4.00")),
        (104, d3, 2): (3317, 3317, 1, (), Decimal("1.00")),
        (107, d2, 2): (5, 5, 1, (), Decimal("1.00")),
    }
