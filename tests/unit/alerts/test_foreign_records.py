"""Records of `pos.alerts` the sink cannot read: each is NotAnAlert (never another error),
and the sink's batch step skips and counts them, keeping the alerts around them."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from typing import Any

import pytest

from pos_lambda.alerts.rules import Alert, NotAnAlert, Source
from pos_lambda.alerts.sink import _rows

GOOD = {
    "alert_id": "a5416906-9c12-524e-8972-2037f9abdf7f",
    "rule": "high_value",
    "operation_id": 101,
    "vendor_fiscal_module": 1001,
    "transaction_id": 42,
    "happened_at": "2026-03-02T08:00:00+00:00",
    "detail": {"revenue": "60.00", "threshold": "50.00"},
    "source": {"partition": 0, "offset": 0, "timestamp_ms": 1000},
}


def with_(**changes: Any) -> bytes:
    return json.dumps({**GOOD, **changes}).encode()


def without(name: str) -> bytes:
    return json.dumps({k: v for k, v in GOOD.items() if k != name}).encode()


def test_an_alert_reads_back() -> None:
    assert Alert.from_json(json.dumps(GOOD).encode()) == Alert(
        alert_id="a5416906-9c12-524e-8972-2037f9abdf7f",
        rule="high_value",
        operation_id=101,
        vendor_fiscal_module=1001,
        transaction_id=42,
        happened_at=datetime(2026, 3, 2, 8, tzinfo=UTC),
        detail={"revenue": "60.00", "threshold": "50.00"},
        source=Source(0, 0, 1000),
    )


def test_an_offset_is_turned_into_utc() -> None:
    alert = Alert.from_json(with_(happened_at="2026-03-02T09:30:00+01:30"))
    assert alert.happened_at == datetime(2026, 3, 2, 8, tzinfo=UTC)


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (with_(detail=None), "detail is a JSON NoneType, not a dict"),
        (with_(detail=["a", "b"]), "detail is a JSON list, not a dict"),
        (with_(detail={"revenue": 60}), "detail must map strings to strings"),
        # An offset that pushes the UTC instant before year 1 (OverflowError inside).
        (with_(happened_at="0001-01-01T00:00:00+01:00"), "OverflowError"),
        (with_(happened_at="9999-12-31T23:59:59-01:00"), "OverflowError"),
        (with_(happened_at="2026-03-02T08:00:00"), "happened_at has no offset"),
        (with_(happened_at="yesterday"), "ValueError: Invalid isoformat string"),
        (b"{not json", "JSONDecodeError"),
        (b"\xff\xfe{}", "UnicodeDecodeError"),
        (b"[" * 100_000 + b"]" * 100_000, "RecursionError"),
        (b'"an alert"', "a JSON str, not an object"),
        (b"42", "a JSON int, not an object"),
        (b"null", "a JSON NoneType, not an object"),
        (None, "no value (a tombstone)"),
        (without("source"), "no source"),
        (without("alert_id"), "no alert_id"),
        (without("happened_at"), "no happened_at"),
        (with_(source={"partition": 0, "offset": 0}), "no timestamp_ms"),
        (with_(source={"partition": -1, "offset": 0, "timestamp_ms": 0}), "partition -1"),
        (with_(operation_id=2**31), "operation_id 2147483648 outside"),
        (with_(transaction_id=True), "transaction_id True outside"),
        (with_(operation_id="101"), "operation_id is a JSON str, not a int"),
        (with_(rule="nonsense"), "unknown rule 'nonsense'"),
        (with_(alert_id=""), "alert_id '' is not a UUID"),
        (with_(detail={"k": "\ud800"}), "is not valid UTF-8"),
    ],
)
def test_a_foreign_record_is_not_an_alert(value: bytes | None, reason: str) -> None:
    with pytest.raises(NotAnAlert, match=re.escape(reason)):
        Alert.from_json(value)


class Record:
    """A consumed Kafka record as the sink sees it (confluent-kafka's Message API)."""

    def __init__(self, value: bytes | None, offset: int) -> None:
        self._value, self._offset = value, offset

    def error(self) -> None:
        return None

    def value(self) -> bytes | None:
        return self._value

    def topic(self) -> str:
        return "pos.alerts"

    def partition(self) -> int:
        return 3

    def offset(self) -> int:
        return self._offset


def test_the_sink_skips_and_counts_foreign_records_between_alerts(
    caplog: pytest.LogCaptureFixture,
) -> None:
    second = {**GOOD, "alert_id": "00000000-0000-5000-8000-000000000002", "transaction_id": 43}
    msgs = [
        Record(json.dumps(GOOD).encode(), 10),
        Record(with_(detail=None), 11),
        Record(with_(happened_at="0001-01-01T00:00:00+01:00"), 12),
        Record(json.dumps(second).encode(), 13),
    ]
    at_end = {3}
    rows, foreign = _rows(msgs, at_end)
    assert foreign == 2
    assert [(r[0], r[4]) for r in rows] == [
        ("a5416906-9c12-524e-8972-2037f9abdf7f", 42),
        ("00000000-0000-5000-8000-000000000002", 43),
    ]
    assert at_end == set()  # records were read: the partition is no longer at its end
    logged = [r.getMessage() for r in caplog.records if r.name == "pos.alerts.sink"]
    assert [m.split(":")[0] for m in logged] == [
        "foreign record (not an alert) at pos.alerts[3]@11",
        "foreign record (not an alert) at pos.alerts[3]@12",
    ]
