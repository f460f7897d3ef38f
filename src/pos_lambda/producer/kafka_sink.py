"""The producer's imperative shell: send messages to Kafka with confluent-kafka.

Idempotence is on by default (the broker drops the producer's own retries by
PID + sequence number); it does not, and cannot, remove application-level
resends, which are different records carrying the same receipt. Used by
`pos-producer` (src/pos_lambda/producer/cli.py); in Python:

    check_topic("127.0.0.1:9092", "pos.transactions")
    stats = produce(result.messages, "127.0.0.1:9092", "pos.transactions")
"""

from __future__ import annotations

import sys
import time
from collections import Counter, deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaError

from pos_lambda.adapters import kafka_admin
from pos_lambda.adapters.kafka_clients import ConfluentClients, KafkaClients, KafkaProducer
from pos_lambda.adapters.service import ServiceError
from pos_lambda.producer.acknowledged import Ack, read_back, unconfirmed
from pos_lambda.producer.simulation import OutgoingMessage

MAX_KEPT_ERRORS = 20
# The acknowledgements kept for the check after a connection loss: the newest ones, which
# are those a broker's crash could take back (at 1,000 messages/s, the last 3 minutes).
CHECK_WINDOW = 200_000
# Resend rounds before giving up on a record the broker keeps not holding.
CHECK_ROUNDS = 3
# librdkafka's connection-level errors: after one, acknowledgements are checked.
CONNECTION_LOST = (KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN)
# librdkafka's poll() timeout is in whole milliseconds (shorter ones round to 0).
MIN_WAIT_S = 0.001


class ProducerError(RuntimeError):
    """Kafka is unreachable, the topic is missing, or deliveries failed; says what to do."""


@dataclass
class DeliveryStats:
    sent: int = 0
    acked: int = 0
    failed: int = 0
    errors: list[str] = field(default_factory=list)  # the first MAX_KEPT_ERRORS
    # Seconds from creating the client to the first ack: connection, metadata and,
    # with idempotence, the producer-id handshake (about 0.5 s with librdkafka).
    first_ack_s: float | None = None
    seconds: float = 0.0  # creating the client (or the call) to the end of the flush
    # The check of acknowledgements against the log (producer/acknowledged.py): how many
    # were read back, how many were not there (by signature), and how many were resent.
    checked: int = 0
    unconfirmed: dict[str, int] = field(default_factory=dict)
    resent: int = 0

    def check_line(self) -> str:
        """One line for the operator: what the check found, or "" when nothing ran."""
        if not self.checked:
            return ""
        found = ", ".join(f"{n} {why}" for why, n in self.unconfirmed.items()) or "none missing"
        return (
            f"checked {self.checked} acknowledged messages against the log after a "
            f"connection loss: {found}; resent {self.resent}"
        )


def producer_config(
    bootstrap: str, idempotence: bool = True, security: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """The idempotent producer's configuration (the Kafka port's, adapters/kafka_clients.py)."""
    return ConfluentClients(bootstrap, security or {}).producer_config(idempotence=idempotence)


def check_topic(
    bootstrap: str,
    topic: str,
    create_partitions: int | None = None,
    replication_factor: int = -1,
    timeout_s: float = 10.0,
    security: Mapping[str, str] | None = None,
) -> None:
    """Fail with a clear message unless Kafka answers and `topic` exists (or is created).

    replication_factor -1 means the broker's default.
    """
    try:
        kafka_admin.require_topic(
            bootstrap, topic, create_partitions, replication_factor, timeout_s,
            hint="create it with `make topics` or pass --create-topic", security=security,
        )  # fmt: skip
    except ServiceError as exc:
        raise ProducerError(str(exc)) from exc


def produce(
    messages: Iterable[OutgoingMessage],
    bootstrap: str,
    topic: str,
    idempotence: bool = True,
    rate: float = 0.0,
    total: int | None = None,
    progress_every_s: float = 1.0,
    quiet: bool = False,
    flush_timeout_s: float = 60.0,
    producer: KafkaProducer | None = None,
    security: Mapping[str, str] | None = None,
    clients: KafkaClients | None = None,
    check_acks: bool = True,
) -> DeliveryStats:
    """Send messages in order at up to `rate` per second (0 = unlimited); flush; report.

    Raises ProducerError when any delivery failed (after flushing the rest). On
    Ctrl-C, flushes what is queued and re-raises KeyboardInterrupt. A `producer`
    passed in (already connected: benchmarks) is used instead of a new one, and
    `bootstrap`/`idempotence` are then ignored.

    With `check_acks`, after the flush, if the connection to a broker was lost meanwhile
    (or the producer was passed in, whose connection this call cannot watch), the newest
    CHECK_WINDOW acknowledgements are read back and what the log does not hold is resent
    (`check_acknowledged`).
    """
    stats = DeliveryStats()
    started = last_report = time.monotonic()
    clients = clients or ConfluentClients(bootstrap, security or {})
    acks: deque[Ack] = deque(maxlen=CHECK_WINDOW if check_acks else 0)
    connection_lost = producer is not None

    def on_error(err: KafkaError) -> None:
        nonlocal connection_lost
        if err.code() in CONNECTION_LOST:
            connection_lost = True

    if producer is None:
        # The Kafka port (adapters/kafka_clients.py): the real broker unless a fake is given.
        producer = clients.producer(idempotence=idempotence, error_cb=on_error)

    def on_delivery(err: KafkaError | None, msg: Any) -> None:
        if err is None:
            stats.acked += 1
            if stats.first_ack_s is None:
                stats.first_ack_s = time.monotonic() - started
            if check_acks and msg is not None:  # a report always has one; fakes may not
                _, timestamp_ms = msg.timestamp()
                acks.append(Ack(msg.partition(), _offset(msg), msg.key(), msg.value(),
                                timestamp_ms if timestamp_ms > 0 else None))  # fmt: skip
            return
        stats.failed += 1
        if len(stats.errors) < MAX_KEPT_ERRORS:
            stats.errors.append(str(err))

    try:
        for msg in messages:
            if rate > 0:
                # Pacing to the requested rate (not synchronisation): serve delivery
                # reports while waiting for this message's slot.
                while (ahead := started + stats.sent / rate - time.monotonic()) > 0:
                    # poll() waits whole milliseconds: a wait under one would be
                    # poll(0), a busy loop that took most of a core at 1,000 messages/s.
                    # The schedule is absolute, so waiting up to 1 ms longer adds no drift.
                    producer.poll(max(ahead, MIN_WAIT_S))
            while True:
                try:
                    producer.produce(
                        topic,
                        value=msg.value,
                        key=msg.key,
                        timestamp=msg.timestamp_ms,
                        on_delivery=on_delivery,
                    )
                    break
                except BufferError:
                    producer.poll(0.1)  # local queue full: let deliveries drain
            stats.sent += 1
            producer.poll(0)
            now = time.monotonic()
            if not quiet and now - last_report >= progress_every_s:
                last_report = now
                _progress(stats, total, now - started)
    except KeyboardInterrupt:
        producer.flush(10)  # what was handed to the client still gets its chance
        raise
    remaining = producer.flush(flush_timeout_s)
    stats.seconds = time.monotonic() - started
    if not quiet:
        _progress(stats, total, time.monotonic() - started)
    if remaining:
        stats.errors.append(f"{remaining} messages still undelivered after {flush_timeout_s} s")
    if acks and (connection_lost or any(a.offset < 0 for a in acks)):
        check_acknowledged(producer, clients, topic, list(acks), stats, flush_timeout_s)
        if not quiet:
            print(stats.check_line(), file=sys.stderr, flush=True)
    if stats.errors:
        raise ProducerError(
            f"{stats.sent - stats.acked} of {stats.sent} messages not delivered to '{topic}': "
            + "; ".join(stats.errors[:5])
        )
    return stats


def check_acknowledged(
    producer: KafkaProducer,
    clients: KafkaClients,
    topic: str,
    acks: list[Ack],
    stats: DeliveryStats,
    flush_timeout_s: float,
) -> None:
    """Read `acks` back; resend what the log does not hold, and check the resends, up to
    CHECK_ROUNDS times. Counts into `stats`; a record still missing is a delivery error."""
    pending = acks
    stats.checked += len(acks)
    for round_ in range(CHECK_ROUNDS + 1):
        records, logs = read_back(clients, topic, pending)
        missing = unconfirmed(pending, records, logs)
        if not missing:
            return
        for why, n in Counter(why for _, why in missing).items():
            stats.unconfirmed[why.value] = stats.unconfirmed.get(why.value, 0) + n
        if round_ == CHECK_ROUNDS:
            break
        resent: list[Ack] = []

        def on_resend(err: KafkaError | None, msg: Any, into: list[Ack] = resent) -> None:
            if err is not None:
                stats.errors.append(f"a resend of an unconfirmed message failed: {err}")
            else:
                into.append(Ack(msg.partition(), _offset(msg), msg.key(), msg.value()))

        for ack, _why in missing:
            producer.produce(topic, value=ack.value, key=ack.key,
                             timestamp=ack.timestamp_ms or 0, on_delivery=on_resend)  # fmt: skip
        producer.flush(flush_timeout_s)
        stats.resent += len(missing)
        pending = resent
    stats.errors.append(
        f"{len(missing)} acknowledged messages still not in {topic} after {CHECK_ROUNDS} "
        f"resends: {stats.check_line()}"
    )


def _offset(msg: Any) -> int:
    """The offset a delivery report gave, -1 for none: confluent-kafka returns None when
    librdkafka reports success without one (a retry after a broker's restart answered
    as a duplicate of a batch it had: seen in tests/integration/test_alerts_eos.py)."""
    offset = msg.offset()
    return -1 if offset is None or offset < 0 else int(offset)


def _progress(stats: DeliveryStats, total: int | None, elapsed_s: float) -> None:
    of = f"/{total}" if total else ""
    print(
        f"produced {stats.sent}{of}, acked {stats.acked}, "
        f"{stats.sent / max(elapsed_s, 1e-9):.0f} msg/s",
        file=sys.stderr,
        flush=True,
    )
