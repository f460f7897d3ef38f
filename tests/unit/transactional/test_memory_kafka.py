"""The in-memory broker (tests/support/memory_kafka.py): its own semantics, and where the
real client can tell, agreement with librdkafka (confluent-kafka's built-in mock cluster,
`test.mock.num.brokers`: an in-process broker, no service).

What librdkafka 2.16's mock cluster cannot show (checked by
`test_what_the_mock_cluster_does_not_model`, so an upgrade that adds it is noticed):
it gives every init_transactions a new producer id, so a second producer with the same
transactional.id fences nobody (the old one goes on committing); read_committed returns
the records of aborted and of still-open transactions (no aborted-transaction index, no
last stable offset); and TxnOffsetCommit stores nothing (send_offsets_to_transaction
then commit leaves the group's offsets unset). For those the fake follows librdkafka's
client code instead: rdkafka_txnmgr.c turns PRODUCER_FENCED / INVALID_PRODUCER_EPOCH
into a fatal `_FENCED`; rd_kafka_check_produce refuses to produce after a fatal error
(`_FATAL`, which confluent-kafka raises without the fatal flag).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_INVALID,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)

from tests.support.memory_kafka import (
    ABORTABLE,
    CRASH,
    DELIVERY_TIMED_OUT,
    LOST,
    REVOKE,
    TIMED_OUT,
    Crash,
    Fault,
    MemoryBroker,
)

T = "t"


def outcome(call: Callable[[], object]) -> object:
    """ "ok", or the error a call raised: (name, fatal, retriable, txn_requires_abort)."""
    try:
        call()
    except KafkaException as exc:
        err: KafkaError = exc.args[0]
        return (err.name(), err.fatal(), err.retriable(), err.txn_requires_abort())
    return "ok"


def values(broker: MemoryBroker, topic: str = T) -> list[bytes | None]:
    return [m.value() for m in broker.read_committed(topic)]


# --- the fake's own semantics --------------------------------------------------------


def test_markers_take_offsets_and_read_committed_hides_aborted_records() -> None:
    broker = MemoryBroker({T: 1})
    producer = broker.clients().transactional_producer("tx", 60_000)
    producer.init_transactions(10)
    for payload, commit in ((b"a", True), (b"b", False), (b"c", True)):
        producer.begin_transaction()
        producer.produce(T, payload)
        (producer.commit_transaction if commit else producer.abort_transaction)(10)

    assert [(e.offset, e.value, e.marker) for e in broker.log(T, 0)] == [
        (0, b"a", None), (1, None, "commit"), (2, b"b", None), (3, None, "abort"),
        (4, b"c", None), (5, None, "commit"),
    ]  # fmt: skip
    reader = broker.clients().reader()
    reader.assign([TopicPartition(T, 0, OFFSET_BEGINNING)])
    got = reader.consume(10, timeout=1)
    assert [(m.offset(), m.value()) for m in got if m.error() is None] == [(0, b"a"), (4, b"c")]
    eof = got[-1].error()
    assert eof is not None and eof.code() == KafkaError._PARTITION_EOF
    assert reader.position([TopicPartition(T, 0)])[0].offset == 6  # past the last marker


def test_read_committed_stops_at_the_first_open_transaction() -> None:
    broker = MemoryBroker({T: 1})
    writer = broker.clients().transactional_producer("tx", 60_000)
    writer.init_transactions(10)
    writer.begin_transaction()
    writer.produce(T, b"open")
    broker.append(T, 0, b"plain, after it")  # a non-transactional record behind it
    reader = broker.clients().reader()
    reader.assign([TopicPartition(T, 0, OFFSET_BEGINNING)])

    assert [m.value() for m in reader.consume(10, timeout=1) if m.error() is None] == []
    assert values(broker) == []
    writer.commit_transaction(10)
    assert [m.value() for m in reader.consume(10, timeout=1) if m.error() is None] == [
        b"open", b"plain, after it",
    ]  # fmt: skip


def test_offsets_are_committed_with_the_transaction_only() -> None:
    broker = MemoryBroker({T: 1, "in": 1})
    clients = broker.clients()
    consumer = clients.group_consumer("g")
    producer = clients.transactional_producer("tx", 60_000)
    producer.init_transactions(10)
    meta = consumer.consumer_group_metadata()
    for commit, offset in ((False, 3), (True, 5)):
        producer.begin_transaction()
        producer.produce(T, b"x")
        producer.send_offsets_to_transaction([TopicPartition("in", 0, offset)], meta, 10)
        # KIP-447: the group's offset is unstable while the transaction is open.
        assert outcome(lambda: consumer.committed([TopicPartition("in", 0)], 1)) == (
            "_TIMED_OUT", False, True, False,
        )  # fmt: skip
        (producer.commit_transaction if commit else producer.abort_transaction)(10)
        assert broker.committed_offsets("g", "in") == ({0: 5} if commit else {})
    assert consumer.committed([TopicPartition("in", 0)], 1)[0].offset == 5


def test_a_new_producer_fences_the_old_one_and_aborts_its_transaction() -> None:
    broker = MemoryBroker({T: 1})
    old = broker.clients().transactional_producer("tx", 60_000)
    old.init_transactions(10)
    old.begin_transaction()
    old.produce(T, b"zombie")
    new = broker.clients().transactional_producer("tx", 60_000)
    new.init_transactions(10)

    assert values(broker) == []  # aborted, and no longer blocking readers
    assert [e.marker for e in broker.log(T, 0)] == [None, "abort"]
    assert outcome(lambda: old.commit_transaction(10)) == ("_FENCED", True, False, False)
    # Then every call fails: transactional ones with the fatal error, produce() with
    # _FATAL, which confluent-kafka raises without the fatal flag.
    assert outcome(old.begin_transaction) == ("_FENCED", True, False, False)
    assert outcome(lambda: old.produce(T, b"more")) == ("_FATAL", False, False, False)
    new.begin_transaction()
    new.produce(T, b"new")
    new.commit_transaction(10)
    assert values(broker) == [b"new"]


def test_a_fenced_producer_learns_it_from_its_next_produce_in_the_background() -> None:
    broker = MemoryBroker({T: 1})
    errors: list[KafkaError] = []
    reports: list[KafkaError | None] = []
    old = broker.clients().transactional_producer("tx", 60_000, error_cb=errors.append)
    old.init_transactions(10)
    old.begin_transaction()
    broker.clients().transactional_producer("tx", 60_000).init_transactions(10)

    old.produce(T, b"refused", on_delivery=lambda err, _msg: reports.append(err))
    old.poll(0)
    assert [e.name() for e in reports if e] == ["_FENCED"]
    assert [(e.name(), e.fatal()) for e in errors] == [("_FENCED", True)]
    assert outcome(lambda: old.produce(T, b"again")) == ("_FATAL", False, False, False)
    assert broker.log(T, 0) == []


def test_an_abortable_error_must_be_aborted_before_anything_else() -> None:
    broker = MemoryBroker({T: 1})
    producer = broker.clients().transactional_producer("tx", 60_000)
    producer.init_transactions(10)
    broker.arm([Fault("producer.commit_transaction", 1, ABORTABLE)])
    producer.begin_transaction()
    producer.produce(T, b"x")
    abortable = ("TRANSACTION_ABORTABLE", False, False, True)

    assert outcome(lambda: producer.commit_transaction(10)) == abortable
    assert outcome(lambda: producer.commit_transaction(10)) == abortable  # still refused
    assert outcome(producer.begin_transaction) == abortable
    assert outcome(lambda: producer.produce(T, b"y")) == ("_STATE", False, False, False)
    producer.abort_transaction(10)
    producer.begin_transaction()
    producer.produce(T, b"z")
    producer.commit_transaction(10)
    assert values(broker) == [b"z"]


def test_a_delivery_that_fails_makes_the_commit_abortable() -> None:
    broker = MemoryBroker({T: 1})
    producer = broker.clients().transactional_producer("tx", 60_000)
    producer.init_transactions(10)
    broker.arm([Fault("producer.delivery", 2, DELIVERY_TIMED_OUT)])
    reports: list[KafkaError | None] = []
    producer.begin_transaction()
    for payload in (b"1", b"2", b"3"):
        producer.produce(T, payload, on_delivery=lambda err, _msg: reports.append(err))

    assert outcome(lambda: producer.commit_transaction(10)) == (
        "_MSG_TIMED_OUT", False, False, True,
    )  # fmt: skip
    assert [e.name() if e else None for e in reports] == [None, None, "_MSG_TIMED_OUT"]
    producer.abort_transaction(10)
    assert values(broker) == []


def test_a_timed_out_commit_went_on_and_resumes() -> None:
    broker = MemoryBroker({T: 1})
    producer = broker.clients().transactional_producer("tx", 60_000)
    producer.init_transactions(10)
    broker.arm([Fault("producer.commit_transaction", 1, TIMED_OUT)])
    producer.begin_transaction()
    producer.produce(T, b"x")

    assert outcome(lambda: producer.commit_transaction(10)) == ("_TIMED_OUT", False, True, False)
    assert values(broker) == [b"x"]  # it went on: "retry call to resume"
    producer.commit_transaction(10)
    producer.begin_transaction()  # Ready again
    assert [e.marker for e in broker.log(T, 0)] == [None, "commit"]


def test_a_crashed_process_writes_nothing_more_and_leaves_its_transaction_open() -> None:
    broker = MemoryBroker({T: 1})
    dead = broker.clients()
    producer = dead.transactional_producer("tx", 60_000)
    producer.init_transactions(10)
    producer.begin_transaction()
    producer.produce(T, b"in flight")
    broker.append(T, 0, b"behind it")
    broker.arm([Fault("producer.commit_transaction", 1, CRASH)])

    with pytest.raises(Crash):
        producer.commit_transaction(10)
    with pytest.raises(Crash):
        producer.abort_transaction(10)
    with pytest.raises(Crash):
        dead.reader()
    assert values(broker) == [] and "tx" in broker.open_txns  # still open: blocks readers
    broker.clients().transactional_producer("tx", 60_000).init_transactions(10)
    assert values(broker) == [b"behind it"]


def test_rebalances_arrive_through_the_callbacks_inside_poll() -> None:
    broker = MemoryBroker({"in": 2})
    for p in (0, 1):
        broker.append("in", p, b"x")
    seen: list[tuple[str, list[int]]] = []

    def note(what: str) -> Callable[[Any, list[TopicPartition]], None]:
        return lambda _c, parts: seen.append((what, sorted(tp.partition for tp in parts)))

    consumer = broker.clients().group_consumer("g")
    consumer.subscribe(["in"], on_assign=note("assign"), on_revoke=note("revoke"),
                       on_lost=note("lost"))  # fmt: skip
    broker.arm([Fault("consumer.poll", 2, REVOKE), Fault("consumer.poll", 4, LOST)])
    polled = [consumer.poll(0) for _ in range(5)]

    assert seen == [
        ("assign", [0, 1]), ("revoke", [0, 1]), ("assign", [0, 1]), ("lost", [0, 1]),
        ("assign", [0, 1]),
    ]  # fmt: skip
    assert [m is not None for m in polled] == [True, False, True, False, True]
    meta = consumer.consumer_group_metadata()
    assert meta.generation == broker.groups["g"].generation


# --- agreement with librdkafka (its mock cluster) ------------------------------------


class Fake:
    name = "fake"

    def __init__(self) -> None:
        self.broker = MemoryBroker({T: 1})
        self.clients = self.broker.clients()

    def producer(self, transactional_id: str) -> Any:
        return self.clients.transactional_producer(transactional_id, 60_000)

    def reader(self) -> Any:
        return self.clients.reader()

    def group_consumer(self) -> Any:
        return self.clients.group_consumer("g")


class MockCluster:
    """librdkafka's mock cluster, inside a plain producer that lives as long as the test."""

    name = "librdkafka mock cluster"

    def __init__(self) -> None:
        self.host = Producer({"test.mock.num.brokers": 1, "log_level": 0})
        brokers = self.host.list_topics(timeout=10).brokers.values()
        self.bootstrap = ",".join(f"{b.host}:{b.port}" for b in brokers)
        self.consumers: list[Consumer] = []

    def _config(self) -> dict[str, Any]:
        return {"bootstrap.servers": self.bootstrap, "log_level": 0}

    def producer(self, transactional_id: str) -> Any:
        return Producer({**self._config(), "transactional.id": transactional_id})

    def _consumer(self, **config: Any) -> Consumer:
        consumer = Consumer({**self._config(), "isolation.level": "read_committed",
                             "enable.auto.commit": False, **config})  # fmt: skip
        self.consumers.append(consumer)
        return consumer

    def reader(self) -> Any:
        return self._consumer(**{"group.id": "reader", "enable.partition.eof": True})

    def group_consumer(self) -> Any:
        return self._consumer(**{"group.id": "g"})

    def close(self) -> None:
        for consumer in self.consumers:
            consumer.close()


@pytest.fixture
def mock_cluster() -> Iterator[MockCluster]:
    cluster = MockCluster()
    yield cluster
    cluster.close()


def read_to_end(reader: Any, end: int) -> list[tuple[int, bytes | None]]:
    """Every record up to `end` (the high watermark), however the client splits it."""
    records: list[tuple[int, bytes | None]] = []
    deadline = time.monotonic() + 20
    while reader.position([TopicPartition(T, 0)])[0].offset < end:
        assert time.monotonic() < deadline, "the reader did not reach the end"
        for msg in reader.consume(10, timeout=0.5):
            if msg.error() is None:
                records.append((msg.offset(), msg.value()))
    return records


def observe(backend: Any) -> dict[str, object]:
    """The scenario: the transactional state machine's errors, a committed transaction
    and how a read_committed reader's position moves over it."""
    seen: dict[str, object] = {}
    producer = backend.producer("tx")
    produce = lambda: producer.produce(T, b"x", partition=0)
    seen["produce before init_transactions"] = outcome(produce)
    seen["begin before init_transactions"] = outcome(producer.begin_transaction)
    producer.init_transactions(10)
    seen["init_transactions twice"] = outcome(lambda: producer.init_transactions(10))
    seen["produce outside a transaction"] = outcome(produce)
    seen["commit outside a transaction"] = outcome(lambda: producer.commit_transaction(10))
    seen["abort outside a transaction"] = outcome(lambda: producer.abort_transaction(10))
    meta = backend.group_consumer().consumer_group_metadata()
    seen["send offsets outside a transaction"] = outcome(
        lambda: producer.send_offsets_to_transaction([TopicPartition(T, 0, 1)], meta, 10)
    )
    producer.begin_transaction()
    seen["begin twice"] = outcome(producer.begin_transaction)
    delivered: list[int] = []
    for payload in (b"a", b"b"):
        producer.produce(
            T, payload, partition=0, on_delivery=lambda _e, m: delivered.append(m.offset())
        )
    producer.commit_transaction(10)
    seen["delivered at"] = delivered
    seen["commit after commit"] = outcome(lambda: producer.commit_transaction(10))

    reader = backend.reader()
    _, end = reader.get_watermark_offsets(TopicPartition(T, 0), timeout=10)
    seen["high watermark"] = end  # the commit marker takes an offset
    reader.assign([TopicPartition(T, 0, OFFSET_BEGINNING)])
    seen["position after assign"] = reader.position([TopicPartition(T, 0)])[0].offset
    seen["records"] = read_to_end(reader, end)
    seen["position at the end"] = reader.position([TopicPartition(T, 0)])[0].offset
    reader.seek(TopicPartition(T, 0, 1))
    seen["position after seek"] = reader.position([TopicPartition(T, 0)])[0].offset
    return seen


def test_the_fake_agrees_with_librdkafka(mock_cluster: MockCluster) -> None:
    real, fake = observe(mock_cluster), observe(Fake())
    assert fake == real
    # What they agree on, spelled out:
    state_error = ("_STATE", False, False, False)
    assert real["commit outside a transaction"] == state_error
    assert real["records"] == [(0, b"a"), (1, b"b")]
    assert real["high watermark"] == real["position at the end"] == 3
    assert real["position after assign"] == real["position after seek"] == OFFSET_INVALID


def test_what_the_mock_cluster_does_not_model(mock_cluster: MockCluster) -> None:
    """If this fails, librdkafka's mock cluster learned one of these: compare the fake with
    it in `observe` (fencing, aborted records, the LSO, transactional offset commits)."""
    old = mock_cluster.producer("tx")
    old.init_transactions(10)
    old.begin_transaction()
    old.produce(T, b"open", partition=0)
    old.flush(10)
    reader = mock_cluster.reader()
    reader.assign([TopicPartition(T, 0, OFFSET_BEGINNING)])
    assert read_to_end(reader, 1) == [(0, b"open")]  # no last stable offset
    new = mock_cluster.producer("tx")
    new.init_transactions(10)  # fences nobody: a new producer id
    meta = mock_cluster.group_consumer().consumer_group_metadata()
    old.send_offsets_to_transaction([TopicPartition(T, 0, 1)], meta, 10)
    assert outcome(lambda: old.commit_transaction(10)) == "ok"  # the real broker: _FENCED
    new.begin_transaction()
    new.produce(T, b"aborted", partition=0)
    new.flush(10)  # on the broker before the abort (else the abort purges it unsent)
    new.abort_transaction(10)
    assert [v for _, v in read_to_end(reader, 4)] == [b"aborted"]  # read despite the abort
    committed = mock_cluster.group_consumer().committed([TopicPartition(T, 0)], timeout=10)
    assert committed[0].offset == OFFSET_INVALID  # TxnOffsetCommit stored nothing
