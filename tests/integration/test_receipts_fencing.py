"""Fencing of the deduplicated topic's processor: a frozen instance (SIGSTOP at its crash
point, receipts on the broker, commit not made) is fenced by a successor with its
transactional.id, which takes over and writes every receipt once; the zombie, woken up,
exits fenced and writes nothing more (as the alerts in test_alerts_fencing.py)."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from pos_lambda.adapters.service import wait_for
from pos_lambda.producer.kafka_sink import produce
from pos_lambda.producer.simulation import OutgoingMessage
from pos_lambda.settings import Settings
from pos_lambda.transactional.processor import EXIT_FENCED
from tests.integration.alerts_helpers import (
    caught_up,
    cleanup,
    end_offsets,
    is_frozen,
    read_all,
    receipts_settings,
    sigterm,
    start_processor,
)

pytestmark = pytest.mark.integration
AT = datetime(2026, 3, 2, 9, tzinfo=UTC)


def _input() -> tuple[list[OutgoingMessage], dict[bytes, bytes]]:
    """300 receipts on 6 devices, every third one resent: 400 messages, 300 receipts."""
    messages, expected = [], {}
    for tid in range(1, 301):
        device = 1001 + tid % 6
        doc = {
            "happened_at": (AT + timedelta(seconds=tid)).isoformat(),
            "operation_id": 101,
            "transaction_id": tid,
            "vendor_fiscal_module": device,
            "transactions": [{"title": "Espresso", "price": "1.90", "amount": 1 + tid % 3}],
        }
        value = json.dumps(doc).encode()
        copies = 2 if tid % 3 == 0 else 1
        messages += [OutgoingMessage(f"101:{device}".encode(), value, 0, "receipt")] * copies
        expected[f"101:{device}:{tid}".encode()] = value
    return messages, expected


def test_a_zombie_is_fenced_by_its_successor_and_writes_nothing_more(
    settings: Settings, new_topic: Callable[..., str], tmp_path: Path
) -> None:
    s = receipts_settings(settings, new_topic, receipts_transaction_max_messages=20)
    group = s.receipts.group_id
    messages, expected = _input()
    produce(messages, s.bootstrap_servers, s.topics.transactions, quiet=True)
    zombie_log, successor_log = tmp_path / "zombie.log", tmp_path / "successor.log"
    zombie = start_processor(
        s, zombie_log, "pos-receipts",
        receipts_crash_point="stop_after_produce", receipts_crash_at_transaction=2,
    )  # fmt: skip
    successor = None
    try:
        assert wait_for(lambda: is_frozen(zombie), timeout=120, interval=0.2), (
            zombie_log.read_text()
        )
        assert sum(end_offsets(s.bootstrap_servers, s.topics.receipts)) > 0  # its open txn's
        successor = start_processor(s, successor_log, "pos-receipts")  # the same id

        def successor_done() -> bool:
            assert successor is not None and successor.poll() is None, successor_log.read_text()
            return caught_up(s, group)

        assert wait_for(successor_done, timeout=240, interval=0.5), successor_log.read_text()
        written = end_offsets(s.bootstrap_servers, s.topics.receipts)
        os.killpg(zombie.pid, signal.SIGCONT)
        assert zombie.wait(timeout=120) == EXIT_FENCED, zombie_log.read_text()[-3000:]
        assert end_offsets(s.bootstrap_servers, s.topics.receipts) == written
        assert "fenced by a newer instance" in zombie_log.read_text()
        assert sigterm(successor) == 0, successor_log.read_text()[-3000:]
    finally:
        cleanup(zombie, *([successor] if successor else []))

    committed = read_all(s.bootstrap_servers, s.topics.receipts, "read_committed")
    assert len(committed) == len(expected)
    assert {r.key: r.value for r in committed} == expected
    uncommitted = read_all(s.bootstrap_servers, s.topics.receipts, "read_uncommitted")
    assert len(uncommitted) > len(committed), "the zombie's open transaction left nothing"
    assert {r.key for r in uncommitted} == set(expected)
