"""The silence alert by each store's own hours, through real Kafka and Cassandra (issue 52).

An operator registers store 101 with hours of their own (`pos-stores add`);
`pos-producer simulate --store-hours` seeds the rest of the `stores` table (Kathmandu at
UTC+05:45, New York, which springs forward on Sunday 8 March 2026) and sends ~1.5 days
of their traffic; hand-made receipts add devices that are silent over closed hours
(must not alert) and in open hours (must alert), at the +05:45 store, across New York's
spring-forward night and at a store the table does not know (the default UTC window).
`pos-alerts run` starts after the seeding, kills itself (-9) mid-transaction once and
is restarted, and its committed alerts must equal:

- for the simulated receipts, the auditor's expectation (`audit.expectations`: the
  ledger's `store_hours`, minute by minute with zoneinfo, never the pipeline's code);
- for the hand-made ones, literals worked out in the comments.

Then the documented rule for edits: a `pos-stores set` changes nothing for the running
instance; after a restart it does.
"""

from __future__ import annotations

import json
import signal
import subprocess
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pos_lambda.adapters.service import wait_for
from pos_lambda.audit import expectations as ex
from pos_lambda.audit.run import alert_rules
from pos_lambda.producer.kafka_sink import produce
from pos_lambda.producer.simulation import OutgoingMessage
from pos_lambda.settings import Settings
from tests.integration import alerts_helpers as helpers
from tests.integration.speed_helpers import VENV_BIN, env_for, simulate

pytestmark = pytest.mark.integration

START = "2026-03-07T12:00:00+00:00"  # a Saturday; New York springs forward on Sunday
KATHMANDU, NEW_YORK, UNREGISTERED = 102, 103, 999
Identity = tuple[str, int, int, int]


def _receipt(store: int, device: int, tid: int, at: str) -> OutgoingMessage:
    doc = {
        "happened_at": at, "operation_id": store, "transaction_id": tid,
        "vendor_fiscal_module": device,
        "transactions": [{"title": "Espresso", "price": "1.90", "amount": 1}],
    }  # fmt: skip
    return OutgoingMessage(f"{store}:{device}".encode(), json.dumps(doc).encode(), 0, "receipt")


# Devices 9001.. (the simulator's are 1001..), each receipt 1.90: only silences alert.
HAND_MADE = [
    # Kathmandu (+05:45), daily 07:00-21:00: 20:50 to 07:10 local is 10 + 10 store
    # minutes: quiet (the default UTC window would count 15:05Z-21:00Z, 355 minutes).
    _receipt(KATHMANDU, 9001, 1, "2026-03-07T20:50:00+05:45"),
    _receipt(KATHMANDU, 9001, 2, "2026-03-08T07:10:00+05:45"),
    # Silent 10:00 to 11:00 local, all of it open: alerts.
    _receipt(KATHMANDU, 9002, 1, "2026-03-08T10:00:00+05:45"),
    _receipt(KATHMANDU, 9002, 2, "2026-03-08T11:00:00+05:45"),
    # New York, weekend 08:00-20:00: Saturday 19:45 EST to Sunday 08:20 EDT, across the
    # spring-forward night, is 15 + 20 minutes: alerts (on EST all along it would be 15).
    _receipt(NEW_YORK, 9003, 1, "2026-03-07T19:45:00-05:00"),
    _receipt(NEW_YORK, 9003, 2, "2026-03-08T08:20:00-04:00"),
    # Sunday 19:50 EDT to Monday 07:05 EDT (weekdays 07:00-22:00): 10 + 5, quiet.
    _receipt(NEW_YORK, 9004, 1, "2026-03-08T19:50:00-04:00"),
    _receipt(NEW_YORK, 9004, 2, "2026-03-09T07:05:00-04:00"),
    # Not in the stores table: the default window, UTC 07:00-21:00. 20 minutes: quiet;
    # then 50: alerts.
    _receipt(UNREGISTERED, 9005, 1, "2026-03-07T20:50:00+00:00"),
    _receipt(UNREGISTERED, 9005, 2, "2026-03-08T07:10:00+00:00"),
    _receipt(UNREGISTERED, 9005, 3, "2026-03-08T08:00:00+00:00"),
]
HAND_MADE_ALERTS = {
    ("device_silent", KATHMANDU, 9002, 2): "Asia/Kathmandu",
    ("device_silent", NEW_YORK, 9003, 2): "America/New_York",
    ("device_silent", UNREGISTERED, 9005, 3): "default",
}


def _stores_cli(settings: Settings, *args: str) -> str:
    out = subprocess.run(
        [str(VENV_BIN / "pos-stores"), *args],
        env=env_for(settings), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    return out.stdout


def _identity(alert: dict[str, Any]) -> Identity:
    return (alert["rule"], alert["operation_id"], alert["vendor_fiscal_module"],
            alert["transaction_id"])  # fmt: skip


def _committed_alerts(settings: Settings) -> list[dict[str, Any]]:
    records = helpers.read_all(settings.bootstrap_servers, settings.topics.alerts, "read_committed")
    return [r.alert for r in records]


def test_silence_counts_each_stores_own_hours(
    isolated: tuple[Settings, Any], new_topic: Callable[..., str], tmp_path: Path
) -> None:
    s = helpers.alerts_settings(isolated[0], new_topic)  # its own keyspace: its own stores table
    # An operator's store 101 (Bratislava in the simulator's catalogue), with short hours:
    # the simulator keeps it, and the ledger records these hours for the auditor.
    _stores_cli(s, "add", "101", "--name", "Bratislava, short hours",
                "--zone", "Europe/Bratislava", "--hours", "daily=10:00-16:00")  # fmt: skip
    ledger = tmp_path / "ledger"
    summary = simulate(
        s, ledger, "--start", START, "--store-hours", "--stores", "3", "--count", "1500",
        "--mean-gap", "60", "--seed", "52", "--resend-rate", "0.03", "--late-rate", "0.02",
        "--late-max-delay", "3600",
    )  # fmt: skip
    assert summary["delivery"]["status"] == "complete"
    assert summary["store_hours"]["101"]["opening_hours"]["mon"] == "10:00-16:00"  # the table's
    listed = json.loads(_stores_cli(s, "list", "--json"))
    assert [(x["operation_id"], x["time_zone"]) for x in listed] == [
        (101, "Europe/Bratislava"), (102, "Asia/Kathmandu"), (103, "America/New_York"),
    ]  # fmt: skip
    produce(HAND_MADE, s.bootstrap_servers, s.topics.transactions, quiet=True)

    audit_ledger = ex.load(ledger)
    rules = alert_rules(s, audit_ledger)
    expected, _ = ex.expected_alerts(audit_ledger, rules)
    expected.update(HAND_MADE_ALERTS.keys())
    # The test can tell: the default window for every store expects other silences.
    everywhere_default, _ = ex.expected_alerts(
        audit_ledger,
        ex.AlertRules(
            rules.high_value, rules.large_return, rules.silence, rules.opens, rules.closes
        ),
    )
    silent = {k for k in expected if k[0] == "device_silent" and k[2] < 9000}
    assert silent, "the simulated stream has no silent device: nothing checked there"
    assert silent != {k for k in everywhere_default if k[0] == "device_silent"}

    log = tmp_path / "alerts.log"
    procs: list[subprocess.Popen[bytes]] = []
    try:
        # Started after the seeding: an instance reads the stores table when it starts.
        # The first one kills itself (-9) with the alerts of its third alerting
        # transaction on the broker, uncommitted; the next one rebuilds and goes on.
        proc = helpers.start_processor(
            s, log, alerts_transaction_max_messages=50,
            alerts_crash_point="kill_after_produce", alerts_crash_at_transaction=3,
        )  # fmt: skip
        procs.append(proc)
        assert proc.wait(timeout=180) == -signal.SIGKILL, log.read_text()[-3000:]
        proc = helpers.start_processor(s, log, alerts_transaction_max_messages=50)
        procs.append(proc)

        def finished() -> bool:
            assert proc.poll() is None, log.read_text()[-3000:]
            return helpers.caught_up(s)

        assert wait_for(finished, timeout=300, interval=0.5), log.read_text()[-3000:]
        assert "store hours: 3 store(s) from the stores table" in log.read_text()

        alerts = _committed_alerts(s)
        got = Counter(_identity(a) for a in alerts)
        assert [k for k, n in got.items() if n > 1] == [], "an alert committed twice"
        assert got == expected
        details = {_identity(a): a["detail"] for a in alerts}
        assert {k: details[k]["store_hours"] for k in HAND_MADE_ALERTS} == HAND_MADE_ALERTS
        assert details[("device_silent", KATHMANDU, 9002, 2)]["store_minutes_silent"] == "60.0"
        assert details[("device_silent", NEW_YORK, 9003, 2)]["store_minutes_silent"] == "35.0"

        # An edit while the instance runs changes nothing for it: Kathmandu closed every
        # day, yet 11:00 to 13:00 local still counts 120 open minutes (the snapshot).
        _stores_cli(s, "set", str(KATHMANDU), "--hours", "daily=closed")
        done = helpers.committed_total(s)
        produce([_receipt(KATHMANDU, 9002, 3, "2026-03-08T13:00:00+05:45")],
                s.bootstrap_servers, s.topics.transactions, quiet=True)  # fmt: skip
        assert wait_for(finished, timeout=120, interval=0.2) and helpers.committed_total(s) > done
        assert helpers.sigterm(proc) == 0, log.read_text()[-3000:]
        # After a restart it does: 13:00 to 15:00 local is no store time any more.
        proc = helpers.start_processor(s, log, alerts_transaction_max_messages=50)
        procs.append(proc)
        produce([_receipt(KATHMANDU, 9002, 4, "2026-03-08T15:00:00+05:45")],
                s.bootstrap_servers, s.topics.transactions, quiet=True)  # fmt: skip
        assert wait_for(finished, timeout=120, interval=0.2), log.read_text()[-3000:]
        assert helpers.sigterm(proc) == 0, log.read_text()[-3000:]
    finally:
        helpers.cleanup(*procs)

    after = Counter(_identity(a) for a in _committed_alerts(s))
    assert after - got == Counter({("device_silent", KATHMANDU, 9002, 3): 1})


def test_a_hand_broken_stores_row_stops_the_start_with_a_clear_error(
    isolated: tuple[Settings, Any], new_topic: Callable[..., str], tmp_path: Path
) -> None:
    s, cql = isolated
    s = helpers.alerts_settings(s, new_topic)
    # Edited in cqlsh past pos-stores' validation: an overnight Monday.
    cql.execute(
        "INSERT INTO stores (operation_id, name, time_zone, opening_hours) "
        "VALUES (555, 'Night owl', 'Europe/Bratislava', {'mon': '22:00-02:00'})"
    )
    log = tmp_path / "alerts.log"
    proc = helpers.start_processor(s, log)
    try:
        assert proc.wait(timeout=120) == 2, log.read_text()[-3000:]
    finally:
        helpers.cleanup(proc)
    assert "error: the stores table: store 555: hours of mon" in log.read_text()
    assert "overnight hours are not supported" in log.read_text()
