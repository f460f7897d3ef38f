"""Exactly-once alerts under faults, in the manner of Kafka's transactions system test.

A known input (the simulator's receipts with resends, late and malformed messages, plus
conflicting copies this test adds) flows into Kafka while `pos-alerts run` processes it
in a separate process that is killed -9 three times mid-transaction (twice by its crash
point, with alerts on the broker and the commit not yet made; once from outside), and
the broker is hard-restarted (kill -9, start) once while it runs. (That restart often
leaves the processor's send_offsets_to_transaction hung, librdkafka#5456: its watchdog
then restarts it in place, same pid, transactional/watchdog.py; either way the same process must
make progress afterwards.) Then:

- a read_committed consumer of the alerts topic sees every expected alert exactly once;
  the expected alerts come from the producer's ledger (and the messages it sent), by
  the small rule implementations below, never by the processor's code;
- a read_uncommitted consumer also sees the aborted alerts: more records, the same ids.

The broker restart acts on the local Kafka every other test uses (as in
test_speed_faults): run this file alone, holding the machine's heavy-work lock.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from pos_lambda.producer import ledger as ledger_files
from pos_lambda.producer.kafka_sink import produce
from pos_lambda.producer.simulation import OutgoingMessage
from pos_lambda.settings import Settings
from tests.integration.alerts_helpers import (
    alerts_settings,
    faulty_stream,
    read_all,
    through_faults,
)

# The broker restart would strike the tests running beside it: `make test` runs this
# file after its parallel part.
pytestmark = [pytest.mark.integration, pytest.mark.serial]

HIGH_VALUE = Decimal("60.00")
LARGE_RETURN = Decimal("4.00")
SILENCE = timedelta(minutes=4)
OPENS, CLOSES = 7, 21  # store hours, UTC
Identity = tuple[str, int, int, int, str]  # rule, natural key, conflicting revenue


def _conflicting_copies(
    messages: list[OutgoingMessage],
) -> tuple[list[OutgoingMessage], set[Identity]]:
    """Copies of every 150th receipt with other line items (some twice, some resent)."""
    originals = [m for m in messages if m.kind == "receipt"]
    copies: list[OutgoingMessage] = []
    expected: set[Identity] = set()
    for n, original in enumerate(originals[::150]):
        doc = json.loads(original.value)
        for variant in (1, 2) if n % 3 == 0 else (1,):
            changed = json.loads(original.value)
            line = changed["transactions"][0]
            line["amount"] = line["amount"] + variant if line["amount"] + variant else 5
            value = json.dumps(changed).encode()
            copies.append(OutgoingMessage(original.key, value, 0, "conflict"))
            if n % 4 == 1:  # the terminal resends the conflicting copy: still one alert
                copies.append(OutgoingMessage(original.key, value, 0, "conflict-resend"))
            revenue = sum(
                (Decimal(i["price"]) * i["amount"] for i in changed["transactions"]), Decimal(0)
            )
            key = (doc["operation_id"], doc["vendor_fiscal_module"], doc["transaction_id"])
            expected.add(("conflict", *key, str(revenue.quantize(Decimal("0.01")))))
    return copies, expected


def _store_time(start: datetime, end: datetime) -> timedelta:
    """Store-hour time in [start, end), minute by minute (slow and obviously right)."""
    total, t = timedelta(0), start
    while t < end:
        step = min(timedelta(minutes=1), end - t)
        if OPENS <= t.hour < CLOSES:
            total += step
        t += step
    return total


def _expected_from_ledger(ledger: Path, messages: list[OutgoingMessage]) -> set[Identity]:
    receipts = ledger_files.load_receipts(ledger)
    expected: set[Identity] = set()
    for key, r in receipts.items():
        if Decimal(r["revenue"]) > HIGH_VALUE:
            expected.add(("high_value", *key, ""))
    # Returned value needs the line items, which the ledger does not keep: read them from
    # the original messages the simulator produced (never from the processor).
    for m in messages:
        if m.kind == "receipt":
            doc = json.loads(m.value)
            returned = sum(
                (
                    -Decimal(i["price"]) * i["amount"]
                    for i in doc["transactions"]
                    if i["amount"] < 0
                ),
                Decimal(0),
            )
            if returned > LARGE_RETURN:
                key = (doc["operation_id"], doc["vendor_fiscal_module"], doc["transaction_id"])
                expected.add(("large_return", *key, ""))
    # Silence: a device's receipts in the order Kafka got them (first send, then issue).
    by_device: dict[tuple[int, int], list[tuple[str, int, dict[str, Any]]]] = {}
    for index, (key, r) in enumerate(receipts.items()):
        by_device.setdefault(key[:2], []).append((r["first_sent_at"], index, r))
    for sends in by_device.values():
        latest: datetime | None = None
        for _, _, r in sorted(sends, key=lambda s: (datetime.fromisoformat(s[0]), s[1])):
            at = datetime.fromisoformat(r["happened_at"]).astimezone(UTC)
            if latest is not None and at > latest and _store_time(latest, at) > SILENCE:
                key = (r["operation_id"], r["vendor_fiscal_module"], r["transaction_id"])
                expected.add(("device_silent", *key, ""))
            latest = at if latest is None else max(latest, at)
    return expected


def _identity(alert: dict[str, Any]) -> Identity:
    conflict = alert["detail"]["revenue"] if alert["rule"] == "conflict" else ""
    return (
        alert["rule"],
        alert["operation_id"],
        alert["vendor_fiscal_module"],
        alert["transaction_id"],
        conflict,
    )


def test_every_alert_exactly_once_after_kill_9_and_a_broker_hard_restart(
    settings: Settings, new_topic: Callable[..., str], tmp_path: Path
) -> None:
    s = alerts_settings(
        settings,
        new_topic,
        alerts_high_value_threshold=HIGH_VALUE,
        alerts_large_return_threshold=LARGE_RETURN,
        alerts_silence_minutes=SILENCE / timedelta(minutes=1),
        alerts_transaction_max_ms=100,
        alerts_transaction_max_messages=50,
    )
    ledger = tmp_path / "ledger"
    result = faulty_stream(seed=61)
    ledger_files.write(ledger, result.receipts, result.faults, result.summary)
    conflicts, expected_conflicts = _conflicting_copies(result.messages)
    expected = _expected_from_ledger(ledger, result.messages) | expected_conflicts
    by_rule = Counter(e[0] for e in expected)
    assert min(by_rule[r] for r in ("high_value", "large_return", "conflict", "device_silent")) >= 5
    log = tmp_path / "alerts.log"
    # After the simulated stream (same producer order), the conflicting copies.
    through_faults(
        s, log, "alerts", result.messages,
        after_input=lambda: produce(conflicts, s.bootstrap_servers, s.topics.transactions,
                                    quiet=True),
    )  # fmt: skip

    committed = read_all(s.bootstrap_servers, s.topics.alerts, "read_committed")
    ids = Counter(r.key for r in committed)
    assert [k for k, n in ids.items() if n > 1] == [], "alerts seen twice by read_committed"
    assert Counter(_identity(r.alert) for r in committed) == Counter(expected)
    assert all(r.key == r.alert["alert_id"].encode() for r in committed)
    # The aborted transactions' alerts are in the log: read_uncommitted shows them, and
    # each is an alert that was emitted again (same id) and committed later.
    uncommitted = read_all(s.bootstrap_servers, s.topics.alerts, "read_uncommitted")
    assert len(uncommitted) > len(committed)
    assert {r.key for r in uncommitted} == set(ids)
    assert log.read_text().count("failpoint alerts.after_produce reached: kill -9") == 2
