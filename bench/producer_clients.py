"""Producer throughput of confluent-kafka (the project's client) vs kafka-python (the one the
mission named), idempotent, on the same messages, alternated in one run.

    python -m bench.producer_clients [--count 200000] [--rounds 3] [--no-json]

The simulator's receipts are encoded once (src/pos_lambda/producer/simulation.py: keys, JSON values,
record timestamps); each run sends all of them into a fresh topic of its own. Both clients
are idempotent with acks=all, linger 5 ms and lz4, as the project's producer
(src/pos_lambda/producer/kafka_sink.py: confluent-kafka through the project's own `produce`), and
kafka-python gets librdkafka's default batch size (1 MB) and its C crc32c and lz4, so it is
measured at its best. Before the clock starts each client delivers one warm-up message
(connection, metadata, producer id); events/s = messages / (first send -> every delivery
acknowledged, after flush). A run counts only when the topic's end offsets add up to
exactly the messages sent plus the warm-up (nothing lost, nothing duplicated). Rounds
alternate which client goes first. Writes docs/bench/producer_clients.json
(bench/results.py). Needs Kafka (`make up`) and `pip install -e '.[bench]'`.
"""

from __future__ import annotations

import functools
import statistics
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition

from bench import harness, results
from pos_lambda.adapters import schema_apply
from pos_lambda.producer.kafka_sink import produce, producer_config
from pos_lambda.producer.simulation import OutgoingMessage, SimulationConfig, simulate
from pos_lambda.settings import Settings, load_settings

CLIENTS = ("confluent-kafka", "kafka-python")
# (settings, topic, messages) -> (seconds first send -> all acked, ms created -> warm-up acked)
Runner = Callable[[Settings, str, Sequence[OutgoingMessage]], tuple[float, float]]
KAFKA_PYTHON_BATCH_BYTES = 1_000_000  # librdkafka's default batch.size


@dataclass(frozen=True)
class Run:
    round: int
    client: str
    topic: str
    messages: int
    seconds: float  # first send -> all acknowledged (after flush)
    connect_ms: float  # client created -> warm-up message acknowledged
    end_offsets: int  # sum over the topic's partitions
    verified: bool  # end_offsets == messages + 1 (the warm-up)

    @property
    def events_per_s(self) -> float:
        return self.messages / self.seconds


def run_confluent(
    settings: Settings, topic: str, messages: Sequence[OutgoingMessage]
) -> tuple[float, float]:
    """(seconds first send -> all acked, ms created -> warm-up acked), the project's path."""
    created = time.perf_counter()
    client = Producer(producer_config(settings.bootstrap_servers, idempotence=True))
    client.produce(topic, b"warm-up")
    if client.flush(30):
        raise RuntimeError(f"confluent-kafka: warm-up message to {topic} not acknowledged")
    connect_ms = 1000 * (time.perf_counter() - created)
    # check_acks off: the figure is the sending, not the read-back after it.
    stats = produce(messages, "", topic, quiet=True, producer=client, check_acks=False)
    if stats.acked != len(messages):
        raise RuntimeError(f"confluent-kafka: {stats.acked} of {len(messages)} acknowledged")
    return stats.seconds, connect_ms


def run_kafka_python(
    settings: Settings,
    topic: str,
    messages: Sequence[OutgoingMessage],
    batch_bytes: int = KAFKA_PYTHON_BATCH_BYTES,
) -> tuple[float, float]:
    """The same with kafka-python: per-message callbacks count acks, as produce() does."""
    from kafka import KafkaProducer  # the bench extra

    created = time.perf_counter()
    client = KafkaProducer(
        bootstrap_servers=settings.bootstrap_servers,
        enable_idempotence=True,
        acks="all",
        linger_ms=5,
        compression_type="lz4",
        batch_size=batch_bytes,
    )
    try:
        client.send(topic, b"warm-up").get(timeout=30)
        connect_ms = 1000 * (time.perf_counter() - created)
        acked = 0
        errors: list[str] = []

        def on_ack(_metadata: object) -> None:
            nonlocal acked
            acked += 1

        def on_error(exc: BaseException) -> None:
            errors.append(repr(exc))

        started = time.perf_counter()
        for msg in messages:
            future = client.send(topic, value=msg.value, key=msg.key, timestamp_ms=msg.timestamp_ms)
            future.add_callback(on_ack)
            future.add_errback(on_error)
        client.flush(timeout=120)
        seconds = time.perf_counter() - started
    finally:
        client.close(timeout=30)
    if errors or acked != len(messages):
        raise RuntimeError(
            f"kafka-python: {acked} of {len(messages)} acknowledged; {'; '.join(errors[:5])}"
        )
    return seconds, connect_ms


def end_offsets(settings: Settings, topic: str) -> int:
    """Records in the topic: the sum of its partitions' high watermarks (a fresh topic)."""
    consumer = Consumer(
        {"bootstrap.servers": settings.bootstrap_servers, "group.id": f"bench-{uuid.uuid4().hex}"}
    )
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        return sum(
            consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in partitions
        )
    finally:
        consumer.close()


def figures(runs: Sequence[Run]) -> list[results.Figure]:
    """Medians of the verified runs per client, confluent-kafka as a ratio to kafka-python."""
    med: dict[str, dict[str, float]] = {}
    for client in CLIENTS:
        ok = [r for r in runs if r.client == client and r.verified]
        if not ok:
            raise RuntimeError(f"{client}: no run delivered every message exactly once")
        med[client] = {
            "events_per_s": statistics.median(r.events_per_s for r in ok),
            "connect_ms": statistics.median(r.connect_ms for r in ok),
        }
    c, k = med["confluent-kafka"], med["kafka-python"]
    return [
        results.vs_peer(
            "confluent-kafka events/s", c["events_per_s"], "events/s",
            "kafka-python events/s", k["events_per_s"],
            goal=results.Goal(">=", 1.0, "the project's client must not be the slower one"),
        ),
        results.baseline("kafka-python events/s", k["events_per_s"], "events/s"),
        results.vs_peer(
            "confluent-kafka connect to first ack", c["connect_ms"], "ms",
            "kafka-python connect to first ack", k["connect_ms"],
        ),
    ]  # fmt: skip


def main() -> None:
    parser = harness.parser(__doc__, "producer_clients")
    parser.add_argument("--count", type=int, default=200_000, help="receipts per run")
    parser.add_argument("--rounds", type=int, default=3, help="rounds (each runs both clients)")
    parser.add_argument(
        "--kafka-python-batch-bytes",
        type=int,
        default=KAFKA_PYTHON_BATCH_BYTES,
        help="kafka-python's batch_size (default: librdkafka's batch.size; its own is 16384)",
    )
    args = parser.parse_args()
    if args.count < 1 or args.rounds < 1:
        parser.error("--count and --rounds must be >= 1")
    settings = load_settings()
    if settings.kafka.security_protocol != "PLAINTEXT":
        parser.error("this benchmark runs against a plaintext local broker (no POS_KAFKA_SASL/TLS)")
    messages = simulate(
        SimulationConfig(count=args.count, seed=1, start=datetime(2026, 3, 2, tzinfo=UTC))
    ).messages
    size = sum(len(m.value) + len(m.key or b"") for m in messages)
    print(f"{len(messages):,} messages, {size / len(messages):.0f} bytes each on average")
    runners: dict[str, Runner] = {
        "confluent-kafka": run_confluent,
        "kafka-python": functools.partial(
            run_kafka_python, batch_bytes=args.kafka_python_batch_bytes
        ),
    }
    runs: list[Run] = []
    topics: list[str] = []
    # Every other round the other client first: neither always runs on a fresher machine.
    for rnd, client in harness.alternate(args.rounds, CLIENTS, reverse_odd=True):
        topic = f"bench.clients.{uuid.uuid4().hex[:8]}"
        schema_apply.create_topics(settings, {topic: settings.topics.partitions})
        topics.append(topic)
        print(f"round {rnd}: {client:<15} ...", end=" ", flush=True)
        seconds, connect_ms = runners[client](settings, topic, messages)
        offsets = end_offsets(settings, topic)
        run = Run(
            rnd, client, topic, len(messages), seconds, connect_ms, offsets,
            verified=offsets == len(messages) + 1,
        )  # fmt: skip
        runs.append(run)
        check = "all arrived" if run.verified else f"END OFFSETS {offsets:,}: NOT COUNTED"
        print(f"{run.events_per_s:>9,.0f} events/s, connect {connect_ms:4.0f} ms, {check}")
    harness.drop(settings, [], topics)  # this run's topics only (the broker is shared)
    figs = figures(runs)
    head = figs[0]
    print(
        f"median: confluent-kafka {head.value:,.0f} events/s, kafka-python "
        f"{head.reference_value:,.0f} events/s: confluent/kafka-python = {head.ratio:.2f}"
    )
    lost = [r for r in runs if not r.verified]
    results.write(
        args,
        "producer_clients",
        figs,
        runs=[_run_json(r) for r in runs],
        notes=(f"{len(lost)} run(s) not counted (end offsets differ); " if lost else "")
        + f"kafka-python batch_size {args.kafka_python_batch_bytes:,} (librdkafka's: 1,000,000); "
        "both: enable idempotence, acks=all, linger 5 ms, lz4; one warm-up message first",
    )
    if lost:
        sys.exit(f"{len(lost)} run(s) lost or duplicated messages: see the runs above")


def _run_json(r: Run) -> dict[str, Any]:
    return {**asdict(r), "events_per_s": round(r.events_per_s, 1)}


if __name__ == "__main__":
    main()
