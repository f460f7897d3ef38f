"""The producer's imperative shell: send messages to Kafka with confluent-kafka.

Idempotence is on by default (the broker drops the producer's own retries by
PID + sequence number); it does not, and cannot, remove application-level
resends, which are different records carrying the same receipt.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient

from producer.simulation import OutgoingMessage


class ProducerError(RuntimeError):
    """Kafka is unreachable, the topic is missing, or deliveries failed; says what to do."""


@dataclass
class DeliveryStats:
    sent: int = 0
    acked: int = 0
    errors: list[str] = field(default_factory=list)


def check_topic(bootstrap: str, topic: str, create_partitions: int | None = None) -> None:
    """Fail with a clear message unless Kafka answers and `topic` exists (or is created)."""
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 2})
    try:
        md = admin.list_topics(timeout=10)
    except KafkaException as exc:
        raise ProducerError(
            f"cannot reach Kafka at {bootstrap}: is it running? try `make up` ({exc})"
        ) from exc
    if topic in md.topics:
        return
    if create_partitions is None:
        raise ProducerError(
            f"topic '{topic}' does not exist on {bootstrap}: create it with `make topics` "
            "or pass --create-topic"
        )
    from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]

    futures = admin.create_topics([NewTopic(topic, num_partitions=create_partitions)])
    try:
        futures[topic].result()
    except KafkaException as exc:
        if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise ProducerError(f"could not create topic '{topic}': {exc}") from exc


def produce(
    messages: Iterable[OutgoingMessage],
    bootstrap: str,
    topic: str,
    idempotence: bool = True,
    rate: float = 0.0,
    total: int | None = None,
    progress_every_s: float = 1.0,
    quiet: bool = False,
) -> DeliveryStats:
    """Send messages in order at up to `rate` per second (0 = unlimited); flush; report."""
    stats = DeliveryStats()
    config = {
        "bootstrap.servers": bootstrap,
        "enable.idempotence": idempotence,
        "acks": "all",
        "linger.ms": 5,
        "compression.type": "lz4",
        "log_level": 3,
    }
    producer = Producer(config)

    def on_delivery(err: KafkaError | None, _msg: object) -> None:
        if err is None:
            stats.acked += 1
        elif len(stats.errors) < 20:
            stats.errors.append(str(err))

    started = last_report = time.monotonic()
    for msg in messages:
        if rate > 0:
            ahead = started + stats.sent / rate - time.monotonic()
            if ahead > 0:
                time.sleep(ahead)  # pacing to the requested rate, not synchronisation
        while True:
            try:
                producer.produce(
                    topic,
                    value=msg.value,
                    key=msg.key,
                    timestamp=msg.timestamp_ms or 0,
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
            of = f"/{total}" if total else ""
            print(
                f"produced {stats.sent}{of}, acked {stats.acked}, "
                f"{stats.sent / (now - started):.0f} msg/s",
                file=sys.stderr,
                flush=True,
            )
    remaining = producer.flush(60)
    if remaining:
        stats.errors.append(f"{remaining} messages still undelivered after 60 s")
    if stats.errors:
        raise ProducerError(
            f"{stats.sent - stats.acked} of {stats.sent} messages failed: "
            + "; ".join(stats.errors[:5])
        )
    return stats
