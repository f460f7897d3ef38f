"""The producer's check of acknowledgements against the log (issue 74): a record the
broker acknowledged and then did not hold is found, named by its signature, and resent.

The in-memory broker stands in for a broker that took records back after answering (the
single broker's kill -9 of the chaos runs); the real-broker path is
tests/integration/test_producer_kafka.py's.
"""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaError

from pos_lambda.producer.acknowledged import Ack, Missing, unconfirmed
from pos_lambda.producer.kafka_sink import ProducerError, produce
from pos_lambda.producer.simulation import OutgoingMessage
from tests.support.memory_kafka import MemoryBroker, MemoryClients, error

TOPIC = "pos.transactions"


def test_unconfirmed_names_how_each_acknowledged_record_went_missing() -> None:
    acks = [
        Ack(0, 3, b"k", b"here"),
        Ack(0, 4, b"k", b"cut, offset given to another"),
        Ack(0, 9, b"k", b"cut"),
        Ack(1, 0, b"k", b"deleted"),
        Ack(1, -1, b"k", b"no offset"),
        Ack(1, -1, b"k", b"no offset, found at 3"),
    ]
    records = {(0, 3): (b"k", b"here"), (0, 4): (b"j", b"another"),
               (1, 3): (b"k", b"no offset, found at 3")}  # fmt: skip
    logs = {0: (0, 5), 1: (2, 7)}
    assert unconfirmed(acks, records, logs) == [
        (acks[1], Missing.OFFSET_REUSED),
        (acks[2], Missing.BEYOND_LOG_END),
        (acks[3], Missing.BELOW_LOG_START),
        (acks[4], Missing.NO_OFFSET),
    ]


def _messages(count: int) -> list[OutgoingMessage]:
    return [
        OutgoingMessage(f"101:{n % 3}".encode(), f"receipt {n}".encode(), 0, "receipt")
        for n in range(count)
    ]


class LosingClients(MemoryClients):
    """A terminal's clients whose broker, after the first `losses` flushes, takes back
    the last two records of partition 0 (the second's offset given to a stranger's
    record) and the connection drops: what a single broker's kill -9 did."""

    def __init__(self, broker: MemoryBroker, losses: int = 1, reconnect: bool = True) -> None:
        super().__init__(broker, "terminal")
        self.losses, self.reconnect = losses, reconnect

    def producer(self, *, idempotence: bool = True, error_cb: Any = None) -> Any:
        producer = super().producer(idempotence=idempotence, error_cb=error_cb)
        flush = producer.flush

        def flush_then_lose(timeout: float | None = None) -> int:
            left = flush(timeout)
            if self.losses > 0:
                self.losses -= 1
                log = self.broker.log(TOPIC, 0)
                del log[-2:]
                self.broker.append(TOPIC, 0, b"a stranger's record", b"999:1")
                if self.reconnect:
                    producer.events.append(error(KafkaError._TRANSPORT, "broker down"))
                    producer.poll(0)
            return left

        producer.flush = flush_then_lose  # type: ignore[method-assign]
        return producer


def _held(broker: MemoryBroker) -> list[bytes]:
    return [m.value() or b"" for p in range(2) for m in broker.read_committed(TOPIC, p)]


def test_records_lost_after_their_acknowledgement_are_resent_after_a_reconnect() -> None:
    broker = MemoryBroker({TOPIC: 2})
    messages = _messages(30)
    stats = produce(messages, "", TOPIC, quiet=True, clients=LosingClients(broker))

    held = _held(broker)
    assert sorted(v for v in held if v != b"a stranger's record") == sorted(
        m.value for m in messages
    )
    assert stats.checked == 30
    assert stats.unconfirmed == {
        "offset beyond the log end": 1,
        "offset reused by another record": 1,
    }
    assert stats.resent == 2
    assert "resent 2" in stats.check_line()


def test_without_a_connection_loss_nothing_is_read_back() -> None:
    broker = MemoryBroker({TOPIC: 2})
    stats = produce(_messages(10), "", TOPIC, quiet=True, clients=MemoryClients(broker, "t"))
    assert (stats.checked, stats.resent, stats.check_line()) == (0, 0, "")


def test_a_broker_that_keeps_losing_the_resends_is_a_delivery_error() -> None:
    broker = MemoryBroker({TOPIC: 2})
    with pytest.raises(ProducerError, match=r"still not in pos\.transactions after 3 resends"):
        produce(_messages(30), "", TOPIC, quiet=True, clients=LosingClients(broker, losses=9))


class NoOffset:
    """A delivery report's message whose offset confluent-kafka gives as None."""

    def __init__(self, msg: Any) -> None:
        self._msg = msg

    def offset(self) -> None:
        return None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._msg, name)


def test_a_success_without_an_offset_is_looked_for_by_its_bytes() -> None:
    """librdkafka reported success without an offset at a broker's hard restart (the
    alerts processor's exactly-once test on the real broker): the record is looked for
    by its bytes in its partition, and resent only if it is not there."""
    broker = MemoryBroker({TOPIC: 2})
    clients = MemoryClients(broker, "terminal")
    real = clients.producer

    def producer(**kw: Any) -> Any:
        p = real(**kw)
        produce_one = p.produce
        sent: list[bytes] = []

        def produce_reporting_no_offset(topic: str, **args: Any) -> None:
            report = args.pop("on_delivery")
            first = not sent  # the resend is reported as usual
            sent.append(args["value"])
            wrapped = (lambda err, msg: report(err, NoOffset(msg))) if first else report
            produce_one(topic, on_delivery=wrapped, **args)
            if first:  # the connection dropped around it
                p.events.append(error(KafkaError._TRANSPORT, "broker down"))

        p.produce = produce_reporting_no_offset  # type: ignore[method-assign,assignment]
        return p

    clients.producer = producer  # type: ignore[method-assign]
    stats = produce(_messages(5), "", TOPIC, quiet=True, clients=clients)
    # It is in the log (the in-memory broker appended it): found by its bytes, not resent.
    assert (stats.checked, stats.unconfirmed, stats.resent) == (5, {}, 0)
    assert sorted(_held(broker)) == sorted(m.value for m in _messages(5))
