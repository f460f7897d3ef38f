"""The transactional processors through errors a live process survives, on the real
broker and the real client, with no restart (issue 61).

- **An abortable error in process.** `pos-receipts`' and `pos-alerts`' processors run in
  this process on a 1-partition topic while 40 receipts arrive in four bursts; their
  third `commit_transaction` raises an abortable `KafkaException` (`txn_requires_abort`)
  at the real client's call, and the real client then aborts. Before the fix the aborted
  batch's records were skipped on the replay as resends of themselves: 30 of 40.
- **Outputs refused for a while.** While receipts flow, the output topics'
  `max.message.bytes` is set below a record's size for 8 s, then set back. The
  processors (`pos-receipts run`, `pos-alerts run`, separate processes) abort, rewind
  and carry on by themselves: neither exits, nothing is lost, nothing doubled.

Expected outputs are literal: receipt i is `101:1001:i` with the bytes this test sent; it
is worth 150.00, so it gives exactly one `high_value` alert (threshold 100.00).
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)

from pos_lambda.adapters.kafka_clients import ConfluentClients
from pos_lambda.adapters.service import wait_for
from pos_lambda.alerts.processor import Processor as AlertsProcessor
from pos_lambda.alerts.processor import rules_from
from pos_lambda.dedup.processor import processor as receipts_processor
from pos_lambda.producer.kafka_sink import produce
from pos_lambda.producer.simulation import OutgoingMessage
from pos_lambda.settings import Settings
from tests.integration.alerts_helpers import (
    caught_up,
    cleanup,
    committed_total,
    read_all,
    send_in_background,
    sigterm,
    start_processor,
)

pytestmark = pytest.mark.integration

START = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
REFUSAL_S = 8.0  # how long the output topics refuse every record, after the first aborts
ABORTED = "aborting the open transaction"  # the processor's log line on an abort


def receipt(transaction_id: int) -> OutgoingMessage:
    """Receipt `transaction_id` of store 101's device 1001: one TV at 150.00."""
    doc = {
        "happened_at": (START + timedelta(seconds=transaction_id)).isoformat(),
        "operation_id": 101,
        "transaction_id": transaction_id,
        "vendor_fiscal_module": 1001,
        "transactions": [{"title": "TV", "price": "150.00", "amount": 1}],
    }
    value = json.dumps(doc, separators=(",", ":")).encode()
    return OutgoingMessage(key=b"101:1001", value=value, timestamp_ms=0, kind="receipt")


def expected_receipts(ids: range) -> Counter[tuple[bytes, bytes]]:
    return Counter((f"101:1001:{i}".encode(), receipt(i).value) for i in ids)


def expected_alerts(ids: range) -> Counter[tuple[str, int, int, int]]:
    return Counter(("high_value", 101, 1001, i) for i in ids)


def committed_receipts(s: Settings) -> Counter[tuple[bytes, bytes]]:
    records = read_all(s.bootstrap_servers, s.topics.receipts, "read_committed")
    return Counter((r.key or b"", r.value) for r in records)


def committed_alerts(s: Settings) -> Counter[tuple[str, int, int, int]]:
    records = read_all(s.bootstrap_servers, s.topics.alerts, "read_committed")
    return Counter(
        (a["rule"], a["operation_id"], a["vendor_fiscal_module"], a["transaction_id"])
        for a in (r.alert for r in records)
    )


@pytest.fixture
def topics(settings: Settings, new_topic: Callable[..., str]) -> Settings:
    """One input partition (as in the issue's reproduction), both outputs, fresh groups."""
    tag = new_topic(partitions=1, prefix="errors-in")
    return settings.with_overrides(
        topic_transactions=tag,
        topic_receipts=new_topic(partitions=1, prefix="errors-receipts"),
        topic_alerts=new_topic(partitions=1, prefix="errors-alerts"),
        topic_dead_letters=new_topic(partitions=1, prefix="errors-dead"),
        receipts_group_id=f"pos-receipts-{tag[-10:]}",
        receipts_instance_id=f"t-{tag[-10:]}",
        alerts_group_id=f"pos-alerts-{tag[-10:]}",
        alerts_instance_id=f"t-{tag[-10:]}",
        receipts_lease_ttl_s=6,
        alerts_lease_ttl_s=6,
        receipts_transaction_max_ms=100,
        alerts_transaction_max_ms=100,
    )


# --- an abortable error at the real client's commit, in process -----------------------


@dataclass(frozen=True)
class CommitFailsOnce(ConfluentClients):
    """The real client, except that its `fail_at`-th commit_transaction raises an
    abortable error instead of committing (the transaction stays open on the broker,
    for the processor's real abort_transaction)."""

    fail_at: int = 3

    def transactional_producer(self, *args: Any, **kwargs: Any) -> Any:
        return _FailingCommit(super().transactional_producer(*args, **kwargs), self.fail_at)


class _FailingCommit:
    def __init__(self, real: Any, fail_at: int) -> None:
        self.real, self.fail_at, self.commits = real, fail_at, 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)

    def commit_transaction(self, *args: Any) -> None:
        self.commits += 1
        if self.commits == self.fail_at:
            raise KafkaException(
                KafkaError(KafkaError._STATE, "injected before commit", txn_requires_abort=True)
            )
        self.real.commit_transaction(*args)


@pytest.fixture
def in_process() -> Iterator[Callable[[Any], None]]:
    """Runs processors in threads of this process; stops them (SIGTERM's path) after."""
    running: list[tuple[threading.Event, threading.Thread, list[int]]] = []

    def start(proc: Any) -> None:
        stop, codes = threading.Event(), list[int]()
        thread = threading.Thread(target=lambda: codes.append(proc.run(stop)), daemon=True)
        thread.start()
        running.append((stop, thread, codes))

    yield start
    for stop, thread, codes in running:
        stop.set()
        thread.join(timeout=120)
        assert codes == [0], f"a processor stopped with {codes}"


@pytest.mark.parametrize("name", ["receipts", "alerts"])
def test_an_abortable_commit_in_process_loses_nothing(
    topics: Settings, in_process: Callable[[Any], None], name: str
) -> None:
    s = topics
    clients = CommitFailsOnce(s.bootstrap_servers, s.kafka.security_config)
    if name == "receipts":
        proc: Any = receipts_processor(s, clients=clients)
    else:
        proc = AlertsProcessor(s, rules_from(s), clients=clients)
    in_process(proc)
    group = getattr(s, name).group_id
    for burst in range(4):  # four bursts of ten, each committed before the next
        ids = range(burst * 10 + 1, burst * 10 + 11)
        produce([receipt(i) for i in ids], s.bootstrap_servers, s.topics.transactions, quiet=True)
        assert wait_for(lambda: caught_up(s, group), timeout=120, interval=0.2), burst
    assert proc.totals["aborts"] == 1 and proc.producer.commits >= 3
    everything = range(1, 41)
    if name == "receipts":
        assert committed_receipts(s) == expected_receipts(everything)
    else:
        assert committed_alerts(s) == expected_alerts(everything)
    assert committed_total(s, group) == 40


# --- outputs refused by the broker for a while ----------------------------------------


def set_max_message_bytes(s: Settings, topics: list[str], value: int | None) -> None:
    """Set (or, with None, delete: back to the broker's default) each topic's
    max.message.bytes."""
    admin = AdminClient({"bootstrap.servers": s.bootstrap_servers})
    op = AlterConfigOpType.DELETE if value is None else AlterConfigOpType.SET
    resources = [
        ConfigResource(
            ResourceType.TOPIC,
            topic,
            incremental_configs=[
                ConfigEntry("max.message.bytes", str(value or ""), incremental_operation=op)
            ],
        )
        for topic in topics
    ]
    for future in admin.incremental_alter_configs(resources).values():
        future.result(timeout=30)


def test_outputs_refused_for_a_while_then_accepted_lose_nothing_and_double_nothing(
    topics: Settings, tmp_path: Path
) -> None:
    s = topics
    ids = range(1, 1201)
    logs = {name: tmp_path / f"{name}.log" for name in ("receipts", "alerts")}
    procs = {
        "receipts": start_processor(s, logs["receipts"], "pos-receipts"),
        "alerts": start_processor(s, logs["alerts"], "pos-alerts"),
    }

    def alive() -> None:
        for name, proc in procs.items():
            assert proc.poll() is None, f"{name} exited: {logs[name].read_text()[-3000:]}"

    try:
        sender = send_in_background(s, [receipt(i) for i in ids])  # 150/s: 8 s
        assert wait_for(lambda: committed_total(s, s.receipts.group_id) >= 100, timeout=120)
        # Every output record is larger than 100 bytes: refused until set back, which
        # happens once both processors have met the refusal (aborted) while input flows.
        set_max_message_bytes(s, [s.topics.receipts, s.topics.alerts], 100)

        def both_refused() -> bool:
            alive()
            return all(ABORTED in log.read_text() for log in logs.values())

        assert wait_for(both_refused, timeout=120, interval=0.2)
        assert sender.is_alive(), "the refusal must strike while receipts flow"
        # The outage itself lasts REFUSAL_S more (the fault's shape, not a wait for
        # something): both processors must stay up through it.
        outage_ends = time.monotonic() + REFUSAL_S

        def outage_over() -> bool:
            alive()
            return time.monotonic() >= outage_ends

        assert wait_for(outage_over, timeout=REFUSAL_S + 5, interval=0.5)
        set_max_message_bytes(s, [s.topics.receipts, s.topics.alerts], None)
        sender.join(timeout=120)
        assert not sender.errors  # type: ignore[attr-defined]

        def finished() -> bool:
            alive()
            return caught_up(s, s.receipts.group_id) and caught_up(s, s.alerts.group_id)

        assert wait_for(finished, timeout=300, interval=0.5)
        for name, proc in procs.items():
            assert sigterm(proc) == 0, logs[name].read_text()[-3000:]
    finally:
        cleanup(*procs.values())
    assert committed_receipts(s) == expected_receipts(ids)
    assert committed_alerts(s) == expected_alerts(ids)


# --- an output the broker refuses for good --------------------------------------------


def huge_receipt(transaction_id: int) -> OutgoingMessage:
    """Receipt `transaction_id` with 60 line items named by hashes, so that compression
    cannot shrink it much: about 6 KB, valid by the contract."""
    doc = json.loads(receipt(transaction_id).value)
    titles = [hashlib.sha256(b"%d" % n).hexdigest() for n in range(60)]
    doc["transactions"] = [{"title": t, "price": "1.00", "amount": 1} for t in titles]
    value = json.dumps(doc, separators=(",", ":")).encode()
    return OutgoingMessage(key=b"101:1001", value=value, timestamp_ms=0, kind="receipt")


def test_an_output_refused_for_good_becomes_a_dead_letter_and_the_partition_goes_on(
    topics: Settings, tmp_path: Path
) -> None:
    s = topics.with_overrides(receipts_refused_output_patience_s=2)
    # Every receipt fits but the huge one (about 3 KB), whose output never will.
    set_max_message_bytes(s, [s.topics.receipts], 1500)
    messages = [receipt(i) for i in range(1, 21)] + [huge_receipt(21)]
    messages += [receipt(i) for i in range(22, 42)]
    assert len(huge_receipt(21).value) > 1500 > max(len(m.value) for m in messages[:20]) + 200
    log = tmp_path / "receipts.log"
    proc = start_processor(s, log, "pos-receipts")
    try:
        produce(messages, s.bootstrap_servers, s.topics.transactions, quiet=True)

        def finished() -> bool:
            assert proc.poll() is None, log.read_text()[-3000:]
            return caught_up(s, s.receipts.group_id)

        assert wait_for(finished, timeout=180, interval=0.5), log.read_text()[-3000:]
        assert sigterm(proc) == 0, log.read_text()[-3000:]
    finally:
        cleanup(proc)
    assert committed_receipts(s) == expected_receipts(range(1, 21)) + expected_receipts(
        range(22, 42)
    )
    letters = read_all(s.bootstrap_servers, s.topics.dead_letters, "read_committed")
    assert [r.key for r in letters] == [f"{s.topics.transactions}:0:20".encode()]
    letter = json.loads(letters[0].value)
    assert (letter["processor"], letter["input"], letter["output_topic"]) == (
        "receipts",
        {"topic": s.topics.transactions, "partition": 0, "offset": 20},
        s.topics.receipts,
    )
    assert letter["reason"].startswith("MSG_SIZE_TOO_LARGE")
    assert letter["outputs"] == [{"key": "101:1001:21", "bytes": len(huge_receipt(21).value)}]
