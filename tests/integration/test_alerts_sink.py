"""The alert sink into the real Cassandra: committed alerts only, one row per alert id,
and replaying the whole topic into the table changes nothing."""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from pos_lambda.adapters.service import wait_for
from pos_lambda.alerts.sink import SinkResult, run_sink
from pos_lambda.producer.kafka_sink import produce
from pos_lambda.producer.simulation import OutgoingMessage
from pos_lambda.schemas import cql as tables
from pos_lambda.settings import Settings
from tests.integration.alerts_helpers import (
    alerts_settings,
    caught_up,
    cleanup,
    read_all,
    sigterm,
    start_processor,
)

pytestmark = pytest.mark.integration
AT = datetime(2026, 3, 2, 9, tzinfo=UTC)


def _receipt(tid: int, price: str, amount: int, at: datetime = AT) -> OutgoingMessage:
    doc = {
        "happened_at": at.isoformat(),
        "operation_id": 101,
        "transaction_id": tid,
        "vendor_fiscal_module": 1001,
        "transactions": [{"title": "Sandwich", "price": price, "amount": amount}],
    }
    return OutgoingMessage(b"101:1001", json.dumps(doc).encode(), 0, "receipt")


def _aborted_alert(settings: Settings) -> None:
    """An alert-shaped record in a transaction that aborts: the sink must never see it."""
    p = Producer({"bootstrap.servers": settings.bootstrap_servers,
                  "transactional.id": f"test-aborter-{settings.alerts.instance_id}"})  # fmt: skip
    p.init_transactions(30)
    p.begin_transaction()
    fake = {"alert_id": "aborted", "rule": "high_value", "operation_id": 1,
            "vendor_fiscal_module": 1, "transaction_id": 1,
            "happened_at": AT.isoformat(), "detail": {},
            "source": {"partition": 0, "offset": 0, "timestamp_ms": 0}}  # fmt: skip
    p.produce(settings.topics.alerts, key=b"aborted", value=json.dumps(fake).encode())
    p.flush(30)
    p.abort_transaction(30)


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _rows(cql: Any) -> list[tuple[Any, ...]]:
    return sorted(
        (r.alert_id, r.rule, r.transaction_id, r.happened_at, dict(r.detail), r.payload)
        for r in cql.execute(f"SELECT * FROM {tables.ALERTS_TABLE}")
    )


def test_sink_writes_committed_alerts_once_and_a_replay_changes_nothing(
    isolated: tuple[Settings, Any], new_topic: Callable[..., str], tmp_path: Path
) -> None:
    base, cql = isolated
    s = alerts_settings(base, new_topic, alerts_high_value_threshold=Decimal("30.00"))
    produce(
        [
            _receipt(1, "20.00", 2),  # 40.00: high value
            _receipt(2, "5.00", 1),
            _receipt(3, "6.00", -2),  # a return worth 12.00
            _receipt(1, "20.00", 1),  # a conflicting copy of receipt 1
            _receipt(4, "5.00", 1, AT + timedelta(hours=1)),  # an hour of silence
        ],
        s.bootstrap_servers,
        s.topics.transactions,
        quiet=True,
    )
    _aborted_alert(s)
    log = tmp_path / "alerts.log"
    proc = start_processor(s, log)
    try:
        assert wait_for(lambda: caught_up(s), timeout=120, interval=0.5), log.read_text()
        assert sigterm(proc) == 0, log.read_text()
    finally:
        cleanup(proc)

    assert run_sink(s, threading.Event(), until_caught_up=True) == SinkResult(4, 0)
    rows = _rows(cql)
    by_receipt = sorted(rows, key=lambda r: (r[2], r[1]))
    assert [(rule, tid, detail) for _, rule, tid, _, detail, _ in by_receipt] == [
        ("conflict", 1, {"revenue": "20.00", "first_offset": "0",
                         "content_hash": _sha256(
                             '{"col1":1772442000000000,"line_items":'
                             '[{"title":"Sandwich","price":20.00,"amount":1}]}'),
                         "first_content_hash": _sha256(
                             '{"col1":1772442000000000,"line_items":'
                             '[{"title":"Sandwich","price":20.00,"amount":2}]}')}),
        ("high_value", 1, {"revenue": "40.00", "threshold": "30.00"}),
        ("large_return", 3, {"returned_value": "12.00", "threshold": "10.00"}),
        ("device_silent", 4, {"silent_since": "2026-03-02T09:00:00+00:00",
                              "store_minutes_silent": "60.0", "threshold_minutes": "30",
                              "store_hours": "default"}),
    ]  # fmt: skip
    committed = read_all(s.bootstrap_servers, s.topics.alerts, "read_committed")
    assert sorted(r.value.decode() for r in committed) == sorted(p for *_, p in rows)
    assert "aborted" not in {r[0] for r in rows}

    # Replay the whole topic into the table (a new sink group starts from the beginning).
    replay = s.with_overrides(**{"alerts_sink_group_id": s.alerts.sink_group_id + "-replay"})
    assert run_sink(replay, threading.Event(), until_caught_up=True) == SinkResult(4, 0)
    assert _rows(cql) == rows


# Records no processor writes, each in every partition of the alerts topic: the sink
# must skip them (logged, counted, committed past) and never stop.
FOREIGN = [
    b"{not json",
    b'["a", "list"]',
    b'{"alert_id": "missing everything else"}',
    json.dumps({"alert_id": "00000000-0000-5000-8000-000000000001", "rule": "high_value",
                "operation_id": 1, "vendor_fiscal_module": 1, "transaction_id": 1,
                "happened_at": AT.isoformat(), "detail": None,
                "source": {"partition": 0, "offset": 0, "timestamp_ms": 0}}).encode(),
    json.dumps({"alert_id": "00000000-0000-5000-8000-000000000002", "rule": "high_value",
                "operation_id": 1, "vendor_fiscal_module": 1, "transaction_id": 1,
                "happened_at": "0001-01-01T00:00:00+01:00", "detail": {},
                "source": {"partition": 0, "offset": 0, "timestamp_ms": 0}}).encode(),
]  # fmt: skip


def _write_foreign(settings: Settings, partitions: int) -> int:
    p = Producer({"bootstrap.servers": settings.bootstrap_servers})
    for partition in range(partitions):
        for value in FOREIGN:
            p.produce(settings.topics.alerts, value=value, partition=partition)
    assert p.flush(30) == 0
    return partitions * len(FOREIGN)


def test_foreign_records_between_alerts_are_skipped_and_the_sink_keeps_running(
    isolated: tuple[Settings, Any],
    new_topic: Callable[..., str],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    base, cql = isolated
    s = alerts_settings(base, new_topic, alerts_high_value_threshold=Decimal("30.00"))
    stop, outcome = threading.Event(), list[Any]()

    def sink() -> None:
        try:
            outcome.append(run_sink(s, stop))
        except BaseException as exc:  # the test reports it: a crash is the failure
            outcome.append(exc)

    sink_thread = threading.Thread(target=sink, name="alerts-sink")
    sink_thread.start()
    log = tmp_path / "alerts.log"
    proc = start_processor(s, log)
    try:
        # Alerts, then foreign records in every partition, then alerts again.
        produce([_receipt(1, "20.00", 2)], s.bootstrap_servers, s.topics.transactions, quiet=True)
        assert wait_for(lambda: caught_up(s), timeout=120, interval=0.5), log.read_text()
        foreign = _write_foreign(s, partitions=4)
        produce([_receipt(2, "40.00", 1)], s.bootstrap_servers, s.topics.transactions, quiet=True)
        assert wait_for(lambda: caught_up(s), timeout=120, interval=0.5), log.read_text()
        assert sigterm(proc) == 0, log.read_text()
    finally:
        cleanup(proc)

    def skipped() -> list[str]:
        return [r.getMessage() for r in caplog.records if "foreign record" in r.getMessage()]

    def all_read() -> bool:
        assert sink_thread.is_alive(), f"the sink stopped: {outcome}"
        return len(_rows(cql)) == 2 and len(skipped()) == 20

    try:
        assert wait_for(all_read, timeout=120, interval=0.2), skipped()
    finally:
        stop.set()
        sink_thread.join(timeout=60)
    assert [(rule, tid) for _, rule, tid, *_ in sorted(_rows(cql), key=lambda r: r[2])] == [
        ("high_value", 1),
        ("high_value", 2),
    ]
    assert foreign == 20
    # Each logged with its coordinates: 5 distinct offsets in each of the 4 partitions.
    coordinates = {
        (int(m.group(1)), int(m.group(2)))
        for m in (
            re.search(rf"at {re.escape(s.topics.alerts)}\[(\d)\]@(\d+):", t) for t in skipped()
        )
        if m
    }
    assert len(coordinates) == 20
    assert sorted(Counter(p for p, _ in coordinates).items()) == [(0, 5), (1, 5), (2, 5), (3, 5)]
    assert outcome == [SinkResult(written=2, foreign=20)]

    # A restarted sink (same group) starts past them: nothing to write, nothing to skip.
    assert run_sink(s, threading.Event(), until_caught_up=True) == SinkResult(0, 0)
