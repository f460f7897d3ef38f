"""Growing the input topic while terminals resend keeps the transactional processors
exact (issue 73), on the real broker.

As a chain that grows would: `pos.transactions` has 2 partitions; two `pos-receipts` and
two `pos-alerts` instances (one group each) process the first 800 receipts of a faulty
stream (resends, late, out-of-order, malformed); then, while the terminals send every
receipt among those messages again and the last 200 receipts, the topic grows to 6 partitions
(`create_partitions`, as `kafka-topics --alter`). The producer keeps partitioning by 2
until its metadata refreshes, so for a few seconds records land off their new home.

On per-partition state this doubled most receipts whose device moved (1,557 records
for 1,000 receipts, issue 73). Now the auditor, from the producer's ledger, finds
`pos.receipts` with every receipt once and `pos.alerts` with every alert once, and the
processors took the new partitions within seconds (their logs say so). The speed layer
(whose Kafka source picks the new partitions up from their start) and the batch layer
then read the grown topic, and every view equals the ledger too.
"""

from __future__ import annotations

import re
import threading
import uuid
from collections import Counter
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewPartitions

from pos_lambda.adapters.kafka_clients import ConfluentClients
from pos_lambda.adapters.service import wait_for
from pos_lambda.alerts.sink import run_sink
from pos_lambda.audit import audit
from pos_lambda.audit.run import VIEWS
from pos_lambda.batch_layer import job
from pos_lambda.producer import ledger as ledger_files
from pos_lambda.producer.kafka_sink import produce
from pos_lambda.schemas.contract import NaturalKey, Receipt, parse_message
from pos_lambda.settings import Settings
from pos_lambda.transactional.layout import home
from tests.integration.alerts_helpers import (
    caught_up,
    cleanup,
    end_offsets,
    faulty_stream,
    read_all,
    send_in_background,
    sigterm,
    start_processor,
)
from tests.integration.speed_helpers import run_available_now
from tests.integration.test_batch_layer import ALL_DAYS

pytestmark = pytest.mark.integration

BEFORE, AFTER = 2, 6


def _grow(s: Settings, count: int) -> None:
    admin = AdminClient({"bootstrap.servers": s.bootstrap_servers})
    futures = admin.create_partitions([NewPartitions(s.topics.transactions, count)])
    for future in futures.values():
        future.result(timeout=60)


def test_growing_the_input_topic_mid_stream_keeps_every_layer_exact(
    spark: Any, isolated: tuple[Settings, Any], new_topic: Callable[..., str], tmp_path: Path
) -> None:
    tag = uuid.uuid4().hex[:8]
    s = isolated[0].with_overrides(
        topic_transactions=new_topic(partitions=BEFORE, prefix="growth-in"),
        topic_receipts=new_topic(partitions=2, prefix="growth-receipts"),
        topic_alerts=new_topic(partitions=2, prefix="growth-alerts"),
        receipts_group_id=f"pos-receipts-growth-{tag}",
        alerts_group_id=f"pos-alerts-growth-{tag}",
        receipts_lease_ttl_s=6,
        alerts_lease_ttl_s=6,
        receipts_transaction_max_ms=200,
        alerts_transaction_max_ms=200,
    )
    result = faulty_stream(seed=73, count=1000)
    receipts = result.receipts
    # The messages up to the 800th receipt's first copy, then the rest.
    seen: set[NaturalKey] = set()
    cut = 0
    for cut, message in enumerate(result.messages):  # noqa: B007 - used below
        key = _key(message.value)
        if key is not None:
            seen.add(key)
        if len(seen) == 800:
            break
    before, rest = result.messages[: cut + 1], result.messages[cut + 1 :]
    # Terminals resend receipts; a malformed message sent twice is two dead letters, which
    # the ledger (written once below) would not expect.
    resent = [m for m in before if _key(m.value) is not None]
    ledger = tmp_path / "ledger"
    ledger_files.write(ledger, receipts, result.faults, {**result.summary,
                       "topic": s.topics.transactions})  # fmt: skip

    procs = []
    log = tmp_path / "processors.log"
    try:
        for name in ("receipts", "alerts"):
            for instance in ("a", "b"):
                procs.append(start_processor(
                    s, log, f"pos-{name}", **{f"{name}_instance_id": f"growth-{tag}-{instance}"}
                ))  # fmt: skip
        produce(before, s.bootstrap_servers, s.topics.transactions, quiet=True)

        def both_caught_up() -> bool:
            assert all(p.poll() is None for p in procs), log.read_text()[-3000:]
            return caught_up(s, s.receipts.group_id) and caught_up(s, s.alerts.group_id)

        assert wait_for(both_caught_up, timeout=300, interval=0.5), log.read_text()[-3000:]

        # The terminals send everything again, and the rest; the topic grows meanwhile.
        sending = send_in_background(s, resent + rest)
        assert wait_for(lambda: _produced(s) > len(before) + 150, timeout=60, interval=0.1)
        grown_at = datetime.now()  # the processors' log times are local, to the ms
        _grow(s, AFTER)
        sending.join(timeout=300)
        assert not sending.errors, sending.errors  # type: ignore[attr-defined]
        assert wait_for(both_caught_up, timeout=300, interval=0.5), log.read_text()[-3000:]
        for proc in procs:
            assert sigterm(proc) == 0, log.read_text()[-3000:]
    finally:
        cleanup(*procs)

    # The speed layer and the batch layer over the grown topic; then every view.
    run_available_now(spark, s)
    job.run(spark, s, ALL_DAYS)
    assert run_sink(s, threading.Event(), until_caught_up=True).written == 10
    report = audit(s, ledger, progress=None)
    assert report.clean, report.table()
    for name in ("receipts_topic", "receipts_by_store_day", "receipts_batch"):
        view = report.view(name)
        assert (view.tally.expected, view.tally.observed) == (1000, 1000), report.table()
    print(report.table())
    compared = {v.name for v in report.views if v.status != "skipped"}
    assert compared == set(VIEWS)
    assert [v.name for v in report.views if v.status != "skipped" and not v.exact] == []
    committed = read_all(s.bootstrap_servers, s.topics.receipts, "read_committed")
    assert len(committed) == 1000
    assert [k for k, n in Counter(r.key for r in committed).items() if n > 1] == []
    alerts = read_all(s.bootstrap_servers, s.topics.alerts, "read_committed")
    assert [k for k, n in Counter(r.key for r in alerts).items() if n > 1] == []
    text = log.read_text()
    # librdkafka's default metadata refresh would leave them unread for 5 minutes.
    taken_s = _first_seen(text, f"has {AFTER} partitions, was {BEFORE}") - grown_at.timestamp()
    assert 0 <= taken_s < 60, text[-3000:]
    # The input holds what the terminals sent, and each stray once more, forwarded to
    # its home by each kind of processor.
    inputs = read_all(s.bootstrap_servers, s.topics.transactions, "read_committed")
    forwards = _forwards(text)
    print(f"forwarded: {forwards}; new partitions taken {taken_s:.1f} s after the growth")
    assert len(inputs) == len(before) + len(resent) + len(rest) + sum(forwards.values())


def _key(value: bytes | None) -> NaturalKey | None:
    parsed = parse_message(value) if value is not None else None
    return parsed.natural_key if isinstance(parsed, Receipt) else None


def _produced(s: Settings) -> int:
    return sum(end_offsets(s.bootstrap_servers, s.topics.transactions))


def _first_seen(log: str, text: str) -> float:
    """When the first log line with `text` was written (epoch seconds)."""
    for line in log.splitlines():
        if text in line:
            return datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()
    raise AssertionError(f"no processor logged {text!r}:\n{log[-3000:]}")


def _forwards(log: str) -> dict[str, int]:
    """Each instance's forwarded total, from the last progress line it logged on stop."""
    totals: dict[str, int] = {}
    for line in log.splitlines():
        match = re.search(r"pos\.(\w+).*stopped: .*'forwarded': (\d+)", line)
        if match:
            totals[match[1]] = totals.get(match[1], 0) + int(match[2])
    return totals


def test_home_is_the_partition_the_producer_picks(
    settings: Settings, new_topic: Callable[..., str]
) -> None:
    """layout.home() is librdkafka's default partitioner: what `pos-producer` picks for
    each device key on a topic of 6 partitions (else every record would be forwarded)."""
    topic = new_topic(partitions=AFTER, prefix="growth-home")
    producer = ConfluentClients(settings.bootstrap_servers).producer()
    delivered: dict[bytes, int] = {}
    keys = [f"{store}:{device}".encode() for store in range(101, 121) for device in range(1, 5)]
    for key in keys:
        producer.produce(
            topic,
            b"{}",
            key=key,
            on_delivery=lambda e, m: delivered.__setitem__(m.key(), m.partition()),
        )
    assert producer.flush(30) == 0
    assert delivered == {key: home(key, AFTER) for key in keys}
    assert len(set(delivered.values())) == AFTER  # the keys spread over every partition
