"""Exactly once, under every fault the transactional client API can raise (property tests).

Hypothesis draws an input stream (valid receipts, resends of the same bytes, the same
content re-encoded, conflicting copies, malformed records, records of aborted input
transactions, 1-3 partitions, copies keyed to their device's partition) and a fault
schedule (tests/support/memory_kafka.py: retriable errors, timeouts that resume,
abortable and fatal errors, fencing, crashes and hangs, revocations and lost partitions,
failed deliveries). The processor runs on the in-memory broker, restarted after every
crash or exit (tests/support/processor_harness.py), then restarted once more, faults off.

Then the committed output (read_committed) must equal a model computed without the shell:

- `pos.receipts`: every valid receipt once, the bytes of its first copy in its
  partition's offset order (the model below is written by hand, not DedupStep);
- `pos.alerts`: the alerts the rules give over each partition's records in offset order
  (AlertStep run without any fault is the model: the code under test is the shell).

And at every offset commit: no input offset is committed past a record whose outputs
are not committed with it or before it, and no output is ever there twice.

One test per fault class (and one with every class mixed), so that a class the shell
mishandles fails alone, with Hypothesis' smallest example. `test_the_shell_only_exits_as_
documented` checks the other half of the contract: an instance stops with an exit code
(0, 3 fatal, 4 fenced) or by an injected crash, never dies of an exception.

Profiles (tests/conftest.py): the default draws a fixed set of examples (`derandomize`);
`HYPOTHESIS_PROFILE=long` searches thousands per test. The end of the run prints how many
examples and distinct fault schedules each test ran, under pytest-xdist too
(tests/support/property_tally.py).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from functools import lru_cache, partial
from typing import Any

import pytest
from hypothesis import event, example, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from hypothesis.control import currently_in_test_context

from pos_lambda.alerts import processor as alerts
from pos_lambda.alerts.rules import AlertStep
from pos_lambda.dedup import processor as dedup
from pos_lambda.producer.simulation import encode
from pos_lambda.schemas.contract import LineItem, NaturalKey, Receipt
from pos_lambda.settings import Settings, load_settings
from pos_lambda.transactional.step import Source
from tests.support import memory_kafka as mk
from tests.support.memory_kafka import Fault, MemoryBroker, MemoryClients
from tests.support.processor_harness import Run, quiet, run_to_completion
from tests.support.property_tally import TALLY

IN, RECEIPTS, ALERTS = "pos.transactions", "pos.receipts", "pos.alerts"

# --- the input stream ------------------------------------------------------------------

DEVICES = [(101, 1001), (101, 1002), (202, 2001), (303, 3001)]
BASKETS = [
    (("bread", "2.50", 2),),  # 5.00
    (("tv", "150.00", 1),),  # high value
    (("shirt", "20.00", -1),),  # a return of 20.00: large return
    (("milk", "1.20", 3), ("radio", "99.00", 1)),  # 102.60: high value
]
START = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)  # store hours: 07:00-21:00 UTC by default
MALFORMED: list[bytes | None] = [
    b"not json",
    b"[]",
    b'{"operation_id": 101}',
    None,  # a tombstone
    b'{"happened_at":"2026-03-02T08:00:00+00:00","operation_id":101,"transaction_id":9,'
    b'"vendor_fiscal_module":1001,"transactions":[{"title":"x","price":"1.00","amount":0}]}',
]

Op = tuple[Any, ...]
ops = st.one_of(
    st.tuples(st.just("new"), st.integers(0, 3), st.integers(0, 3), st.integers(0, 8)),
    st.tuples(st.just("resend"), st.integers(0, 50)),  # the same bytes again
    st.tuples(st.just("reencoded"), st.integers(0, 50)),  # the same content, other bytes
    st.tuples(st.just("conflict"), st.integers(0, 50), st.integers(1, 3)),
    st.tuples(st.just("malformed"), st.integers(0, 2), st.integers(0, len(MALFORMED) - 1)),
    st.tuples(st.just("aborted"), st.integers(0, 3), st.integers(0, 3)),  # never readable
)


@dataclass(frozen=True)
class Stream:
    partitions: int
    device_partition: tuple[int, ...]  # each device's partition (the producer keys by it)
    ops: tuple[Op, ...]
    transactional: bool  # written by a transactional producer: markers between records


streams = st.builds(
    Stream,
    partitions=st.integers(1, 3),
    device_partition=st.tuples(*[st.integers(0, 2)] * len(DEVICES)),
    ops=st.lists(ops, min_size=3, max_size=20).map(tuple),
    transactional=st.booleans(),
)


@dataclass(frozen=True)
class Written:
    """An input record as the broker holds it."""

    partition: int
    offset: int
    value: bytes | None
    key: NaturalKey | None  # None: a record the contract refuses
    readable: bool  # False: written by an aborted transaction


def receipt(device: int, tx: int, basket: int, minute: int) -> Receipt:
    op, vfm = DEVICES[device]
    items = tuple(LineItem(t, Decimal(p), a) for t, p, a in BASKETS[basket])
    return Receipt(START + timedelta(minutes=20 * minute), op, tx, vfm, items)


def basket_of(r: Receipt) -> int:
    return BASKETS.index(tuple((i.title, str(i.price), i.amount) for i in r.line_items))


def write(broker: MemoryBroker, stream: Stream) -> list[Written]:
    """The stream into `pos.transactions`, as POS terminals would send it."""
    terminal = broker.clients("terminals").transactional_producer("terminals", 60_000)
    terminal.init_transactions(10)
    written: list[Written] = []
    sent: list[tuple[int, Receipt]] = []  # (device, receipt) of every readable copy
    next_tx = iter(range(1, 10_000))

    def send(partition: int, value: bytes | None, key: NaturalKey | None, commit: bool) -> None:
        if commit and not stream.transactional:
            offset = broker.append(IN, partition, value).offset
        else:
            terminal.begin_transaction()
            terminal.produce(IN, value, partition=partition)
            (terminal.commit_transaction if commit else terminal.abort_transaction)(10)
            offset = [e for e in broker.log(IN, partition) if e.marker is None][-1].offset
        written.append(Written(partition, offset, value, key, commit))

    for op in stream.ops:
        kind = op[0]
        if kind in ("new", "aborted"):
            device, basket = op[1], op[2]
            r = receipt(device, next(next_tx), basket, op[3] if kind == "new" else 0)
            partition = stream.device_partition[device] % stream.partitions
            send(partition, encode(r), r.natural_key, commit=kind == "new")
            if kind == "new":
                sent.append((device, r))
        elif kind == "malformed":
            send(op[1] % stream.partitions, MALFORMED[op[2]], None, commit=True)
        elif sent:  # a copy of an earlier receipt, on its device's partition
            device, r = sent[op[1] % len(sent)]
            partition = stream.device_partition[device] % stream.partitions
            if kind == "resend":
                value = encode(r)
            elif kind == "reencoded":
                value = encode(r, utc_offset_h=2)  # same instant, other text
            else:  # a conflict: the same natural key, another basket
                basket = (basket_of(r) + op[2]) % len(BASKETS)
                value = encode(receipt(device, r.transaction_id, basket, 0))
            send(partition, value, r.natural_key, commit=True)
    return written


# --- the models --------------------------------------------------------------------------

# An output as the checks see it: (input partition, input offset, key, value).
Output = tuple[int, int, bytes | None, bytes | None]


def model_receipts(written: list[Written]) -> list[Output]:
    """Every valid receipt once: its first readable copy in its partition."""
    seen: set[tuple[int, NaturalKey]] = set()
    out: list[Output] = []
    for w in sorted(written, key=lambda w: (w.partition, w.offset)):
        if w.readable and w.key is not None and (w.partition, w.key) not in seen:
            seen.add((w.partition, w.key))
            out.append((w.partition, w.offset, ":".join(map(str, w.key)).encode(), w.value))
    return out


def model_alerts(broker: MemoryBroker, written: list[Written], s: Settings) -> list[Output]:
    """The rules over each partition's readable records in offset order, no faults."""
    step = AlertStep(alerts.rules_from(s))
    out: list[Output] = []
    for partition in range(broker.partitions(IN)):
        state = step.initial()
        for w in sorted(written, key=lambda w: w.offset):
            if w.partition == partition and w.readable:
                stamp = broker.log(IN, partition)[w.offset].timestamp_ms
                for o in step.apply(state, w.value, Source(partition, w.offset, stamp)):
                    out.append((partition, w.offset, o.key, o.value))
    return out


def receipts_out(broker: MemoryBroker) -> list[Output]:
    out = []
    for m in broker.read_committed(RECEIPTS):
        source = dict(m.headers() or [])["pos.source"].decode()
        partition, offset = map(int, source.split(":"))
        out.append((partition, offset, m.key(), m.value()))
    return out


def alerts_out(broker: MemoryBroker) -> list[Output]:
    out = []
    for m in broker.read_committed(ALERTS):
        source = json.loads(m.value() or b"")["source"]
        out.append((source["partition"], source["offset"], m.key(), m.value()))
    return out


# --- the fault schedules ---------------------------------------------------------------

# How far into a run each call's count goes (a fault past it would rarely strike).
NTH_MAX = {
    "producer.init_transactions": 2,
    "producer.begin_transaction": 4,
    "producer.produce": 8,
    "producer.delivery": 8,
    "producer.send_offsets_to_transaction": 4,
    "producer.commit_transaction": 4,
    "producer.abort_transaction": 2,
    "consumer.poll": 12,
    "consumer.consume": 4,
    "consumer.committed": 3,
    "consumer.position": 4,
    "consumer.seek": 2,
    "reader.consume": 3,
    "reader.get_watermark_offsets": 2,
}
CLASSES: dict[str, tuple[str, ...]] = {
    "retriable": (mk.RETRIABLE, mk.QUEUE_FULL),
    "timed_out": (mk.TIMED_OUT,),
    "abortable": (mk.ABORTABLE,),
    "fatal": (mk.FATAL,),
    "fenced": (mk.FENCED,),
    "crash": (mk.CRASH, mk.CRASH_AFTER),
    "hang": (mk.HANG,),
    "rebalance": (mk.REVOKE, mk.LOST),
    "delivery": (mk.DELIVERY_FAILED, mk.DELIVERY_TIMED_OUT),
}
CLASSES["mixed"] = tuple(kind for kinds in CLASSES.values() for kind in kinds)


def schedules(kinds: tuple[str, ...]) -> st.SearchStrategy[tuple[Fault, ...]]:
    where = [(call, kind) for call, allowed in mk.FAULTS_AT.items() for kind in allowed
             if kind in kinds]  # fmt: skip
    one = st.sampled_from(where).flatmap(
        lambda ck: st.builds(
            Fault,
            st.just(ck[0]),
            st.integers(1, 2) | st.integers(1, NTH_MAX[ck[0]]),  # early, or anywhere
            st.just(ck[1]),
        )
    )
    return st.lists(one, min_size=1, max_size=4, unique_by=lambda f: (f.call, f.nth)).map(tuple)


# --- running -------------------------------------------------------------------------------


# What the tests ran, printed at the end of the session (summed over xdist's workers).
STATS = TALLY


@lru_cache
def settings_for(max_messages: int) -> Settings:
    return load_settings(
        receipts_transaction_max_messages=max_messages,
        alerts_transaction_max_messages=max_messages,
        receipts_transaction_max_ms=50,
        alerts_transaction_max_ms=50,
    )


@dataclass
class Outcome:
    broker: MemoryBroker
    written: list[Written]
    run: Run
    # At each offset commit of the processor's group: its offsets, the outputs then.
    commits: list[tuple[dict[int, int], Counter[Output]]]
    drawn: str  # the example, to reproduce it

    def describe(self) -> str:
        faults = ", ".join(map(str, self.broker.faults.fired)) or "none struck"
        return f"faults struck: {faults}; instances: {self.run.exits}; example: {self.drawn}"


def run_processor(
    test: str,
    stream: Stream,
    schedule: tuple[Fault, ...],
    max_messages: int,
    make: Callable[[Settings, MemoryClients], Any],
    output: Callable[[MemoryBroker], list[Output]],
) -> Outcome:
    s = settings_for(max_messages)
    broker = MemoryBroker({IN: stream.partitions, RECEIPTS: 1, ALERTS: 1})
    written = write(broker, stream)
    commits: list[tuple[dict[int, int], Counter[Output]]] = []

    def on_commit(group: str, _offsets: dict[mk.TP, int]) -> None:
        if group != "pos-terminals":
            commits.append((broker.committed_offsets(group, IN), Counter(output(broker))))

    broker.on_commit.append(on_commit)
    broker.arm(schedule)
    with quiet():
        run = run_to_completion(broker, lambda clients: make(s, clients), restarts=8)
    STATS.record(test, schedule, struck=len(broker.faults.fired))
    for fault in broker.faults.fired if currently_in_test_context() else ():
        event(f"struck: {fault.kind} at {fault.call}")
    drawn = f"{stream}, schedule={schedule}, transaction_max_messages={max_messages}"
    return Outcome(broker, written, run, commits, drawn)


def check_exactly_once(outcome: Outcome, expected: list[Output], actual: list[Output]) -> None:
    why = outcome.describe()
    assert outcome.run.caught_up, f"the input was never all committed; {why}"
    missing = Counter(expected) - Counter(actual)
    extra = Counter(actual) - Counter(expected)
    assert not missing and not extra, (
        f"committed output differs from the model: missing {sorted(missing)}, "
        f"extra {sorted(extra)}; {why}"
    )
    for partition in {o[0] for o in expected}:
        assert [o for o in actual if o[0] == partition] == [
            o for o in expected if o[0] == partition
        ], f"partition {partition}'s outputs out of offset order; {why}"
    for n, (offsets, seen) in enumerate(outcome.commits):
        duplicated = sorted(o for o, count in seen.items() if count > 1)
        assert not duplicated, f"commit {n}: outputs twice: {duplicated}; {why}"
        owed = Counter(o for o in expected if o[1] < offsets.get(o[0], 0))
        assert not owed - seen, (
            f"commit {n} committed offsets {offsets} past outputs not committed: "
            f"{sorted(owed - seen)}; {why}"
        )


def receipts_processor(s: Settings, clients: MemoryClients) -> Any:
    return dedup.processor(s, clients=clients)


def alerts_processor(s: Settings, clients: MemoryClients) -> Any:
    return alerts.Processor(s, alerts.rules_from(s), clients=clients)


def examples(quick: int) -> int:
    """`quick` under the default profile; the profile's count under `long`."""
    loaded = hypothesis_settings.default
    assert loaded is not None
    return quick if loaded.derandomize else loaded.max_examples


max_messages = st.sampled_from([1, 2, 3, 5])
CLASS_NAMES = list(CLASSES)

# What long runs found, replayed first by every run (Hypothesis' @example), per class.
REGRESSIONS: dict[str, list[tuple[Stream, tuple[Fault, ...], int]]] = {
    # poll() returns r4 while r3's transaction is open; the consume() after it serves a
    # revocation, whose commit counts r4 (consumer.position()), which is then dropped.
    "rebalance": [
        (
            Stream(1, (0, 0, 0, 0), (("new", 0, 1, 0),) * 5, transactional=False),
            (Fault("consumer.consume", 2, mk.REVOKE),),
            3,
        )
    ],
}


def with_regressions(fault_class: str, prop: Callable[..., None]) -> Callable[..., None]:
    for stream, schedule, batch in REGRESSIONS.get(fault_class, []):
        prop = example(stream, schedule, batch)(prop)
    return prop


def failing(test: str, check: Callable[[], None]) -> None:
    try:
        check()
    except AssertionError:
        STATS.failed[test] += 1
        raise


@pytest.mark.parametrize("fault_class", CLASS_NAMES)
def test_receipts_exactly_once(fault_class: str) -> None:
    test = f"receipts[{fault_class}]"

    @hypothesis_settings(max_examples=examples(30))
    @given(streams, schedules(CLASSES[fault_class]), max_messages)
    @partial(with_regressions, fault_class)
    def prop(stream: Stream, schedule: tuple[Fault, ...], batch: int) -> None:
        outcome = run_processor(test, stream, schedule, batch, receipts_processor, receipts_out)
        failing(test, lambda: check_exactly_once(
            outcome, model_receipts(outcome.written), receipts_out(outcome.broker)
        ))  # fmt: skip

    prop()


@pytest.mark.parametrize("fault_class", CLASS_NAMES)
def test_alerts_exactly_once(fault_class: str) -> None:
    test = f"alerts[{fault_class}]"

    @hypothesis_settings(max_examples=examples(20))
    @given(streams, schedules(CLASSES[fault_class]), max_messages)
    @partial(with_regressions, fault_class)
    def prop(stream: Stream, schedule: tuple[Fault, ...], batch: int) -> None:
        outcome = run_processor(test, stream, schedule, batch, alerts_processor, alerts_out)
        expected = model_alerts(outcome.broker, outcome.written, settings_for(batch))
        failing(test, lambda: check_exactly_once(outcome, expected, alerts_out(outcome.broker)))

    prop()


@pytest.mark.parametrize("fault_class", CLASS_NAMES)
def test_the_shell_only_exits_as_documented(fault_class: str) -> None:
    """Every instance ends with an exit code (0, 3 fatal, 4 fenced) or an injected crash or
    hang; none dies of an exception (which a supervisor would also restart, but which the
    shell's contract says it handles: retry, abort and rewind, or stop)."""
    test = f"exits[{fault_class}]"

    @hypothesis_settings(max_examples=examples(20))
    @given(streams, schedules(CLASSES[fault_class]), max_messages)
    def prop(stream: Stream, schedule: tuple[Fault, ...], batch: int) -> None:
        outcome = run_processor(test, stream, schedule, batch, receipts_processor, receipts_out)
        died = [e for e in outcome.run.exits if "died:" in e]
        failing(test, lambda: _assert_no(died, outcome))

    prop()


def _assert_no(died: list[str], outcome: Outcome) -> None:
    assert not died, f"an instance died of an exception: {died[0]}; {outcome.describe()}"
