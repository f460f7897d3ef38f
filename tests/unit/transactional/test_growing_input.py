"""Exactly once while the input topic grows (issue 73), property tests on the in-memory
broker.

Hypothesis draws a stream of receipts keyed by device as `pos-producer` keys them, sent
to the partition librdkafka's default partitioner picks; the topic grows from 1-3 to
more partitions (up to 6) after a drawn number of the processor's commits (while it
runs: its next poll rebalances) or between two runs; after the growth each record is sent
either by a producer that already knows the new count or by one whose metadata still has
the old one (a stray). Resends and re-encodings of receipts sent before the growth come
after it, so most of them land on another partition than their first copy. A fault
schedule of every class strikes meanwhile.

Expected values come from the drawn stream alone: every valid receipt once in
`pos.receipts` (the bytes of one of its copies: its first, where all its copies share a
partition), and in `pos.alerts` every high-value and large-return alert once, by its id.
No output is ever committed twice. On today's per-partition state (no layout history,
no forwarding) the resends after the growth come out a second time.
"""

from __future__ import annotations

import json
import zlib
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from pos_lambda.alerts import processor as alerts
from pos_lambda.alerts.rules import alert_id
from pos_lambda.dedup import processor as dedup
from pos_lambda.producer.simulation import encode
from pos_lambda.schemas.contract import LineItem, NaturalKey, Receipt
from pos_lambda.settings import Settings, load_settings
from pos_lambda.transactional.layout import forwarded_by
from tests.support import memory_kafka as mk
from tests.support.memory_kafka import Fault, MemoryBroker
from tests.support.processor_harness import quiet, run_to_completion
from tests.unit.transactional.test_exactly_once_properties import CLASSES, examples, schedules

IN, RECEIPTS, ALERTS = "pos.transactions", "pos.receipts", "pos.alerts"
DEVICES = [(101, 1001), (101, 1002), (202, 2001), (303, 3001), (404, 4001), (505, 5001)]
BASKETS = [
    (("bread", "2.50", 2),),  # 5.00
    (("tv", "150.00", 1),),  # high value
    (("shirt", "20.00", -1),),  # a return of 20.00: large return
]
START = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)

# ("new", device, basket) | ("resend", which earlier receipt) | ("reencoded", which)
# | ("malformed",), each after the growth with `stale`: sent by the old partition count.
op = st.one_of(
    st.tuples(st.just("new"), st.integers(0, len(DEVICES) - 1), st.integers(0, 2)),
    st.tuples(st.just("resend"), st.integers(0, 40)),
    st.tuples(st.just("reencoded"), st.integers(0, 40)),
    st.tuples(st.just("malformed"), st.integers(0, len(DEVICES) - 1)),
)


@dataclass(frozen=True)
class Growth:
    before: int  # partitions before
    after: int  # ... and after
    at_commit: int  # grown at the processor's nth commit (0: between two runs)
    first: tuple[tuple[Any, ...], ...]  # sent before the growth
    then: tuple[tuple[tuple[Any, ...], bool], ...]  # sent after it: (op, stale)
    max_messages: int


growths = st.integers(1, 3).flatmap(
    lambda before: st.builds(
        Growth,
        st.just(before),
        st.integers(before + 1, 6),
        st.integers(0, 3),
        st.lists(op, min_size=2, max_size=12).map(tuple),
        st.lists(st.tuples(op, st.booleans()), min_size=2, max_size=14).map(tuple),
        st.sampled_from([1, 3, 5]),
    )
)


def device_key(device: int) -> bytes:
    return "{}:{}".format(*DEVICES[device]).encode()  # pos-producer's key (simulation.Device)


def partition_for(key: bytes, count: int) -> int:
    """librdkafka's default partitioner, written out (CRC-32 of the key)."""
    return zlib.crc32(key) % count


@dataclass
class Sent:
    copies: dict[NaturalKey, list[bytes]]  # every valid copy of each receipt
    receipts: list[tuple[int, Receipt]]  # (device, receipt), in the order first sent


def send(broker: MemoryBroker, ops: Any, count: int, before: int, sent: Sent) -> None:
    for entry, stale in ops:
        kind = entry[0]
        if kind == "new":
            device, basket = entry[1], entry[2]
            items = tuple(LineItem(t, Decimal(p), a) for t, p, a in BASKETS[basket])
            number = len(sent.receipts) + 1
            r = Receipt(START + timedelta(minutes=3 * number), *DEVICES[device][:1], number,
                        DEVICES[device][1], items)  # fmt: skip
            sent.receipts.append((device, r))
            value = encode(r)
        elif kind == "malformed":
            device, value, r = entry[1], b"not json", None
        elif sent.receipts:
            device, r = sent.receipts[entry[1] % len(sent.receipts)]
            value = encode(r) if kind == "resend" else encode(r, utc_offset_h=2)
        else:
            continue
        key = device_key(device)
        # A stale producer still partitions by the count before the growth.
        partition = partition_for(key, before if stale else count)
        broker.append(IN, partition, value, key=key)
        if r is not None:
            sent.copies.setdefault(r.natural_key, []).append(value)


def settings(max_messages: int) -> Settings:
    return load_settings(
        receipts_transaction_max_messages=max_messages,
        alerts_transaction_max_messages=max_messages,
        receipts_transaction_max_ms=50,
        alerts_transaction_max_ms=50,
    )


def run_growth(
    g: Growth, schedule: tuple[Fault, ...], make: Any
) -> tuple[MemoryBroker, Sent, list[Counter[bytes]]]:
    broker = MemoryBroker({IN: g.before, RECEIPTS: 1, ALERTS: 1})
    sent = Sent({}, [])
    send(broker, ((o, False) for o in g.first), g.before, g.before, sent)
    grown = False
    commits: list[Counter[bytes]] = []
    output = RECEIPTS if make is dedup.processor else ALERTS

    def grow() -> None:
        nonlocal grown
        grown = True
        broker.grow(IN, g.after)
        send(broker, g.then, g.after, g.before, sent)

    def on_commit(group: str, _offsets: dict[mk.TP, int]) -> None:
        commits.append(Counter(m.key() for m in broker.read_committed(output)))
        if not grown and g.at_commit and len(commits) >= g.at_commit:
            grow()

    broker.on_commit.append(on_commit)
    broker.arm(schedule)
    s = settings(g.max_messages)
    build = (
        (lambda clients: dedup.processor(s, clients=clients))
        if make is dedup.processor
        else (lambda clients: alerts.Processor(s, alerts.rules_from(s), clients=clients))
    )
    with quiet():
        run = run_to_completion(broker, build, restarts=8)
        if not grown:
            grow()
            run = run_to_completion(broker, build, restarts=8)
    assert run.caught_up, f"the input was never all committed: {run.exits}"
    return broker, sent, commits


def check_only_receipts_forwarded(broker: MemoryBroker) -> None:
    """A malformed record stays where it landed: its forward would be a second copy for
    the speed layer to dead-letter (its dead letters are keyed by Kafka coordinates)."""
    forwarded = [m.value() for m in broker.read_committed(IN) if forwarded_by(m.headers())]
    assert b"not json" not in forwarded


def check_no_output_twice(commits: list[Counter[bytes]], what: str) -> None:
    for n, seen in enumerate(commits):
        twice = sorted(k for k, c in seen.items() if c > 1)
        assert not twice, f"commit {n}: {what} twice: {twice}"


@hypothesis_settings(max_examples=examples(40))
@given(growths, schedules(CLASSES["mixed"]))
def test_receipts_once_while_the_input_grows(g: Growth, schedule: tuple[Fault, ...]) -> None:
    broker, sent, commits = run_growth(g, schedule, dedup.processor)
    out = broker.read_committed(RECEIPTS)
    keys = Counter(m.key() for m in out)
    expected = {":".join(map(str, k)).encode() for k in sent.copies}
    assert set(keys) == expected, f"missing {expected - set(keys)}, extra {set(keys) - expected}"
    assert not [k for k, c in keys.items() if c > 1], f"doubled: {keys}"
    for m in out:
        key = tuple(map(int, (m.key() or b"").decode().split(":")))
        assert m.value() in sent.copies[key], f"{m.key()!r}: not one of its copies"
    check_no_output_twice(commits, "a receipt")
    check_only_receipts_forwarded(broker)


@hypothesis_settings(max_examples=examples(25))
@given(growths, schedules(CLASSES["mixed"]))
def test_alerts_once_while_the_input_grows(g: Growth, schedule: tuple[Fault, ...]) -> None:
    broker, sent, commits = run_growth(g, schedule, alerts.Processor)
    ids = Counter((m.key() or b"").decode() for m in broker.read_committed(ALERTS))
    assert not [k for k, c in ids.items() if c > 1], f"an alert twice: {ids}"
    expected = set()
    for _, r in sent.receipts:
        if r.revenue > Decimal("100"):
            expected.add(alert_id("high_value", r.natural_key))
        if any(i.amount < 0 for i in r.line_items):
            expected.add(alert_id("large_return", r.natural_key))
    value_rules = {
        (m.key() or b"").decode()
        for m in broker.read_committed(ALERTS)
        if json.loads(m.value() or b"")["rule"] in ("high_value", "large_return")
    }
    assert value_rules == expected
    check_no_output_twice(commits, "an alert")
    check_only_receipts_forwarded(broker)
