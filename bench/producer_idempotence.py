"""Producer throughput with idempotence on and off, side by side in one run.

    python -m bench.producer_idempotence [--count 200000] [--rounds 3]

Generates the receipts once (the pure simulator is not what we measure), then
sends them to fresh topics alternating on/off per round, and reports per round
and as medians, with on/off ratios:
- cold: a new client per run, creation to final flush (what a `pos-producer` run
  sees), and its time to the first ack (connection, metadata and, with
  idempotence, the producer-id handshake);
- warm: a client that has already delivered one message, so only the sending of
  the N receipts is timed.
Writes docs/bench/producer_idempotence.json (bench/results.py; --no-json: don't).
Needs Kafka (`make up`).
"""

from __future__ import annotations

import statistics
import uuid
from datetime import UTC, datetime
from typing import Any

from confluent_kafka import Producer

from bench import harness, results
from pos_lambda.adapters import schema_apply
from pos_lambda.producer.kafka_sink import DeliveryStats, produce, producer_config
from pos_lambda.producer.simulation import SimulationConfig, simulate
from pos_lambda.settings import Settings, load_settings


def main() -> None:
    parser = harness.parser(__doc__, "producer_idempotence")
    parser.add_argument("--count", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    settings = load_settings()
    messages = simulate(
        SimulationConfig(count=args.count, seed=1, start=datetime(2026, 3, 2, tzinfo=UTC))
    ).messages
    runs: list[dict[str, Any]] = []
    cold: dict[bool, list[DeliveryStats]] = {True: [], False: []}
    warm: dict[bool, list[DeliveryStats]] = {True: [], False: []}
    for rnd, idempotence in harness.alternate(args.rounds, (True, False)):
        mode = "on " if idempotence else "off"
        topic = _topic(settings)
        stats = produce(
            messages, settings.bootstrap_servers, topic, idempotence=idempotence, quiet=True
        )
        cold[idempotence].append(stats)
        topic = _topic(settings)
        client = Producer(producer_config(settings.bootstrap_servers, idempotence))
        client.produce(topic, b"warm-up")
        client.flush(30)
        warm_stats = produce(messages, "", topic, quiet=True, producer=client, check_acks=False)
        warm[idempotence].append(warm_stats)
        for kind, st in (("cold", stats), ("warm", warm_stats)):
            runs.append(
                {"round": rnd, "idempotence": idempotence, "client": kind,
                 "messages": st.acked, "seconds": st.seconds, "events_per_s": _rate(st),
                 "first_ack_ms": _first_ack_ms(st)}
            )  # fmt: skip
        print(
            f"round {rnd}: idempotence={mode} cold {_rate(stats):,.0f} events/s "
            f"(first ack {_first_ack_ms(stats):.0f} ms), warm {_rate(warm_stats):,.0f} events/s"
        )
    figures: list[results.Figure] = []
    # Warm first, the report's headline: the per-message cost; cold adds the handshake.
    for name, unit, by_mode, metric in (
        ("warm", "events/s", warm, _rate),
        ("cold", "events/s", cold, _rate),
        ("cold first ack", "ms", cold, _first_ack_ms),
    ):
        on = statistics.median(metric(s) for s in by_mode[True])
        off = statistics.median(metric(s) for s in by_mode[False])
        print(f"median {name} {unit}: on {on:,.0f}, off {off:,.0f}, on/off = {on / off:.2f}")
        figures += [
            results.vs_peer(f"idempotence on, {name}", on, unit, f"idempotence off, {name}", off),
            results.baseline(f"idempotence off, {name}", off, unit),
        ]
    results.write(
        args,
        "producer_idempotence",
        figures,
        runs,
        notes=f"{args.count:,} receipts per run, medians of {args.rounds} alternating rounds; "
        "cold: client creation to final flush, warm: a connected client, the N sends only",
    )


def _topic(settings: Settings) -> str:
    topic = f"bench.producer.{uuid.uuid4().hex[:8]}"
    schema_apply.create_topics(settings, {topic: settings.topics.partitions})
    return topic


def _rate(s: DeliveryStats) -> float:
    return s.acked / s.seconds


def _first_ack_ms(s: DeliveryStats) -> float:
    return 1000 * (s.first_ack_s or 0.0)


if __name__ == "__main__":
    main()
