"""Fencing: two processor instances with one transactional.id.

The first freezes itself (SIGSTOP at its crash point) mid-transaction, its alerts on
the broker and its commit not made: a zombie. A second instance with the same id
starts, fences it (its open transaction is aborted), takes over the partitions (at once:
the same group.instance.id replaces the zombie's group member, static membership) and
processes the whole input. When the zombie wakes up, it is told it is fenced, exits
with the fenced exit code and writes nothing more: the alert topic's end offsets do
not move. A read_committed reader sees every expected alert once; a read_uncommitted
reader also sees the zombie's aborted ones.

Two *live* instances with one id: the second refuses to start (its id's lease is held
and renewed) before it touches Kafka, and the first goes on committing every alert once.
"""

from __future__ import annotations

import json
import os
import signal
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from pos_lambda.adapters.service import wait_for
from pos_lambda.alerts.processor import EXIT_FENCED, EXIT_ID_IN_USE, transactional_id
from pos_lambda.producer.kafka_sink import produce
from pos_lambda.producer.simulation import OutgoingMessage
from pos_lambda.schemas import cql as tables
from pos_lambda.settings import Settings
from tests.integration.alerts_helpers import (
    alerts_settings,
    await_progress,
    caught_up,
    cleanup,
    end_offsets,
    is_frozen,
    read_all,
    sigterm,
    start_processor,
)

pytestmark = pytest.mark.integration
AT = datetime(2026, 3, 2, 9, tzinfo=UTC)
DEVICES = (1001, 1002, 1003, 1004, 1005, 1006, 1007, 1008)


def _input() -> tuple[list[OutgoingMessage], set[tuple[str, int, int]]]:
    """400 receipts on 8 devices a second apart; every even receipt number is worth 20.00
    (one alert each above 10.00), every odd one 1.90."""
    messages, expected = [], set()
    for tid in range(1, 401):
        device = DEVICES[tid % len(DEVICES)]
        even = tid % 2 == 0
        item = {"title": "Sandwich", "price": "10.00", "amount": 2} if even else {
            "title": "Espresso", "price": "1.90", "amount": 1}  # fmt: skip
        doc = {
            "happened_at": (AT + timedelta(seconds=tid)).isoformat(),
            "operation_id": 101,
            "transaction_id": tid,
            "vendor_fiscal_module": device,
            "transactions": [item],
        }
        messages.append(OutgoingMessage(f"101:{device}".encode(), json.dumps(doc).encode(), 0,
                                        "receipt"))  # fmt: skip
        if even:
            expected.add(("high_value", device, tid))
    return messages, expected


def test_a_zombie_is_fenced_by_its_successor_and_writes_nothing_more(
    settings: Settings, new_topic: Callable[..., str], tmp_path: Path
) -> None:
    s = alerts_settings(
        settings,
        new_topic,
        alerts_high_value_threshold=Decimal("10.00"),
        alerts_transaction_max_messages=20,
    )
    messages, expected = _input()
    produce(messages, s.bootstrap_servers, s.topics.transactions, quiet=True)
    zombie_log, successor_log = tmp_path / "zombie.log", tmp_path / "successor.log"
    zombie = start_processor(
        s, zombie_log, alerts_crash_point="stop_after_produce", alerts_crash_at_transaction=2
    )
    successor = None
    try:
        assert wait_for(lambda: is_frozen(zombie), timeout=120, interval=0.2), (
            zombie_log.read_text()
        )
        assert sum(end_offsets(s.bootstrap_servers, s.topics.alerts)) > 0  # its open txn's
        successor = start_processor(s, successor_log)  # the same instance id

        def successor_done() -> bool:
            assert successor is not None and successor.poll() is None, successor_log.read_text()
            return caught_up(s)

        assert wait_for(successor_done, timeout=240, interval=0.5), successor_log.read_text()
        written = end_offsets(s.bootstrap_servers, s.topics.alerts)
        os.killpg(zombie.pid, signal.SIGCONT)
        assert zombie.wait(timeout=120) == EXIT_FENCED, zombie_log.read_text()[-3000:]
        assert end_offsets(s.bootstrap_servers, s.topics.alerts) == written
        assert "fenced by a newer instance" in zombie_log.read_text()
        assert sigterm(successor) == 0, successor_log.read_text()[-3000:]
    finally:
        cleanup(zombie, *([successor] if successor else []))

    committed = read_all(s.bootstrap_servers, s.topics.alerts, "read_committed")
    alerts = [r.alert for r in committed]
    assert Counter((a["rule"], a["vendor_fiscal_module"], a["transaction_id"]) for a in alerts) \
        == Counter(expected)  # fmt: skip
    uncommitted = read_all(s.bootstrap_servers, s.topics.alerts, "read_uncommitted")
    aborted = len(uncommitted) - len(committed)
    assert aborted > 0, "the zombie's open transaction left no aborted alerts"
    assert {r.key for r in uncommitted} == {r.key for r in committed}


def test_a_second_live_instance_with_the_same_id_refuses_and_the_first_goes_on(
    settings: Settings, new_topic: Callable[..., str], tmp_path: Path, cql: Any
) -> None:
    s = alerts_settings(
        settings,
        new_topic,
        alerts_high_value_threshold=Decimal("10.00"),
        alerts_transaction_max_messages=20,
    )
    messages, expected = _input()
    produce(messages[:200], s.bootstrap_servers, s.topics.transactions, quiet=True)
    first_log, second_log = tmp_path / "first.log", tmp_path / "second.log"
    first = start_processor(s, first_log)
    second = None
    try:
        await_progress(s, 0, first)
        second = start_processor(s, second_log)  # the same instance id, default settings
        # Refused within a heartbeat or two (every 2 s with the 6 s TTL), before Kafka.
        assert second.wait(timeout=60) == EXIT_ID_IN_USE, second_log.read_text()[-3000:]
        refusal = second_log.read_text()
        assert f"holds transactional.id {transactional_id(s)}" in refusal, refusal[-3000:]
        assert "another live instance (pid " in refusal and "POS_ALERTS_INSTANCE_ID" in refusal

        produce(messages[200:], s.bootstrap_servers, s.topics.transactions, quiet=True)

        def first_done() -> bool:
            assert first.poll() is None, first_log.read_text()[-3000:]
            return caught_up(s)

        assert wait_for(first_done, timeout=240, interval=0.5), first_log.read_text()[-3000:]
        assert sigterm(first) == 0, first_log.read_text()[-3000:]
    finally:
        cleanup(first, *([second] if second else []))
    assert "fenced" not in first_log.read_text()
    lease = cql.execute(
        f"SELECT owner FROM {tables.ALERTS_LEASES_TABLE} WHERE transactional_id = %s",
        (transactional_id(s),),
    ).one()
    assert lease is None  # released by the clean stop: a restart needs no wait

    committed = read_all(s.bootstrap_servers, s.topics.alerts, "read_committed")
    alerts = [r.alert for r in committed]
    assert Counter((a["rule"], a["vendor_fiscal_module"], a["transaction_id"]) for a in alerts) \
        == Counter(expected)  # fmt: skip
    # Nothing was aborted: the refused instance never fenced the first one.
    assert len(read_all(s.bootstrap_servers, s.topics.alerts, "read_uncommitted")) == len(committed)
